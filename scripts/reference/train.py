#!/usr/bin/env python3
"""The oracle for oomlab: each trial of an oomlab summary.csv, re-run in plain eager PyTorch.

oomlab trains through libtorch from Rust and reads the caching allocator itself. This script
trains the same configurations the way the lesson's readers would write them in Python
(nn.Sequential of nn.Linear + nn.ReLU, a stack of nn.Conv2d, torchvision's ResNets,
nn.TransformerEncoder; F.cross_entropy, torch.optim, torch.autocast, torch.amp.GradScaler,
torch.utils.checkpoint) and reads torch.cuda.memory_allocated() and friends at the same points.
Where the two differ in bytes, either oomlab does something a PyTorch user would not, or the
Python side costs something libtorch's C++ does not; the comments marked "Differs from oomlab"
say where we already know the two part ways.

Usage:
    train.py --summary results/<device>/<experiment>/summary.csv --device cuda --out ref.csv

It writes, like oomlab's trace.csv, one row per trial x step x micro-batch x phase (same columns,
same phases, same order) to --out, and one row per trial to --out + ".summary.csv" (status, the
phase and step of an OOM, peaks, final loss). The configuration of each trial comes from the
summary row's columns and from the validated spec in manifest.json beside it (learning rate,
momentum, weight decay, seeds, steps, grad scaler settings, and the swept value).

The data set lives where the spec's data.location put it in oomlab's run (host: CPU tensors,
each batch gathered there and moved with .to(device); device: made and gathered on the device);
--location overrides it. Before trial 1 a warm-up makes what libtorch keeps for the process
(cuBLAS workspaces), as oomlab's run does, and prints it as `workspace <bytes>`.

On the CPU, PyTorch keeps no allocator statistics, so the memory fields are left empty: the
phases, timings, statuses and losses still compare. Trials oomlab ran out of memory in are
skipped on the CPU (PyTorch has no CPU budget, so they would simply run, or exhaust the
machine) unless --run-oom-on-cpu.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import gc
import json
import math
import sys
import time
import warnings
from pathlib import Path

# The GPU machine's venv may lack numpy; torch only warns about it, and nothing here needs it.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint, checkpoint_sequential  # noqa: E402

TRACE_COLUMNS = [
    "trial", "step", "micro", "phase", "memory_allocated", "memory_reserved",
    "max_memory_allocated", "max_memory_reserved", "device_used", "phase_seconds",
    "elapsed_seconds", "rank",
]
# What happened first (status, where an OOM struck: oom_phase and oom_step, as oomlab's
# summary.csv names them since 2026-11-26, peaks, message); then what compare.py needs
# to check the numbers as well as the bytes: baselines, final loss, the grad scaler, step time.
SUMMARY_COLUMNS = [
    "trial", "status", "oom_phase", "oom_step", "max_memory_allocated", "max_memory_reserved",
    "message", "baseline_allocated", "after_allocated", "final_loss", "skipped_steps",
    "final_scale", "step_seconds", "rank",
]
DTYPES = {
    "float32": torch.float32, "float64": torch.float64,
    "bfloat16": torch.bfloat16, "float16": torch.float16,
}
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# The same markers oomlab's src/oom/mod.rs counts as out of memory: cuBLAS and the stock CPU
# allocator raise plain RuntimeErrors, not torch.OutOfMemoryError.
OOM_MARKERS = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed",
               "cudnn_status_alloc_failed")


# --------------------------------------------------------------------------------------------
# What to run: summary rows and the spec they came from


def read_summary(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_manifest(summary: Path) -> dict:
    path = summary.parent / "manifest.json"
    if not path.exists():
        sys.exit(f"train.py: {path} is missing; it holds the spec (lr, seeds, steps, scaler)")
    return json.loads(path.read_text())


def trial_config(manifest: dict, row: dict) -> dict:
    """The validated config of one trial (the manifest's JSON form), as oomlab ran it.

    Starts from the variant's (or the base's) config, applies the swept value as
    Spec::trial_config does, then takes the summary row's own columns over it, so that a row
    always reads as the trial that produced it. The row's `depth` and `hidden` are read back for a
    uniform MLP only (for a CNN or a transformer they hold its blocks or layers and its width, and
    its `model` column and kind columns, `arch`, `d_model`, ..., describe it), and its `features`
    column is C*H*W for images and seq_len for tokens: none of these is read back into those
    models or data sets, whose shape comes from the spec and the swept field alone.
    """
    spec = manifest["spec"]
    if spec.get("variants"):
        found = [v["config"] for v in spec["variants"] if v["name"] == row["variant"]]
        if not found:
            raise ValueError(f"trial {row['trial']}: no variant {row['variant']!r} in manifest.json")
        cfg = copy.deepcopy(found[0])
    else:
        cfg = copy.deepcopy(spec["base"])
    t, d, m = cfg["training"], cfg["data"], cfg["model"]
    field, value = row.get("field") or "", row.get("value") or ""
    if field and value:
        v = float(value)
        if field == "training.lr":
            t["optimizer"]["lr"] = v
        else:
            # Any `section.key` (model.depth, model.num_layers, model.d_model, model.channels,
            # data.seq_len, data.size, ...) sets cfg[section][key]: whole numbers, unless the
            # spec holds a float there (model.dropout).
            section, key = field.split(".")
            target = {"model": m, "data": d, "training": t, "parallel": cfg.get("parallel", {})}[section]
            if key == "accumulation":
                t["techniques"]["accumulation"] = int(v)
            elif isinstance(target.get(key), float):
                target[key] = v
            else:
                target[key] = int(v)

    if model_kind(m) == "mlp" and "widths" not in m:
        m["depth"], m["hidden"] = int(row["depth"]), int(row["hidden"])
    t["batch_size"] = int(row["batch_size"])
    if d["kind"] == "synthetic":
        d["samples"], d["features"], d["classes"] = (int(row[k]) for k in ("samples", "features", "classes"))
    elif d["kind"] in ("images", "tokens"):
        d["samples"], d["classes"] = (int(row[k]) for k in ("samples", "classes"))
    # The column is a label: "sgd_momentum" is SGD with momentum != 0.
    if row["optimizer"].split("_")[0] != t["optimizer"]["name"]:
        raise ValueError(f"trial {row['trial']}: optimizer {row['optimizer']} in summary.csv, "
                         f"{t['optimizer']['name']} in the spec")
    t["dtype"] = row["dtype"]
    tech = t["techniques"]
    tech["accumulation"] = int(row["accumulation"])
    if row["amp"] != tech["amp"]["dtype"]:
        tech["amp"] = {"dtype": row["amp"]}
    if row["amp"] == "fp16":
        tech["amp"].setdefault("scaler", {"init_scale": 65536.0, "growth_factor": 2.0,
                                          "backoff_factor": 0.5, "growth_interval": 2000})
    ck = row["checkpoint"]
    if ck in ("none", "sqrt"):
        tech["checkpoint"] = ck
    elif ck.startswith("sequential:"):  # Checkpoint::name of { sequential = S }
        tech["checkpoint"] = {"sequential": int(ck.split(":", 1)[1])}
    else:
        tech["checkpoint"] = {"every": int(ck)}
    tech["mode"], tech["history"] = row["mode"], row["history"]
    if row.get("world_size"):
        cfg["parallel"]["world_size"] = int(row["world_size"])
    return cfg


def ddp_of(cfg: dict) -> dict | None:
    """The config's DistributedDataParallel knobs (`[parallel]` strategy = "ddp", or "zero":
    ZeroRedundancyOptimizer over a DDP model), or None."""
    strategy = cfg.get("parallel", {}).get("strategy", {})
    return strategy if strategy.get("name") in ("ddp", "zero") else None


def shards_optimizer(cfg: dict) -> bool:
    """`[parallel]` strategy = "zero": torch.distributed.optim.ZeroRedundancyOptimizer."""
    return cfg.get("parallel", {}).get("strategy", {}).get("name") == "zero"


def model_kind(model: dict) -> str:
    """mlp, cnn or transformer; a manifest from before model kinds holds an MLP without one."""
    return model.get("kind", "mlp")


def segment_len(checkpoint_spec, units: int) -> int | tuple[str, int] | None:
    """Units per checkpointed segment, as Checkpoint::segment_len computes it; for
    {"sequential": S}, ("sequential", S): forward_loss then calls checkpoint_sequential, which
    cuts the units itself. The units are what model.units() lists: an MLP's hidden layers
    (Linear + ReLU each), a CNN's stem then its blocks, a transformer's embedding then its
    encoder layers."""
    if checkpoint_spec == "none":
        return None
    if isinstance(checkpoint_spec, dict) and "sequential" in checkpoint_spec:
        return ("sequential", int(checkpoint_spec["sequential"]))
    if checkpoint_spec == "sqrt":
        return max(1, math.ceil(math.sqrt(units)))
    return max(1, int(checkpoint_spec["every"]))


def segment_ranges(units: int, length: int) -> list[range]:
    """0..units in consecutive ranges of `length` units, the last one possibly shorter
    (train::checkpoint::segment_ranges)."""
    return [range(s, min(s + length, units)) for s in range(0, units, length)]


# --------------------------------------------------------------------------------------------
# Reading the allocator at phase boundaries


class Probe:
    """The allocator's counters as oomlab reads them: peaks reset at a phase's start, and a
    synchronize before every read so that queued kernels have allocated what they will."""

    def __init__(self, device: torch.device, counter=None):
        self.device = device
        self.cuda = device.type == "cuda"
        # On the CPU, cpu_memory's counting allocator (--cpu-memory), which counts every CPU
        # tensor's bytes as oomlab's own counting allocator does: reserved = allocated.
        self.counter = counter
        self.counts = self.cuda or counter is not None
        self._nvml = True

    def reset_peak(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.counter is not None:
            self.counter.reset_peak()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def snapshot(self) -> dict:
        """memory_allocated & co. at this moment; empty strings on the CPU without a counter."""
        self.sync()
        if self.counter is not None:
            now, peak = self.counter.allocated(), self.counter.peak()
            return {"memory_allocated": now, "memory_reserved": now, "max_memory_allocated": peak,
                    "max_memory_reserved": peak, "device_used": ""}
        if not self.cuda:
            return dict.fromkeys(TRACE_COLUMNS[4:9], "")
        d = self.device
        return {
            "memory_allocated": torch.cuda.memory_allocated(d),
            "memory_reserved": torch.cuda.memory_reserved(d),
            "max_memory_allocated": torch.cuda.max_memory_allocated(d),
            "max_memory_reserved": torch.cuda.max_memory_reserved(d),
            "device_used": self.device_used(),
        }

    def device_used(self):
        # oomlab reads NVML's used memory. torch.cuda.device_memory_used needs pynvml, which a
        # bare venv lacks; cudaMemGetInfo's total - free is the driver's figure for the same
        # thing (it can differ from nvidia-smi by the memory the driver reserves for itself).
        if self._nvml:
            try:
                return torch.cuda.device_memory_used(self.device)
            except Exception:
                self._nvml = False
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def allocated(self) -> int | None:
        if self.counter is not None:
            return self.counter.allocated()
        return torch.cuda.memory_allocated(self.device) if self.cuda else None

    def empty_cache(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()


class PhaseOOM(Exception):
    """A phase that failed inside PyTorch, carried as data without its tensors."""

    def __init__(self, phase: str, step: int, message: str, oom: bool):
        super().__init__(message)
        self.phase, self.step, self.message, self.oom = phase, step, message, oom


HISTORY_COLUMNS = ["trial", "step", "micro", "phase", "action", "requested", "frames", "addr"]


class History:
    """--history: every allocation and free of each phase, in order, in the columns of
    `oomlab estimate --blocks` (scripts/reference/compare.py aligns the two). On CUDA from
    PyTorch's own allocation history (torch.cuda.memory._record_memory_history, its snapshot's
    device trace: `alloc` and `free_completed`, with the Python frames that made them, and
    `segment_alloc` and `segment_free`, each with its device address, so that a replay of the
    caching allocator can be checked block by block: which free block served a request, which
    segment a block came from); on the CPU from cpu_memory's counting allocator's event log
    (--cpu-memory), without addresses."""

    def __init__(self, probe: Probe, writer: csv.DictWriter):
        self.probe, self.writer = probe, writer
        self.seen = 0
        self.trial = None
        self.cache: list[tuple] = []
        self.outside: list[dict] = []
        self.ended: int | None = None
        if probe.cuda:
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=10_000_000)
        elif probe.counter is None:
            sys.exit("train.py: --history on the CPU needs --cpu-memory (PyTorch keeps no CPU history)")

    def begin(self):
        if self.probe.cuda:
            snapshot = torch.cuda.memory._snapshot()
            trace = self._trace(snapshot)
            # What the loop did since the last phase ended (frees of what it dropped between
            # phases), written with the phase that follows as `outside_alloc` / `outside_free`:
            # compare.py skips them (no phase of the estimate has them), a replay of the
            # allocator needs them.
            self.outside = trace[self.ended:] if self.ended is not None else []
            self.seen = len(trace)
            # The cache each phase starts from, written before a trial's first phase only: every
            # segment (`cached_segment`, its size) and its blocks (`cached_block`, with state),
            # by address. A replay of the allocator from the trial's first event needs them.
            index = self.probe.device.index or 0
            self.cache = [(kind, size, state, addr)
                          for seg in snapshot["segments"] if seg.get("device", 0) == index
                          for kind, size, state, addr in
                          [("cached_segment", seg["total_size"], seg.get("segment_type", ""), seg["address"])]
                          + [("cached_block", b["size"], b["state"], b["address"]) for b in seg["blocks"]]]
        else:
            self.probe.counter.clear_events()
            self.probe.counter.set_logging(True)

    def _trace(self, snapshot: dict | None = None) -> list[dict]:
        traces = (snapshot or torch.cuda.memory._snapshot())["device_traces"]
        index = self.probe.device.index or 0
        return traces[index] if index < len(traces) else []

    @staticmethod
    def _rows(events: list[dict], prefix: str = "") -> list[tuple]:
        """A device trace's allocations and frees, and its segments (cudaMalloc and cudaFree as
        the cache grows and empties, for reserved memory; compare.py aligns blocks only)."""
        rows = []
        for e in events:
            action = {"alloc": "alloc", "free_completed": "free", "segment_alloc": "segment_alloc",
                      "segment_free": "segment_free"}.get(e.get("action"))
            if action is None:
                continue
            frames = [f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in e.get("frames", [])]
            rows.append((prefix + action, int(e["size"]), " < ".join(frames[:4]), int(e.get("addr", 0))))
        return rows

    def end(self, trial: int, step: int, micro: int, phase: str):
        rows = []
        if self.probe.cuda:
            # A trial's first phase starts from the cache as the snapshot found it; later ones
            # from the last phase's end, then what happened in between.
            rows += self.cache if trial != self.trial else self._rows(self.outside, "outside_")
            trace = self._trace()
            rows += self._rows(trace[self.seen:])
            self.ended = len(trace)
        else:
            self.probe.counter.set_logging(False)
            for e in self.probe.counter.events():
                rows.append(("alloc" if e.delta > 0 else "free", abs(e.delta), f"serial {e.serial}", ""))
        self.trial = trial
        for action, size, frames, addr in rows:
            self.writer.writerow({"trial": trial, "step": step, "micro": micro, "phase": phase,
                                  "action": action, "requested": size, "frames": frames, "addr": addr})


class Recorder:
    """Runs one phase at a time, as oomlab's train::recorder does, and writes its trace row
    whether the phase succeeded or failed."""

    def __init__(self, probe: Probe, trial: int, writer: csv.DictWriter, history: History | None = None):
        self.probe, self.trial, self.writer, self.history = probe, trial, writer, history
        self.start = time.perf_counter()
        self.micro = 0
        self.peak = [0, 0]
        self.step_seconds: list[float] = []

    def phase(self, step: int, name: str, fn, *args):
        self.probe.reset_peak()
        if self.history is not None:
            self.history.begin()
        t0 = time.perf_counter()
        error = None
        try:
            out = fn(*args)
        except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
            text = str(e)
            oom = isinstance(e, torch.OutOfMemoryError) or any(m in text.lower() for m in OOM_MARKERS)
            error = (text.strip().splitlines() or [""])[0], oom
            out = None
        if error is not None:
            # The traceback held the failed phase's frames and their tensors; it is gone now
            # that the except block has ended, but frames can sit in reference cycles. oomlab
            # reads the allocator after the failed closure's locals are dropped: do the same.
            gc.collect()
        mem = self.probe.snapshot()
        secs = time.perf_counter() - t0
        if self.history is not None:
            self.history.end(self.trial, step, self.micro, name)
        if self.probe.counts:
            self.peak[0] = max(self.peak[0], mem["max_memory_allocated"])
            self.peak[1] = max(self.peak[1], mem["max_memory_reserved"])
        if step > 0:
            while len(self.step_seconds) < step:
                self.step_seconds.append(0.0)
            self.step_seconds[step - 1] += secs
        self.writer.writerow({
            "trial": self.trial, "step": step, "micro": self.micro, "phase": name, **mem,
            "phase_seconds": f"{secs:.9f}",
            "elapsed_seconds": f"{time.perf_counter() - self.start:.9f}",
        })
        if error is not None:
            raise PhaseOOM(name, step, error[0], error[1])
        return out

    def mean_step_seconds(self):
        """Leaves out the first step when there are more, as oomlab does."""
        s = self.step_seconds
        if not s:
            return None
        rest = s[1:] or s
        return sum(rest) / len(rest)


# --------------------------------------------------------------------------------------------
# The trial: data, model, optimizer, steps


class Dataset:
    """x: the (first) input; extra: a tensors kind's other inputs, in the forward's order; y: the
    target."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, extra: list | None = None):
        self.x, self.y, self.extra = x, y, extra or []


