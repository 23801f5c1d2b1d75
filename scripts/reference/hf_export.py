"""Hugging Face `transformers` models for scripts/export-model: built from a config (no weights
are downloaded), wrapped so that the forward takes the batch's tensors and returns the logits,
traced as they train, and made to run on any device and in any floating dtype.

transformers 5 models do not script (`torch.jit.script` cannot read their configs' source), so
they are traced, in train mode (dropout's flag is a constant of the trace). A plain trace gets
three things wrong, which this module mends:

1. It bakes the device and dtype it ran in into the graph (`torch.arange(..., device="cpu")`,
   `torch.zeros(..., dtype=float32)`): the file then fails on a GPU and after
   `module.to(torch.bfloat16)`. So the model is traced in float64, then every device constant
   becomes "the device of a parameter" and every float64 dtype constant "the dtype of a floating
   parameter"; the model's own float32 upcasts (softmax in float32, RMSNorm) are left as they
   are, and float64's finfo min/max become -inf/inf ([`make_portable`]). A model that branches in
   Python on its weights' dtype (T5) is traced in the dtype it will train in, and runs in that one;
   so is a model whose float64 copy would not fit this machine's memory beside it (a 1 B-parameter
   decoder takes 8 GB in float64 besides its 4 GB in float32) ([`too_big_for_float64`]).
2. Under a trace, transformers' masking code assumes padded or packed batches and passes a
   materialized `[B, 1, L, L]` causal mask to attention (`is_causal=False`, which on CUDA rules
   out the flash kernel). oomlab's batches neither pad nor pack: [`NoMaskUnderTrace`] keeps
   eager training's `attn_mask=None, is_causal=True`, as the same model run eagerly gives.
3. Its output is a `ModelOutput`: the wrappers return `.logits` (decoders with
   `use_cache=False`, as training runs them), so oomlab's loss reads them.

Tied weights (GPT-2's embedding and head) stay one tensor through trace, save, load and dtype
conversion; oomlab's loader (and `nn.Module.parameters()`) counts them once.

With `--blocks` a decoder is traced stage by stage instead ([`trace_blocks`]): its embedding, each
block and its head, saved as an `nn.Sequential` of the traced stages, whose children oomlab's
`model.units = "children"` checkpoints between.
"""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import torch
import torch.nn as nn


def is_hf(model: nn.Module) -> bool:
    """Whether `model` is a transformers model (it has a config with a model type)."""
    return hasattr(getattr(model, "config", None), "model_type")


def parse_config(items: list[str]) -> dict:
    """`--config KEY=VALUE` (repeated, or comma-separated) or `--config FILE.json`: the keys of the
    model's config, values read as JSON where they parse (numbers, booleans, null), else strings."""
    out: dict = {}
    for item in items:
        if item.endswith(".json") and "=" not in item:
            try:
                out.update(json.loads(Path(item).read_text()))
            except (OSError, ValueError) as e:
                raise SystemExit(f"export-model: --config {item}: {e}") from e
            continue
        for pair in item.split(","):
            key, eq, value = pair.partition("=")
            if not eq or not key.strip():
                raise SystemExit(f"export-model: --config {pair!r}: write KEY=VALUE (n_layer=2,n_embd=64) or a "
                                 ".json file")
            try:
                out[key.strip()] = json.loads(value)
            except ValueError:
                out[key.strip()] = value
    return out


def build(name: str, config: dict) -> nn.Module:
    """`hf:<Class>` (GPT2LMHeadModel, BertForSequenceClassification, T5ForConditionalGeneration,
    ViTForImageClassification, ...) from its config class with `config`'s keys; random weights."""
    try:
        import transformers
    except ImportError as e:
        raise SystemExit("export-model: hf: models need transformers, which scripts/setup-libtorch installs "
                         f"({e})") from e
    cls = getattr(transformers, name, None)
    if cls is None or not hasattr(cls, "config_class"):
        raise SystemExit(f"export-model: hf:{name}: transformers {transformers.__version__} has no model class "
                         f"{name} (write the class, e.g. hf:GPT2LMHeadModel or hf:BertForSequenceClassification)")
    try:
        cfg = cls.config_class(**config)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"export-model: hf:{name}: --config: {e}") from e
    return cls(cfg)


