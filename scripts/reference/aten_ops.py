#!/usr/bin/env python3
"""Classifies every ATen op by whether CUDA allocates for it what the CPU does, into oomlab's table.

oomlab's CUDA estimate of a TorchScript module replays the module's step recorded on the CPU
(every allocation labelled with the innermost op that made it, as "aten::linear > aten::addmm")
through CUDA's caching allocator. Whether an op's CUDA allocations are the CPU's is read from
crates/estimate/src/estimate/recorded/aten_ops.csv, which this script writes from PyTorch's own sources: the
native_functions.yaml of the wheel that scripts/setup-libtorch installs (torchgen, packaged with
torch), parsed by torchgen itself. An op, by its name before the overload's dot (as a recording's
label shows it, without `aten::`), is:

  view          every overload returns an alias of an input (`Tensor(a)`, or torchgen's view ops:
                inplace_view, wildcard aliases): it allocates nothing of its own;
  inplace       its overloads write into an input or an `out=` argument (`Tensor(a!)`), through a
                structured kernel or a composite: no output of its own;
  structured    a structured kernel (`structured: True`, or `structured_delegate:`): its outputs are
                allocated by the meta function, on either device alike, and its CPU and CUDA
                impls take no tensors besides (each that does is on the hand list below);
  composite     a CompositeImplicitAutograd or CompositeExplicitAutograd(NonFunctional) kernel and
                no CPU or CUDA kernel of its own: the same C++ on both devices, which allocates
                through the ops it calls, each recorded under its own name;
  shared        one C++ function registered for CPU and CUDA alike (`CPU, CUDA: fn`), its device
                work through DispatchStub: what it allocates itself is the same on both;
  workspace     (hand list) CUDA's kernel takes temporaries the CPU's does not, of the order of
                its input: the estimate refuses the op until it is modelled;
  staging       (hand list) CUDA's kernel may take a transient the CPU's does not, bounded (a
                reduction's staging buffer, a scan's tile states): allowed, named, and the bound
                widened;
  modelled      (hand list) CUDA's kernel allocates otherwise, and the replay already does what
                CUDA does (a library span, a CUDA temporary, a reduction's staging);
  unclassified  anything else: separate CPU and CUDA kernels, not structured (or, for an in-place
                op, kernels of its own that are not structured): allowed, named, and the bound
                widened.

Overloads that run on no dense CPU or CUDA tensor (sparse, quantized, nested, MPS, XPU only)
are left out; an op takes the least certain class among the rest (unclassified over shared
over structured over composite over inplace over view). The hand lists below say, each entry,
why and from which of PyTorch 2.11's CUDA sources.

Usage (the table is committed; running it again must reproduce it byte for byte, which
`cargo test --lib estimate::recorded::cuda_ops` checks where python3 and the wheel are here):

    PYTHONPATH="$(dirname "$(scripts/setup-libtorch)")" scripts/reference/aten_ops.py \\
        > crates/estimate/src/estimate/recorded/aten_ops.csv
"""
from __future__ import annotations

import hashlib
import os
import re
import sys

