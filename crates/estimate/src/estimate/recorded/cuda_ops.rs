//! Which of a recorded step's ops CUDA runs as the CPU does, and which trials a CPU recording
//! cannot stand for on CUDA at all; each refusal says why.
use crate::spec::Config;

/// Ops whose kernels allocate otherwise on CUDA than on the CPU, which the recording cannot
/// stand for, and why (PyTorch 2.11's kernels; the built-in kinds' replays model them).
pub(super) const CUDA_OTHERWISE: [(&str, &str); 2] = [
    ("attention", "the CPU ran attention through its math path (an attention mask that needs a gradient, as T5's \
      position bias, or a shape its flash kernel does not take) and CUDA runs a fused attention kernel, with other \
      saved tensors (recorded on the meta device, the default, a mask that needs a gradient runs as CUDA's \
      memory-efficient kernel for float32 heads of 32 to 64)"),
    ("mkldnn", "it is oneDNN's, a CPU library"),
];

/// Ops (the innermost that allocated, without `aten::`) whose allocations on CUDA are the CPU's
/// recorded ones, block for block: held against the built-in MLP's CUDA replay (each optimizer
/// and implementation, batches with and without CUDA's reduction staging), or allocating only
/// their output on both.
#[rustfmt::skip]
pub(super) const CUDA_SAME: &[&str] = &[
    "addmm", "mm", "bmm", "matmul", "linear", "relu", "clamp_min", "threshold_backward", "_log_softmax",
    "_log_softmax_backward_data", "_softmax", "nll_loss_forward",
    "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "index_select", "ones_like",
    "zeros_like", "zeros", "ones", "empty_like", "empty", "empty_strided", "clone", "contiguous", "copy_",
    "to", "_to_copy", "sqrt", "mul", "add", "sub", "div", "neg", "addcmul", "addcdiv", "lerp", "sum", "tanh",
    "tanh_backward", "sigmoid", "sigmoid_backward", "cat", "stack", "remainder", "arange", "resize_", "randn",
    "rand", "randint", "normal_", "uniform_", "random_", "fill_", "argmax", "scatter_add_", "t", "transpose",
    "view", "reshape", "_reshape_alias", "expand", "unsqueeze", "squeeze", "flatten",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward", "mean", "avg_pool2d", "avg_pool2d_backward", "hardswish", "hardswish_backward",
    "hardsigmoid", "hardsigmoid_backward", "silu", "silu_backward", "hardtanh", "hardtanh_backward",
    // Structured kernels whose output alone is allocated, by their meta function, on either.
    "gelu", "gelu_backward", "softmax", "log_softmax", "exp", "log", "pow", "rsqrt", "abs", "where",
    "masked_fill", "native_layer_norm", "native_layer_norm_backward",
    // In-place dropout is `_dropout<true>` on every device (Dropout.cpp): only `dropout` fuses.
    "dropout_", "bernoulli_", "div_", "mul_",
    // CUDA's takes a temporary the size of its output besides, which the replay adds
    // (`Shape::CudaTemp`).
    "_softmax_backward_data",
];

/// Whether op `label` is (or is inside) CUDA's memory-efficient attention, forward or backward
/// (its autograd node), which a step recorded for CUDA on the meta device calls where an
/// attention mask needs a gradient: their meta kernels allocate what CUDA's do, temporaries and
/// workspace included (a CPU has no such kernel to record); and the mask's padding before it
/// (`preprocess_mask` pads rows whose strides are not multiples of 8), which neither CPU path
/// does.
pub(super) fn efficient_on_meta(label: &str) -> bool {
    let lower = label.to_lowercase();
    lower.contains("_scaled_dot_product_efficient_attention")
        || lower.contains("efficientattentionbackward")
        || lower.ends_with("scaled_dot_product_attention > aten::constant_pad_nd")
}

/// How far a CUDA replay may take an op's recorded allocations for CUDA's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpOnCuda {
    /// Its allocations on CUDA are the CPU's, or the replay does what CUDA does.
    Same,
    /// Allowed, unchecked: CUDA runs a kernel of its own, not structured, or one that may take a
    /// bounded transient (a reduction's staging): its recorded outputs stand in, and the bound
    /// is widened ([`super::super::evidence::UNCHECKED_OPS`]).
    Unchecked,
}

/// PyTorch 2.11's ATen ops, each with its class (see `scripts/reference/aten_ops.py`, which
/// writes this table from the wheel's `native_functions.yaml` and hand lists from CUDA's
/// sources).
const ATEN_OPS: &str = include_str!("aten_ops.csv");

