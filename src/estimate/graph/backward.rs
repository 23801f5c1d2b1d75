//! What each backward node allocates, in the order libtorch's generated `Node::apply` (and the
//! engine's `validate_outputs`, which reduces a broadcast gradient) allocates it, measured
//! against PyTorch 2.11's CPU kernels op by op. A gradient that is a view of the incoming one
//! (transpose, unsqueeze, a reshape that can view) costs nothing; a reshape that cannot view,
//! a select's zeros, a reduction, a product, each a new tensor.
use std::rc::Rc;

use super::node::Node;
use super::tensor::{view_strides, Dt, Sym};
use super::{kernels, Ctx};
use crate::estimate::ledger::Category::Transient;

/// A node's backward, with the shapes it needs.
pub(crate) enum Rule {
    /// `addmm(bias, mat1, weight.t())`; edges `[bias, mat1, weight]`. The input's gradient
    /// (`grad.mm(weight)`), then the weight's, then the bias's `sum_to` (in `validate_outputs`).
    Addmm {
        mat1: Vec<i64>,
        weight: Vec<i64>,
        bias: Vec<i64>,
    },
    /// `mm(a, b)` / `bmm(a, b)`; edges `[a, b]`. `b`'s gradient first, then `a`'s.
    Mm {
        a: Vec<i64>,
        b: Vec<i64>,
    },
    /// `threshold_backward`: a new tensor of the output's shape.
    Relu {
        shape: Vec<i64>,
    },
    /// `grad * other` for a factor that needs no grad (a dropout mask, checkpointing's upstream).
    MulByConstant {
        shape: Vec<i64>,
    },
    /// `grad * s` for a C++ scalar `s`: the scalar wrapped (8 bytes, cast to the dtype on the
    /// CPU), then the product.
    MulScalar {
        shape: Vec<i64>,
    },
    /// `grad / s` (a loss divided by the micro-batches): as `MulScalar`.
    DivScalar {
        shape: Vec<i64>,
    },
    /// `sum()`: `grad.expand(shape)`, a view.
    Sum {
        shape: Vec<i64>,
    },
    /// `mean(dim)` and `adaptive_avg_pool2d(1)`: the input's gradient, with a wrapped scalar
    /// for the division.
    MeanLike {
        input: Vec<i64>,
    },
    /// `a + b` and `a.add_(b)`: the same gradient to both (a broadcast one reduced to its input's
    /// shape in `validate_outputs`, a new tensor).
    Add {
        shapes: [Vec<i64>; 2],
    },
    /// `log_softmax`: a new `[N, K]`.
    LogSoftmax {
        shape: Vec<i64>,
    },
    /// `nll_loss`: a new `[N, K]` (zeros, the targets filled).
    NllLoss {
        input: Vec<i64>,
    },
    /// `_safe_softmax`: a new tensor of its shape.
    Softmax {
        shape: Vec<i64>,
    },
    /// `native_layer_norm_backward`: the input's gradient, the weight's and the bias's, a copy
    /// of the incoming gradient when it is not contiguous, and per-thread partial sums of the
    /// weight's and bias's gradients (`2 * threads * d` floats, CPU) that go at once.
    LayerNorm {
        input: Vec<i64>,
        d: i64,
    },
    /// `native_batch_norm_backward` (CPU): a temporary of the input's size, the weight's and
    /// bias's gradients, the input's; per-thread buffers at a 1x1 spatial size.
    BatchNorm {
        input: Vec<i64>,
    },
    /// `max_pool2d_with_indices_backward`: zeros of the input's size.
    MaxPool {
        input: Vec<i64>,
    },
    /// `embedding_dense_backward`: zeros of the weight's size.
    Embedding {
        weight: Vec<i64>,
    },
    /// `convolution_backward`; edges `[input, weight, bias]`: what its kernels allocate (on the
    /// CPU measured once per shape, [`kernels`]), then the gradients.
    Conv(Rc<kernels::ConvBackward>),
    /// A view (`view`, `reshape`, `flatten`, `unflatten`, `_unsafe_view`): the gradient
    /// reshaped to the input's shape, a copy when the incoming one cannot be viewed so.
    View {
        input: Vec<i64>,
    },
    /// `transpose`, `permute` (`order`: the forward's dimension order), `unsqueeze(d)`,
    /// `squeeze(d)`, and `clone` or `expand` to the same shape: the gradient viewed back,
    /// nothing allocated.
    Permute {
        order: Vec<usize>,
    },
    Unsqueeze {
        dim: usize,
    },
    Squeeze {
        dim: usize,
    },
    Pass,
    /// `select`: zeros of the input's size, the gradient copied into its slice.
    Select {
        input: Vec<i64>,
    },
    /// `_scaled_dot_product_flash_attention_for_cpu`'s backward: zeros for the three gradients,
    /// the incoming gradient made contiguous (it arrives permuted), and per-thread buffers.
    Flash {
        q: Vec<i64>,
        k: Vec<i64>,
        v: Vec<i64>,
    },
    /// `x.to(dtype)` (autocast's casts): the gradient cast back to `dt`, the input's.
    ToCopy {
        dt: Dt,
    },
}