def make_data(cfg: dict, dtype: torch.dtype, home: torch.device) -> Dataset:
    """The data set, as train::data::make makes it, bit for bit from the same seed:
    synthetic (standard normal features, labels from a random linear teacher), images (the
    same with C x H x H samples, the teacher reading them flattened), tokens (uniform token
    ids; the label is the residue, id mod classes, the sample's tokens take most often, the
    first on a tie: a bag of tokens, which a mean-pooled encoder without positions can learn),
    or a CSV with a label column."""
    d = cfg["data"]
    if d["kind"] == "synthetic":
        torch.manual_seed(int(d["seed"]))
        x = torch.randn(d["samples"], d["features"], dtype=dtype, device=home)
        teacher = torch.randn(d["features"], d["classes"], dtype=dtype, device=home)
        y = (x @ teacher).argmax(1)
        return Dataset(x, y)
    if d["kind"] == "images":
        torch.manual_seed(int(d["seed"]))
        s, c, h = int(d["samples"]), int(d["channels"]), int(d["size"])
        x = torch.randn(s, c, h, h, dtype=dtype, device=home)
        teacher = torch.randn(c * h * h, d["classes"], dtype=dtype, device=home)
        y = (x.reshape(s, -1) @ teacher).argmax(1)
        return Dataset(x, y)
    if d["kind"] == "tokens":
        torch.manual_seed(int(d["seed"]))
        x = torch.randint(0, int(d["vocab"]), (int(d["samples"]), int(d["seq_len"])),
                          dtype=torch.int64, device=home)
        k = int(d["classes"])
        residues = x % k
        counts = torch.zeros(int(d["samples"]), k, dtype=torch.int64, device=home)
        counts.scatter_add_(1, residues, torch.ones_like(residues))
        y = counts.argmax(1)
        return Dataset(x, y)
    if d["kind"] == "tensors":
        # Each input in turn, then the target (class indices, or values for mse), one seed.
        torch.manual_seed(int(d["seed"]))
        s = int(d["samples"])
        made = []
        for i in d["inputs"]:
            shape = (s, *[int(n) for n in i["shape"]])
            kind = i["dtype"]
            if kind == "float":
                made.append(torch.randn(shape, dtype=dtype, device=home))
            elif kind == "bool":
                made.append(torch.randint(2, shape, dtype=torch.bool, device=home))
            else:  # {"int64": {"high": N}}
                made.append(torch.randint(int(kind["int64"]["high"]), shape, dtype=torch.int64, device=home))
        shape = (s, *[int(n) for n in d["target"]])
        if d.get("classes") is not None:
            y = torch.randint(int(d["classes"]), shape, dtype=torch.int64, device=home)
        else:
            y = torch.randn(shape, dtype=dtype, device=home)
        return Dataset(made[0], y, made[1:])
    if d["kind"] != "csv":
        raise ValueError(f"data kind {d['kind']!r}")
    with open(d["path"], newline="") as f:
        rows = list(csv.DictReader(f))
    label = d["label"]
    feats = [k for k in rows[0] if k != label]
    x = torch.tensor([[float(r[k]) for k in feats] for r in rows], dtype=torch.float32).to(dtype).to(home)
    y = torch.tensor([int(r[label]) for r in rows], dtype=torch.int64).to(home)
    return Dataset(x, y)


