"""PyTorch's own estimate of a Hugging Face model's training peak without its memory or arithmetic:
MemTracker (torch.distributed._tools.mem_tracker) under FakeTensorMode, over the step oomlab
trains (logits, cross_entropy over the last dimension, backward, Adam, zero_grad), on the CPU.
The anchor `scripts/bench-memtracker` times oomlab's meta recording against. Prints one JSON line:
the peak in bytes (MemTracker's "Total" on the CPU) and the seconds the steps took.

    python3 scripts/reference/memtracker.py hf:GPT2LMHeadModel --input int64:1024:50257 --batch 8
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_export  # noqa: E402


def loss_of(model, x, y):
    """The loss as oomlab's step takes it, the logits dropped once it is made (as the step, and
    scripts/reference/train.py, drop them: only log_softmax's output is kept for the backward)."""
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="hf:<Class>, e.g. hf:GPT2LMHeadModel")
    p.add_argument("--config", action="append", default=[], help="KEY=VALUE,... of the model's config")
    p.add_argument("--input", required=True, help="int64:SEQ:VOCAB, as scripts/export-model takes it")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    if not args.model.startswith("hf:"):
        raise SystemExit("memtracker.py: give an hf:<Class> model")
    kind, seq, vocab = args.input.split(":")
    if kind != "int64":
        raise SystemExit("memtracker.py: --input int64:SEQ:VOCAB (token ids)")
    seq, vocab = int(seq), int(vocab)
    started = time.perf_counter()
    with FakeTensorMode():
        model = hf_export.Logits(hf_export.build(args.model[3:], hf_export.parse_config(args.config)))
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        x = torch.randint(0, vocab, (args.batch, seq))
        y = torch.randint(0, vocab, (args.batch, seq))
        tracker = MemTracker()
        tracker.track_external(model, opt, x, y)
        with tracker:
            for step in range(args.steps):
                if step > 0:
                    # Module-wise statistics are kept for one iteration; the peak stays.
                    tracker.reset_mod_stats()
                loss = loss_of(model, x, y)
                loss.backward()
                opt.step()
                opt.zero_grad()
    seconds = time.perf_counter() - started
    peak = tracker.get_tracker_snapshot("peak")
    total = sum(snap.get("Total", 0) for device, snap in peak.items() if torch.device(device).type == "cpu")
    print(json.dumps({"peak": total, "seconds": seconds, "params": sum(t.numel() for t in model.parameters())}))


if __name__ == "__main__":
    main()