fn new(ctx: &Rc<Ctx>, shape: &[i64], dt: Dt) -> Sym {
    Sym::alloc(ctx, shape, dt, Transient)
}

/// A wrapped C++ scalar for a pointwise op on the CPU (8 bytes, and its cast to the op's dtype
/// unless that is double), made and gone around the op's output.
fn with_wrapped_scalar<T>(ctx: &Rc<Ctx>, dt: Dt, f: impl FnOnce() -> T) -> T {
    let wrapped = Sym::alloc_on(ctx, &[], Dt(tch::Kind::Double), Transient, true);
    let cast = (dt.0 != tch::Kind::Double).then(|| Sym::alloc_on(ctx, &[], dt, Transient, true));
    let out = f();
    drop(cast);
    drop(wrapped);
    out
}

/// `grad.reshape(shape)`: a view where one exists, else a contiguous copy.
pub(crate) fn reshape(ctx: &Rc<Ctx>, grad: &Sym, shape: &[i64]) -> Sym {
    match view_strides(&grad.shape(), &grad.strides(), shape) {
        Some(strides) => grad.view_as(shape.to_vec(), strides),
        None => new(ctx, shape, grad.dt()),
    }
}

/// How many chunks `at::parallel_for(0, n, 1, ..)` runs `n` work items in on `threads` threads
/// (OpenMP's backend, `ParallelOpenMP.h`): as many threads as items at most, each a contiguous
/// chunk of `ceil(n / threads)` items, those left empty not run.
pub(crate) fn flash_chunks(n: i64, threads: usize) -> usize {
    let threads = (threads.max(1) as i64).min(n.max(1));
    let chunk = (n + threads - 1) / threads;
    ((n + chunk - 1) / chunk).max(1) as usize
}

/// The bytes by which a backward peak through the CPU flash kernel may fall short of the
/// estimate on a busy machine: the chunks' `dsum` buffers are modelled live at once, and all but
/// one of them may come and go before another is made. For a query of `[batch, heads, len, _]`
/// whose accumulate type takes `acc_bytes` (8 for float64, else 4).
pub fn flash_backward_racy(batch: i64, heads: i64, len: i64, threads: usize, acc_bytes: u64) -> u64 {
    let chunks = flash_chunks(batch * heads, threads) as u64;
    (chunks - 1) * acc_bytes * flash_split(len) as u64
}

/// The CPU flash kernel's query block: 32 rows under 192, 64 under 768, else 256 (at most the
/// sequence).
pub(crate) fn flash_split(l: i64) -> i64 {
    let split = if l < 192 {
        32
    } else if l < 768 {
        64
    } else {
        256
    };
    split.min(l)
}

