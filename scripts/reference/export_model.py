#!/usr/bin/env python3
"""Export a PyTorch model as TorchScript for oomlab, with a spec beside it that is ready to run.

The model is a torchvision model by name (`torchvision.models.get_model(NAME,
num_classes=CLASSES)`), a Hugging Face `transformers` model class built from a config
(`hf:GPT2LMHeadModel --config n_layer=2,n_embd=64,...`: random weights, nothing downloaded), or
any `module:callable` of your own that returns an `nn.Module` (the module is imported with the
current folder on the path; the callable gets no arguments). It is scripted
(`torch.jit.script`), or traced on an example batch with --trace (or when scripting fails, which
is said). A Hugging Face model (by hf: or returned by your callable) is traced in train mode,
its forward returning the `.logits` of its output, made to run on any device and dtype
(scripts/reference/hf_export.py says how). Its forward takes one batch of the --input kinds (images, tokens or
features) and returns class logits `[batch, classes]`; or, with --input repeated in the tensors
forms (float:6, int64:128:30522, bool:128), it takes each in turn and returns class logits in its
last dimension (`[batch, ..., classes]`, cross_entropy) or values (--loss mse), whose shape the
spec's data.target takes. The export checks that on two rows before writing anything.

Writes OUT (default models/<name>.pt) and, beside it, <name>.toml: the model as
`kind = "torchscript"`, data of the shape --input gives, Adam, and a search for the largest
batch that fits --budget (default 24GB, a 24 GB GPU), for `oomlab run` (on a GPU) or
`oomlab estimate` (on any machine).

Usage (through scripts/export-model, which finds the torch scripts/setup-libtorch installed):
    scripts/export-model mobilenet_v3_small --input images:3x224x224 --classes 10
    scripts/export-model mypkg.models:make_net --input features:64 --classes 3 --trace
    scripts/export-model mypkg.models:regressor --input float:6 --input int64:5:50 --loss mse
    scripts/export-model hf:GPT2LMHeadModel --config n_layer=2,n_head=2,n_embd=64,vocab_size=1000 \
        --input int64:128:1000
    scripts/export-model hf:BertForSequenceClassification --config num_labels=2 --input tokens:128:30522 --classes 2
    scripts/export-model hf:T5ForConditionalGeneration --config d_model=64,num_layers=2 \
        --input int64:64:32128 --input int64:16:32128
    scripts/export-model hf:GPT2LMHeadModel --blocks --input int64:1024:50257   # units: its blocks
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_export  # noqa: E402


def parse_input(text: str) -> dict:
    """`images:CxHxW` (H = W), `tokens:LEN:VOCAB` or `features:N`, as the spec's data table."""
    kind, _, rest = text.partition(":")
    try:
        if kind == "images":
            c, h, w = (int(x) for x in rest.split("x"))
            if h != w:
                raise ValueError("oomlab's images are square (data.size): give CxSxS")
            return {"kind": "images", "channels": c, "size": h}
        if kind == "tokens":
            length, vocab = (int(x) for x in rest.split(":"))
            return {"kind": "tokens", "seq_len": length, "vocab": vocab}
        if kind == "features":
            return {"kind": "synthetic", "features": int(rest)}
    except ValueError as e:
        raise SystemExit(f"export-model: --input {text}: {e}") from e
    raise SystemExit(f"export-model: --input {text}: write images:3x224x224, tokens:128:30000 or features:64")


def parse_tensor(text: str) -> dict:
    """`float:AxB`, `int64:AxB:HIGH` or `bool:AxB`: one input of data.kind = "tensors"."""
    dtype, _, rest = text.partition(":")
    try:
        if dtype == "int64":
            dims, _, high = rest.rpartition(":")
            entry = {"shape": [int(d) for d in dims.split("x")], "dtype": "int64", "high": int(high)}
        elif dtype in ("float", "bool"):
            entry = {"shape": [int(d) for d in rest.split("x")]}
            if dtype == "bool":
                entry["dtype"] = "bool"
        else:
            raise ValueError("not a tensors form")
        if any(d < 1 for d in entry["shape"]) or entry.get("high", 1) < 1:
            raise ValueError("every size at least 1")
        return entry
    except ValueError as e:
        raise SystemExit(f"export-model: --input {text}: {e}; write float:3x32x32, int64:128:30522 (ids in "
                         f"0..30522) or bool:128, once per argument of the forward") from e