/// Op `name`'s class and why, from [`ATEN_OPS`], read into a map once per process: a recording
/// asks for each of its device allocations.
fn aten_class(name: &str) -> Option<(&'static str, &'static str)> {
    static CLASSES: std::sync::OnceLock<
        std::collections::HashMap<&'static str, (&'static str, &'static str)>,
    > = std::sync::OnceLock::new();
    let classes = CLASSES.get_or_init(|| {
        ATEN_OPS
            .lines()
            .filter(|l| !l.starts_with('#'))
            .skip(1)
            .filter_map(|l| {
                let mut it = l.splitn(3, ',');
                Some((it.next()?, (it.next()?, it.next().unwrap_or(""))))
            })
            .collect()
    });
    classes.get(name).copied()
}

/// Whether op `label` (as a recording names it: "outer > innermost") allocates on CUDA what it
/// does on the CPU, or may stand for it unchecked; why not, if neither.
pub(super) fn cuda_op(label: &str) -> std::result::Result<OpOnCuda, String> {
    if label.is_empty() {
        return Ok(OpOnCuda::Same); // outside any op: the file's parameters as loaded, the trial's own code
    }
    let lower = label.to_lowercase();
    let inner = label.rsplit(" > ").next().unwrap_or(label);
    let name = inner.strip_prefix("aten::").unwrap_or(inner);
    // The CPU's flash kernel is a library span whose outputs the replay makes CUDA's; CUDA's
    // memory-efficient kernel is recorded only on meta, by kernels that allocate as CUDA's do
    // (ffi/meta.cpp); any other attention path allocating here (the math path's scores) is not
    // what CUDA's fused kernels do.
    if efficient_on_meta(label) {
        return Ok(OpOnCuda::Same);
    }
    // Autocast's cast of an argument (a float32 mask to the low dtype) before the attention runs:
    // CUDA's autocast makes the same copy (`ffi/meta_autocast.cpp` runs its lists).
    if lower.ends_with("scaled_dot_product_attention > aten::_to_copy") {
        return Ok(OpOnCuda::Same);
    }
    if !lower.contains("flash_attention_for_cpu") {
        if let Some((_, why)) = CUDA_OTHERWISE.iter().find(|(op, _)| lower.contains(op)) {
            return Err(format!("allocates in {label}, where {why}: not modelled from a CPU recording"));
        }
    }
    if CUDA_SAME.contains(&name) {
        return Ok(OpOnCuda::Same);
    }
    if !inner.starts_with("aten::") {
        return Err(format!(
            "allocates in {label}, not an ATen op: its CUDA allocations are unknown to the estimate"
        ));
    }
    match aten_class(name) {
        Some(("view" | "inplace" | "structured" | "composite" | "shared" | "foreach" | "modelled", _)) => {
            Ok(OpOnCuda::Same)
        }
        Some(("staging" | "unclassified", _)) => Ok(OpOnCuda::Unchecked),
        Some(("workspace", why)) => Err(format!(
            "allocates in {label}, whose CUDA kernel takes temporaries the CPU's does not: {why}; not modelled \
             from a CPU recording"
        )),
        Some(("cpu-only", _)) => Err(format!("allocates in {label}, an op CUDA does not run")),
        _ => Err(format!(
            "allocates in {label}, an op PyTorch 2.11's native functions do not list: its CUDA allocations are \
             unknown to the estimate"
        )),
    }
}