def gather(data: Dataset, index: int, batch: int, device: torch.device, shard: tuple[int, int] = (0, 1)):
    """Micro-batch `index`: rows index*batch .. +batch, wrapping around the end, in tensors of
    their own (step.rs's gather). On the host the batch is gathered there and then copied, as a
    DataLoader hands a CPU batch to `.to(device)`. `shard` = (rank, world): the rank's rows as an
    unshuffled DistributedSampler deals them, its k-th row being row k * world + rank."""
    n = data.x.shape[0]
    start = (index * batch) % n
    rank, world = shard
    idx = torch.arange(start * world + rank, (start + batch) * world + rank, world, dtype=torch.int64,
                       device=data.x.device) % n
    if data.extra:
        # Several inputs: each gathered and moved before the next, as a collate and
        # [t.to(device) for t in batch] do; the model reads them as one tuple.
        take = [t.index_select(0, idx).to(device) for t in [data.x, *data.extra]]
        return tuple(take), data.y.index_select(0, idx).to(device)
    x, y = data.x.index_select(0, idx), data.y.index_select(0, idx)
    if x.device != device:
        x, y = x.to(device), y.to(device)
    return x, y


class Units(nn.Module):
    """A classifier as a list of units and a head: forward(x) = head(units...(x)).

    Checkpointing cuts units() into segments (the head is never checkpointed). units() hands
    out the model's own submodules (or nn.Sequentials of them, which own nothing), so
    parameters() keeps the underlying model's order."""

    def units(self) -> list[nn.Module]:
        raise NotImplementedError

    def head(self, h):
        raise NotImplementedError

    def forward(self, x):
        # Each unit's input goes when the unit returns and `x` is rebound; the head's when the
        # head returns (oomlab's Model::forward_units and Model::head).
        for unit in self.units():
            x = unit(x)
        return self.head(x)


