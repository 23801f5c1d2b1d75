#!/usr/bin/env python3
"""PyTorch's parameters after training one oomlab configuration: the oracle of
tests/suite/pytorch_oracle.rs.

Reads one validated config on stdin (the JSON form oomlab writes into manifest.json, as
`spec.base`), trains it on the CPU with train.py's loop (its model of the config's kind: the
MLP's nn.Sequential, the plain CNN, torchvision's ResNet or the Transformer encoder; torch.optim
in the config's implementation, autocast, GradScaler, torch.utils.checkpoint, the same seeds),
and writes every parameter after the last step to stdout as little-endian float64, in
model.parameters() order (python-reference.md lists it per kind; for an MLP each layer's
weight, then its bias). Parameters only: BatchNorm's running statistics and step count are
buffers and are left out. The first line of stderr says what it ran.

Usage:  params.py [--threads N] < config.json > params.f64
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train  # noqa: E402  (the shared reference loop)

import torch  # noqa: E402


class _NoRecorder:
    """train.py's Recorder, without the probe: each phase just runs."""

    micro = 0

    def phase(self, step, name, fn, *args):
        return fn(*args)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = json.load(sys.stdin)
    run = types.SimpleNamespace(location=None, optimizer_impl=None, steps=None)
    out = {"keep_params": True}
    train.run_trial(cfg, torch.device("cpu"), _NoRecorder(), run, out)
    impl = cfg["training"]["techniques"].get("optimizer_impl") or "default"
    print(f"params.py: torch {torch.__version__}, {cfg['model'].get('kind', 'mlp')}, "
          f"{cfg['training']['optimizer']['name']} ({impl}), final loss {out.get('final_loss')!r}",
          file=sys.stderr)
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in out["params"]])
    sys.stdout.buffer.write(_bytes(flat))


def _bytes(flat: torch.Tensor) -> bytes:
    """The float64s as the machine stores them (little-endian on x86 and ARM), through a uint8
    view: no numpy, which the PyPI wheel does not bring."""
    return bytes(flat.contiguous().view(torch.uint8).tolist())


if __name__ == "__main__":
    main()