impl Rule {
    /// The libtorch node it stands for, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Rule::Addmm { .. } => "AddmmBackward0",
            Rule::Mm { .. } => "MmBackward0/BmmBackward0",
            Rule::Relu { .. } => "ReluBackward0",
            Rule::MulByConstant { .. } => "MulBackward0",
            Rule::MulScalar { .. } => "MulBackward1",
            Rule::DivScalar { .. } => "DivBackward1",
            Rule::Sum { .. } => "SumBackward0",
            Rule::MeanLike { .. } => "MeanBackward1",
            Rule::Add { .. } => "AddBackward0",
            Rule::LogSoftmax { .. } => "LogSoftmaxBackward0",
            Rule::NllLoss { .. } => "NllLossBackward0",
            Rule::Softmax { .. } => "SafeSoftmaxBackward0",
            Rule::LayerNorm { .. } => "NativeLayerNormBackward0",
            Rule::BatchNorm { .. } => "NativeBatchNormBackward0",
            Rule::MaxPool { .. } => "MaxPool2DWithIndicesBackward0",
            Rule::Embedding { .. } => "EmbeddingBackward0",
            Rule::Conv(_) => "ConvolutionBackward0",
            Rule::View { .. } => "ViewBackward0",
            Rule::Permute { .. } => "PermuteBackward0",
            Rule::Unsqueeze { .. } => "UnsqueezeBackward0",
            Rule::Squeeze { .. } => "SqueezeBackward0",
            Rule::Pass => "CloneBackward0",
            Rule::Select { .. } => "SelectBackward0",
            Rule::Flash { .. } => "ScaledDotProductFlashAttentionForCpuBackward0",
            Rule::ToCopy { .. } => "ToCopyBackward0",
        }
    }
}