class Mlp(Units):
    """The lesson's Classifier_MLP: nn.Sequential(Linear, ReLU, ..., Linear), kept as built
    (the same construction order as before units, so the same parameters from the same seed).
    nn.Linear's default init draws weight then bias from U(+-1/sqrt(fan_in)), the same draws in
    the same order as model.rs's Linear::new, so the same seed gives bit-identical parameters
    (checked on CPU, in float32)."""

    def __init__(self, features: int, widths: list[int], classes: int, dtype, device):
        super().__init__()
        dims = [features] + list(widths) + [classes]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims, dims[1:])):
            layers.append(nn.Linear(a, b, device=device, dtype=dtype))
            if i < len(widths):
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.depth = len(widths)

    def units(self):
        return [self.net[2 * i: 2 * i + 2] for i in range(self.depth)]  # (Linear, ReLU) each

    def head(self, h):
        return self.net[-1](h)

    def forward(self, x):
        # The lesson's flat nn.Sequential: each Linear's input goes once its output exists.
        return self.net(x)


class ConvStack(Units):
    """A plain CNN: a stem conv, `depth` blocks of conv (standard, or depthwise then 1x1 as
    guide 002 writes a depthwise-separable conv), ReLU each, then global average pooling and a
    Linear. Same-padding (kernel // 2), so the spatial size never changes."""

    def __init__(self, in_ch, channels, depth, conv, kernel, classes, dtype, device):
        super().__init__()
        f = {"device": device, "dtype": dtype}
        p = kernel // 2
        self.stem = nn.Sequential(nn.Conv2d(in_ch, channels, kernel, padding=p, **f), nn.ReLU())
        blocks = []
        for _ in range(depth):
            if conv == "standard":
                blocks.append(nn.Sequential(nn.Conv2d(channels, channels, kernel, padding=p, **f), nn.ReLU()))
            elif conv == "depthwise_separable":
                blocks.append(nn.Sequential(
                    nn.Conv2d(channels, channels, kernel, padding=p, groups=channels, **f),
                    nn.Conv2d(channels, channels, 1, **f), nn.ReLU()))
            else:
                raise ValueError(f"conv {conv!r}")
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes, **f)

    def units(self):
        return [self.stem, *self.blocks]

    def head(self, h):
        return self.fc(torch.flatten(self.pool(h), 1))


class ResNetClassifier(Units):
    """torchvision's resnetN(num_classes=K), untouched (weights=None: torchvision's own init),
    as self.net. Its units are the stem (conv1, bn1, relu, maxpool) and each residual block of
    layer1..layer4; the head is avgpool, flatten, fc: ResNet._forward_impl's ops in its order.

    Built in float32 on the CPU (torchvision's constructors take neither dtype nor device), so
    the init draws come from the CPU generator, then moved and cast with one .to(device,
    dtype): each parameter and float buffer replaced in turn (on the CPU in float32, nothing
    happens). BatchNorm runs in training
    mode throughout, updating its running statistics (buffers, not parameters). Under
    checkpointing the recompute runs each BN forward again, so running_mean, running_var and
    num_batches_tracked are updated twice per checkpointed step (as in any recompute, oomlab's
    included); training-mode BN normalises with the batch's own statistics, so the parameters
    do not see it."""

    def __init__(self, arch: str, classes: int, dtype, device):
        super().__init__()
        import torchvision  # only here: an MLP-only run needs no torchvision

        if arch not in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
            raise ValueError(f"cnn arch {arch!r}")
        # As its users do: built on the CPU (torchvision's constructors take no device), then
        # moved and cast in one .to(), each tensor replaced in turn.
        net = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
        self.net = net.to(device=device, dtype=dtype)

    def units(self):
        n = self.net
        return [nn.Sequential(n.conv1, n.bn1, n.relu, n.maxpool), *n.layer1, *n.layer2, *n.layer3, *n.layer4]

    def head(self, h):
        return self.net.fc(torch.flatten(self.net.avgpool(h), 1))


class EncoderClassifier(Units):
    """Token embedding, nn.TransformerEncoder (batch_first, post- or pre-norm, ReLU, no masks),
    mean over the sequence, Linear, as oomlab's transformer.rs has it. There is no positional
    encoding: the label (which residue the tokens take most often) is a bag of tokens, which
    the mean over the sequence can learn.

    TransformerEncoder deep-copies `layer` num_layers times: every encoder layer starts with
    the same parameters, drawn once, and the prototype itself is dropped after __init__ (it is
    no submodule: in memory, one extra layer until then). The model stays in training mode, so
    nn.MultiheadAttention and TransformerEncoderLayer never take their fast paths (which
    fused kernels would serve in eval mode under no_grad)."""

    def __init__(self, vocab, d_model, nhead, num_layers, dim_feedforward, dropout, norm_first,
                 classes, dtype, device):
        super().__init__()
        f = {"device": device, "dtype": dtype}
        self.embed = nn.Embedding(vocab, d_model, **f)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True,
                                           norm_first=norm_first, **f)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head_fc = nn.Linear(d_model, classes, **f)

    def units(self):
        return [self.embed, *self.encoder.layers]

    def head(self, h):
        return self.head_fc(h.mean(dim=1))


