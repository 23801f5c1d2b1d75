//! CUDA's memory-efficient attention, the backend PyTorch 2.11 picks for float32 inputs on a
//! GPU of compute capability 8.0 or more (flash attention takes only fp16 and bf16; the math
//! path comes after both): `_scaled_dot_product_efficient_attention` and its backward
//! (aten/src/ATen/native/transformers/cuda/attention.cu and attention_backward.cu, the cutlass
//! kernels of `mem_eff_attention/kernel_forward.h` and `kernel_backward.h`).
//!
//! Unlike the math path it keeps no `[L, L]` scores: the forward saves its output and a
//! logsumexp padded to 32 rows; the backward recomputes the scores block by block. Measured on an
//! H200 (experiments/gpu/transformer_seq512: 6 layers of d_model 512 at sequence 512, batch 16,
//! with and without dropout, Adam) against PyTorch's own allocation history, event for event.
//!
//! Modelled: float32, head dimension in 32..=64 (a multiple of 4), no mask. The kernel that
//! `dispatch_cutlassB<float>` launches for it is `fmha_cutlassB_f32_aligned_64x64_k64_sm80`
//! (33 to 64), or `..._64x64_k32_sm80` for 32: the same 64 x 64 blocks, so the same workspace
//! (an H200 measured 83,968,000 B at batch 320, 4 heads of 32 over 256 tokens:
//! experiments/gpu/transformer_rows). Other head dimensions run kernels whose workspace this
//! does not know, and go through the math path's rules instead.
use std::rc::Rc;

use tch::Kind;

use super::alloc::new;
use super::tensor::{Dt, Sym};
use super::Ctx;

/// The backward kernel's blocks: `kBlockSizeI` (queries) and the columns of the query-gradient
/// matmul's threadblock (`MatmulGradQ::ThreadblockShape::kN`). Its key block decides only how
/// many splits the keys get, which for float32 moves no bytes (the workspace is zeroed in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kernel {
    block_i: i64,
    grad_q_cols: i64,
}

/// `fmha_cutlassB_f32_aligned_64x64_k64_sm80`, and `..._k32_sm80` (the same blocks).
const F32_64X64_K64: Kernel = Kernel { block_i: 64, grad_q_cols: 64 };

/// Whether the efficient path is modelled for inputs of `kind` with heads of `head_dim` (query
/// and value alike): float32, 32 to 64, a multiple of 4. `evidence` asks it of a spec.
pub(crate) fn modelled(kind: Kind, head_dim: i64) -> bool {
    kind == Kind::Float && (32..=64).contains(&head_dim) && head_dim % 4 == 0
}

/// The kernel for `q`, `k`, `v` laid out `[batch, heads, len, head_dim]`, or None where the
/// efficient path is not modelled (another dtype or head dimension).
pub(crate) fn kernel(q: &Sym, v: &Sym) -> Option<Kernel> {
    let (qs, vs) = (q.shape(), v.shape());
    if qs.len() != 4 || vs.len() != 4 || qs[3] != vs[3] {
        return None;
    }
    modelled(q.dt().0, qs[3]).then_some(F32_64X64_K64)
}

impl Kernel {
    /// The backward's workspace (`Params::workspace_size`): per batch and head, the query
    /// gradient's split-key staging, `ceil(M / kBlockSizeI) * ceil(K / kN)` tiles of
    /// `GradQTempStorage` (a lock, a counter and two words of padding, then a `kBlockSizeI x kN`
    /// float tile), aligned to 4 floats. float32 keeps no staging for the key and value
    /// gradients (`kNeedsAccumGradK/V`: the output type is the accumulator's).
    pub(crate) fn workspace_bytes(self, batch: i64, heads: i64, queries: i64, head_dim: i64) -> u64 {
        let blocks = ceil_div(queries, self.block_i);
        let cols = ceil_div(head_dim, self.grad_q_cols);
        let tile = 4 + self.block_i * self.grad_q_cols;
        let per_bh = align_up(blocks * cols * tile, 4);
        (batch * heads * per_bh * 4) as u64
    }
}