def family(model: nn.Module) -> str:
    """How the model's forward is called: "seq2seq" (input_ids and decoder_input_ids),
    "vision" (pixel_values), "decoder" (input_ids, use_cache=False) or "encoder" (input_ids)."""
    name = type(model).__name__
    if getattr(model.config, "is_encoder_decoder", False):
        return "seq2seq"
    # The signature as written (decorators wrap the forward; `inspect` follows `__wrapped__`).
    if "pixel_values" in inspect.signature(model.forward).parameters:
        return "vision"
    if "ForCausalLM" in name or "LMHeadModel" in name:
        return "decoder"
    return "encoder"


class Logits(nn.Module):
    """forward(*batch) -> the model's logits, its other outputs dropped, as a training loop reads them."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.kind = family(model)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        if self.kind == "seq2seq":
            return self.model(input_ids=x, decoder_input_ids=y, use_cache=False).logits
        if self.kind == "vision":
            return self.model(pixel_values=x).logits
        if self.kind == "decoder":
            return self.model(input_ids=x, use_cache=False).logits
        return self.model(input_ids=x).logits


def dtype_specific(model: nn.Module) -> bool:
    """Whether the model branches in Python on its weights' dtype, so that a trace holds the
    branch of the dtype it ran in (T5's feed-forward keeps float32 where its weights are not
    half): such a file runs in the dtype it is saved in only."""
    return getattr(model.config, "model_type", "") in ("t5", "mt5", "umt5", "longt5")


def too_big_for_float64(model: nn.Module) -> bool:
    """Whether tracing `model` in float64 would need more than this machine's memory: its float64
    copy beside the float32 one it is built in, with room for the trace's activations and the
    save (half the memory)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return False
    return sum(p.numel() for p in model.parameters()) * (8 + 4) > memory // 2


class NoMaskUnderTrace:
    """Tells transformers' masking code that it is not tracing, so that it looks at the example
    batch (no padding, no packing) as eager training does and passes attention no mask and
    `is_causal=True`, instead of the full causal mask it builds for any batch under a trace."""

    def __enter__(self):
        try:
            import transformers.masking_utils as mu
        except ImportError:
            self.mu = None
            return self
        self.mu, self.saved = mu, mu.is_tracing
        mu.is_tracing = lambda tensor=None: False
        return self

    def __exit__(self, *exc):
        if self.mu is not None:
            self.mu.is_tracing = self.saved


SCALAR_TYPE = {torch.float64: 7, torch.float32: 6, torch.bfloat16: 15, torch.float16: 5}


def _walk(block):
    for n in block.nodes():
        yield n
        for b in n.blocks():
            yield from _walk(b)


def _reference(g, mod, floating: bool):
    """A value in graph `g` that is a (floating) tensor of `mod`, read by a chain of GetAttr from
    `self` inserted at the top of the graph, or a tensor input; (value, last node) or (None, None)."""
    path = None
    for name, t in list(mod.named_parameters()) + list(mod.named_buffers()):
        if not floating or t.is_floating_point():
            path = name.split(".")
            break
    if path is not None:
        cur, owner, anchor = list(g.inputs())[0], mod, None
        for i, part in enumerate(path):
            node = g.create("prim::GetAttr", [cur], 1)
            node.s_("name", part)
            if i < len(path) - 1:
                owner = getattr(owner, part)
                node.output().setType(owner._c._type())
            else:
                node.output().setType(torch._C.TensorType.get())
            if anchor is None:
                g.prependNode(node)
            else:
                node.insertAfter(anchor)
            anchor, cur = node, node.output()
        return cur, anchor
    for v in list(g.inputs())[1:]:
        if v.type().kind() == "TensorType":
            dt = getattr(v.type(), "dtype", lambda: None)()
            if not floating or (dt is not None and dt.is_floating_point):
                return v, None
    return None, None