class Script(Units):
    """A TorchScript module of the user's (model.kind = "torchscript"), loaded as a PyTorch user
    loads one, torch.jit.load, and trained as it is: one unit, its output the logits. The
    executor runs it op by op, as eager PyTorch would run the module it came from (no profiling
    executor, no optimised graph, no fuser), as oomlab sets libtorch's."""

    def __init__(self, path: str, dtype, device, children: bool = False):
        super().__init__()
        # model.units = "children": its top-level children are the units checkpointing cuts.
        self.children_are_units = children
        torch._C._jit_set_profiling_executor(False)
        torch._C._set_graph_executor_optimize(False)
        torch._C._jit_set_texpr_fuser_enabled(False)
        self.module = torch.jit.load(path, map_location=device)
        if dtype != torch.float32:
            self.module.to(dtype)
        # Parameters as saved: one frozen (requires_grad = False) gets no gradient, and the
        # optimizer, given them all, skips it.
        self.module.train()

    def units(self):
        return list(self.module.children()) if self.children_are_units else [self.module]

    def head(self, h):
        return h

    def forward(self, x):
        # A tensors kind's several inputs come as one tuple (gather), the forward's arguments.
        out = self.module(*x) if isinstance(x, tuple) else self.module(x)
        return logits_of(out)


def logits_of(out):
    """The logits in what a module returns, as a training loop reads them (oomlab's
    nn::script::logits): the tensor; a tuple's or list's first tensor (return_dict=False); a
    dict's "logits" (a Hugging Face ModelOutput, traced into a dict), else its first tensor.
    The rest is dropped here, as `out = model(x)[0]` drops it."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        if isinstance(out.get("logits"), torch.Tensor):
            return out["logits"]
        out = list(out.values())
    return next(t for t in out if isinstance(t, torch.Tensor))


def loss_of(cfg: dict, out, y):
    """The config's loss, the mean: F.cross_entropy (a TorchScript module's over its output's
    last dimension, flattened as oomlab's nn::script::loss does) or F.mse_loss (model.loss)."""
    m = cfg["model"]
    if model_kind(m) == "torchscript" and m.get("loss") == "mse":
        return F.mse_loss(out, y)
    if out.dim() > 2:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return F.cross_entropy(out, y)


def make_model(cfg: dict, features_or_shape, classes: int, dtype, device) -> Units:
    """The config's model, with units() and head(). features_or_shape is a sample's shape
    (data.x.shape[1:]; an int for an MLP's features): (D,), (C, H, W) or (L,). Call it right
    after torch.manual_seed(training.seed): every kind draws its init from the global generator
    (python-reference.md lists the draws, in order)."""
    m = cfg["model"]
    shape = (features_or_shape,) if isinstance(features_or_shape, int) else tuple(features_or_shape)
    kind = model_kind(m)
    if kind == "mlp":
        widths = [int(w) for w in m["widths"]] if "widths" in m else [int(m["hidden"])] * int(m["depth"])
        return Mlp(int(shape[0]), widths, classes, dtype, device)
    if kind == "cnn":
        if m["arch"] == "plain":
            return ConvStack(int(shape[0]), int(m["channels"]), int(m["depth"]), m["conv"], int(m["kernel"]),
                             classes, dtype, device)
        return ResNetClassifier(m["arch"], classes, dtype, device)
    if kind == "transformer":
        return EncoderClassifier(int(cfg["data"]["vocab"]), int(m["d_model"]), int(m["nhead"]),
                                 int(m["num_layers"]), int(m["dim_feedforward"]), float(m["dropout"]),
                                 bool(m["norm_first"]), classes, dtype, device)
    if kind == "torchscript":
        return Script(m["path"], dtype, device, m.get("units") == "children")
    raise ValueError(f"model kind {kind!r}")


def make_optimizer(spec: dict, params, impl: str, zero: bool = False) -> torch.optim.Optimizer:
    """torch.optim with oomlab's settings (betas 0.9/0.999, eps 1e-8, no nesterov, no
    dampening) in the implementation oomlab ran (the spec's training.optimizer_impl, else
    PyTorch's own pick: `default`, foreach on CUDA and the for-loop on the CPU); with `zero`,
    as the local optimizer of torch.distributed.optim.ZeroRedundancyOptimizer over `params`."""
    kw = {"for_loop": {"foreach": False}, "foreach": {"foreach": True},
          "fused": {"fused": True}, "default": {}}[impl]
    name, lr, wd = spec["name"], spec["lr"], spec.get("weight_decay", 0.0)
    if name == "sgd":
        cls, kw = torch.optim.SGD, dict(lr=lr, momentum=spec.get("momentum", 0.0), weight_decay=wd, **kw)
    elif name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, **kw)
    else:
        raise ValueError(f"optimizer {name!r}")
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


def autocast(device: torch.device, amp: dict):
    if amp["dtype"] == "off":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp["dtype"]])


def forward_loss(cfg: dict, model: Units, x, y, seg: int | tuple[str, int] | None):
    """Logits and mean cross-entropy (F.cross_entropy's defaults): head(units...(x)), each
    segment of `seg` units under torch.utils.checkpoint when checkpointing; with
    ("sequential", S), the units through torch.utils.checkpoint.checkpoint_sequential in S
    segments (S - 1 of len(units) // S checkpointed, the rest not), then the head."""
    if seg is None:
        return loss_of(cfg, model(x), y)
    units = model.units()
    h = x
    # Over a TorchScript module's children, non-reentrant checkpoint must recompute whole: its
    # early stop raises out of the saved-tensor hook to end a recompute, and the TorchScript
    # interpreter turns that into a RuntimeError (PyTorch 2.11).
    whole = torch.utils.checkpoint.set_checkpoint_early_stop(False) if isinstance(model, Script) \
        else contextlib.nullcontext()
    if isinstance(seg, tuple):
        # PyTorch's own cut, as a reader calls it: oomlab's Checkpoint::segments reproduces it
        # (and its checkpointed segments as above; with S = 1 both run everything plain).
        with whole:
            h = checkpoint_sequential(nn.Sequential(*units), seg[1], h, use_reentrant=False)
        return loss_of(cfg, model.head(h), y)
    # Differs from oomlab: oomlab's checkpoint.rs is hand-written (tch has no custom autograd
    # Function): it runs segments under no_grad, recomputes each in backward and pushes the
    # gradient through with (out * g).sum().backward(), freeing the head's input and gradient
    # early with set_(). torch.utils.checkpoint (non-reentrant) keeps the same boundaries but
    # through saved-tensor hooks, so its transient peaks can differ; it also stashes the RNG
    # state per segment (host memory only; on CUDA the device generator's state too), so that
    # the recompute draws the same dropout masks. The head is not checkpointed in either.
    with whole:
        for r in segment_ranges(len(units), seg):
            h = checkpoint(nn.Sequential(*units[r.start:r.stop]), h, use_reentrant=False)
    return loss_of(cfg, model.head(h), y)


def data_home(cfg: dict, device: torch.device, override: str | None) -> torch.device:
    """Where the data set lives: --location, else the config's data.location as oomlab ran
    it. A manifest without the key predates it, from when oomlab made the data on the device."""
    location = override or cfg.get("location", "device")
    return torch.device("cpu") if location == "host" else device


