#!/usr/bin/env python3
"""Reads cuDNN's convolution workspaces off a GPU run's allocation history, into oomlab's table.

oomlab's CUDA estimate takes a convolution's cuDNN workspace from a table measured on a GPU
(crates/estimate/src/estimate/cudnn_workspaces.csv; why: crates/estimate/src/estimate/cudnn_conv.rs). This script fills it from
a real run: `oomlab estimate SPEC --device cuda --gpu GPU --blocks EST.csv` marks every cuDNN
call (action `cudnn`, the call in `site`), and PyTorch's history of the same spec
(`scripts/validate-gpu`, `validation/<experiment>.history.csv`) holds the workspace as an
allocation freed at once, right where the mark is. The two sequences are walked side by side,
phase by phase, block for block (sizes in the allocator's 512-byte blocks, runs of frees
compared by their total, as compare.py does); at each mark the history's next event is the
workspace if it is an allocation freed by the next event (same address) and the estimate does
not make that pair itself; otherwise the call took none. Where the sequences part for another
reason, the rest of that phase is not read (it is reported). A call measured twice at two sizes
(cuDNN fell back to a smaller plan under memory pressure) is left out and reported.

Usage (on the machine that has the results; no GPU needed):

    oomlab estimate experiments/gpu/resnet50_224.toml --device cuda --gpu h200 --brief \\
        --blocks /tmp/r50.blocks.csv
    scripts/reference/cudnn_workspaces.py --blocks /tmp/r50.blocks.csv \\
        --history results/nvidia-h200/validation/resnet50_224.history.csv \\
        --gpu h200 --source 'results/nvidia-h200 (f631eed)' --table crates/estimate/src/estimate/cudnn_workspaces.csv
"""
import argparse
import csv
import sys
from pathlib import Path

from compare import cuda_block as block  # scripts/reference/compare.py, beside this file

HEADER = ["gpu", "pass", "input", "weight", "stride", "padding", "groups", "dtype", "workspace", "source"]
# A row's key: the call, not the GPU. The estimate tells Hopper GPUs (H100, H200: the same
# GH100 chip) apart from the rest and not from each other, so one call has one size in the table.
KEY = slice(1, 8)
HOPPER = ("h100", "h200", "gh200")


def gpu_name(name: str) -> str:
    """A GPU as the table names it: `nvidia-h200`, `NVIDIA H200` and `h200` are all `h200`."""
    n = name.lower().replace("nvidia", "").replace(" ", "-").strip("-")
    return n.split("-")[0] if n else name


def by_phase(path: Path, actions: tuple) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["action"] not in actions:
                continue
            if r["action"] in ("alloc", "free") and int(r["requested"]) <= 0:
                continue
            k = (int(r["trial"]), int(r["step"]), int(r["micro"]), r["phase"])
            out.setdefault(k, []).append(r)
    return out


def free_run(events: list[dict], i: int) -> tuple[int, int]:
    """The total of the run of frees starting at i, and the index after it."""
    total = 0
    while i < len(events) and events[i]["action"] == "free":
        total += block(int(events[i]["requested"]))
        i += 1
    return total, i


