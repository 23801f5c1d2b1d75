"""oomlab's estimate of a Hugging Face decoder's training peak on the CPU, its step recorded on the
meta device, side by side with PyTorch's MemTracker under FakeTensorMode (memtracker.py) at the
same batch, and optionally with the step recorded through the CPU's kernels (every byte a run
takes). Prints each peak, each time, and the ratios. A benchmark, not a test: the times are this
machine's. Run through scripts/bench-memtracker.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed(cmd: list[str], **kw) -> tuple[str, float]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"bench-memtracker: {' '.join(cmd[:3])} ... failed ({done.returncode})")
    return done.stdout, seconds


def at_batch(spec: str, batch: int) -> str:
    """The exporter's spec, trained at `batch` alone on the CPU, its data set one batch, no budget."""
    spec = spec.split("\n[sweep]")[0]
    spec = re.sub(r"(?m)^batch_size = \d+$", f"batch_size = {batch}", spec)
    spec = re.sub(r"(?m)^samples = \d+$", f"samples = {batch}", spec)
    spec = re.sub(r"(?m)^budget = .*\n", "", spec)
    return re.sub(r'(?m)^device = ".*"$', 'device = "cpu"', spec)


def oomlab_peak(spec: Path, record_on: str) -> tuple[int, int, float]:
    """The estimate's peak and its data set's bytes (which MemTracker does not see), and seconds."""
    out, seconds = timed([str(ROOT / "target/release/oomlab"), "estimate", str(spec), "--device", "cpu",
                          "--record-on", record_on, "--json"])
    point = json.loads(out)[0]["points"][0]["prediction"]
    data = next(p["allocated_end"] for p in point["phases"] if p["phase"] == "data")
    return point["peak"], data, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="hf:<Class>, e.g. hf:GPT2LMHeadModel")
    p.add_argument("--config", action="append", default=[], help="KEY=VALUE,... of the model's config")
    p.add_argument("--input", required=True, help="int64:SEQ:VOCAB")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cpu", action="store_true",
                   help="also record through this CPU's kernels (as long as training the step takes)")
    p.add_argument("--keep", type=Path, default=None, help="export into this folder (kept) instead of a temporary one")
    args = p.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-memtracker-"))
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / "model.pt"
    config = [a for c in args.config for a in ("--config", c)]
    if not module.exists():
        _, export = timed([str(ROOT / "scripts/export-model"), args.model, *config, "--input", args.input,
                           "--out", str(module)])
        print(f"exported {args.model} in {export:.1f} s (once; not in the times below)")
    spec = folder / "bench.toml"
    spec.write_text(at_batch((folder / "model.toml").read_text(), args.batch))

    rows = []
    peak, data, seconds = oomlab_peak(spec, "meta")
    rows.append(("oomlab estimate, recorded on meta", peak - data, seconds))
    tracker, seconds = timed([sys.executable, str(ROOT / "scripts/reference/memtracker.py"), args.model, *config,
                              "--input", args.input, "--batch", str(args.batch)], env=os.environ)
    tracked = json.loads(tracker.strip().splitlines()[-1])
    rows.append(("PyTorch MemTracker under FakeTensorMode", tracked["peak"], seconds))
    if args.cpu:
        peak, data, seconds = oomlab_peak(spec, "cpu")
        rows.append(("oomlab estimate, recorded on this CPU", peak - data, seconds))

    print(f"{args.model} {' '.join(args.config)} at batch {args.batch}, input {args.input}, 2 steps of Adam on the "
          f"CPU ({tracked['params']:,} parameters); peaks without the data set, which MemTracker does not see:")
    first_peak, first_seconds = rows[0][1], rows[0][2]
    for name, peak, seconds in rows:
        print(f"  {name:42} peak {peak:>15,} B  ({(peak - first_peak) / first_peak:+.4%})  {seconds:7.1f} s "
              f"(x{seconds / first_seconds:.2f})")


if __name__ == "__main__":
    main()