def run_trial(cfg: dict, device: torch.device, rec: Recorder, args, out: dict):
    """One trial, phase by phase, as step.rs's train(). Everything it makes is local, so it is
    all freed when this returns or raises."""
    t, tech = cfg["training"], cfg["training"]["techniques"]
    home = data_home(cfg, device, args.location)
    dtype = DTYPES[t["dtype"]]
    data = rec.phase(0, "data", make_data, cfg, dtype, home)
    # A CSV's classes are its largest label + 1, at least 2 (data.rs's read_csv).
    shape, classes = tuple(data.x.shape[1:]), int(cfg["data"].get("classes") or max(2, int(data.y.max()) + 1))

    def build():
        torch.manual_seed(int(t["seed"]))
        model = make_model(cfg, shape, classes, dtype, device)
        impl = args.optimizer_impl or tech.get("optimizer_impl") or "default"
        # ZeRO's wrapper needs the ranks' process group: a rank's process (--ddp-world) has it.
        zero = shards_optimizer(cfg) and bool(getattr(args, "ddp_world", 0))
        opt = make_optimizer(t["optimizer"], model.parameters(), impl, zero=zero)
        scaler = None
        if tech["amp"]["dtype"] == "fp16":
            s = tech["amp"]["scaler"]
            # Its scale and growth tracker come at the first scale() (backward of step 1), as
            # oomlab's do.
            scaler = torch.amp.GradScaler(device.type, init_scale=s["init_scale"],
                                          growth_factor=s["growth_factor"],
                                          backoff_factor=s["backoff_factor"],
                                          growth_interval=int(s["growth_interval"]))
        return model, opt, scaler

    model, opt, scaler = rec.phase(0, "model", build)
    seg = segment_len(tech["checkpoint"], len(model.units()))
    ddp = ddp_of(cfg)
    if ddp is not None and getattr(args, "ddp_world", 0):
        if seg is not None:
            sys.exit("train.py: DDP with checkpointing is not run here")
        # What a DDP user writes: the module wrapped once the optimizer holds its parameters.
        cap = ddp.get("bucket_cap_bytes")
        model = rec.phase(0, "wrap", lambda: torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=None if cap is None else cap / (1024 * 1024),
            find_unused_parameters=bool(ddp.get("find_unused_parameters")),
            gradient_as_bucket_view=bool(ddp.get("gradient_as_bucket_view")),
            static_graph=bool(ddp.get("static_graph"))))
    steps = args.steps or int(t["steps"])
    kept_tensors, kept_values = [], []

    def keep(loss):
        if tech["history"] == "loss_tensor":
            kept_tensors.append(loss)  # the guide's leak: the tensor keeps its graph alive
        elif tech["history"] == "loss_value":
            kept_values.append(loss.item())

    skipped = 0
    for step in range(1, steps + 1):
        if tech["mode"] == "train":
            loss, skip, mean = train_step(cfg, data, model, opt, scaler, seg, step, rec, keep, device,
                                          read_loss=step == steps, shard=shard_of(args))
            skipped += int(skip)
        else:
            loss, mean = forward_step(cfg, data, model, step, rec, keep, device), None
        if step == steps:
            # As oomlab's final_loss: under accumulation, the mean of the last step's
            # micro-batches' losses (the effective batch's loss).
            out["final_loss"] = mean if mean is not None else loss.item()
        # oomlab drops each step's loss at the end of its iteration. A plain Python loop would
        # hold it (and, in forward mode, its whole graph) until the next step's assignment:
        # memory oomlab does not have, so it is dropped here to measure the same thing.
        del loss
    if scaler is not None:
        out["skipped_steps"], out["final_scale"] = skipped, scaler.get_scale()
    if out.get("keep_params"):
        out["params"] = [p.detach() for p in model.parameters()]


def train_step(cfg, data, model, opt, scaler, seg, step, rec, keep, device, read_loss=False, shard=(0, 1)):
    t, tech = cfg["training"], cfg["training"]["techniques"]
    n = int(tech["accumulation"])
    last = None
    total = 0.0

    def forward(x, y):
        with autocast(device, tech["amp"]):
            return forward_loss(cfg, model, x, y, seg)

    def backward(loss):
        # Differs from oomlab: oomlab re-enters autocast around a checkpointed backward (for
        # the recompute) and keeps autocast's weight-cast cache for the whole backward; here
        # backward runs outside autocast, as PyTorch recommends, and torch.utils.checkpoint
        # re-enters autocast per segment on its own, clearing the cache after each.
        loss_b = loss / n if n > 1 else loss  # each micro-batch counts 1/n of the mean
        if scaler is not None:
            loss_b = scaler.scale(loss_b)
        loss_b.backward()

    for micro in range(n):
        rec.micro = micro
        x, y = rec.phase(step, "to_device", gather, data, (step - 1) * n + micro, t["batch_size"], device,
                         shard)
        loss = rec.phase(step, "forward", forward, x, y)
        keep(loss)
        rec.phase(step, "backward", backward, loss)
        if read_loss:
            total += loss.item()
        # As in step.rs, the micro-batch goes at the end of its iteration (Python would
        # otherwise keep it through the next to_device); only the last loss lives on.
        del x, y
        if micro + 1 == n:
            last = loss
        del loss
    rec.micro = 0

    def optimizer_step():
        if scaler is None:
            opt.step()
            return False
        before = scaler.get_scale()
        scaler.step(opt)  # unscale, skip on inf/NaN
        scaler.update()
        return scaler.get_scale() < before  # a backed-off scale means the step was skipped

    skip = rec.phase(step, "optimizer_step", optimizer_step)
    # set_to_none=True (the default since 2.0) frees the gradients, as libtorch's zero_grad.
    rec.phase(step, "zero_grad", opt.zero_grad)
    return last, skip, (total / n if read_loss else None)


def shard_of(args) -> tuple[int, int]:
    """This process's (rank, world) in a DDP trial's world; (0, 1) alone."""
    # Callers that build their own args (params.py) run one process.
    world = getattr(args, "ddp_world", 0)
    return (args.ddp_rank, world) if world else (0, 1)


