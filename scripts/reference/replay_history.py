#!/usr/bin/env python3
"""Replays PyTorch's own CUDA allocation history (train.py --history) through the caching
allocator's rules, twice: breaking ties among equal free blocks by device address, as
c10/cuda/CUDACachingAllocator.cpp does (its pools are ordered by size, then address), and by
the order the segments were made, as oomlab's estimate assumes (crates/estimate/src/estimate/caching.rs: the
driver, not PyTorch, picks addresses, so the estimate cannot know them).

Why: where the estimate's allocations and frees are PyTorch's, event for event, and its peak
still differs, the difference is in which block served which request. Replaying PyTorch's own
events tells the allocator's rules apart from the events: with addresses the replay should give
PyTorch's peak; the order made then shows what assuming it costs.

The history must carry addresses and the cache each trial started from (`cached_segment`,
`cached_block`: train.py since the history has an `addr` column); what the loop freed between
phases (`outside_alloc`, `outside_free`) is replayed where the history has it, else missed, and
the replay then keeps those blocks (its peak can only be higher for it).

Rules (each as CUDACachingAllocator.cpp has it, default settings): requests rounded up to 512 B;
up to 1 MiB from the small pool, above from the large; best fit (smallest free block that holds
the request, then the tie-break); split when what remains is at least 512 B (small pool) or more
than 1 MiB (large pool), else the whole block is counted as allocated; a new segment of 2 MiB for
small requests, 20 MiB under 10 MiB, else the request rounded up to 2 MiB; a freed block merges
with free neighbours in its segment.

Usage: replay_history.py HISTORY.csv [--phases PHASES.csv] [--trial N]
Prints one line per trial: the peak allocated and reserved of each replay, and with --phases
(train.py's per-phase CSV of the same run) PyTorch's max_memory_allocated and reserved.
"""
import argparse
import csv
import sys

from compare import cuda_block  # the block a request takes (round_size)

SMALL_SIZE = 1 << 20
MIN_BLOCK = 512


def segment_size(n: int) -> int:
    if n <= SMALL_SIZE:
        return 2 << 20
    if n < 10 << 20:
        return 20 << 20
    return (n + (2 << 20) - 1) // (2 << 20) * (2 << 20)


class Replay:
    """The allocator's blocks by segment; `by_address` picks the tie-break."""

    def __init__(self, by_address: bool):
        self.by_address = by_address
        self.segments: list[dict] = []  # {small, address, made, blocks: [[size, owner]]}
        self.owner_at: dict[int, int] = {}  # PyTorch's block address -> this replay's owner id
        self.next = 0
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def own(self) -> int:
        self.next += 1
        return self.next

    def add_segment(self, small: bool, address: int, size: int, blocks=None):
        self.segments.append({"small": small, "address": address, "made": len(self.segments),
                              "blocks": [[size, None]] if blocks is None else blocks})
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def alloc(self, requested: int, address: int, new_segments: list[int]):
        size = cuda_block(requested)
        small = size <= SMALL_SIZE
        best = None
        for s in self.segments:
            if s["small"] != small:
                continue
            offset = 0
            for i, (b, owner) in enumerate(s["blocks"]):
                if owner is None and b >= size:
                    tie = (s["address"] + offset) if self.by_address else (s["made"], offset)
                    if best is None or (b, tie) < best[0]:
                        best = ((b, tie), s, i)
                offset += b
        if best is None:
            # PyTorch's own segment address where it made one here, else one past them all.
            at = new_segments.pop(0) if new_segments else (1 << 60) + len(self.segments)
            self.add_segment(small, at, segment_size(size))
            best = (None, self.segments[-1], 0)
        _, s, i = best
        blocks = s["blocks"]
        remaining = blocks[i][0] - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            blocks[i][0] = size
            blocks.insert(i + 1, [remaining, None])
        blocks[i][1] = self.own()
        self.owner_at[address] = blocks[i][1]
        self.allocated += blocks[i][0]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, address: int):
        owner = self.owner_at.pop(address, None)
        if owner is None:
            return
        for s in self.segments:
            blocks = s["blocks"]
            for i, (b, o) in enumerate(blocks):
                if o != owner:
                    continue
                blocks[i][1] = None
                self.allocated -= b
                if i + 1 < len(blocks) and blocks[i + 1][1] is None:
                    blocks[i][0] += blocks.pop(i + 1)[0]
                if i > 0 and blocks[i - 1][1] is None:
                    blocks[i - 1][0] += blocks.pop(i)[0]
                return


def replay(rows: list[dict], by_address: bool) -> Replay:
    r = Replay(by_address)
    # Segments PyTorch made, in order: a replay that needs one where PyTorch did gets its address.
    made = [int(e["addr"]) for e in rows if e["action"] in ("segment_alloc", "outside_segment_alloc")]
    for e in rows:
        action, size, address = e["action"].removeprefix("outside_"), int(e["requested"]), int(e["addr"] or 0)
        if action == "cached_segment":
            r.add_segment(e["frames"] == "small", address, size, blocks=[])
        elif action == "cached_block":
            owner = None if e["frames"] == "inactive" else r.own()
            r.segments[-1]["blocks"].append([size, owner])
            if owner is not None:
                r.owner_at[address] = owner
                r.allocated += size
        elif action == "alloc":
            r.alloc(size, address, made)
        elif action == "free":
            r.free(address)
    r.peak_allocated = max(r.peak_allocated, r.allocated)
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("history")
    p.add_argument("--phases", help="train.py's per-phase CSV of the same run (PyTorch's peaks)")
    p.add_argument("--trial", type=int)
    args = p.parse_args()
    with open(args.history, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "addr" not in rows[0]:
        print(f"{args.history}: no addresses (a history from before train.py wrote them)", file=sys.stderr)
        return 2
    measured = {}
    if args.phases:
        with open(args.phases, newline="") as f:
            for m in csv.DictReader(f):
                t = int(m["trial"])
                a, res = measured.get(t, (0, 0))
                measured[t] = (max(a, int(m["max_memory_allocated"])), max(res, int(m["max_memory_reserved"])))
    trials = sorted({int(e["trial"]) for e in rows})
    print("trial,order,peak_allocated,peak_reserved,measured_allocated,measured_reserved")
    for t in trials:
        if args.trial is not None and t != args.trial:
            continue
        events = [e for e in rows if int(e["trial"]) == t]
        if not any(e["action"] == "cached_segment" for e in events):
            print(f"trial {t}: no starting cache in the history", file=sys.stderr)
            return 2
        for by_address in (True, False):
            r = replay(events, by_address)
            m = measured.get(t, ("", ""))
            print(f"{t},{'address' if by_address else 'made'},{r.peak_allocated},{r.peak_reserved},{m[0]},{m[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