# A CUDA kernel that takes temporaries the CPU's does not, of the order of its input (op, why,
# source in pytorch/pytorch at v2.11). cub's wrappers (aten/src/ATen/cuda/cub.cuh, CUB_WRAPPER)
# take their temp storage from the caching allocator.
WORKSPACE = [
    ("sort", "past the in-place bitonic sort's sizes a segmented cub radix sort: its temp storage, and a "
     "dense copy of the input and of values/indices where their strides differ",
     "aten/src/ATen/native/cuda/Sort.cpp (sort_cuda_kernel); Sort.cu (launch_stable_sort_kernel)"),
    ("argsort", "sort's (it calls sort with stable=True)", "aten/src/ATen/native/cuda/Sort.cpp"),
    ("msort", "sort's", "aten/src/ATen/native/cuda/Sort.cpp"),
    ("topk", "radix select's per-slice counts and, for large k, a sort of the selected values",
     "aten/src/ATen/native/cuda/TensorTopK.cu (launch_gather_topk_kernel); TensorTopK.cpp"),
    ("kthvalue", "a contiguous copy of the input and sort-based selection",
     "aten/src/ATen/native/cuda/Sorting.cpp (kthvalue_out_impl_cuda)"),
    ("median", "a contiguous copy of the input and sort-based selection",
     "aten/src/ATen/native/cuda/Sorting.cpp (median_with_indices_impl)"),
    ("nanmedian", "median's", "aten/src/ATen/native/cuda/Sorting.cpp"),
    ("mode", "sorts each slice (a sorted copy and its indices)", "aten/src/ATen/native/cuda/TensorModeKernel.cpp"),
    ("_unique", "cub radix sort and unique: sorted copies, inverse and counts buffers, temp storage",
     "aten/src/ATen/native/cuda/Unique.cu (compute_unique); UniqueCub.cu"),
    ("_unique2", "_unique's", "aten/src/ATen/native/cuda/UniqueCub.cu"),
    ("unique_dim", "thrust sort over the dimension: index and mask buffers",
     "aten/src/ATen/native/cuda/Unique.cu (_unique_dim_cuda_template)"),
    ("unique_consecutive", "cub unique-by-key and run-length encode: temp storage and counts",
     "aten/src/ATen/native/cuda/UniqueCub.cu"),
    ("unique_dim_consecutive", "unique_dim's", "aten/src/ATen/native/cuda/Unique.cu"),
    ("nonzero", "cub count and select-flagged: temp storage per chunk, and a pinned host count",
     "aten/src/ATen/native/cuda/Nonzero.cu (nonzero_cuda_out_impl)"),
    ("nonzero_static", "nonzero's", "aten/src/ATen/native/cuda/Nonzero.cu"),
    ("argwhere", "nonzero's", "aten/src/ATen/native/cuda/Nonzero.cu"),
    ("masked_select", "a prefix sum of the mask (cub) and nonzero's buffers",
     "aten/src/ATen/native/cuda/IndexKernel.cu (masked_select_out_cuda_impl); TensorAdvancedIndexing.cpp"),
    ("masked_scatter_", "an exclusive prefix sum of the mask (cub): a long per mask element, and temp storage",
     "aten/src/ATen/native/cuda/IndexKernel.cu (masked_scatter_cuda_impl)"),
    ("_index_put_impl_", "with accumulate=True a sort of the linearized indices: sorted indices, their "
     "positions, and cub's temp storage",
     "aten/src/ATen/native/cuda/Indexing.cu (index_put_with_sort_kernel)"),
    ("index_put_", "_index_put_impl_'s", "aten/src/ATen/native/cuda/Indexing.cu"),
    ("index_put", "_index_put_impl_'s", "aten/src/ATen/native/cuda/Indexing.cu"),
    ("put_", "with accumulate=True index_put_'s sort", "aten/src/ATen/native/cuda/IndexKernel.cu (put_kernel)"),
    ("_embedding_bag", "sorts the indices (cub radix sort) and keeps offset2bag and segment buffers",
     "aten/src/ATen/native/cuda/EmbeddingBag.cu"),
    ("_embedding_bag_dense_backward", "sorts the indices and takes the segment reduction's buffers",
     "aten/src/ATen/native/cuda/EmbeddingBag.cu; EmbeddingBackwardKernel.cu"),
    ("_embedding_bag_backward", "_embedding_bag_dense_backward's", "aten/src/ATen/native/cuda/EmbeddingBag.cu"),
    ("multinomial", "without replacement: exponential draws and a topk over them; with: a normalized copy "
     "and cumulative distribution", "aten/src/ATen/native/cuda/MultinomialKernel.cu"),
    ("randperm", "cub radix sort of random keys past a size: keys, values and temp storage",
     "aten/src/ATen/native/cuda/Randperm.cu (randperm_out_cuda)"),
    ("repeat_interleave", "a cub inclusive sum of the repeats and its temp storage",
     "aten/src/ATen/native/cuda/RepeatInterleave.cu"),
    ("bincount", "minimum and maximum reductions and a histogram kernel's buffers",
     "aten/src/ATen/native/cuda/SummaryOps.cu (_bincount_cuda_template)"),
    ("histc", "minimum and maximum reductions where no range is given",
     "aten/src/ATen/native/cuda/SummaryOps.cu (_histc_cuda_template)"),
    ("_cdist_backward", "a buffer of batch x r1 x r2 x m per output before its reduction",
     "aten/src/ATen/native/cuda/DistanceKernel.cu (cdist_backward_kernel_impl)"),
    ("_pdist_backward", "a buffer of the pairs x m before its reduction",
     "aten/src/ATen/native/cuda/DistanceKernel.cu (pdist_backward_kernel_impl)"),
]

# A CUDA kernel that may take a bounded transient the CPU's does not: allowed, named, and the
# bound widened (op, why, source).
REDUCE_WHY = ("CUDA's reduction kernel holds a staging buffer and semaphores while it runs where it splits an "
              "output's inputs over blocks (up to twice its input's bytes for a reduction over leading "
              "dimensions; cuda_reduce models it for a sum over leading dimensions only)")