/// Why a recording of `config`'s step does not say what CUDA allocates, if it does not; `on_meta`:
/// recorded on the meta device, where CUDA's autocast runs (`ffi/meta_autocast.cpp`).
pub(super) fn cuda_scope(config: &Config, on_meta: bool) -> std::result::Result<(), String> {
    use crate::spec::{Amp, Dtype, Named};
    if config.training.techniques.amp != Amp::Off && !on_meta {
        return Err(format!(
            "cannot do under training.amp = \"{}\": CPU autocast casts other ops, to other dtypes, than CUDA's \
             (recorded on the meta device, the default, the step runs CUDA's)",
            config.training.techniques.amp.as_str()
        ));
    }
    if matches!(config.training.dtype, Dtype::Float16 | Dtype::Bfloat16) {
        return Err(format!(
            "cannot do in training.dtype = \"{}\": CPU kernels upcast half-precision tensors to float32 where \
             CUDA's do not",
            config.training.dtype.as_str()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ops_cuda_allocations_are_the_cpus_only_where_known() {
        assert_eq!(cuda_op(""), Ok(OpOnCuda::Same), "outside any op");
        assert_eq!(cuda_op("aten::linear > aten::addmm"), Ok(OpOnCuda::Same));
        assert_eq!(
            cuda_op("autograd::engine::evaluate_function: AddmmBackward0 > aten::mm"),
            Ok(OpOnCuda::Same)
        );
        // Structured, composite and view ops from the table; a hand-checked one over the table.
        for op in ["aten::le", "aten::gather", "AsStridedBackward0 > aten::new_empty", "aten::split"] {
            assert_eq!(cuda_op(op), Ok(OpOnCuda::Same), "{op}");
        }
        assert_eq!(cuda_op("aten::_adaptive_avg_pool2d"), Ok(OpOnCuda::Same));
        // Autocast's cast of attention's mask is CUDA's too; the math path's scores are not.
        assert_eq!(cuda_op("aten::scaled_dot_product_attention > aten::_to_copy"), Ok(OpOnCuda::Same));
        assert!(cuda_op(
            "aten::scaled_dot_product_attention > aten::_scaled_dot_product_attention_math > aten::bmm"
        )
        .is_err());
        // Separate kernels, or a reduction's staging: allowed, unchecked.
        assert_eq!(cuda_op("aten::_masked_softmax"), Ok(OpOnCuda::Unchecked));
        assert_eq!(cuda_op("aten::amax"), Ok(OpOnCuda::Unchecked));
        // The CPU's flash kernel is modelled; the math path is not CUDA's.
        assert_eq!(
            cuda_op("aten::scaled_dot_product_attention > aten::_scaled_dot_product_flash_attention_for_cpu"),
            Ok(OpOnCuda::Same)
        );
        // CUDA's memory-efficient kernel, recorded on meta as CUDA allocates, forward and backward.
        for op in [
            "aten::scaled_dot_product_attention > aten::_scaled_dot_product_efficient_attention",
            "autograd::engine::evaluate_function: ScaledDotProductEfficientAttentionBackward0 > aten::mul",
            "aten::scaled_dot_product_attention > aten::constant_pad_nd",
        ] {
            assert_eq!(cuda_op(op), Ok(OpOnCuda::Same), "{op}");
        }
        let e = cuda_op(
            "aten::scaled_dot_product_attention > aten::_scaled_dot_product_attention_math > aten::bmm",
        )
        .unwrap_err();
        assert!(e.contains("math path"), "{e}");
        let e = cuda_op("aten::mkldnn_rnn_layer").unwrap_err();
        assert!(e.contains("oneDNN"), "{e}");
        let e = cuda_op("aten::sort").unwrap_err();
        assert!(e.contains("aten::sort") && e.contains("temporaries"), "{e}");
        let e = cuda_op("torchvision::nms").unwrap_err();
        assert!(e.contains("not an ATen op"), "{e}");
        let e = cuda_op("aten::no_such_op").unwrap_err();
        assert!(e.contains("do not list"), "{e}");
    }

    #[test]
    fn every_class_in_the_table_is_one_the_estimate_reads() {
        let known = [
            "view",
            "inplace",
            "structured",
            "composite",
            "shared",
            "foreach",
            "modelled",
            "staging",
            "unclassified",
            "workspace",
            "cpu-only",
        ];
        let rows: Vec<&str> = ATEN_OPS.lines().filter(|l| !l.starts_with('#')).skip(1).collect();
        assert!(rows.len() > 1000, "the table lists PyTorch's ops");
        for row in rows {
            let class = row.split(',').nth(1).unwrap_or("");
            assert!(known.contains(&class), "{row}");
        }
    }

    /// The table is what the script makes of the installed wheel: nobody edited it by hand, and
    /// a new PyTorch comes with a new table. Skipped (said) where the wheel is not installed.
    #[test]
    fn the_table_is_the_scripts() {
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let Ok(torch) = std::fs::canonicalize(root.join(".libtorch")) else {
            eprintln!("no .libtorch link here: the table's check waits for scripts/setup-libtorch");
            return;
        };
        let site = torch.parent().expect("torch's folder has a parent");
        let out = std::process::Command::new("python3")
            .arg(root.join("scripts/reference/aten_ops.py"))
            .env("PYTHONPATH", site)
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), ATEN_OPS, "run scripts/reference/aten_ops.py again");
    }
}