def make_portable(traced: torch.jit.ScriptModule, trace_dtype: torch.dtype, patch_dtype: bool = True) -> list[str]:
    """Rewrites every method graph of `traced` in place: device constants become `prim::device` of
    a tensor of the module, `dtype=` constants equal to `trace_dtype` become `prim::dtype` of a
    floating one (with `patch_dtype`), and float constants past 1e300 (finfo(float64).min/max) become
    -inf/inf. Returns what it could not mend, in words (empty: all of it)."""
    code = SCALAR_TYPE[trace_dtype]
    unmended, done = [], set()
    for qual, mod in traced.named_modules():
        kind = str(mod._c._type())
        if kind in done:
            continue
        done.add(kind)
        try:
            g = mod.graph
        except (AttributeError, RuntimeError):
            continue  # a submodule the trace never called
        devices = [n for n in _walk(g) if n.kind() == "prim::Constant" and n.output().type().kind() == "DeviceObjType"]
        dtypes = []
        for n in (_walk(g) if patch_dtype else ()):
            if n.kind() == "prim::Constant":
                continue
            try:
                schema = torch._C.parse_schema(n.schema())
            except Exception:  # noqa: BLE001 - prim:: nodes have no schema
                continue
            for i, (a, v) in enumerate(zip(schema.arguments, n.inputs())):
                if a.name == "dtype" and v.node().kind() == "prim::Constant" and v.type().kind() == "IntType" \
                        and v.toIValue() == code:
                    dtypes.append((n, i))
        for n in [n for n in _walk(g) if n.kind() == "prim::Constant"
                  and n.output().type().kind() == "FloatType" and abs(n.output().toIValue()) > 1e300]:
            c = g.create("prim::Constant", [], 1)
            c.f_("value", float("inf") if n.output().toIValue() > 0 else float("-inf"))
            c.output().setType(torch._C.FloatType.get())
            g.prependNode(c)
            n.output().replaceAllUsesWith(c.output())
            n.destroy()
        if devices:
            ref, anchor = _reference(g, mod, floating=False)
            if ref is None:
                unmended.append(f"{qual or 'the model'}: a device constant (no tensor to take the device from)")
            else:
                d = g.create("prim::device", [ref], 1)
                d.output().setType(torch._C.DeviceObjType.get())
                d.insertAfter(anchor) if anchor is not None else g.prependNode(d)
                for c in devices:
                    c.output().replaceAllUsesWith(d.output())
                    c.destroy()
        if dtypes:
            ref, anchor = _reference(g, mod, floating=True)
            if ref is None:
                unmended.append(f"{qual or 'the model'}: a dtype constant (no floating tensor to take it from)")
            else:
                t = g.create("prim::dtype", [ref], 1)
                t.output().setType(torch._C.IntType.get())
                t.insertAfter(anchor) if anchor is not None else g.prependNode(t)
                for n, i in dtypes:
                    n.replaceInput(i, t.output())
        torch._C._jit_pass_dce(g)
        torch._C._jit_pass_lint(g)
    return unmended


class _GPT2Embed(nn.Module):
    """GPT-2's embedding stage, as `GPT2Model.forward` computes it: tokens plus positions, dropout."""

    def __init__(self, t: nn.Module):
        super().__init__()
        self.wte, self.wpe, self.drop = t.wte, t.wpe, t.drop

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.drop(self.wte(ids) + self.wpe(pos))


class _TokenEmbed(nn.Module):
    """A Llama-like decoder's embedding stage: its token embedding alone."""

    def __init__(self, embed: nn.Module):
        super().__init__()
        self.embed = embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)


class _Block(nn.Module):
    """One decoder block, taking and giving the hidden states; a Llama-like block computes its
    rotary position embeddings itself (from the model's one `rotary_emb`), where the whole model
    computes them once for every block: two `[1, L, head_dim]` tensors a block."""

    def __init__(self, block: nn.Module, rotary: nn.Module | None = None):
        super().__init__()
        self.block, self.rotary = block, rotary

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.rotary is None:
            out = self.block(h)
        else:
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            out = self.block(h, position_embeddings=self.rotary(h, pos), position_ids=pos)
        return out[0] if isinstance(out, tuple) else out