def tensor_example(entry: dict, rows: int) -> torch.Tensor:
    shape = (rows, *entry["shape"])
    if entry.get("dtype") == "int64":
        return torch.randint(entry["high"], shape)
    if entry.get("dtype") == "bool":
        return torch.randint(2, shape, dtype=torch.bool)
    return torch.randn(shape)


def toml_value(v) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else str(v)


def example(data: dict, rows: int) -> torch.Tensor:
    """A batch of `rows` as oomlab makes the data: float32 features or images, int64 tokens."""
    if data["kind"] == "images":
        return torch.randn(rows, data["channels"], data["size"], data["size"])
    if data["kind"] == "tokens":
        return torch.randint(data["vocab"], (rows, data["seq_len"]))
    return torch.randn(rows, data["features"])


def build(name: str, classes: int, config: list[str]) -> nn.Module:
    if name.startswith("hf:"):
        return hf_export.build(name[3:], hf_export.parse_config(config))
    if config:
        raise SystemExit("export-model: --config is read for hf: models only")
    if ":" in name:
        module, _, attr = name.partition(":")
        sys.path.insert(0, str(Path.cwd()))
        try:
            made = getattr(importlib.import_module(module), attr)()
        except (ImportError, AttributeError) as e:
            raise SystemExit(f"export-model: {name}: {e}") from e
        if not isinstance(made, nn.Module):
            raise SystemExit(f"export-model: {name}() returned a {type(made).__name__}, not an nn.Module")
        return made
    import torchvision

    try:
        return torchvision.models.get_model(name, num_classes=classes)
    except ValueError as e:
        known = ", ".join(sorted(torchvision.models.list_models(module=torchvision.models))[:12])
        raise SystemExit(f"export-model: {name}: {e} (torchvision has {known}, ...)") from e


def last_line(e: Exception) -> str:
    """What an exception says in the end (PyTorch's own errors end with the error raised,
    after a traceback of the TorchScript or C++ code that raised it)."""
    said = [line for line in str(e).splitlines() if line.strip()]
    return said[-1] if said else type(e).__name__


