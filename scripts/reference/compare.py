#!/usr/bin/env python3
"""Puts an oomlab results folder beside the PyTorch reference's re-run of it (train.py), as a
markdown section per experiment.

Usage:
    compare.py RESULTS_DIR REF_CSV [RESULTS_DIR REF_CSV ...] [--out FILE] [--max-trials N]

RESULTS_DIR is `results/<device>/<experiment>` (trace.csv, summary.csv, manifest.json); REF_CSV
is train.py's --out (its per-trial summary is REF_CSV + ".summary.csv").

For each experiment it writes a one-line verdict, then the memory at the end of each phase
(memory_allocated) and the peak within it (max_memory_allocated), oomlab against PyTorch, for
step 0 (data, model), step 1 and the last step (first and last micro-batch), for a few trials
chosen to show where they disagree most; then one row per trial: status (a difference flagged),
peak, oomlab's predicted_peak against PyTorch's measured peak, final loss, step time.

PyTorch keeps no allocator statistics on the CPU, so a CPU reference compares phases, statuses
and losses only, and says so.

Block sequences (issue #30's validation): with `--blocks EST_CSV --history REF_CSV` it aligns,
phase by phase, the estimate's every allocation and free (`oomlab estimate --blocks`) with a
recorded history in the same columns (trial, step, micro, phase, action, requested; train.py's
`--history`: PyTorch's allocation history on CUDA, its counting allocator's log on the CPU) and
writes, per trial, the first event where they part, with the estimate's replay line and the
reference's frames: one run is enough to name the allocation behind a gap. On CUDA it does the
same for the segments each side made (cudaMalloc: the estimate's `segment_alloc` rows, the
history's), so that a reserved-memory gap is named by the first segment made in another size or
phase.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

MIB = 1024 * 1024


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(s) -> int | None:
    return None if s in (None, "") else int(float(s))


def fnum(s) -> float | None:
    return None if s in (None, "") else float(s)


def fmt_bytes(b: int | None) -> str:
    return "" if b is None else f"{b:,}"


def fmt_delta(d: int | None) -> str:
    if d is None:
        return ""
    return "0" if d == 0 else f"{d:+,}"


def fmt_size(b: float) -> str:
    b = abs(b)
    if b < 1024:
        return f"{b:.0f} B"
    if b < MIB:
        return f"{b / 1024:.1f} KiB"
    return f"{b / MIB:.2f} MiB"


def oom_at(r: dict) -> tuple[str, str]:
    """A summary row's (phase, step) where an OOM or error struck, "" when none: `oom_phase` and
    `oom_step` since 2026-11-26, `phase` and `step` in older files (oomlab's and train.py's)."""
    phase = r.get("oom_phase", r.get("phase")) or ""
    step = r.get("oom_step", r.get("step")) or ""
    return phase, str(step)


def key(r: dict) -> tuple:
    return int(r["trial"]), int(r["step"]), int(r["micro"]), r["phase"]


class Experiment:
    def __init__(self, results: Path, ref: Path):
        self.results, self.ref = results, ref
        self.manifest = json.loads((results / "manifest.json").read_text())
        self.name = self.manifest.get("experiment", results.name)
        self.o_trace = {key(r): r for r in read_csv(results / "trace.csv")}
        self.o_sum = {int(r["trial"]): r for r in read_csv(results / "summary.csv")}
        self.r_trace = {key(r): r for r in read_csv(ref)}
        self.r_sum = {int(r["trial"]): r for r in read_csv(Path(str(ref) + ".summary.csv"))}
        self.has_mem = any(r["memory_allocated"] != "" for r in self.r_trace.values())
        self.trials = sorted(t for t, r in self.r_sum.items() if r["status"] != "skipped")
        self.skipped = sorted(t for t, r in self.r_sum.items() if r["status"] == "skipped")

    def label(self, t: int) -> str:
        r = self.o_sum[t]
        parts = [r["variant"]] if r["variant"] else []
        if r["field"]:
            v = float(r["value"])
            parts.append(f"{r['field'].split('.')[-1]}={v:g}")
        return " ".join(parts) or self.name

    def keys(self, trace: dict, t: int) -> list[tuple]:
        """The trial's phases in the order they ran (the file's order)."""
        return [k for k in trace if k[0] == t]

    def status(self, t: int) -> tuple[str, str]:
        """oomlab's and PyTorch's outcome, with the phase and step of an OOM."""
        def where(r):
            s = r["status"]
            phase, step = oom_at(r)
            return f"{s} ({phase} {step})" if phase else s
        return where(self.o_sum[t]), where(self.r_sum[t])

    def status_differs(self, t: int) -> bool:
        o, r = self.o_sum[t], self.r_sum[t]
        return (o["status"], *oom_at(o)) != (r["status"], *oom_at(r))

    def phases_agree(self, t: int) -> bool:
        return [k[1:] for k in self.keys(self.o_trace, t)] == [k[1:] for k in self.keys(self.r_trace, t)]

    def deltas(self, t: int) -> list[tuple]:
        """(key, alloc oomlab, alloc torch, peak oomlab, peak torch) for phases both recorded."""
        out = []
        for k in self.keys(self.o_trace, t):
            if k in self.r_trace:
                o, r = self.o_trace[k], self.r_trace[k]
                out.append((k, num(o["memory_allocated"]), num(r["memory_allocated"]),
                            num(o["max_memory_allocated"]), num(r["max_memory_allocated"])))
        return out

    def loss_rel(self, t: int) -> float | None:
        a, b = fnum(self.o_sum[t].get("final_loss")), fnum(self.r_sum[t].get("final_loss"))
        if a is None or b is None:
            return None
        return abs(b - a) / max(abs(a), 1e-30)


def shown_steps(e: Experiment, t: int) -> set[tuple]:
    """Step 0, step 1 and the last step; within a step, the first and last micro-batch."""
    ks = [k for k in e.keys(e.o_trace, t) if k in e.r_trace]
    if not ks:
        return set()
    last = max(k[1] for k in ks)
    out = set()
    for s in {0, 1, last}:
        micros = [k[2] for k in ks if k[1] == s]
        if micros:
            out |= {(s, min(micros)), (s, max(micros))}
    return out


def pick_trials(e: Experiment, n: int) -> list[int]:
    """The trials whose phases are tabled: differing statuses first, then the largest
    difference, the highest peak that fit, the first trial and the first OOM."""
    if len(e.trials) <= n:
        return e.trials
    cands = [t for t in e.trials if e.status_differs(t)]
    if e.has_mem:
        worst = max(e.trials, key=lambda t: max(
            [abs(a - b) for _, ao, ar, po, pr in e.deltas(t) for a, b in ((ao, ar), (po, pr))
             if a is not None and b is not None] or [0]))
        cands.append(worst)
    ok = [t for t in e.trials if e.o_sum[t]["status"] == "ok"]
    if ok:
        cands.append(max(ok, key=lambda t: num(e.o_sum[t]["max_memory_allocated"]) or 0))
    cands.append(e.trials[0])
    cands += [t for t in e.trials if e.o_sum[t]["status"] == "oom"][:1]
    seen: list[int] = []
    for t in cands:
        if t not in seen:
            seen.append(t)
    return sorted(seen[:n])


def section(e: Experiment, max_trials: int) -> str:
    dev = e.manifest.get("device", {})
    lines = [f"### {e.name}", ""]
    budget = dev.get("budget_bytes")
    lines.append(f"oomlab: `{e.results}` on {dev.get('name', '?')}"
                 + (f", budget {fmt_size(budget)}" if budget else "")
                 + f"; PyTorch: `{e.ref}`.")
    lines.append("")
    if not e.trials:
        lines += ["No trial was re-run" + (f" ({len(e.skipped)} skipped: oomlab ran out of its CPU "
                                           "budget, PyTorch has none on the CPU)." if e.skipped else "."), ""]
        return "\n".join(lines)

    differ = [t for t in e.trials if e.status_differs(t)]
    phase_bad = [t for t in e.trials if not e.phases_agree(t)]
    losses = [(t, e.loss_rel(t)) for t in e.trials if e.loss_rel(t) is not None]
    exact = sum(1 for _, r in losses if r == 0)
    worst_loss = max(losses, key=lambda x: x[1]) if losses else None

    verdict = [f"{len(e.trials)} trials re-run"]
    if e.skipped:
        verdict[0] += f" ({len(e.skipped)} skipped: OOM in oomlab, no CPU budget in PyTorch)"
    verdict.append("status agrees in all" if not differ else
                   f"**status differs in {len(differ)}** (trials {', '.join(map(str, differ))})")
    verdict.append("phases agree" if not phase_bad else
                   f"**phase sequence differs in trials {', '.join(map(str, phase_bad))}**")
    if e.has_mem:
        worst_a = worst_p = (0, None)
        for t in e.trials:
            for k, ao, ar, po, pr in e.deltas(t):
                if ao is not None and ar is not None and abs(ar - ao) > abs(worst_a[0]):
                    worst_a = (ar - ao, k)
                if po is not None and pr is not None and abs(pr - po) > abs(worst_p[0]):
                    worst_p = (pr - po, k)
        for what, (d, k) in (("allocated", worst_a), ("peak", worst_p)):
            if k is None:
                verdict.append(f"{what} equal at every phase")
            else:
                verdict.append(f"largest {what} difference {'+' if d > 0 else '-'}{fmt_size(d)} "
                               f"(PyTorch - oomlab; trial {k[0]} step {k[1]} {k[3]})")
        errs = []
        for t in e.trials:
            pred, peak = num(e.o_sum[t].get("predicted_peak")), num(e.r_sum[t].get("max_memory_allocated"))
            if pred is not None and peak and e.r_sum[t]["status"] == "ok":
                errs.append(abs(pred - peak) / peak)
        if errs:
            # Past 5% the estimate would send a user into an OOM: said as a miss, not a bound.
            worst = 100 * max(errs)
            verdict.append(f"predicted_peak within {worst:.1f}% of PyTorch's peak" if worst <= 5.0 else
                           f"**predicted_peak off by up to {worst:.1f}%** of PyTorch's peak (more than 5%)")
    if worst_loss and exact == len(losses):
        verdict.append(f"final loss identical in all {len(losses)} that finished")
    elif worst_loss:
        verdict.append(f"final loss identical in {exact}/{len(losses)}, largest relative difference "
                       f"{worst_loss[1]:.1e} (trial {worst_loss[0]})")
    lines.append(f"**Verdict:** {'; '.join(verdict)}.")
    lines.append("")
    if e.has_mem:
        # Absolute bytes include what was allocated before a trial: cuBLAS's workspaces, kept for
        # the process's lifetime. Both sides make them in a warm-up before trial 1 (an oomlab
        # without one makes them in trial 1, whose phases then start below the reference's).
        first, last = e.trials[0], e.trials[-1]
        b = [num(e.o_sum[first].get("baseline_allocated")), num(e.r_sum[first].get("baseline_allocated")),
             num(e.o_sum[last].get("after_allocated")), num(e.r_sum[last].get("after_allocated"))]
        ws = (e.manifest.get("workspace") or {}).get("allocated_bytes")
        warm = f" (oomlab's warm-up: {fmt_bytes(ws)} B)" if ws is not None else " (no warm-up in its manifest)"
        lines += [f"Allocated before trial {first}: oomlab {fmt_bytes(b[0])} B{warm}, PyTorch {fmt_bytes(b[1])} B; "
                  f"after trial {last}'s clean-up: oomlab {fmt_bytes(b[2])} B, PyTorch {fmt_bytes(b[3])} B.", ""]
    else:
        lines += ["CPU: no allocator statistics in PyTorch; compared phases and status only "
                  "(and final losses).", ""]

    if e.has_mem:
        shown = pick_trials(e, max_trials)
        note = "" if len(shown) == len(e.trials) else f" (trials {', '.join(map(str, shown))} of {len(e.trials)})"
        lines += [f"Bytes at the end of each phase and peak within it; Δ = PyTorch - oomlab{note}.", "",
                  "| trial | step(.micro) | phase | allocated oomlab | allocated PyTorch | Δ | peak oomlab | peak PyTorch | Δ |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for t in shown:
            keep = shown_steps(e, t)
            micros = any(k[2] > 0 for k in e.keys(e.o_trace, t))
            for k, ao, ar, po, pr in e.deltas(t):
                if (k[1], k[2]) not in keep:
                    continue
                at = f"{k[1]}.{k[2]}" if micros else str(k[1])
                da = None if ao is None or ar is None else ar - ao
                dp = None if po is None or pr is None else pr - po
                lines.append(f"| {t} | {at} | {k[3]} | {fmt_bytes(ao)} | {fmt_bytes(ar)} | "
                             f"{fmt_delta(da)} | {fmt_bytes(po)} | {fmt_bytes(pr)} | {fmt_delta(dp)} |")
        lines.append("")

    # One row per trial: outcome, peak, prediction, loss, time.
    rows = []
    if e.has_mem:
        head = ("| trial | config | status oomlab | status PyTorch | peak oomlab | peak PyTorch | Δ | "
                "predicted | vs PyTorch | loss rel. Δ | step s oomlab / PyTorch |")
        sep = "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    else:
        head = ("| trial | config | status oomlab | status PyTorch | phases | final loss oomlab | "
                "final loss PyTorch | rel. Δ | step s oomlab / PyTorch |")
        sep = "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"
    for t in e.trials:
        o, r = e.o_sum[t], e.r_sum[t]
        so, sr = e.status(t)
        flag = " ⚠" if e.status_differs(t) else ""
        rel = e.loss_rel(t)
        rel_s = "" if rel is None else ("0" if rel == 0 else f"{rel:.1e}")
        secs = f"{fnum(o.get('step_seconds')) or 0:.4f} / {fnum(r.get('step_seconds')) or 0:.4f}"
        if e.has_mem:
            po, pr = num(o["max_memory_allocated"]), num(r["max_memory_allocated"])
            pred = num(o.get("predicted_peak"))
            # Only a trial that ran has a measured peak to predict; an OOM's is where it stopped.
            ran = r["status"] == "ok"
            perr = "" if pred is None or not pr or not ran else f"{100 * (pred - pr) / pr:+.2f}%"
            d = None if po is None or pr is None else pr - po
            rows.append(f"| {t} | {e.label(t)} | {so} | {sr}{flag} | {fmt_bytes(po)} | {fmt_bytes(pr)} | "
                        f"{fmt_delta(d)} | {fmt_bytes(pred)} | {perr} | {rel_s} | {secs} |")
        else:
            ph = "same" if e.phases_agree(t) else "**differ**"
            rows.append(f"| {t} | {e.label(t)} | {so} | {sr}{flag} | {ph} | {o.get('final_loss', '')} | "
                        f"{r.get('final_loss', '')} | {rel_s} | {secs} |")
    table = [head, sep, *rows]
    if len(rows) > 8:
        lines += ["<details><summary>All trials</summary>", "", *table, "", "</details>", ""]
    else:
        lines += [*table, ""]
    return "\n".join(lines)


PHASE_EVENT = ("trial", "step", "micro", "phase")


def read_events(path: Path) -> dict[tuple, list[dict]]:
    """Events by (trial, step, micro, phase), each list in its file's order. Only allocations and
    frees of a positive size count (a CUDA history's segment events are not blocks)."""
    out: dict[tuple, list[dict]] = {}
    for r in read_csv(path):
        if r["action"] not in ("alloc", "free") or int(r["requested"]) <= 0:
            continue
        k = (int(r["trial"]), int(r["step"]), int(r["micro"]), r["phase"])
        out.setdefault(k, []).append(r)
    return out


def cuda_block(requested: int) -> int:
    """The CUDA caching allocator's block for a request: at least 512 B and a multiple of 512
    (c10/cuda/CUDACachingAllocator.cpp, round_size, without roundup_power2_divisions)."""
    return max(512, (requested + 511) // 512 * 512)


def blocks_of(events: list[dict], cuda: bool) -> list[dict]:
    """Each event with `bytes`, the size compared: on CUDA the allocator's block for the request
    (the MLP's replay counts in blocks, so a 40 B bias is 512 B to both sides; the part of a
    cached block the allocator does not split off is left out, since a history names only the
    request), on the CPU the bytes asked, which the counting allocator takes as they are."""
    return [{**e, "bytes": cuda_block(int(e["requested"])) if cuda else int(e["requested"])} for e in events]


def collapse_frees(events: list[dict]) -> list[dict]:
    """Each run of consecutive frees as one free of their total: the estimate frees a group at
    once (every gradient at zero_grad) where PyTorch frees tensor by tensor, and the order of
    frees with nothing allocated between them moves no peak."""
    out: list[dict] = []
    for e in events:
        if e["action"] == "free" and out and out[-1]["action"] == "free":
            out[-1] = {**out[-1], "bytes": out[-1]["bytes"] + e["bytes"]}
        else:
            out.append(dict(e))
    return out


def first_divergence(est: list[dict], ref: list[dict]) -> tuple[int, dict | None, dict | None] | None:
    """The index of the first event where the two sequences differ in action or bytes (`bytes`:
    `blocks_of`; runs of frees collapsed: `collapse_frees`), with each side's event there (None
    past its end); None when they are the same."""
    est, ref = collapse_frees(est), collapse_frees(ref)
    for i in range(max(len(est), len(ref))):
        e = est[i] if i < len(est) else None
        r = ref[i] if i < len(ref) else None
        same = e is not None and r is not None and (e["action"], e["bytes"]) == (r["action"], r["bytes"])
        if not same:
            return i, e, r
    return None


def describe_event(ev: dict | None, where: str) -> str:
    if ev is None:
        return "(nothing: the sequence ended)"
    asked = int(ev["requested"])
    size = f"{fmt_bytes(ev['bytes'])} B" + (f" (asked {fmt_bytes(asked)} B)" if ev["bytes"] != asked and ev["action"] == "alloc" else "")
    return f"{ev['action']} {size} ({ev.get(where) or '?'})"


def read_segments(path: Path) -> dict[int, list[dict]]:
    """The segments each trial made (cudaMalloc, `segment_alloc`), in order: the estimate's from
    `estimate --blocks`, PyTorch's from its history (with those it made between phases,
    `outside_segment_alloc`; the estimate makes none there). Empty on the CPU."""
    out: dict[int, list[dict]] = {}
    for r in read_csv(path):
        if r["action"] in ("segment_alloc", "outside_segment_alloc"):
            out.setdefault(int(r["trial"]), []).append(r)
    return out


def describe_segment(seg: dict | None, where: str) -> str:
    if seg is None:
        return "(none: no more segments)"
    return f"{fmt_bytes(int(seg['requested']))} B in {seg['phase']}, step {seg['step']}.{seg['micro']} ({seg.get(where) or '?'})"


def segment_line(est: list[dict], ref: list[dict]) -> str | None:
    """Where reserved memory parts: the first segment made in another size or phase, or that
    only one side made (None when neither made any: the CPU)."""
    if not est and not ref:
        return None
    key = lambda s: (int(s["step"]), int(s["micro"]), s["phase"], int(s["requested"]))
    for i in range(max(len(est), len(ref))):
        e = est[i] if i < len(est) else None
        r = ref[i] if i < len(ref) else None
        if e is None or r is None or key(e) != key(r):
            return (f"  - segments part at segment {i + 1}: estimate {describe_segment(e, 'site')}, "
                    f"reference {describe_segment(r, 'frames')}")
    return f"  - segments: the same {len(est)} ({fmt_bytes(sum(int(s['requested']) for s in est))} B)"


def block_sections(est_path: Path, ref_path: Path) -> str:
    """Per trial: every phase compared, and the first event where the estimate and the reference
    part (or that they never do)."""
    est, ref = read_events(est_path), read_events(ref_path)
    est_segments, ref_segments = read_segments(est_path), read_segments(ref_path)
    cuda = any(e.get("pool", "cpu") != "cpu" for events in est.values() for e in events)
    est = {k: blocks_of(v, cuda) for k, v in est.items()}
    ref = {k: blocks_of(v, cuda) for k, v in ref.items()}
    lines = [f"## Block sequences: `{est_path.name}` against `{ref_path.name}`", ""]
    # Phases in the order they ran: by step and micro-batch, then as the reference's file (or the
    # estimate's) first met them, not by name.
    order = {k: i for i, k in enumerate(list(ref) + [k for k in est if k not in ref])}
    for trial in sorted({k[0] for k in est} | {k[0] for k in ref}):
        keys = sorted((k for k in order if k[0] == trial), key=lambda k: (k[1], k[2], order[k]))
        parted = None
        for k in keys:
            d = first_divergence(est.get(k, []), ref.get(k, []))
            if d is not None:
                parted = (k, d)
                break
        n = sum(len(est.get(k, [])) for k in keys)
        if parted is None:
            lines.append(f"- trial {trial}: the same {n} events in {len(keys)} phases")
        else:
            (_, step, micro, phase), (i, e, r) = parted
            lines.append(
                f"- trial {trial}: first parts in {phase}, step {step}.{micro}, event {i}: "
                f"estimate {describe_event(e, 'site')}, reference {describe_event(r, 'frames')}"
            )
        segments = segment_line(est_segments.get(trial, []), ref_segments.get(trial, []))
        if segments:
            lines.append(segments)
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pairs", nargs="*", metavar="RESULTS_DIR REF_CSV")
    p.add_argument("--blocks", type=Path, help="the estimate's events (oomlab estimate --blocks)")
    p.add_argument("--history", type=Path, help="the reference's events (train.py --history)")
    p.add_argument("--out", type=Path, help="append the markdown here (default: stdout)")
    p.add_argument("--max-trials", type=int, default=4, help="trials whose phases are tabled (default 4)")
    args = p.parse_args()
    if len(args.pairs) % 2:
        p.error("give RESULTS_DIR REF_CSV pairs")
    if (args.blocks is None) != (args.history is None):
        p.error("--blocks and --history go together")
    if not args.pairs and args.blocks is None:
        p.error("give RESULTS_DIR REF_CSV pairs, or --blocks and --history")
    parts = [block_sections(args.blocks, args.history)] if args.blocks else []
    for results, ref in zip(args.pairs[::2], args.pairs[1::2]):
        parts.append(section(Experiment(Path(results), Path(ref)), args.max_trials))
    text = "\n".join(parts)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
