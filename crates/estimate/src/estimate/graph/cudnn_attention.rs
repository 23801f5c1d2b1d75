//! cuDNN's fused attention, the backend PyTorch 2.11 puts first for fp16 and bf16 inputs on a
//! Hopper GPU: `sdp_utils.cpp`'s `check_prefer_cudnn_attention` (compute capability 9.0 or 10.0,
//! cuDNN 9.9 or later, unless `TORCH_CUDNN_SDPA_PREFERRED=0`) moves `cudnn_attention` ahead of
//! flash, memory-efficient and math the first time a backend is chosen, and
//! `can_use_cudnn_attention` takes half types with head dimensions that are multiples of 8, up to
//! 256 on compute capability 9.0, and key sequences longer than 1. The kernels are cuDNN's own
//! (`aten/src/ATen/native/cudnn/MHA.cpp` builds a cuDNN frontend graph per shape); what reaches
//! the caching allocator is PyTorch's tensors and the graph's workspace.
//!
//! Measured on an H200 (PyTorch 2.11.0+cu130; `tests/fixtures/h200/amp_models`: a Transformer
//! encoder of 4 layers of d_model 256, 4 heads, under bf16 autocast at batch 1024 over 64 tokens,
//! dropout 0.1), event for event against PyTorch's allocation history:
//! - forward: the dropout seed and offset as two 8-byte CUDA tensors (saved), the output laid
//!   out as the query (`alloc_with_matching_layout`), the softmax statistics `[B, H, Sq, 1]` in
//!   fp32 (saved), and a 256-byte workspace that goes before it returns;
//! - backward: the three gradients laid out as q, k and v, then one workspace of an fp32 query
//!   gradient accumulator `[B, H, Sq, D]`, an fp32 row sum `[B, H, Sq]` and 256 bytes.
//!
//! Not measured: dropout 0 (the seed and offset are assumed made all the same), fp16 (assumed as
//! bf16), other shapes; Blackwell (compute capability 10.0), which PyTorch also sends to cuDNN,
//! is not told apart from other GPUs here and keeps the math path's rule.
//!
//! The workspaces' sizes are cuDNN's choice for the plan it builds; they are modelled as they
//! were measured at that one shape (`evidence::CUDNN_ATTENTION` says so).
use std::rc::Rc;

use tch::Kind;

use super::alloc::new;
use super::tensor::{Dt, Sym};
use super::Ctx;
use crate::estimate::GpuArch;

/// The forward's workspace, as the H200 measured it.
const FORWARD_WORKSPACE: i64 = 256;
/// What the backward's workspace holds beyond its accumulator and row sum.
const BACKWARD_WORKSPACE_EXTRA: i64 = 256;

/// Whether PyTorch 2.11 runs attention over q `[B, H, Sq, Dqk]`, k `[B, H, Sk, Dqk]` and v
/// `[B, H, Sk, Dv]` of `kind` through cuDNN on a GPU of `gpu`.
pub(crate) fn chosen(gpu: GpuArch, kind: Kind, q: &[i64], k: &[i64], v: &[i64], dropout: f64) -> bool {
    if gpu != GpuArch::Hopper || !matches!(kind, Kind::Half | Kind::BFloat16) {
        return false;
    }
    if q.len() != 4 || k.len() != 4 || v.len() != 4 {
        return false;
    }
    let (s_q, d_qk, s_k, d_v) = (q[2], q[3], k[2], v[3]);
    let head_ok = |d: i64| d > 0 && d % 8 == 0 && d <= 256;
    head_ok(d_qk) && head_ok(d_v) && s_k > 1 && !(s_q == 1 && dropout > 0.0)
}

/// What the forward keeps for its backward, besides q, k and v.
pub(crate) struct Forward {
    pub out: Sym,
    pub stats: Option<Sym>,
    pub seed: Sym,
    pub offset: Sym,
}

/// The forward (`_scaled_dot_product_cudnn_attention_cuda`, then `run_cudnn_SDP_fprop`). The
/// statistics are made only where a backward will need them (`compute_logsumexp`: grad mode on
/// and an input that requires grad), as with the other fused kernels; `stats` is then `None`.
pub(crate) fn forward(ctx: &Rc<Ctx>, q: &Sym, v: &Sym, compute_logsumexp: bool) -> Forward {
    let seed = new(ctx, &[1], Dt(Kind::Int64));
    let offset = new(ctx, &[1], Dt(Kind::Int64));
    let (s, dv) = (q.shape(), v.shape()[3]);
    let out = matching(ctx, &[s[0], s[1], s[2], dv], &q.strides(), q.dt());
    let stats = compute_logsumexp.then(|| new(ctx, &[s[0], s[1], s[2], 1], Dt(Kind::Float)));
    drop(new(ctx, &[FORWARD_WORKSPACE], Dt(Kind::Uint8)));
    Forward { out, stats, seed, offset }
}

