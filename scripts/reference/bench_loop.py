#!/usr/bin/env python3
"""PyTorch's side of `oomlab bench`: one configuration trained by the Python loop, timed.

Usage (the bench runs it; by hand, for a look):
    bench_loop.py --mode default|sync < request.json

The request (JSON on stdin, see crates/run/src/bench/protocol.rs) holds the configuration as oomlab
validated it (`config`, the form manifest.json holds), the device, the warm-up and timed steps
and the intra-op threads. The data, model, optimizer, autocast and checkpointing come from
train.py, the oracle the tests hold oomlab to, so that both sides train the same model the same
way. The loop itself is written here as the lesson's readers write theirs: train.py's loop runs
each phase through a recorder (closures, the grad scaler's scale read before and after its
step, which waits for the device twice a step), which is not what is being timed.

Modes:
  default  nothing measured inside a step.
  sync     torch.cuda.synchronize() and the host's clock at every phase's end, the way people
           time phases (on the CPU there is nothing to wait for: only the clock).

In both, a step's time is the host's clock between step ends, the device waited for at each end
(as oomlab's worker times its steps). Prints one JSON line: the timed steps' seconds, per-phase
seconds (sync), the parameter count, the last step's loss, threads, torch's and Python's versions.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings

# The GPU machine's venv may lack numpy; torch only warns about it, and nothing here needs it.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

import train  # noqa: E402  (scripts/reference/train.py, beside this file)

PHASES = ("to_device", "forward", "backward", "optimizer_step", "zero_grad")


def run(request: dict, mode: str) -> dict:
    cfg = request["config"]
    t, tech = cfg["training"], cfg["training"]["techniques"]
    if tech["mode"] != "train" or tech["history"] != "none":
        raise SystemExit("bench_loop.py: only training steps that keep no history are benchmarked")
    device = torch.device(request["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if request.get("threads"):
        torch.set_num_threads(int(request["threads"]))
    cuda = device.type == "cuda"

    home = train.data_home(cfg, device, None)
    data = train.make_data(cfg, train.DTYPES[t["dtype"]], home)
    classes = int(cfg["data"]["classes"])
    torch.manual_seed(int(t["seed"]))
    model = train.make_model(cfg, tuple(data.x.shape[1:]), classes, train.DTYPES[t["dtype"]], device)
    opt = train.make_optimizer(t["optimizer"], model.parameters(), tech.get("optimizer_impl") or "default")
    scaler = None
    if tech["amp"]["dtype"] == "fp16":
        s = tech["amp"]["scaler"]
        scaler = torch.amp.GradScaler(device.type, init_scale=s["init_scale"], growth_factor=s["growth_factor"],
                                      backoff_factor=s["backoff_factor"], growth_interval=int(s["growth_interval"]))
    batch, n = int(t["batch_size"]), int(tech["accumulation"])
    seg = train.segment_len(tech["checkpoint"], len(model.units()))
    amp = tech["amp"]
    warmup, steps = int(request["warmup"]), int(request["steps"])
    sync = mode == "sync"

    def wait():
        if cuda:
            torch.cuda.synchronize(device)

    phase_seconds = {p: [0.0] * (warmup + steps) for p in PHASES}
    ends = []
    wait()
    ends.append(time.perf_counter())
    mark = ends[0]
    loss = None
    for step in range(warmup + steps):
        if sync:
            def phase_end(name):
                nonlocal mark
                wait()
                now = time.perf_counter()
                phase_seconds[name][step] += now - mark
                mark = now
        for micro in range(n):
            x, y = train.gather(data, step * n + micro, batch, device)
            if sync:
                phase_end("to_device")
            with train.autocast(device, amp):
                loss = train.forward_loss(cfg, model, x, y, seg)
            if sync:
                phase_end("forward")
            scaled = loss / n if n > 1 else loss
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            if sync:
                phase_end("backward")
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if sync:
            phase_end("optimizer_step")
        opt.zero_grad()
        if sync:
            phase_end("zero_grad")
        wait()
        ends.append(time.perf_counter())
        mark = ends[-1]
    seconds = [b - a for a, b in zip(ends, ends[1:])]
    return {
        "step_seconds": seconds[warmup:],
        "phase_seconds": {p: v[warmup:] for p, v in phase_seconds.items()} if sync else {},
        "param_count": sum(p.numel() for p in model.parameters()),
        "final_loss": loss.item() if loss is not None else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(device) if cuda else "CPU",
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("default", "sync"), required=True)
    args = p.parse_args()
    request = json.load(sys.stdin)
    print(json.dumps(run(request, args.mode)), flush=True)


if __name__ == "__main__":
    main()