def read_phase(est: list[dict], ref: list[dict], seen: dict, where: str, notes: list):
    i = j = 0
    while i < len(est):
        e = est[i]
        if e["action"] == "cudnn":
            call = e["site"]
            i += 1
            # The estimate's own hold of a measured workspace: its alloc and free follow.
            if int(e["requested"]) > 0:
                i += 2
            nxt = est[i] if i < len(est) else None
            nxt2 = est[i + 1] if i + 1 < len(est) else None
            pair = (
                j + 1 < len(ref)
                and ref[j]["action"] == "alloc"
                and ref[j + 1]["action"] == "free"
                and ref[j].get("addr") == ref[j + 1].get("addr")
            )
            size = block(int(ref[j]["requested"])) if pair else None
            est_pair = (
                nxt is not None and nxt2 is not None and nxt["action"] == "alloc" and nxt2["action"] == "free"
                and block(int(nxt["requested"])) == size
            )
            if pair and not est_pair:
                seen.setdefault(call, set()).add(int(ref[j]["requested"]))
                j += 2
            else:
                seen.setdefault(call, set()).add(0)
            continue
        if j >= len(ref):
            notes.append(f"{where}: the history ends before the estimate's event {i}")
            return
        r = ref[j]
        if e["action"] == "free" and r["action"] == "free":
            (te, i2), (tr, j2) = free_run(est, i), free_run(ref, j)
            # A mark can sit between two frees of the estimate's run; PyTorch's run is one.
            while te < tr and i2 < len(est) and est[i2]["action"] == "cudnn" and int(est[i2]["requested"]) == 0:
                seen.setdefault(est[i2]["site"], set())
                t, i2 = free_run(est, i2 + 1)
                te += t
            if te != tr:
                notes.append(f"{where}: frees part at event {i} ({te} B against {tr} B); the rest is not read")
                return
            i, j = i2, j2
            continue
        if e["action"] != r["action"] or block(int(e["requested"])) != block(int(r["requested"])):
            notes.append(
                f"{where}: parts at event {i} (estimate {e['action']} {e['requested']} B, history "
                f"{r['action']} {r['requested']} B); the rest is not read"
            )
            return
        i += 1
        j += 1


def read_table(path: Path) -> tuple[list[str], dict[tuple, list[str]]]:
    comments, rows = [], {}
    if path.exists():
        lines = path.read_text().splitlines()
        comments = [l for l in lines if l.startswith("#")]
        body = [l for l in lines if l and not l.startswith("#")]
        for row in csv.reader(body[1:]):
            rows[tuple(row[KEY])] = row
    return comments, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--blocks", type=Path, required=True, help="oomlab estimate --device cuda --blocks of the spec")
    p.add_argument("--history", type=Path, required=True, help="PyTorch's history of the same spec (validate-gpu)")
    p.add_argument("--gpu", required=True, help="the GPU that ran it: h200, nvidia-h200 or NVIDIA H200 (kept as h200)")
    p.add_argument("--source", required=True, help="where the history comes from (no commas), kept in each row")
    p.add_argument("--table", type=Path, help="merge into this table (default: print the rows)")
    a = p.parse_args()
    if "," in a.source or "," in a.gpu:
        p.error("--source and --gpu are CSV fields: no commas")
    est = by_phase(a.blocks, ("alloc", "free", "cudnn"))
    ref = by_phase(a.history, ("alloc", "free"))
    seen: dict[str, set] = {}
    notes: list[str] = []
    for k in sorted(est, key=lambda k: k[:3]):
        if not any(e["action"] == "cudnn" for e in est[k]):
            continue
        if k not in ref:
            notes.append(f"trial {k[0]} step {k[1]}.{k[2]} {k[3]}: not in the history")
            continue
        read_phase(est[k], ref[k], seen, f"trial {k[0]} step {k[1]}.{k[2]} {k[3]}", notes)
    rows = {}
    for call, sizes in sorted(seen.items()):
        if len(sizes) != 1:
            notes.append(f"{call}: measured at {sorted(sizes)} B, left out" if sizes else f"{call}: not read")
            continue
        row = [gpu_name(a.gpu), *call.split(","), str(sizes.pop()), a.source]
        rows[tuple(row[KEY])] = row
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    if a.table is None:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows(rows.values())
        return
    if gpu_name(a.gpu) not in HOPPER:
        p.error(f"--table: the estimate reads the table for Hopper GPUs only ({', '.join(HOPPER)}), not {a.gpu}")
    comments, table = read_table(a.table)
    clash = [k for k, r in rows.items() if k in table and table[k][8] != r[8]]
    if clash:
        for k in clash:
            print(f"error: {','.join(k)}: the table says {table[k][8]} B ({table[k][0]}), this history "
                  f"{rows[k][8]} B", file=sys.stderr)
        sys.exit(1)
    added = [k for k in rows if k not in table]
    table.update({k: rows[k] for k in added})
    with open(a.table, "w", newline="") as f:
        f.write("".join(c + "\n" for c in comments))
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows(table[k] for k in sorted(table))
    print(f"{a.table}: {len(added)} calls added, {len(rows) - len(added)} already there", file=sys.stderr)


if __name__ == "__main__":
    main()
