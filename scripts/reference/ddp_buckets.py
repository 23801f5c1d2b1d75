#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel on CPU processes over gloo: the oracle of oomlab's DDP
engine (`oomlab::ffi::dist`), which drives the same C++ reducer from Rust.

For an nn.Sequential of nn.Linear layers (ReLU between them) of the given widths, every rank
starts from its own weights (`weights`, below, shifted by the rank, so that DDP's broadcast of
rank 0's shows), wraps the model in DDP, and trains `--steps` steps on its own rows (all
`rank + 1`), `loss = model(x).sum()`. It writes one JSON object per rank to --out, in rank order:

  buckets: the reducer's buckets, each one's bytes in the reducer's order, after the wrap and
           after each step's backward (DDP rebuilds them at the second step's forward);
  weight:  the first weight's first four entries after the wrap;
  grads:   after each step's backward, every parameter's gradient, flattened, in module order.

Usage: ddp_buckets.py --widths 3,16,8,2 --world 2 [--bucket-cap-bytes N] [--steps 2] --out F
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def weights(shape, index, rank):
    """A parameter's starting values: distinct per parameter and per rank, exact in float32."""
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, dtype=torch.float32) % 7) / 8 + index + rank).reshape(shape)


def rank_main(rank, args, store, outs):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world)
    widths = [int(w) for w in args.widths.split(",")]
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(a, b))
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for index, p in enumerate(model.parameters()):
            p.copy_(weights(p.shape, index, rank))
    kwargs = {}
    if args.bucket_cap_bytes is not None:
        kwargs["bucket_cap_mb"] = args.bucket_cap_bytes / (1024 * 1024)
    ddp = DDP(model, **kwargs)

    def buckets():
        return [b.buffer().numel() * b.buffer().element_size() for b in ddp.reducer._get_zeros_like_grad_buckets()]

    out = {"buckets": [buckets()], "weight": next(model.parameters()).flatten()[:4].tolist(), "grads": []}
    for _ in range(args.steps):
        model.zero_grad(set_to_none=False)
        x = torch.ones(5, widths[0]) * (rank + 1)
        loss = ddp(x).sum()
        loss.backward()
        out["buckets"].append(buckets())
        out["grads"].append([g for p in model.parameters() for g in p.grad.flatten().tolist()])
    with open(outs[rank], "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--bucket-cap-bytes", type=int)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(args.world)]
        # Forked, the ranks share this process's imported torch rather than import it again.
        mp.start_processes(rank_main, args=(args, store, outs), nprocs=args.world, start_method="fork")
        ranks = []
        for path in outs:
            with open(path) as f:
                ranks.append(json.load(f))
    with open(args.out, "w") as f:
        json.dump(ranks, f)


if __name__ == "__main__":
    sys.exit(main())