/// The shapes and strides the backward needs of the forward's q, k, v and output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layouts {
    pub q: (Vec<i64>, Vec<i64>),
    pub k: (Vec<i64>, Vec<i64>),
    pub v: (Vec<i64>, Vec<i64>),
    pub out: Vec<i64>,
}

impl Layouts {
    pub(crate) fn of(q: &Sym, k: &Sym, v: &Sym, out: &Sym) -> Self {
        Layouts {
            q: (q.shape(), q.strides()),
            k: (k.shape(), k.strides()),
            v: (v.shape(), v.strides()),
            out: out.strides(),
        }
    }
}

/// The backward (`_cudnn_attention_backward`, then `run_cudnn_SDP_bprop`): the three gradients
/// laid out as q, k and v; the incoming gradient copied into the output's layout where its
/// innermost stride is not 1 (cuDNN 9.5.1 and later take any other strides); then the
/// workspace.
pub(crate) fn backward(ctx: &Rc<Ctx>, l: &Layouts, grad: &Sym) -> [Sym; 3] {
    let dt = grad.dt();
    let grads = [&l.q, &l.k, &l.v].map(|(shape, strides)| matching(ctx, shape, strides, dt));
    let copy = needs_copy(&grad.strides()).then(|| matching(ctx, &grad.shape(), &l.out, dt));
    let (b, h, s_q, d) = (l.q.0[0], l.q.0[1], l.q.0[2], l.q.0[3]);
    let workspace = (b * h * s_q * d + b * h * s_q) * 4 + BACKWARD_WORKSPACE_EXTRA;
    drop(new(ctx, &[workspace], Dt(Kind::Uint8)));
    drop(copy);
    grads
}

/// Whether `run_cudnn_SDP_bprop` materialises the incoming gradient (cuDNN 9.5.1 or later: only
/// for an innermost stride other than 1).
fn needs_copy(grad_strides: &[i64]) -> bool {
    grad_strides.last() != Some(&1)
}

/// A new tensor of `shape` whose dimensions lie in memory in the order of `like`'s strides
/// (MHA.cpp's `alloc_with_matching_layout`: a stable sort of the dimensions by stride, the
/// smallest innermost).
fn matching(ctx: &Rc<Ctx>, shape: &[i64], like: &[i64], dt: Dt) -> Sym {
    let strides = matching_strides(shape, like);
    new(ctx, shape, dt).view_as(shape.to_vec(), strides)
}

fn matching_strides(shape: &[i64], like: &[i64]) -> Vec<i64> {
    let mut order: Vec<usize> = (0..shape.len()).collect();
    order.sort_by_key(|&d| like[d]);
    let mut strides = vec![0; shape.len()];
    let mut next = 1;
    for d in order {
        strides[d] = next;
        next *= shape[d];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_follows_the_querys_memory_order() {
        // Multi-head attention's q: [B, H, L, D] over memory laid out [L, B, H, D].
        let (b, h, l, d) = (2, 4, 8, 16);
        let q_strides = [h * d, d, b * h * d, 1];
        assert_eq!(matching_strides(&[b, h, l, d], &q_strides), q_strides.to_vec());
        // A contiguous query gives a contiguous output.
        assert_eq!(matching_strides(&[b, h, l, d], &[h * l * d, l * d, d, 1]), vec![h * l * d, l * d, d, 1]);
    }

    /// Strides that differ anywhere but innermost (a head of one, a batch of one, another
    /// order) are taken as they come; only a gradient not contiguous in its last dimension is
    /// copied.
    #[test]
    fn the_incoming_gradient_is_copied_only_when_its_last_dimension_is_strided() {
        assert!(!needs_copy(&[64, 64 * 256, 256, 1]));
        assert!(!needs_copy(&[1, 4096, 64, 1]));
        assert!(needs_copy(&[4096, 64, 1, 64]));
    }

    #[test]
    fn cudnn_takes_half_types_on_hopper_only() {
        let (q, k) = ([8, 4, 64, 64], [8, 4, 64, 64]);
        assert!(chosen(GpuArch::Hopper, Kind::BFloat16, &q, &k, &k, 0.1));
        assert!(chosen(GpuArch::Hopper, Kind::Half, &q, &k, &k, 0.0));
        assert!(!chosen(GpuArch::Hopper, Kind::Float, &q, &k, &k, 0.0));
        assert!(!chosen(GpuArch::Other, Kind::BFloat16, &q, &k, &k, 0.0));
        // Head dimensions: multiples of 8, at most 256.
        assert!(!chosen(GpuArch::Hopper, Kind::Half, &[8, 4, 64, 36], &[8, 4, 64, 36], &[8, 4, 64, 36], 0.0));
        assert!(!chosen(
            GpuArch::Hopper,
            Kind::Half,
            &[8, 1, 64, 264],
            &[8, 1, 64, 264],
            &[8, 1, 64, 264],
            0.0
        ));
        // A key sequence of 1 goes elsewhere.
        assert!(!chosen(GpuArch::Hopper, Kind::Half, &q, &[8, 4, 1, 64], &[8, 4, 1, 64], 0.0));
    }
}