/// Runs `node`'s rule on its incoming gradients; one gradient (or none) per edge.
pub(crate) fn apply(ctx: &Rc<Ctx>, node: &Node, inputs: &[Option<Sym>]) -> Vec<Option<Sym>> {
    if ctx.logged && super::tensor::replay_log() {
        let g = inputs.first().and_then(|g| g.as_ref()).map(|g| (g.shape(), g.strides()));
        eprintln!("replay-node {} {g:?}", node.rule.name());
    }
    let wants = |i: usize| node.next.get(i).is_some_and(Option::is_some);
    let Some(Some(grad)) = inputs.first() else {
        return node.next.iter().map(|_| None).collect();
    };
    let dt = grad.dt();
    match &node.rule {
        Rule::Addmm { mat1, weight, bias } => {
            let g_in = wants(1).then(|| new(ctx, mat1, dt));
            let g_w = wants(2).then(|| new(ctx, weight, dt));
            let g_b = wants(0).then(|| new(ctx, bias, dt));
            if g_b.is_some() {
                kernels::bias_sum_staging(ctx, mat1[0], bias, dt);
            }
            vec![g_b, g_in, g_w]
        }
        Rule::Mm { a, b } => {
            let g_b = wants(1).then(|| new(ctx, b, dt));
            let g_a = wants(0).then(|| new(ctx, a, dt));
            vec![g_a, g_b]
        }
        Rule::Relu { shape } | Rule::MulByConstant { shape } | Rule::Softmax { shape } => {
            vec![Some(new(ctx, shape, dt))]
        }
        // In the input's dtype (CUDA's autocast makes fp32 log-probabilities of low-precision
        // logits).
        Rule::LogSoftmax { shape } => vec![Some(new(ctx, shape, node.dts[0]))],
        Rule::MulScalar { shape } | Rule::DivScalar { shape } => {
            vec![Some(with_wrapped_scalar(ctx, dt, || new(ctx, shape, dt)))]
        }
        Rule::Sum { shape } => {
            let strides = vec![0; shape.len()];
            vec![Some(grad.view_as(shape.clone(), strides))]
        }
        Rule::MeanLike { input } => vec![Some(with_wrapped_scalar(ctx, dt, || new(ctx, input, dt)))],
        Rule::Add { shapes } => shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                wants(i).then(|| {
                    if *s == grad.shape() {
                        return grad.handle();
                    }
                    // `sum_to` a broadcast operand; a bias (the last dimension) over the rows
                    // before it takes CUDA's reduction buffer.
                    let g = new(ctx, s, dt);
                    let shape = grad.shape();
                    if s.len() == 1 && shape.last() == s.first() {
                        let rows = shape[..shape.len() - 1].iter().product();
                        kernels::bias_sum_staging(ctx, rows, s, dt);
                    }
                    g
                })
            })
            .collect(),
        Rule::NllLoss { input } => vec![Some(new(ctx, input, dt))],
        Rule::LayerNorm { input, d } => {
            // The weight's and bias's gradients in their own dtype (fp32 under autocast), the
            // partial sums in the input's.
            let g_in = wants(0).then(|| new(ctx, input, dt));
            let g_w = wants(1).then(|| new(ctx, &[*d], node.dts[1]));
            let g_b = wants(2).then(|| new(ctx, &[*d], node.dts[2]));
            let copy = (!grad.is_contiguous()).then(|| new(ctx, input, dt));
            let partial = (ctx.target == crate::estimate::Target::Cpu)
                .then(|| new(ctx, &[2 * ctx.threads as i64 * d], dt));
            drop((partial, copy));
            vec![g_in, g_w, g_b]
        }
        Rule::BatchNorm { input } => {
            kernels::batch_norm_backward(ctx, input, dt, node.dts[1], [wants(0), wants(1), wants(2)])
        }
        Rule::MaxPool { input } => vec![Some(new(ctx, input, dt))],
        Rule::Embedding { weight } => vec![Some(new(ctx, weight, dt))],
        Rule::Conv(c) => c.apply(ctx, [wants(0), wants(1), wants(2)]),
        Rule::View { input } => vec![Some(reshape(ctx, grad, input))],
        Rule::Permute { order } => {
            // out[i] = in[order[i]]: in[order[i]] = out[i].
            let (shape, strides) = (grad.shape(), grad.strides());
            let (mut s, mut st) = (vec![0; shape.len()], vec![0; shape.len()]);
            for (i, &o) in order.iter().enumerate() {
                (s[o], st[o]) = (shape[i], strides[i]);
            }
            vec![Some(grad.view_as(s, st))]
        }
        Rule::Unsqueeze { dim } => {
            let (mut s, mut st) = (grad.shape(), grad.strides());
            s.remove(*dim);
            st.remove(*dim);
            vec![Some(grad.view_as(s, st))]
        }
        Rule::Squeeze { dim } => {
            let (mut s, mut st) = (grad.shape(), grad.strides());
            let stride = if *dim < s.len() { st[*dim] * s[*dim] } else { 1 };
            s.insert(*dim, 1);
            st.insert(*dim, stride);
            vec![Some(grad.view_as(s, st))]
        }
        Rule::Pass => vec![Some(grad.handle())],
        Rule::Select { input } => vec![Some(new(ctx, input, dt))],
        Rule::ToCopy { dt } => vec![Some(super::ops::new_like_dt(ctx, grad, *dt))],
        Rule::Flash { q, k, v } => {
            let (gq, gk, gv) = (new(ctx, q, dt), new(ctx, k, dt), new(ctx, v, dt));
            let copy = (!grad.is_contiguous()).then(|| new(ctx, &grad.shape(), dt));
            let (qs, kvs) = (flash_split(q[2]), 512.min(k[2]));
            let acc = super::ops::flash_acc(dt);
            let buffer = new(ctx, &[ctx.threads as i64 * 2 * qs * kvs], acc);
            // In low precision the gradients of the scores also go through the input's dtype.
            let low = matches!(dt.0, tch::Kind::Half | tch::Kind::BFloat16);
            let reduced = low.then(|| new(ctx, &[ctx.threads as i64 * 2 * qs * kvs], dt));
            // `dsum`, made by each of `at::parallel_for`'s chunks over batch x heads
            // (FlashAttentionKernel.cpp, `cpu_flash_attention_backward`): the chunks run on their
            // threads at once, so all are live together, as a quiet machine runs them. On a busy
            // one a chunk may end before another starts and the peak is then lower, by at most
            // all but one of them ([`flash_backward_racy`]).
            let dsums: Vec<Sym> =
                (0..flash_chunks(q[0] * q[1], ctx.threads)).map(|_| new(ctx, &[qs], acc)).collect();
            drop((dsums, reduced, buffer, copy));
            vec![Some(gq), Some(gk), Some(gv)]
        }
    }
}