/// The backward's workspace for `[batch, heads, queries, head_dim]` where the kernel is the one
/// modelled (see [`modelled`]): what a recorded step's CUDA replay adds.
pub(crate) fn workspace_bytes(batch: i64, heads: i64, queries: i64, head_dim: i64) -> u64 {
    F32_64X64_K64.workspace_bytes(batch, heads, queries, head_dim)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn align_up(a: i64, to: i64) -> i64 {
    ceil_div(a, to) * to
}

/// The forward: the output `[B, M, H, Kv]` (returned transposed, as `[B, H, M, Kv]`, so a
/// caller's `permute(2, 0, 1, 3).contiguous()` copies it) and the logsumexp `[B, H, M']` in
/// float32, `M'` the sequence rounded up to 32 (`kAlignLSE`). Dropout's seed and offset are CPU tensors: nothing on the
/// GPU. Returns the output and the logsumexp (both saved, with q, k and v).
///
/// Without `compute_logsumexp` (no backward to come: grad mode off, or no input that requires
/// grad) the logsumexp has no rows (`_efficient_attention_forward`): `None`.
pub(crate) fn forward(ctx: &Rc<Ctx>, q: &Sym, v: &Sym, compute_logsumexp: bool) -> (Sym, Option<Sym>) {
    let (s, kv) = (q.shape(), v.shape()[3]);
    let (b, h, m) = (s[0], s[1], s[2]);
    let out = new(ctx, &[b, m, h, kv], q.dt());
    let out = out.view_as(vec![b, h, m, kv], vec![m * h * kv, kv, h * kv, 1]);
    let lse = compute_logsumexp.then(|| new(ctx, &[b, h, ceil_div(m, 32) * 32], Dt(Kind::Float)));
    (out, lse)
}

/// The backward, for `q` `[B, H, M, K]`, `k` `[B, H, N, K]` and the incoming gradient: the
/// gradient made contiguous as `[B, M, H, Kv]` unless it is; the three gradients, each new and
/// laid out `[B, M, H, _]`; float32's `delta` computed outside the kernel (`kKernelComputesDelta`
/// is for half types), `(grad_out * out).sum(-1).transpose(-2, -1).contiguous()`, whose product
/// and sum go before the workspace is taken; then the workspace. Returns the three gradients,
/// viewed back as `[B, H, _, _]`.
pub(crate) fn backward(
    ctx: &Rc<Ctx>,
    kernel: Kernel,
    q: &[i64],
    k: &[i64],
    v: &[i64],
    grad: &Sym,
) -> [Sym; 3] {
    let dt = grad.dt();
    let (b, h, m, hd, n, hv) = (q[0], q[1], q[2], q[3], k[2], v[3]);
    // `grad_out_.transpose(1, 2).contiguous()`: a copy unless that transpose is contiguous.
    let gs = grad.strides();
    let transposed_contiguous = gs[3] == 1 && gs[2] == hv * h && gs[1] == hv && gs[0] == m * h * hv;
    let copy = (!transposed_contiguous).then(|| new(ctx, &[b, m, h, hv], dt));
    let bmhk = |len: i64, d: i64| {
        let t = new(ctx, &[b, len, h, d], dt);
        t.view_as(vec![b, h, len, d], vec![len * h * d, d, h * d, 1])
    };
    let grads = [bmhk(m, hd), bmhk(n, hd), bmhk(n, hv)];
    let delta = {
        let product = new(ctx, &[b, m, h, hv], Dt(Kind::Float));
        let sum = new(ctx, &[b, m, h], Dt(Kind::Float));
        let delta = new(ctx, &[b, h, m], Dt(Kind::Float));
        drop(sum);
        drop(product);
        delta
    };
    let workspace = new(ctx, &[kernel.workspace_bytes(b, h, m, hd) as i64], Dt(Kind::Uint8));
    drop(delta);
    drop(workspace);
    drop(copy);
    grads
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace PyTorch 2.11 took on an H200 for 16 x 8 heads x 512 queries of 64: the
    /// 16,793,600 B block of results/nvidia-h200/validation/transformer_seq512.history.csv.
    #[test]
    fn the_workspace_is_the_query_gradients_split_key_tiles() {
        assert_eq!(F32_64X64_K64.workspace_bytes(16, 8, 512, 64), 16_793_600);
        // A partial query block still takes a whole tile.
        assert_eq!(F32_64X64_K64.workspace_bytes(1, 1, 65, 64), F32_64X64_K64.workspace_bytes(1, 1, 128, 64));
    }
}
