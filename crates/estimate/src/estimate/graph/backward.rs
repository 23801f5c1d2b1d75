//! What each backward node allocates, in the order libtorch's generated `Node::apply` (and the
//! engine's `validate_outputs`, which reduces a broadcast gradient) allocates it, measured
//! against PyTorch 2.11's CPU kernels op by op. A gradient that is a view of the incoming one
//! (transpose, unsqueeze, a reshape that can view) costs nothing; a reshape that cannot view,
//! a select's zeros, a reduction, a product, each a new tensor.
use std::rc::Rc;

use super::alloc::{new, new_like_dt};
use super::flash::{flash_acc, flash_chunks, flash_split};
use super::node::{Node, Rule};
use super::tensor::{view_strides, Dt, Sym};
use super::{kernels, Ctx};
use crate::estimate::ledger::Category::Transient;
use crate::estimate::{cuda_reduce, Target};

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

/// CUDA's layer norm backward past 64 Ki rows (`cuda_reduce::layer_norm_partial_rows`): a
/// `[rows, d]` partial for each of the weight's and bias's gradients asked for, then each
/// gradient summed from its partial (`*dgamma = dgamma_blocks.sum(0)`, the reduction's staging
/// buffer with it) into a tensor that replaces the one made first, freed then; the partials go
/// last, in the reverse of their making.
fn layer_norm_partials(ctx: &Rc<Ctx>, input: &[i64], d: i64, grads: [(&mut Option<Sym>, Dt); 2]) {
    let rows = input.iter().product::<i64>() / d.max(1);
    let Some(partial_rows) =
        cuda_reduce::layer_norm_partial_rows(rows.max(0) as u64, d.max(0) as u64, ctx.gpu)
    else {
        return;
    };
    let partial_rows = partial_rows as i64;
    let partials: Vec<Sym> =
        grads.iter().filter(|(g, _)| g.is_some()).map(|(_, dt)| new(ctx, &[partial_rows, d], *dt)).collect();
    for (g, dt) in grads {
        if let Some(old) = g.take() {
            let sum = new(ctx, &[d], dt);
            kernels::bias_sum_staging(ctx, partial_rows, &[d], dt);
            drop(old);
            *g = Some(sum);
        }
    }
    partials.into_iter().rev().for_each(drop);
}

/// `grad.reshape(shape)`: a view where one exists, else a contiguous copy.
pub(crate) fn reshape(ctx: &Rc<Ctx>, grad: &Sym, shape: &[i64]) -> Sym {
    match view_strides(&grad.shape(), &grad.strides(), shape) {
        Some(strides) => grad.view_as(shape.to_vec(), strides),
        None => new(ctx, shape, grad.dt()),
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
        Rule::Relu { shape } | Rule::MulByConstant { shape } => vec![Some(new(ctx, shape, dt))],
        Rule::Softmax { shape } => {
            let g = new(ctx, shape, dt);
            // CUDA's `softmax_backward_cuda_out` (SoftMax.cu, 2.11) computes `tmp = grad * output`
            // into a tensor of its own before its kernel; the CPU's kernel does not.
            if ctx.target == Target::Cuda {
                drop(new(ctx, shape, dt));
            }
            vec![Some(g)]
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
            let mut g_w = wants(1).then(|| new(ctx, &[*d], node.dts[1]));
            let mut g_b = wants(2).then(|| new(ctx, &[*d], node.dts[2]));
            let copy = (!grad.is_contiguous()).then(|| new(ctx, input, dt));
            let partial = (ctx.target == Target::Cpu).then(|| new(ctx, &[2 * ctx.threads as i64 * d], dt));
            if ctx.target == Target::Cuda {
                layer_norm_partials(ctx, input, *d, [(&mut g_w, node.dts[1]), (&mut g_b, node.dts[2])]);
            }
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
        Rule::ToCopy { dt } => vec![Some(new_like_dt(ctx, grad, *dt))],
        Rule::Flash { q, k, v } => {
            let (gq, gk, gv) = (new(ctx, q, dt), new(ctx, k, dt), new(ctx, v, dt));
            let copy = (!grad.is_contiguous()).then(|| new(ctx, &grad.shape(), dt));
            let (qs, kvs) = (flash_split(q[2]), 512.min(k[2]));
            let acc = flash_acc(dt);
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
        Rule::Cudnn(layouts) => {
            let [gq, gk, gv] = super::cudnn_attention::backward(ctx, layouts, grad);
            vec![Some(gq), Some(gk), Some(gv)]
        }
        Rule::Efficient { q, k, v, kernel } => {
            let [gq, gk, gv] = super::efficient::backward(ctx, *kernel, q, k, v, grad);
            vec![Some(gq), Some(gk), Some(gv)]
        }
    }
}