def run_ranks(args, trial: int, world: int) -> list[tuple[list[dict], list[dict]]]:
    """A DDP trial's ranks, each a process of this script (`--ddp-rank R --ddp-world W`) meeting
    at a fresh FileStore, as torchrun starts them; their trace and summary rows, rank by rank."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="train-ddp-") as tmp:
        store = Path(tmp) / "store"
        procs, outs = [], []
        for rank in range(world):
            out = Path(tmp) / f"rank{rank}.csv"
            argv = [sys.executable, str(Path(__file__).resolve()), "--summary", str(args.summary),
                    "--device", "cpu", "--trials", str(trial), "--out", str(out), "--no-warmup",
                    "--ddp-rank", str(rank), "--ddp-world", str(world), "--ddp-store", str(store)]
            if args.cpu_memory:
                argv.append("--cpu-memory")
            if args.threads:
                argv += ["--threads", str(args.threads)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            outs.append(out)
        failed = [(r, p.wait(), p.stderr.read()) for r, p in enumerate(procs)]
        failed = [f for f in failed if f[1] != 0]
        if failed:
            rank, code, err = failed[0]
            sys.exit(f"train.py: DDP rank {rank} of trial {trial} exited {code}: {err.strip()[-2000:]}")
        results = []
        for rank, out in enumerate(outs):
            with open(out) as f:
                trace = list(csv.DictReader(f))
            with open(str(out) + ".summary.csv") as f:
                summary = list(csv.DictReader(f))
            for r in trace + summary:
                r["rank"] = rank
            results.append((trace, summary))
        return results


def forward_step(cfg, data, model, step, rec, keep, device):
    """Forward and loss only: with grad tracking (a validation loop that forgot no_grad) or
    under torch.no_grad()."""
    t, tech = cfg["training"], cfg["training"]["techniques"]
    x, y = rec.phase(step, "to_device", gather, data, step - 1, t["batch_size"], device)

    def forward():
        grad = torch.no_grad() if tech["mode"] == "forward_no_grad" else contextlib.nullcontext()
        with grad, autocast(device, tech["amp"]):
            return forward_loss(cfg, model, x, y, None)

    loss = rec.phase(step, "forward", forward)
    keep(loss)
    return loss


# --------------------------------------------------------------------------------------------
# The run


def tiny(cfg: dict) -> dict:
    """A few-KiB copy of a config that goes through the same code paths, as oomlab's
    train::warmup::tiny makes it: the same kind of model and data, shrunk (an MLP of at most
    two hidden layers of 8; a plain CNN of 4 channels, at most two blocks, on 8 x 8 images; a
    ResNet of the same arch, kept whole as its blocks are the code paths, on 32 x 32 images;
    a transformer of d_model 8, 2 heads, feed-forward 16, at most two layers, on 4 tokens of
    16), a batch of 4 from 8 rows, two steps, at most two micro-batches, checkpointing every
    unit if at all.

    Differs from oomlab maybe: the lead's Rust tiny() for CNNs and transformers may shrink
    them otherwise. Nothing compares the warm-up trial itself; only what it leaves behind
    (cuBLAS/cuDNN workspaces, lazy imports) matters, and that needs the same ops, not the same
    sizes."""
    c = copy.deepcopy(cfg)
    m, d = cfg["model"], cfg["data"]
    kind = model_kind(m)
    classes = min(int(d["classes"]), 4) if d.get("classes") is not None else 2
    if kind == "torchscript" and "samples" in d:
        # A module of the user's reads the shapes it was made for: the spec's data, fewer rows.
        c["data"]["samples"] = min(int(d["samples"]), 8)
    if kind == "mlp":
        depth = len(m["widths"]) if "widths" in m else int(m["depth"])
        c["model"] = {"kind": "mlp", "hidden": 8, "depth": min(depth, 2)}
        c["data"] = {"kind": "synthetic", "samples": 8, "features": 4, "classes": classes, "seed": 0}
    elif kind == "cnn":
        if m["arch"] == "plain":
            c["model"] = {**m, "channels": 4, "depth": min(int(m["depth"]), 2)}
            size = 8
        else:
            size = 32  # each of the five stride-2 stages halves it: 1 x 1 at the end
        c["data"] = {"kind": "images", "samples": 8, "channels": int(d["channels"]), "size": size,
                     "classes": classes, "seed": 0}
    elif kind == "transformer":
        c["model"] = {**m, "d_model": 8, "nhead": 2, "dim_feedforward": 16,
                      "num_layers": min(int(m["num_layers"]), 2)}
        c["data"] = {"kind": "tokens", "samples": 8, "seq_len": min(int(d["seq_len"]), 4),
                     "vocab": min(int(d["vocab"]), 16), "classes": classes, "seed": 0}
    t = c["training"]
    t["batch_size"], t["steps"] = 4, 2
    tech = t["techniques"]
    tech["accumulation"] = min(int(tech["accumulation"]), 2)
    ck = tech["checkpoint"]
    if isinstance(ck, dict) and int(ck.get("sequential", 2)) == 1:
        tech["checkpoint"] = "none"  # one segment of checkpoint_sequential checkpoints nothing
    elif ck != "none":
        tech["checkpoint"] = {"every": 1}
    return c


class _Discard:
    def writerow(self, _row):
        pass


def warm_up(device: torch.device, configs: list[dict], amp_kinds: set[str], args) -> int:
    """What libtorch keeps for the process, made before trial 1, so that no trial counts it.

    cuBLAS and cuBLASLt make a workspace per thread that runs matrix products (the main thread
    in forward, the autograd engine's device thread in backward), through the caching allocator,
    and keep them for the process's lifetime: memory_allocated counts them and empty_cache does
    not free them. Without a warm-up trial 1 would carry them (and look like it leaked) while
    every later trial started above them.

    First a tiny Linear forward + backward, in fp32 and under autocast for each amp dtype the
    trials use; then, as oomlab's run does since train/warmup.rs, a tiny copy of each of the
    spec's configurations through the same trial code (the grad scaler, checkpointing,
    torch.optim and their lazy Python imports included, which would otherwise add a second or
    two to trial 1's model phase). Returns memory_allocated afterwards (0 on the CPU)."""
    lin = nn.Linear(64, 64, device=device)
    x = torch.randn(64, 64, device=device)
    lin(x).sum().backward()
    for kind in sorted(amp_kinds):
        with torch.autocast(device_type=device.type, dtype=AMP_DTYPES[kind]):
            out = lin(x)
        out.float().sum().backward()
        del out
    del lin, x
    counter = None
    if args.cpu_memory and device.type == "cpu":
        import cpu_memory  # beside this script
        cpu_memory.install()
        counter = cpu_memory
    probe = Probe(device, counter)
    steps, args.steps = args.steps, None
    try:
        for i, cfg in enumerate(configs):
            try:
                run_trial(tiny(cfg), device, Recorder(probe, i + 1, _Discard()), args, {})
            except PhaseOOM:
                pass  # a few KiB that fail say nothing the trials will not record themselves
    finally:
        args.steps = steps
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        return torch.cuda.memory_allocated(device)
    return 0


def apply_budget(device: torch.device, budget: int):
    """The budget as the caching allocator's per-process fraction, as oomlab's CUDA probe sets
    it, checked the same way: an allocation just over it must fail."""
    free, total = torch.cuda.mem_get_info(device)
    if budget > total:
        sys.exit(f"train.py: budget {budget} B is more than the device's {total} B")
    torch.cuda.set_per_process_memory_fraction(budget / total, device)
    over = budget + (1 << 20)
    if over <= total:
        try:
            t = torch.empty(over, dtype=torch.uint8, device=device)
            del t
            torch.cuda.empty_cache()
            sys.exit(f"train.py: an allocation of {over} B succeeded under a budget of {budget} B")
        except torch.OutOfMemoryError:
            pass
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary", type=Path, required=True, help="an oomlab summary.csv")
    p.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N (default cuda)")
    p.add_argument("--budget", type=int, default=None,
                   help="bytes, as a per-process memory fraction (CUDA only); default: the budget "
                        "the oomlab run used (manifest.json); 0: none")
    p.add_argument("--location", choices=("device", "host"), default=None,
                   help="where the data set lives: host (CPU tensors, each batch gathered there and "
                        "moved with .to(), as a DataLoader does) or device (made and gathered "
                        "there). Default: the spec's data.location as oomlab ran it (manifest.json), "
                        "or device for a manifest from before that key. Host data is drawn from "
                        "the CPU generator, device data from the GPU's: different numbers")
    p.add_argument("--steps", type=int, default=None, help="override every trial's steps")
    p.add_argument("--optimizer-impl", choices=("for_loop", "foreach", "fused", "default"),
                   default=None, help="torch.optim implementation (default: the one oomlab ran, "
                                      "the spec's training.optimizer_impl or PyTorch's own pick)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="make cuBLAS's workspaces before trial 1 (default on)")
    p.add_argument("--trials", default=None, help="only these trial numbers, e.g. 1,3,5")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default on CPU: the oomlab run's, from manifest.json, so that "
                        "split sums add up in the same order)")
    p.add_argument("--run-oom-on-cpu", action="store_true",
                   help="also run, on the CPU, trials oomlab ran out of memory in (no budget there)")
    p.add_argument("--cpu-memory", action="store_true",
                   help="on the CPU, count every tensor's bytes with cpu_memory.py's counting "
                        "allocator (built once with g++ from cpu_alloc.cpp beside this script), "
                        "so that the trace has memory columns as oomlab's CPU runs do")
    p.add_argument("--out", type=Path, required=True, help="trace CSV to write")
    p.add_argument("--ddp-rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--ddp-world", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--ddp-store", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--history", type=Path, default=None,
                   help="also write every allocation and free of each phase to this CSV, in the "
                        "columns of `oomlab estimate --blocks` (for compare.py --blocks --history); "
                        "on the CPU it needs --cpu-memory")
    args = p.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("train.py: --device cuda but torch.cuda.is_available() is False")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)

    manifest = read_manifest(args.summary)
    if args.threads or device.type == "cpu":
        threads = args.threads or manifest.get("host", {}).get("torch_threads")
        if threads:
            torch.set_num_threads(int(threads))
    rows = [r for r in read_summary(args.summary) if r["status"] in ("ok", "oom")]
    if args.trials:
        wanted = {int(s) for s in args.trials.split(",")}
        rows = [r for r in rows if int(r["trial"]) in wanted]

    if device.type == "cuda":
        budget = args.budget
        if budget is None:
            # What the run used (device.budget_bytes); else the spec's, whose CUDA budget may be
            # sized apart from the CPU's (run.cuda_budget) to leave room for cuBLAS workspaces.
            run = manifest["spec"].get("run", {})
            budget = next((b for b in (manifest.get("device", {}).get("budget_bytes"),
                                       run.get("cuda_budget"), run.get("budget")) if isinstance(b, int)), None)
        if budget:
            apply_budget(device, int(budget))
            print(f"budget {int(budget)} B (per-process fraction)", flush=True)
    elif args.budget:
        print("train.py: --budget is ignored on the CPU (PyTorch has no CPU budget)", file=sys.stderr)

    if args.warmup:
        amp_kinds = {r["amp"] for r in rows} & set(AMP_DTYPES)
        spec = manifest["spec"]
        configs = [v["config"] for v in spec["variants"]] if spec.get("variants") else [spec["base"]]
        ws = warm_up(device, configs, amp_kinds, args)
        print(f"workspace {ws}" if device.type == "cuda" else "workspace n/a (cpu)", flush=True)

    counter = None
    if args.cpu_memory and device.type == "cpu":
        import cpu_memory  # beside this script
        cpu_memory.install()
        counter = cpu_memory
    probe = Probe(device, counter)
    if args.ddp_world:
        # One rank of a DDP trial (run_ranks started it): the process group first, as a
        # torchrun-started script's first line does; gloo on the CPU.
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{args.ddp_store}", rank=args.ddp_rank,
                                world_size=args.ddp_world)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary_path = Path(str(args.out) + ".summary.csv")
    hf = open(args.history, "w", newline="") if args.history else None
    history = None
    if hf is not None:
        hw = csv.DictWriter(hf, HISTORY_COLUMNS)
        hw.writeheader()
        history = History(probe, hw)
    with open(args.out, "w", newline="") as tf, open(summary_path, "w", newline="") as sf:
        trace = csv.DictWriter(tf, TRACE_COLUMNS)
        summary = csv.DictWriter(sf, SUMMARY_COLUMNS)
        trace.writeheader()
        summary.writeheader()
        for row in rows:
            trial = int(row["trial"])
            res = {"trial": trial, "status": "ok", "oom_phase": "", "oom_step": "", "message": ""}
            if device.type == "cpu" and row["status"] == "oom" and not args.run_oom_on_cpu:
                res.update(status="skipped", message="oomlab ran out of its CPU budget here; "
                           "PyTorch has no CPU budget (--run-oom-on-cpu to run it anyway)")
                summary.writerow(res)
                print(f"trial {trial:>3}  skipped (oom in oomlab, no CPU budget)", flush=True)
                continue
            cfg = trial_config(manifest, row)
            if ddp_of(cfg) is not None and not args.ddp_world:
                ranks = run_ranks(args, trial, int(cfg["parallel"]["world_size"]))
                for rank_trace, rank_summary in ranks:
                    for r in rank_trace:
                        trace.writerow(r)
                    for r in rank_summary:
                        summary.writerow(r)
                tf.flush()
                sf.flush()
                print(f"trial {trial:>3}  {len(ranks)} ranks  (oomlab: {row['status']})", flush=True)
                continue
            probe.empty_cache()
            baseline = probe.allocated()
            rec = Recorder(probe, trial, trace, history)
            extra: dict = {}
            try:
                run_trial(cfg, device, rec, args, extra)
            except PhaseOOM as e:
                res.update(status="oom" if e.oom else "error", oom_phase=e.phase, oom_step=e.step,
                           message=e.message)
            # Everything the trial made was local to run_trial; collect cycles (autograd graphs
            # held by frames of a caught exception) and hand the cache back, as oomlab does.
            gc.collect()
            probe.empty_cache()
            after = probe.allocated()
            res.update(
                max_memory_allocated=rec.peak[0] if probe.counts else "",
                max_memory_reserved=rec.peak[1] if probe.counts else "",
                baseline_allocated="" if baseline is None else baseline,
                after_allocated="" if after is None else after,
                final_loss=repr(extra["final_loss"]) if "final_loss" in extra else "",
                skipped_steps=extra.get("skipped_steps", ""),
                final_scale=extra.get("final_scale", ""),
                step_seconds=f"{rec.mean_step_seconds():.9f}" if rec.step_seconds else "",
            )
            summary.writerow(res)
            tf.flush()
            sf.flush()
            where = f" in {res['oom_phase']} of step {res['oom_step']}" if res["oom_phase"] else ""
            peak = f"  peak {rec.peak[0]} B" if probe.counts else ""
            loss = f"  final loss {extra['final_loss']:.7f}" if "final_loss" in extra else ""
            leak = ""
            if baseline is not None and after is not None and after > baseline:
                leak = f"  LEAK {after - baseline} B"
            print(f"trial {trial:>3}  {res['status']}{where}{peak}{loss}{leak}"
                  f"  (oomlab: {row['status']})", flush=True)
    print(f"wrote {args.out} and {summary_path}", flush=True)


if __name__ == "__main__":
    main()