REDUCE_SRC = "aten/src/ATen/native/cuda/Reduce.cuh (gpu_reduce_kernel; ReduceConfig::global_memory_size)"
STAGING = [(op, REDUCE_WHY, REDUCE_SRC) for op in [
    "all", "any", "amax", "amin", "aminmax", "_aminmax", "argmin", "max", "min", "prod", "nansum",
    "norm", "linalg_vector_norm", "std", "var", "std_mean", "var_mean", "logsumexp", "count_nonzero",
]] + [
    ("cumsum", "a scan over all its elements (a 1-D input) runs cub's inclusive scan: temp storage of its "
     "tile states, a few bytes per 2048 elements; a non-contiguous input is made contiguous first",
     "aten/src/ATen/native/cuda/ScanUtils.cuh (scan_dim); ScanKernels.cpp (contiguous_out_arg)"),
    ("cumprod", "cumsum's", "aten/src/ATen/native/cuda/ScanUtils.cuh (scan_dim)"),
    ("logcumsumexp", "cumsum's", "aten/src/ATen/native/cuda/ScanKernels.cpp (_logcumsumexp_out_cuda)"),
    ("_logcumsumexp", "cumsum's", "aten/src/ATen/native/cuda/ScanKernels.cpp (_logcumsumexp_out_cuda)"),
    ("_cummax_helper", "a contiguous buffer for values and indices that are not",
     "aten/src/ATen/native/cuda/ScanKernels.cpp (cummax_helper_cuda)"),
    ("_cummin_helper", "_cummax_helper's", "aten/src/ATen/native/cuda/ScanKernels.cpp (cummin_helper_cuda)"),
]

# CUDA allocates otherwise, and the replay already does what CUDA does (op, how, where).
MODELLED = [
    ("_softmax_backward_data", "CUDA's kernel computes grad * output into a temporary of the output's size: "
     "the replay adds it", "aten/src/ATen/native/cuda/SoftMax.cu (softmax_backward_cuda_out); "
     "crates/estimate/src/estimate/recorded/parsed.rs (Shape::CudaTemp)"),
    ("sum", "CUDA's reduction staging for a sum over leading dimensions: the replay adds it",
     "aten/src/ATen/native/cuda/Reduce.cuh; crates/estimate/src/estimate/cuda_reduce.rs"),
    ("embedding_dense_backward", "CUDA sorts the indices: a library span, whose output alone the replay keeps",
     "aten/src/ATen/native/cuda/Embedding.cu; crates/torch/src/ffi/shim.cpp (opens_span)"),
    ("native_layer_norm_backward", "past 64 Ki rows CUDA sums partial rows: the replay adds them",
     "aten/src/ATen/native/cuda/layer_norm_kernel.cu; crates/estimate/src/estimate/cuda_reduce.rs (layer_norm_partial_rows)"),
    ("native_dropout", "a library span: CUDA's mask is bool, a byte an element, as the replay takes it",
     "aten/src/ATen/native/cuda/Dropout.cu; crates/estimate/src/estimate/recorded/parsed.rs (Span::Mask)"),
    ("convolution_backward", "a library span (cuDNN on CUDA): its outputs kept, each call's workspace from "
     "a table a GPU measured", "aten/src/ATen/native/cudnn/Conv_v8.cpp; crates/estimate/src/estimate/cudnn_conv.rs"),
    ("native_batch_norm", "a library span (cuDNN's or the native kernel on CUDA): its outputs kept",
     "aten/src/ATen/native/cuda/Normalization.cu; crates/torch/src/ffi/shim.cpp (opens_span)"),
    ("native_batch_norm_backward", "native_batch_norm's", "aten/src/ATen/native/cuda/Normalization.cu"),
    ("_scaled_dot_product_flash_attention_for_cpu", "a library span: its output and logsumexp kept as CUDA's "
     "memory-efficient kernel returns them; the replay pads the logsumexp to 32 rows",
     "aten/src/ATen/native/transformers/cuda/attention.cu (_efficient_attention_forward); "
     "crates/estimate/src/estimate/recorded/parsed.rs (Shape::AttnPad)"),
    ("_scaled_dot_product_flash_attention_for_cpu_backward", "a library span: its gradients kept; the replay "
     "adds the memory-efficient backward's delta and workspace",
     "aten/src/ATen/native/transformers/cuda/attention_backward.cu (_efficient_attention_backward); "
     "crates/estimate/src/estimate/recorded/parsed.rs (Shape::AttnTemps)"),
    ("_batch_norm_with_update", "native_batch_norm's", "aten/src/ATen/native/cuda/Normalization.cu"),
    ("_native_batch_norm_legit", "native_batch_norm's", "aten/src/ATen/native/cuda/Normalization.cu"),
]

