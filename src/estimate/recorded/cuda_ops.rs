//! Which of a recorded step's ops CUDA runs as the CPU does, and which trials a CPU recording
//! cannot stand for on CUDA at all; each refusal says why.
use crate::spec::Config;

/// Ops whose kernels allocate otherwise on CUDA than on the CPU, which the recording cannot
/// stand for, and why (PyTorch 2.11's kernels; the built-in kinds' replays model them).
pub(super) const CUDA_OTHERWISE: [(&str, &str); 2] = [
    ("attention", "CUDA runs another attention kernel (flash, memory-efficient or cuDNN) than the CPU's flash, with other saved tensors"),
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

/// Whether op `label` (as a recording names it: "outer > innermost") allocates on CUDA what it
/// does on the CPU; why not, if not.
pub(super) fn cuda_op(label: &str) -> std::result::Result<(), String> {
    if label.is_empty() {
        return Ok(()); // outside any op: the file's parameters as loaded, the trial's own code
    }
    let lower = label.to_lowercase();
    if let Some((_, why)) = CUDA_OTHERWISE.iter().find(|(op, _)| lower.contains(op)) {
        return Err(format!("allocates in {label}, where {why}: not modelled from a CPU recording"));
    }
    let inner = label.rsplit(" > ").next().unwrap_or(label);
    let name = inner.strip_prefix("aten::").unwrap_or(inner);
    if CUDA_SAME.contains(&name) {
        return Ok(());
    }
    Err(format!(
        "allocates in {label}, an op whose CUDA allocations the estimate has not been checked to be the CPU's \
         (it knows {} ops)",
        CUDA_SAME.len()
    ))
}

/// Why a CPU recording of `config`'s step does not say what CUDA allocates, if it does not.
pub(super) fn cuda_scope(config: &Config) -> std::result::Result<(), String> {
    use crate::spec::{Amp, Dtype, Named};
    if config.training.techniques.amp != Amp::Off {
        return Err(format!(
            "cannot do under training.amp = \"{}\": CPU autocast casts other ops, to other dtypes, than CUDA's",
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
        assert!(cuda_op("").is_ok(), "outside any op");
        assert!(cuda_op("aten::linear > aten::addmm").is_ok());
        assert!(cuda_op("autograd::engine::evaluate_function: AddmmBackward0 > aten::mm").is_ok());
        let e =
            cuda_op("aten::scaled_dot_product_attention > aten::_scaled_dot_product_flash_attention_for_cpu")
                .unwrap_err();
        assert!(e.contains("attention kernel"), "{e}");
        let e = cuda_op("aten::mkldnn_rnn_layer").unwrap_err();
        assert!(e.contains("oneDNN"), "{e}");
        let e = cuda_op("aten::erfinv").unwrap_err();
        assert!(e.contains("aten::erfinv") && e.contains("not been checked"), "{e}");
    }
}