def traced(model: nn.Module, x, inputs: list[str]):
    """`torch.jit.trace` on the example input, its failure in one line."""
    try:
        return torch.jit.trace(model, x, check_trace=False)
    except Exception as e:  # noqa: BLE001 - the module's own error, whatever it is
        raise SystemExit(f"export-model: tracing on 2 rows of --input {' '.join(inputs)} failed: {last_line(e)}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a torchvision model name (resnet50, mobilenet_v3_small, vit_b_16, ...) or module:callable")
    ap.add_argument("--input", required=True, action="append",
                    help="images:CxSxS, tokens:LEN:VOCAB or features:N; or, once per argument of the forward, "
                         "float:AxB, int64:AxB:HIGH or bool:AxB")
    ap.add_argument("--classes", type=int,
                    help="the classes the logits are over (the tensors forms read them off the output)")
    ap.add_argument("--loss", choices=["cross_entropy", "mse"], default="cross_entropy",
                    help="cross_entropy over the output's last dimension (default), or mse against values "
                         "shaped as the output (tensors forms only)")
    ap.add_argument("--out", type=Path, help="the .pt to write (default models/<name>.pt)")
    ap.add_argument("--trace", action="store_true", help="trace on an example batch instead of scripting")
    ap.add_argument("--blocks", action="store_true",
                    help="a Hugging Face decoder (GPT-2, Llama-like) as the chain of its embedding, blocks and head, "
                         "so that training.checkpoint cuts between blocks (model.units = \"children\")")
    ap.add_argument("--config", action="append", default=[],
                    help="an hf: model's config: KEY=VALUE pairs (repeated or comma-separated) or a .json file")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                    help="the dtype the file is saved in (default float32; oomlab's training.dtype converts it)")
    ap.add_argument("--budget", default="24GB", help="the memory the spec's search fits in (default 24GB)")
    ap.add_argument("--max-batch", type=int, default=1024, help="the largest batch the search tries (default 1024)")
    ap.add_argument("--spec", type=Path, help="the spec to write (default: the .pt's path with .toml)")
    ap.add_argument("--force", action="store_true", help="replace an existing .pt or spec")
    args = ap.parse_args()

    tensors = len(args.input) > 1 or args.input[0].partition(":")[0] in ("float", "int64", "bool")
    if tensors:
        entries = [parse_tensor(t) for t in args.input]
        data = {"kind": "tensors"}
    else:
        data = parse_input(args.input[0])
        if args.loss == "mse":
            raise SystemExit("export-model: --loss mse needs the tensors forms of --input (float:N, ...): "
                             "its target is values shaped as the output")
        if args.classes is None:
            raise SystemExit("export-model: --classes is needed with --input " + args.input[0])
    if (args.classes is not None and args.classes < 1) or not 2 <= args.max_batch <= 100_000_000:
        raise SystemExit("export-model: --classes must be at least 1 and --max-batch from 2 to 100000000 "
                         "(oomlab's largest batch)")
    # oomlab's sizes (crates/core/src/spec/size.rs): a number, then B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or PiB.
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)? *([kmgt]?b|[kmgtp]ib)?", args.budget.strip(), re.IGNORECASE):
        raise SystemExit(f"export-model: --budget {args.budget!r} is not a size: write it like 24GB, 15.90GiB "
                         "or 512MiB")
    if args.loss == "mse" and args.classes is not None:
        raise SystemExit("export-model: --classes is not read with --loss mse (its target is values)")
    named = args.out.stem if args.out else args.model.split(":")[-1]
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", named).strip("_") or "model"
    out = args.out or Path("models") / f"{stem}.pt"
    spec = args.spec or out.with_suffix(".toml")
    for path in (out, spec):
        if path.exists() and not args.force:
            raise SystemExit(f"export-model: {path} exists; pass --force to replace it")

    torch.manual_seed(0)
    model = build(args.model, args.classes or 2, args.config)
    model.train()
    x = tuple(tensor_example(e, 2) for e in entries) if tensors else example(data, 2)
    how = "traced"
    if hf_export.is_hf(model):
        try:
            export = hf_export.trace_blocks if args.blocks else hf_export.trace
            scripted, how = export(model, x if tensors else (x,), getattr(torch, args.dtype))
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001 - the model's own error, whatever it is
            raise SystemExit(f"export-model: tracing on 2 rows of --input {' '.join(args.input)} failed: "
                             f"{last_line(e)}") from None
        if args.dtype != "float32":
            x = tuple(t.to(getattr(torch, args.dtype)) if t.is_floating_point() else t for t in x) if tensors \
                else (x.to(getattr(torch, args.dtype)) if x.is_floating_point() else x)
    elif args.blocks:
        raise SystemExit("export-model: --blocks takes a Hugging Face decoder (hf:GPT2LMHeadModel, "
                         "hf:LlamaForCausalLM, ...)")
    elif args.trace:
        scripted = traced(model, x, args.input)
    else:
        try:
            scripted = torch.jit.script(model)
            how = "scripted"
        except Exception as e:  # noqa: BLE001 - TorchScript raises many kinds
            print(f"export-model: scripting failed ({type(e).__name__}: {str(e).splitlines()[0]}); tracing instead",
                  file=sys.stderr)
            scripted = traced(model, x, args.input)
    try:
        logits = scripted(*x) if tensors else scripted(x)
    except Exception as e:  # noqa: BLE001 - the module's own error, whatever it is
        raise SystemExit(f"export-model: the forward fails on 2 rows of --input {' '.join(args.input)}: "
                         f"{last_line(e)}") from None
    if tensors:
        if not isinstance(logits, torch.Tensor) or logits.dim() < (1 if args.loss == "mse" else 2) \
                or logits.shape[0] != 2:
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise SystemExit(f"export-model: the forward returns {shape} for 2 rows; oomlab needs one tensor, "
                             f"the batch first{', classes last' if args.loss == 'cross_entropy' else ''}")
        if args.loss == "mse":
            data["target"] = list(logits.shape[1:])
        else:
            found = int(logits.shape[-1])
            if args.classes is not None and found != args.classes:
                raise SystemExit(f"export-model: the forward's last dimension is {found}, not --classes "
                                 f"{args.classes}")
            args.classes = found
            data["target"] = list(logits.shape[1:-1])
        data["inputs"] = entries
    elif not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (2, args.classes):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise SystemExit(f"export-model: the forward returns {shape} for 2 rows; oomlab needs class logits "
                         f"(2, {args.classes}): wrap the model so that forward returns one tensor of logits")
    if not isinstance(logits, torch.Tensor):
        raise SystemExit(f"export-model: the forward returns {type(logits).__name__}; oomlab needs one tensor of logits")
    if not any(True for _ in scripted.parameters()):
        raise SystemExit("export-model: the module has no parameters: there is nothing to train")
    # A model that cannot train on one row (a batch norm over a 1x1 map: "Expected more than 1
    # value per channel when training") starts its search at 2, said in the spec.
    start, start_note = 1, ""
    try:
        scripted(*[t[:1] for t in x]) if tensors else scripted(x[:1])
    except Exception as e:  # noqa: BLE001 - the module's own error, whatever it is
        start = 2
        start_note = f"\n# It cannot train on one row ({last_line(e)}): the search starts at 2."

    # A forward that is its children run in turn (an nn.Sequential) can be checkpointed between
    # them: oomlab's model.units = "children", which the run checks again on the spec's data.
    children = list(scripted.children())
    chain = False
    one = x[0] if tensors and len(x) == 1 else None if tensors else x
    if len(children) > 1 and one is not None:
        scripted.eval()
        with torch.no_grad():
            try:
                # A trace keeps dropout on (train mode is its constant): both draw from one state.
                state = torch.get_rng_state()
                h = one
                for child in children:
                    h = child(h)
                torch.set_rng_state(state)
                whole = scripted(one)
                torch.set_rng_state(state)
                chain = h.shape == whole.shape and torch.allclose(h, whole, rtol=1e-5, atol=1e-6)
            except Exception:  # noqa: BLE001 - a child that does not take its predecessor's output
                chain = False
        scripted.train()
    units = (f'\nunits = "children"  # its forward runs its {len(children)} children in turn: '
             f'checkpointing can cut between them') if chain else ""

    out.parent.mkdir(parents=True, exist_ok=True)
    spec.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(scripted, str(out))
    samples = args.max_batch
    data_keys = ", ".join(f"{k} = {toml_value(v)}" for k, v in data.items())
    loss = '\nloss = "mse"' if args.loss == "mse" else ""
    classes = "" if args.loss == "mse" else f"\nclasses = {args.classes}"
    # Each tensor once, as torch.optim and oomlab count a tied weight (GPT-2's embedding and head).
    params = sum(p.numel() for p in {id(p): p for p in scripted.parameters()}.values())
    dtype_line = f'\ndtype = "{args.dtype}"' if args.dtype != "float32" else ""
    spec.write_text(f"""# Written by scripts/export-model {" ".join(sys.argv[1:])}
# {args.model}, {how}: {params:,} parameters. The largest batch that fits {args.budget}:
#   oomlab run {spec}        (on the GPU; on a CPU the budget caps host memory){start_note}
[experiment]
name = "{stem}"
description = "{stem} (TorchScript): the largest batch that fits {args.budget}"

[model]
kind = "torchscript"
path = "{os.path.relpath(out, spec.parent)}"{loss}{units}

[data]
{data_keys.replace(", ", chr(10)) if not tensors else chr(10).join(f"{k} = {toml_value(v)}" for k, v in data.items())}
samples = {samples}{classes}

[training]
optimizer = "adam"
lr = 0.001
batch_size = {start}
steps = 2{dtype_line}

[run]
device = "auto"
budget = "{args.budget}"

[sweep]
field = "training.batch_size"
search = {{ start = {start}, factor = 2, max = {args.max_batch} }}
""")
    print(f"wrote {out} ({how}, {params:,} parameters) and {spec}")


if __name__ == "__main__":
    main()