DENSE = ("CPU", "CUDA")
COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
# The least certain first.
ORDER = ["cpu-only", "unclassified", "foreach", "shared", "structured", "composite", "inplace", "view"]


def yaml_paths() -> tuple[str, str]:
    import torchgen

    native = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    return os.path.join(native, "native_functions.yaml"), os.path.join(native, "tags.yaml")


def torch_version() -> str:
    """The wheel's version, read beside torchgen without importing torch."""
    import torchgen

    path = os.path.join(os.path.dirname(os.path.dirname(torchgen.__file__)), "torch", "version.py")
    with open(path) as f:
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M)
    return m.group(1) if m else "unknown"


def overload_class(f, indices) -> tuple[str, str] | None:
    """One overload's class and what says so; None where the CPU cannot run it (a dense CPU
    recording never names it)."""
    from torchgen.model import DispatchKey

    name = f.func.name
    kernels = {}
    for key in DENSE:
        meta = indices[getattr(DispatchKey, key)].get_kernel(f)
        if meta is not None:
            kernels[key] = meta.kernel
    composite = [k for k in COMPOSITE if name in indices[getattr(DispatchKey, k)].index]
    structured = f.structured or f.structured_delegate is not None
    if "CPU" not in kernels and not composite and not structured:
        return None
    if f.is_view_op:
        return "view", "view"
    writes = any(r.annotation is not None and r.annotation.is_write for r in f.func.returns)
    same = "inplace" if writes else None
    if structured:
        return same or "structured", f"structured {f.structured_delegate or name}"
    if not kernels:
        return same or "composite", composite[0]
    if set(kernels) == set(DENSE) and kernels["CPU"] == kernels["CUDA"]:
        return same or "shared", f"CPU and CUDA: {kernels['CPU']}"
    cpu, cuda = kernels.get("CPU", composite[0] if composite else ""), kernels.get("CUDA", "")
    if not cuda and composite:
        cuda = composite[0]
    if str(name.name).startswith("_foreach_") and cuda.startswith("foreach_tensor_") and not kernels.get("CPU"):
        # ForeachBinaryOpScalar.cu and the rest: each output by empty_like, or the CPU's slow path.
        return "foreach", f"CPU: {cpu} (the slow path); CUDA: {cuda}"
    if not cuda:
        return "cpu-only", f"CPU: {cpu}; CUDA: none"
    return "unclassified", f"CPU: {cpu}; CUDA: {cuda}" + ("; in place" if writes else "")


def table() -> str:
    from torchgen.gen import parse_native_yaml

    native, tags = yaml_paths()
    with open(native, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    parsed = parse_native_yaml(native, tags)
    indices = parsed.backend_indices
    classes: dict[str, tuple[str, str]] = {}
    for f in parsed.native_functions:
        got = overload_class(f, indices)
        if got is None:
            continue
        op = str(f.func.name.name)
        seen = classes.get(op)
        # The least certain overload; of two alike, a functional one over an out= variant.
        if (
            seen is None
            or ORDER.index(got[0]) < ORDER.index(seen[0])
            or (got[0] == seen[0] and seen[1].endswith("; in place") and not got[1].endswith("; in place"))
        ):
            classes[op] = got
    hand = [(WORKSPACE, "workspace"), (STAGING, "staging"), (MODELLED, "modelled")]
    for entries, cls in hand:
        for op, why, source in entries:
            if op not in classes:
                raise SystemExit(f"aten_ops.py: {op} ({cls}) is not an op of native_functions.yaml")
            classes[op] = (cls, f"{why} ({source})")
    lines = [
        f"# Which ATen ops CUDA allocates for as the CPU does (PyTorch {torch_version()}): see",
        "# crates/estimate/src/estimate/recorded/cuda_ops.rs. Made by scripts/reference/aten_ops.py from the wheel's",
        f"# torchgen/packaged/ATen/native/native_functions.yaml (sha256 {digest[:16]}) and the",
        "# script's hand lists; do not edit by hand: change the script and run it again.",
        "op,class,why",
    ]
    for op in sorted(classes):
        cls, why = classes[op]
        lines.append(f"{op},{cls},{why.replace(',', ';')}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