class _Head(nn.Module):
    """The final norm and the LM head (tied to the embedding where the model ties them)."""

    def __init__(self, norm: nn.Module, head: nn.Module):
        super().__init__()
        self.norm, self.head = norm, head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(h))


def stages(model: nn.Module) -> list[nn.Module] | None:
    """A decoder as the chain of its embedding, each block and its head, each taking the one
    before's output, as `gradient_checkpointing_enable()` cuts it (per block); None for a model
    that is not GPT-2 or Llama-like (`model.embed_tokens`, `.layers`, `.norm`, `.rotary_emb`)."""
    t = getattr(model, "transformer", None)
    if t is not None and all(hasattr(t, a) for a in ("wte", "wpe", "drop", "h", "ln_f")):
        return [_GPT2Embed(t)] + [_Block(b) for b in t.h] + [_Head(t.ln_f, model.lm_head)]
    m = getattr(model, "model", None)
    if m is not None and all(hasattr(m, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return [_TokenEmbed(m.embed_tokens)] + [_Block(b, m.rotary_emb) for b in m.layers] + \
            [_Head(m.norm, model.lm_head)]
    return None


def trace_blocks(model: nn.Module, example: tuple, dtype: torch.dtype) -> tuple[torch.jit.ScriptModule, str]:
    """`model` (a decoder: [`stages`]) as an `nn.Sequential` of its stages, each traced in train mode
    on what the one before gives and made portable as [`trace`] does, so that oomlab's
    `model.units = "children"` checkpoints it per block. Its weights are the model's (a tied head
    stays tied)."""
    if family(model) != "decoder" or len(example) != 1 or stages(model) is None:
        raise SystemExit(f"export-model: --blocks takes a GPT-2 or Llama-like decoder (one --input of tokens); "
                         f"{type(model).__name__} is not one")
    model.train()
    specific = dtype_specific(model)
    big = not specific and too_big_for_float64(model)
    at = dtype if specific or big else torch.float64
    model.to(at)
    chain, x = [], example[0]
    with NoMaskUnderTrace():
        for stage in stages(model):
            traced = torch.jit.trace(stage, (x,), check_trace=False)
            unmended = make_portable(traced, at, patch_dtype=not (specific or big))
            if unmended:
                raise SystemExit("export-model: the trace holds what would tie it to this machine: " + "; ".join(unmended))
            chain.append(traced)
            with torch.no_grad():
                x = stage(x)
    scripted = torch.jit.script(nn.Sequential(*chain))
    scripted.to(dtype)
    name = str(dtype).replace("torch.", "")
    how = (f"traced per block (train mode, in {str(at).replace('torch.', '')}, device- and dtype-portable; its "
           f"embedding, {len(chain) - 2} blocks and head in turn)")
    if big:
        how = f"traced per block in {name} (train mode; too big for a float64 copy here, so it runs in {name} only)"
    return scripted, how


def trace(model: nn.Module, example: tuple, dtype: torch.dtype) -> tuple[torch.jit.ScriptModule, str]:
    """The wrapped model traced in train mode as described above, saved-ready in `dtype`; and how."""
    wrapped = Logits(model)
    wrapped.train()
    specific = dtype_specific(model)
    big = not specific and too_big_for_float64(model)
    at = dtype if specific or big else torch.float64
    wrapped.to(at)
    example = tuple(x.to(at) if x.is_floating_point() else x for x in example)
    with NoMaskUnderTrace():
        traced = torch.jit.trace(wrapped, example, check_trace=False)
    unmended = make_portable(traced, at, patch_dtype=not (specific or big))
    if unmended:
        raise SystemExit("export-model: the trace holds what would tie it to this machine: " + "; ".join(unmended))
    traced.to(dtype)
    how = f"traced (train mode, in {str(at).replace('torch.', '')}, device- and dtype-portable)"
    name = str(dtype).replace("torch.", "")
    if specific:
        how = f"traced in {name} (train mode; it branches on its dtype, so it runs in {name} only)"
    elif big:
        how = (f"traced in {name} (train mode; its float64 copy would not fit this machine's memory beside it, so "
               f"it runs in {name} only: for another training.dtype export it with --dtype)")
    return traced, how
