//! The forward ops over symbolic tensors: for each, what ATen allocates and frees, in order
//! (measured against PyTorch 2.11's CPU kernels op by op), what autograd saves, and the node it
//! records. Composite ops are replayed as ATen decomposes them (`linear` on a 3-D input into a
//! flatten, `addmm` and a view, or, on a strided input, `matmul`'s copy, `mm`, view and in-place
//! bias; `scaled_dot_product_attention` into its math or flash kernel), so that their views,
//! copies and saved tensors are libtorch's.
//!
//! Under autocast (`Ctx::autocast_mode`) an op on libtorch's lower-precision list casts its
//! arguments first (`to_low`: right to left, a parameter's cast cached until autocast exits) and
//! runs with autocast off, as libtorch's autocast kernels redispatch; an op on the fp32 list casts
//! up (`to_float`); the others run in the dtypes they are given, mixed ones promoting to fp32.
use std::cell::RefCell;
use std::rc::Rc;

use tch::{Device, Kind};

use super::alloc::{alloc_like, new, new_like, new_like_dt};
use super::engine;
use super::flash::{flash_acc, flash_split};
use super::kernels;
use super::node::{Edge, Node, Rule};
use super::tensor::{contiguous_strides, view_strides, Dt, Sym};
use super::{ctx, Ctx, GradMode};
use crate::estimate::ledger::Category::{Activations, AmpCopies, Params, Transient};
use crate::estimate::Target;
use crate::nn::{Init, Ops, Place, Result};

fn is_low(kind: Kind) -> bool {
    matches!(kind, Kind::Half | Kind::BFloat16)
}

/// `x.to(dt)` with its history: `ToCopyBackward` casts the gradient back. Autocast's copies
/// are filed as such until something saves them.
fn cast(ctx: &Rc<Ctx>, x: &Sym, dt: Dt) -> Sym {
    let out = alloc_like(ctx, x, dt, AmpCopies);
    record(ctx, Rule::ToCopy { dt: x.dt() }, &[x], &[], &[&out]);
    out
}

/// Autocast's `cached_cast` for an op on its lower-precision list: an fp32 tensor cast down,
/// other dtypes as they are. The cast of a leaf that requires grad (a parameter) is cached
/// until autocast exits, and found there by the next op that casts it.
fn to_low(ctx: &Rc<Ctx>, x: &Sym) -> Sym {
    let Some(low) = ctx.autocast() else { return x.handle() };
    if !x.defined() || x.dt().0 != Kind::Float {
        return x.handle();
    }
    let cacheable = x.requires_grad() && x.grad_fn().is_none();
    if cacheable {
        if let Some((_, c)) = ctx.cast_cache.borrow().iter().find(|(k, _)| Rc::ptr_eq(k, &x.0)) {
            return c.handle();
        }
    }
    let out = cast(ctx, x, Dt(low));
    if cacheable {
        ctx.cast_cache.borrow_mut().push((x.0.clone(), out.handle()));
    }
    out
}

/// An op's tensor arguments cast by [`to_low`] right to left, as the compiler evaluates the
/// arguments of autocast's call (which decides which cast the allocator sees first).
fn to_low_args<const N: usize>(ctx: &Rc<Ctx>, args: [&Sym; N]) -> [Sym; N] {
    let mut out: [Option<Sym>; N] = std::array::from_fn(|_| None);
    for i in (0..N).rev() {
        out[i] = Some(to_low(ctx, args[i]));
    }
    out.map(|t| t.expect("each argument cast"))
}

/// A low-precision tensor cast up to fp32 (an op on autocast's fp32 list; never cached), other
/// dtypes as they are.
fn to_float(ctx: &Rc<Ctx>, x: &Sym) -> Sym {
    if is_low(x.dt().0) {
        cast(ctx, x, Dt(Kind::Float))
    } else {
        x.handle()
    }
}

/// A reduction (`mean`) of a low-precision tensor on the CPU accumulates in fp32: an fp32
/// result, the whole input cast to fp32 (gone once summed), the division with its scalar cast
/// to fp32, then the result cast into the output. Made after the output, all gone before the
/// op returns. Elsewhere, the division's wrapped scalar in the input's dtype.
fn reduce_temporaries(ctx: &Rc<Ctx>, x: &Sym, out_shape: &[i64]) {
    if ctx.target == Target::Cpu && is_low(x.dt().0) {
        let result = new(ctx, out_shape, Dt(Kind::Float));
        drop(new(ctx, &x.shape(), Dt(Kind::Float)));
        drop(wrapped(ctx, Dt(Kind::Float), false));
        drop(result);
    } else {
        drop(wrapped(ctx, x.dt(), false));
    }
}

/// A C++ scalar wrapped for a pointwise op on the CPU: 8 bytes (double or int64) and, inside
/// TensorIterator, its cast to the op's dtype (unless double or integer). Returned cast first,
/// so that dropping the pair frees them as ATen does: the cast, then the scalar.
fn wrapped(ctx: &Rc<Ctx>, dt: Dt, integer: bool) -> (Option<Sym>, Sym) {
    let kind = if integer { Kind::Int64 } else { Kind::Double };
    let w = Sym::alloc_on(ctx, &[], Dt(kind), Transient, true);
    let cast = (!integer && dt.0 != Kind::Double).then(|| Sym::alloc_on(ctx, &[], dt, Transient, true));
    (cast, w)
}

/// Records `rule` for `outputs`, made from `inputs` with `saved` kept, when grad mode is on and an
/// input requires grad. Saved tensors the forward made are activations from now on.
fn record(ctx: &Rc<Ctx>, rule: Rule, inputs: &[&Sym], saved: &[&Sym], outputs: &[&Sym]) {
    if !ctx.grad_enabled() || !inputs.iter().any(|t| t.requires_grad()) {
        return;
    }
    for s in saved {
        if s.storage().is_some_and(|st| st.category() == Transient) {
            s.file_as(Activations);
        }
    }
    let node = Rc::new(Node {
        seq: ctx.next_seq(),
        rule,
        saved: RefCell::new(saved.iter().map(|s| s.view_as(s.shape(), s.strides())).collect()),
        next: inputs.iter().map(|t| Edge::of(t)).collect(),
        dts: inputs.iter().map(|t| t.dt()).collect(),
    });
    for (i, o) in outputs.iter().enumerate() {
        o.set_grad_fn(node.clone(), i);
    }
}

/// Whether a fused attention kernel computes its logsumexp (`should_compute_logsumexp`):
/// only for a backward, grad mode on and an input that requires grad.
fn logsumexp<const N: usize>(ctx: &Rc<Ctx>, inputs: [&Sym; N]) -> bool {
    ctx.grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// A view of `x` with `shape` and `strides`, recorded with `rule`.
fn view(ctx: &Rc<Ctx>, x: &Sym, shape: Vec<i64>, strides: Vec<i64>, rule: Rule) -> Sym {
    let v = x.view_as(shape, strides);
    record(ctx, rule, &[x], &[], &[&v]);
    v
}

/// `x.reshape(shape)`: a view when one exists, else a contiguous clone viewed (ATen's
/// `_unsafe_view(clone)`).
fn reshape(ctx: &Rc<Ctx>, x: &Sym, shape: &[i64]) -> Sym {
    let input = x.shape();
    match view_strides(&input, &x.strides(), shape) {
        Some(strides) => view(ctx, x, shape.to_vec(), strides, Rule::View { input }),
        None => {
            let copy = new(ctx, &input, x.dt());
            record(ctx, Rule::Pass, &[x], &[], &[&copy]);
            let out = view(ctx, &copy, shape.to_vec(), contiguous_strides(shape), Rule::View { input });
            drop(copy);
            out
        }
    }
}

/// `addmm(bias, x, weight.t())` for a 2-D `x`; the node folds `weight.t()`'s (which allocates
/// nothing and runs right after it) into its own.
fn addmm(ctx: &Rc<Ctx>, x: &Sym, w: &Sym, b: &Sym) -> Sym {
    let (xs, ws) = (x.shape(), w.shape());
    let out = new(ctx, &[xs[0], ws[0]], x.dt());
    // mat1 for the weight's gradient, the weight for the input's (a parameter, or under
    // autocast its cast, which only this keeps past the forward).
    let mut saved: Vec<&Sym> = Vec::new();
    if w.requires_grad() {
        saved.push(x);
    }
    if x.requires_grad() {
        saved.push(w);
    }
    record(ctx, Rule::Addmm { mat1: xs, weight: ws, bias: b.shape() }, &[b, x, w], &saved, &[&out]);
    out
}

/// `mm(a, b)` or `bmm(a, b)`, the output contiguous; the node saves each for the other's
/// gradient, `b` first (the order its saved variables are declared in, and released).
fn mm(ctx: &Rc<Ctx>, a: &Sym, b: &Sym, out_shape: &[i64], weight_shape: Option<Vec<i64>>) -> Sym {
    let out = new(ctx, out_shape, a.dt());
    let b_shape = weight_shape.unwrap_or_else(|| b.shape());
    let mut saved = vec![];
    if a.requires_grad() {
        saved.push(b);
    }
    if b.requires_grad() {
        saved.push(a);
    }
    record(ctx, Rule::Mm { a: a.shape(), b: b_shape }, &[a, b], &saved, &[&out]);
    out
}

/// `matmul` of two 4-D tensors with equal batch dims, as ATen does it: each reshaped to 3-D
/// (views where they can be), `bmm`, the result viewed back.
fn matmul4(ctx: &Rc<Ctx>, a: &Sym, b: &Sym) -> Sym {
    let (sa, sb) = (a.shape(), b.shape());
    let batch = sa[0] * sa[1];
    let a3 = reshape(ctx, a, &[batch, sa[2], sa[3]]);
    let b3 = reshape(ctx, b, &[batch, sb[2], sb[3]]);
    let out3 = mm(ctx, &a3, &b3, &[batch, sa[2], sb[3]], None);
    drop((a3, b3));
    let shape = vec![sa[0], sa[1], sa[2], sb[3]];
    let strides = contiguous_strides(&shape);
    view(ctx, &out3, shape, strides, Rule::View { input: vec![batch, sa[2], sb[3]] })
}

/// `t * s` for a C++ scalar: the scalar wrapped, the product laid out as `t`.
fn mul_scalar(ctx: &Rc<Ctx>, t: &Sym) -> Sym {
    let scalar = wrapped(ctx, t.dt(), false);
    let out = new_like(ctx, t);
    drop(scalar);
    record(ctx, Rule::MulScalar { shape: t.shape() }, &[t], &[], &[&out]);
    out
}

/// `_safe_softmax(x, -1)`: the softmax (saved), then `isneginf`, `all` and a 0-d zero made and
/// dropped to mask rows that were all -inf (`masked_fill_`, in place).
fn safe_softmax(ctx: &Rc<Ctx>, x: &Sym) -> Sym {
    let shape = x.shape();
    let out = new(ctx, &shape, x.dt());
    let mask = new(ctx, &shape, Dt(Kind::Bool));
    let mut rows = shape.clone();
    *rows.last_mut().expect("attention scores have dims") = 1;
    let all = new(ctx, &rows, Dt(Kind::Bool));
    let zero = new(ctx, &[], x.dt());
    drop((zero, all, mask));
    record(ctx, Rule::Softmax { shape }, &[x], &[&out], &[&out]);
    out
}

impl Sym {
    /// `t / n` (a micro-batch's loss over the micro-batches): the scalar wrapped, then the
    /// quotient.
    pub fn div_scalar(&self) -> Sym {
        let ctx = ctx();
        let scalar = wrapped(&ctx, self.dt(), false);
        let out = new(&ctx, &self.shape(), self.dt());
        drop(scalar);
        record(&ctx, Rule::DivScalar { shape: self.shape() }, &[self], &[], &[&out]);
        out
    }

    /// The tensor the replay makes for the host's and the device's data: `host` tensors count
    /// on the CPU only.
    pub fn made(shape: &[i64], kind: Kind, category: crate::estimate::Category, host: bool) -> Sym {
        Sym::alloc_on(&ctx(), shape, Dt(kind), category, host)
    }

    /// A copy on the device (`to_device` of a batch gathered on the host).
    pub fn to_device(&self, category: crate::estimate::Category) -> Sym {
        Sym::alloc_on(&ctx(), &self.shape(), self.dt(), category, false)
    }

    /// A leaf's `.grad`, dropped (`zero_grad`, set to none).
    pub fn drop_grad(&self) {
        let grad = self.0.autograd.borrow_mut().grad.take();
        drop(grad);
    }

    /// Makes `view` the leaf's `.grad` if it has one (`grad = bucket_view` after
    /// `bucket_view.copy_(grad)`); the old one goes.
    pub(crate) fn repoint_grad(&self, view: &Sym) {
        let mut autograd = self.0.autograd.borrow_mut();
        if let Some(old) = autograd.grad.as_mut() {
            drop(std::mem::replace(old, view.handle()));
        }
    }

    /// Whether the leaf has a `.grad`.
    pub fn has_grad(&self) -> bool {
        self.0.autograd.borrow().grad.is_some()
    }
}

impl Ops for Sym {
    type Guard = GradMode;

    fn no_grad() -> GradMode {
        ctx().grad_mode(false)
    }

    fn enable_grad() -> GradMode {
        ctx().grad_mode(true)
    }

    fn shallow_clone(&self) -> Self {
        self.handle()
    }

    fn size(&self) -> Vec<i64> {
        self.shape()
    }

    fn kind(&self) -> Kind {
        self.dt().0
    }

    fn device(&self) -> Device {
        match ctx().target {
            Target::Cuda if !self.0.host => Device::Cuda(0),
            _ => Device::Cpu,
        }
    }

    fn defined(&self) -> bool {
        self.0.defined
    }

    fn load_script(
        path: &std::path::Path,
        _place: Place,
    ) -> Result<(std::sync::Arc<tch::CModule>, Vec<Self>)> {
        Err(tch::TchError::Torch(format!("{}: {}", path.display(), crate::estimate::NOT_REPLAYED_SCRIPT)))
    }

    fn script_forward(_module: &tch::CModule, _inputs: &[&Self]) -> Result<Self> {
        Err(tch::TchError::Torch(crate::estimate::NOT_REPLAYED_SCRIPT.into()))
    }

    fn script_loss(_out: &Self, _y: &Self, _loss: crate::spec::Loss, _classes: usize) -> Result<Self> {
        Err(tch::TchError::Torch(crate::estimate::NOT_REPLAYED_SCRIPT.into()))
    }

    fn script_children(_module: &tch::CModule) -> Result<Vec<String>> {
        Err(tch::TchError::Torch(crate::estimate::NOT_REPLAYED_SCRIPT.into()))
    }

    fn script_buffers(_module: &tch::CModule) -> Result<Vec<Self>> {
        Err(tch::TchError::Torch(crate::estimate::NOT_REPLAYED_SCRIPT.into()))
    }

    fn script_child_forward(_module: &tch::CModule, _i: usize, _x: &Self) -> Result<Self> {
        Err(tch::TchError::Torch(crate::estimate::NOT_REPLAYED_SCRIPT.into()))
    }

    fn param(shape: &[i64], place: Place, _init: Init) -> Result<Self> {
        let t = Sym::alloc_on(&ctx(), shape, Dt(place.kind), Params, place.device == Device::Cpu);
        t.0.autograd.borrow_mut().requires_grad = true;
        Ok(t)
    }

    fn filled(shape: &[i64], kind: Kind, device: Device, _value: f64) -> Result<Self> {
        Ok(Sym::alloc_on(&ctx(), shape, Dt(kind), Params, device == Device::Cpu))
    }

    fn deep_copy(&self) -> Result<Self> {
        let t = Sym::alloc_on(&ctx(), &self.shape(), self.dt(), Params, self.0.host);
        t.0.autograd.borrow_mut().requires_grad = true;
        Ok(t)
    }

    fn moved(&self, place: Place, param: bool) -> Result<Self> {
        let kind = if self.dt().0 == Kind::Int64 { Kind::Int64 } else { place.kind };
        let host = place.device == Device::Cpu;
        if kind == self.dt().0 && host == self.0.host {
            return Ok(self.handle());
        }
        let t = Sym::alloc_on(&ctx(), &self.shape(), Dt(kind), Params, host);
        t.0.autograd.borrow_mut().requires_grad = param;
        Ok(t)
    }

    fn init_(&mut self, _init: Init) -> Result<()> {
        Ok(())
    }

    fn f_linear(&self, weight: &Self, bias: Option<&Self>) -> Result<Self> {
        let ctx = ctx();
        if ctx.autocast().is_some() {
            // On the lower-precision list: the arguments cast (the bias last of all, as the
            // compiler evaluates it first), then the op itself with autocast off.
            let b = bias.map(|b| to_low(&ctx, b));
            let [x, w] = to_low_args(&ctx, [self, weight]);
            let _off = ctx.autocast_mode(None);
            return x.f_linear(&w, b.as_ref());
        }
        let b = bias.expect("the models' Linears have a bias");
        let shape = self.shape();
        let (inputs, outputs) = (shape[shape.len() - 1], weight.shape()[0]);
        if shape.len() == 2 {
            return Ok(addmm(&ctx, self, weight, b));
        }
        let rows: i64 = shape[..shape.len() - 1].iter().product();
        let mut out_shape = shape[..shape.len() - 1].to_vec();
        out_shape.push(outputs);
        if self.is_contiguous() {
            // _flatten_nd_linear: a flattening view, addmm, the result viewed back.
            let flat = reshape(&ctx, self, &[rows, inputs]);
            let out = addmm(&ctx, &flat, weight, b);
            drop(flat);
            let strides = contiguous_strides(&out_shape);
            return Ok(view(&ctx, &out, out_shape, strides, Rule::View { input: vec![rows, outputs] }));
        }
        // matmul: the input reshaped (a copy: it cannot be viewed flat), mm with the weight's
        // transpose, viewed back; then the bias added in place.
        let flat = reshape(&ctx, self, &[rows, inputs]);
        let product = mm(&ctx, &flat, weight, &[rows, outputs], Some(weight.shape()));
        drop(flat);
        let strides = contiguous_strides(&out_shape);
        let mut out = view(&ctx, &product, out_shape, strides, Rule::View { input: vec![rows, outputs] });
        drop(product);
        out.add_(b)?;
        Ok(out)
    }

    fn f_relu(&self) -> Result<Self> {
        let ctx = ctx();
        let out = new_like(&ctx, self);
        record(&ctx, Rule::Relu { shape: self.shape() }, &[self], &[&out], &[&out]);
        Ok(out)
    }

    fn relu_(&mut self) -> Result<()> {
        let ctx = ctx();
        let before = self.view_as(self.shape(), self.strides());
        *before.0.autograd.borrow_mut() = std::mem::take(&mut *self.0.autograd.borrow_mut());
        let requires = before.requires_grad();
        record(&ctx, Rule::Relu { shape: self.shape() }, &[&before], &[self], &[self]);
        self.0.autograd.borrow_mut().requires_grad = requires;
        Ok(())
    }

    fn f_conv2d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        stride: i64,
        padding: i64,
        groups: i64,
    ) -> Result<Self> {
        let ctx = ctx();
        if ctx.autocast().is_some() {
            let b = bias.map(|b| to_low(&ctx, b));
            let [x, w] = to_low_args(&ctx, [self, weight]);
            let _off = ctx.autocast_mode(None);
            return x.f_conv2d(&w, b.as_ref(), stride, padding, groups);
        }
        let (out, conv) = kernels::conv_forward(&ctx, self, weight, bias.is_some(), stride, padding, groups);
        let rule = Rule::Conv(conv);
        let mut inputs = vec![self, weight];
        inputs.extend(bias);
        // The input and the weight (under autocast its cast, which only this keeps).
        record(&ctx, rule, &inputs, &[self, weight], &[&out]);
        Ok(out)
    }

    fn batch_norm_train(&self, weight: &Self, bias: &Self, stats: [&Self; 3]) -> Result<Self> {
        let ctx = ctx();
        // num_batches_tracked.add_(1): an int64 scalar wrapped, in place.
        drop(wrapped(&ctx, Dt(Kind::Int64), true));
        let _ = stats;
        let (out, mean, invstd) = kernels::batch_norm_forward(&ctx, self, weight.dt());
        record(
            &ctx,
            Rule::BatchNorm { input: self.shape() },
            &[self, weight, bias],
            &[self, &mean, &invstd],
            &[&out],
        );
        Ok(out)
    }

    fn f_max_pool2d(&self, kernel: i64, stride: i64, padding: i64) -> Result<Self> {
        let ctx = ctx();
        let s = self.shape();
        let side = |x: i64| (x + 2 * padding - kernel) / stride + 1;
        let shape = [s[0], s[1], side(s[2]), side(s[3])];
        let out = new(&ctx, &shape, self.dt());
        let indices = new(&ctx, &shape, Dt(Kind::Int64));
        record(&ctx, Rule::MaxPool { input: s }, &[self], &[self, &indices], &[&out]);
        Ok(out)
    }

    fn f_global_avg_pool(&self) -> Result<Self> {
        let ctx = ctx();
        let s = self.shape();
        let out = new(&ctx, &[s[0], s[1], 1, 1], self.dt());
        reduce_temporaries(&ctx, self, &[s[0], s[1], 1, 1]);
        record(&ctx, Rule::MeanLike { input: s }, &[self], &[], &[&out]);
        Ok(out)
    }

    fn f_flatten1(&self) -> Result<Self> {
        let s = self.shape();
        let rest: i64 = s[1..].iter().product();
        Ok(reshape(&ctx(), self, &[s[0], rest]))
    }

    fn f_add(&self, other: &Self) -> Result<Self> {
        let ctx = ctx();
        if self.dt() != other.dt() {
            // Mixed precision (an fp32 residual plus a low-precision branch): the sum in fp32.
            // On the CPU TensorIterator first casts the low-precision operand (a temporary).
            let dt = if is_low(self.dt().0) { other.dt() } else { self.dt() };
            let low = if is_low(self.dt().0) { self } else { other };
            let copy = (ctx.target == Target::Cpu).then(|| new_like_dt(&ctx, low, dt));
            let out = new_like_dt(&ctx, self, dt);
            drop(copy);
            record(&ctx, Rule::Add { shapes: [self.shape(), other.shape()] }, &[self, other], &[], &[&out]);
            return Ok(out);
        }
        let out = new_like(&ctx, self);
        record(&ctx, Rule::Add { shapes: [self.shape(), other.shape()] }, &[self, other], &[], &[&out]);
        Ok(out)
    }

    fn add_(&mut self, other: &Self) -> Result<()> {
        let ctx = ctx();
        let before = self.view_as(self.shape(), self.strides());
        *before.0.autograd.borrow_mut() = std::mem::take(&mut *self.0.autograd.borrow_mut());
        let requires = before.requires_grad() || other.requires_grad();
        record(&ctx, Rule::Add { shapes: [self.shape(), other.shape()] }, &[&before, other], &[], &[self]);
        self.0.autograd.borrow_mut().requires_grad = requires;
        Ok(())
    }

    fn f_embedding(weight: &Self, tokens: &Self) -> Result<Self> {
        let ctx = ctx();
        let mut shape = tokens.shape();
        shape.push(weight.shape()[1]);
        let out = new(&ctx, &shape, weight.dt());
        record(&ctx, Rule::Embedding { weight: weight.shape() }, &[weight], &[tokens], &[&out]);
        Ok(out)
    }

    fn f_layer_norm(&self, weight: &Self, bias: &Self) -> Result<Self> {
        let ctx = ctx();
        if ctx.autocast().is_some() && ctx.target == Target::Cuda {
            // On CUDA's fp32 list (not on the CPU's: there it runs in the input's dtype).
            let x = to_float(&ctx, self);
            let _off = ctx.autocast_mode(None);
            return x.f_layer_norm(weight, bias);
        }
        let s = self.shape();
        let d = *s.last().expect("layer_norm over the last dim");
        let mut stat_shape = s.clone();
        *stat_shape.last_mut().expect("checked") = 1;
        let stat_dt = super::kernels::norm_stat_dt(ctx.target, self.dt(), weight.dt());
        let out = new(&ctx, &s, self.dt());
        let (mean, rstd) = (new(&ctx, &stat_shape, stat_dt), new(&ctx, &stat_shape, stat_dt));
        record(&ctx, Rule::LayerNorm { input: s, d }, &[self, weight, bias], &[self, &mean, &rstd], &[&out]);
        Ok(out)
    }

    fn f_dropout(&self, p: f64) -> Result<Self> {
        let ctx = ctx();
        if p == 0.0 {
            return Ok(self.handle());
        }
        let (mask, out) = if ctx.target == Target::Cuda {
            // native_dropout (Dropout.cu, `dropout_cuda`): the bool mask, then the output (the
            // order an H200's allocation history shows).
            let mask = new(&ctx, &self.shape(), Dt(Kind::Bool));
            let out = new_like(&ctx, self);
            (mask, out)
        } else {
            // empty_like().bernoulli_(1 - p), div_(1 - p), then input * mask.
            let mask = new_like(&ctx, self);
            drop(wrapped(&ctx, self.dt(), false));
            let out = new_like(&ctx, &mask);
            (mask, out)
        };
        record(&ctx, Rule::MulByConstant { shape: self.shape() }, &[self], &[&mask], &[&out]);
        Ok(out)
    }

    fn f_mean1(&self) -> Result<Self> {
        let ctx = ctx();
        let mut shape = self.shape();
        let input = shape.clone();
        shape.remove(1);
        let out = new(&ctx, &shape, self.dt());
        reduce_temporaries(&ctx, self, &shape);
        record(&ctx, Rule::MeanLike { input }, &[self], &[], &[&out]);
        Ok(out)
    }

    fn f_transpose(&self, a: i64, b: i64) -> Result<Self> {
        let n = self.shape().len() as i64;
        let (a, b) = (a.rem_euclid(n) as usize, b.rem_euclid(n) as usize);
        let mut order: Vec<usize> = (0..n as usize).collect();
        order.swap(a, b);
        self.f_permute(&order.iter().map(|&d| d as i64).collect::<Vec<_>>())
    }

    fn f_unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Self> {
        let mut shape = self.shape();
        let d = dim.rem_euclid(shape.len() as i64) as usize;
        shape.splice(d..=d, sizes.iter().copied());
        self.f_view(&shape)
    }

    fn f_unsqueeze(&self, dim: i64) -> Result<Self> {
        let (mut shape, mut strides) = (self.shape(), self.strides());
        let d = dim.rem_euclid(shape.len() as i64 + 1) as usize;
        let stride = if d < shape.len() { strides[d] * shape[d] } else { 1 };
        shape.insert(d, 1);
        strides.insert(d, stride);
        Ok(view(&ctx(), self, shape, strides, Rule::Unsqueeze { dim: d }))
    }

    fn f_squeeze_dim(&self, dim: i64) -> Result<Self> {
        let (mut shape, mut strides) = (self.shape(), self.strides());
        let d = dim.rem_euclid(shape.len() as i64) as usize;
        if shape[d] != 1 {
            return Ok(self.handle());
        }
        shape.remove(d);
        strides.remove(d);
        Ok(view(&ctx(), self, shape, strides, Rule::Squeeze { dim: d }))
    }

    fn f_contiguous(&self) -> Result<Self> {
        if self.is_contiguous() {
            return Ok(self.handle());
        }
        let ctx = ctx();
        let out = new(&ctx, &self.shape(), self.dt());
        record(&ctx, Rule::Pass, &[self], &[], &[&out]);
        Ok(out)
    }

    fn f_select(&self, dim: i64, _index: i64) -> Result<Self> {
        let (mut shape, mut strides) = (self.shape(), self.strides());
        let input = shape.clone();
        let d = dim.rem_euclid(shape.len() as i64) as usize;
        shape.remove(d);
        strides.remove(d);
        Ok(view(&ctx(), self, shape, strides, Rule::Select { input }))
    }

    fn f_view(&self, sizes: &[i64]) -> Result<Self> {
        let input = self.shape();
        let strides = view_strides(&input, &self.strides(), sizes)
            .ok_or_else(|| tch::TchError::Torch(format!("estimate: no view of {input:?} as {sizes:?}")))?;
        Ok(view(&ctx(), self, sizes.to_vec(), strides, Rule::View { input }))
    }

    fn f_permute(&self, dims: &[i64]) -> Result<Self> {
        let (shape, strides) = (self.shape(), self.strides());
        let order: Vec<usize> = dims.iter().map(|&d| d.rem_euclid(shape.len() as i64) as usize).collect();
        let s = order.iter().map(|&d| shape[d]).collect();
        let st = order.iter().map(|&d| strides[d]).collect();
        Ok(view(&ctx(), self, s, st, Rule::Permute { order }))
    }

    fn f_sdpa(q: &Self, k: &Self, v: &Self, dropout: f64) -> Result<Self> {
        let ctx = ctx();
        if ctx.autocast().is_some() {
            let [q, k, v] = to_low_args(&ctx, [q, k, v]);
            let _off = ctx.autocast_mode(None);
            return Sym::f_sdpa(&q, &k, &v, dropout);
        }
        if dropout == 0.0 && ctx.target == Target::Cpu {
            return Ok(flash_cpu(&ctx, q, k, v));
        }
        if ctx.target == Target::Cuda {
            let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
            if super::cudnn_attention::chosen(ctx.gpu, q.dt().0, &qs, &ks, &vs, dropout) {
                let f = super::cudnn_attention::forward(&ctx, q, v, logsumexp(&ctx, [q, k, v]));
                let rule = Rule::Cudnn(Rc::new(super::cudnn_attention::Layouts::of(q, k, v, &f.out)));
                if let Some(stats) = &f.stats {
                    record(&ctx, rule, &[q, k, v], &[q, k, v, stats, &f.out, &f.seed, &f.offset], &[&f.out]);
                }
                return Ok(f.out);
            }
            if let Some(kernel) = super::efficient::kernel(q, v) {
                let (out, lse) = super::efficient::forward(&ctx, q, v, logsumexp(&ctx, [q, k, v]));
                if let Some(lse) = &lse {
                    let rule = Rule::Efficient { q: q.shape(), k: k.shape(), v: v.shape(), kernel };
                    record(&ctx, rule, &[q, k, v], &[q, k, v, lse, &out], &[&out]);
                }
                return Ok(out);
            }
        }
        // _scaled_dot_product_attention_math. On the CPU it computes a low-precision call in
        // fp32: q, k and v cast up first, and at the end the attention weights and the result
        // cast back (the weights first: the compiler evaluates the returned pair right to
        // left), the fp32 casts of q and k gone as it returns.
        let low = (ctx.target == Target::Cpu && is_low(q.dt().0)).then(|| q.dt());
        let up = |t: &Sym| match low {
            Some(_) => to_float(&ctx, t),
            None => t.handle(),
        };
        let (q, k, v) = (up(q), up(k), up(v));
        // `query = q * sqrt(scale)` (a local, alive until it returns); `attn = matmul(query,
        // k.transpose(-2, -1) * sqrt(scale))` (the scaled k a temporary); `attn =
        // _safe_softmax(attn)`; `attn = dropout(attn)`; it returns `(matmul(attn, v), attn)`,
        // whose `attn` goes when the caller has taken the output.
        let query = mul_scalar(&ctx, &q);
        let scores = {
            let kt = k.f_transpose(-2, -1)?;
            let ks = mul_scalar(&ctx, &kt);
            matmul4(&ctx, &query, &ks)
        };
        let probs = safe_softmax(&ctx, &scores);
        drop(scores);
        let attn = probs.f_dropout(dropout)?;
        drop(probs);
        let Some(low) = low else {
            let out = matmul4(&ctx, &attn, &v);
            drop(query);
            drop(attn);
            return Ok(out);
        };
        let attn_low = cast(&ctx, &attn, low);
        let out32 = matmul4(&ctx, &attn, &v);
        let out = cast(&ctx, &out32, low);
        drop(out32);
        drop((v, k, q, query, attn));
        drop(attn_low);
        Ok(out)
    }

    fn f_cross_entropy(&self, y: &Self) -> Result<Self> {
        let ctx = ctx();
        if ctx.autocast().is_some() && is_low(self.dt().0) {
            let _off = ctx.autocast_mode(None);
            if ctx.target == Target::Cpu {
                // On the CPU's fp32 list: the logits cast up (gone as it returns), then as in fp32.
                let x = to_float(&ctx, self);
                return x.f_cross_entropy(y);
            }
            // CUDA's lists have no cross_entropy_loss: its decomposition (LossNLL.cpp) calls
            // `log_softmax(self, dim, self.scalar_type())`, whose explicit dtype autocast's
            // fp32_set_opt_dtype keeps, so the log-probabilities are low precision (saved by
            // their backward); then nll_loss, on the fp32 list, casts them up (saved by its
            // backward). Measured on an H200: tests/fixtures/h200/amp_models.
            let logp = new(&ctx, &self.shape(), self.dt());
            record(&ctx, Rule::LogSoftmax { shape: self.shape() }, &[self], &[&logp], &[&logp]);
            let up = to_float(&ctx, &logp);
            drop(logp);
            return Ok(nll_loss(&ctx, &up, y));
        }
        // log_softmax (saved by its own backward and by nll_loss's), then nll_loss: the loss and
        // its total_weight (saved).
        let logp = new(&ctx, &self.shape(), self.dt());
        record(&ctx, Rule::LogSoftmax { shape: self.shape() }, &[self], &[&logp], &[&logp]);
        Ok(nll_loss(&ctx, &logp, y))
    }

    fn f_detach(&self) -> Result<Self> {
        Ok(self.view_as(self.shape(), self.strides()))
    }

    fn f_set_requires_grad(&self, requires: bool) -> Result<Self> {
        self.0.autograd.borrow_mut().requires_grad = requires;
        Ok(self.handle())
    }

    fn f_mul(&self, other: &Self) -> Result<Self> {
        let ctx = ctx();
        let out = new_like(&ctx, self);
        record(&ctx, Rule::MulByConstant { shape: self.shape() }, &[self], &[other], &[&out]);
        Ok(out)
    }

    fn f_sum(&self) -> Result<Self> {
        let ctx = ctx();
        let out = new(&ctx, &[], self.dt());
        // A CPU reduction of many elements to one splits across threads, one partial result
        // each (`two_pass_reduction`: at least 32768 elements and more than one thread).
        if ctx.target == Target::Cpu && ctx.threads > 1 && self.numel() >= 32_768 {
            drop(new(&ctx, &[ctx.threads as i64], self.dt()));
        }
        record(&ctx, Rule::Sum { shape: self.shape() }, &[self], &[], &[&out]);
        Ok(out)
    }

    fn backward(&self) -> Result<()> {
        engine::backward(&ctx(), self);
        Ok(())
    }

    fn f_grad(&self) -> Result<Self> {
        Ok(match &self.0.autograd.borrow().grad {
            Some(g) => g.handle(),
            None => Sym::undefined(self.dt()),
        })
    }

    fn set_empty(&mut self) -> Result<()> {
        let storage = self.0.storage.borrow_mut().take();
        *self.0.shape.borrow_mut() = vec![0];
        *self.0.strides.borrow_mut() = vec![1];
        drop(storage);
        Ok(())
    }

    fn rng_state(device: Device) -> Result<Self> {
        // A CPU byte tensor: mt19937's state (5056 bytes), or CUDA's seed and offset (16).
        let bytes = if device == Device::Cpu { 5056 } else { 16 };
        Ok(Sym::alloc_on(&ctx(), &[bytes], Dt(Kind::Uint8), Transient, true))
    }

    fn set_rng_state(_device: Device, _state: &Self) -> Result<()> {
        Ok(())
    }
}

/// `nll_loss` of log-probabilities: the loss and its total_weight (saved).
fn nll_loss(ctx: &Rc<Ctx>, logp: &Sym, y: &Sym) -> Sym {
    let loss = new(ctx, &[], logp.dt());
    let total_weight = new(ctx, &[], logp.dt());
    record(ctx, Rule::NllLoss { input: logp.shape() }, &[logp], &[logp, y, &total_weight], &[&loss]);
    loss
}

/// `_scaled_dot_product_flash_attention_for_cpu` (no dropout): the output, laid out as the
/// query (so that multi-head attention's `permute(2, 0, 1, 3).contiguous()` of it is free), the
/// logsumexp `[B, H, L]` (both saved, with q, k and v), and per-thread buffers that go before it
/// returns.
fn flash_cpu(ctx: &Rc<Ctx>, q: &Sym, k: &Sym, v: &Sym) -> Sym {
    let s = q.shape();
    let (b, h, l, hd) = (s[0], s[1], s[2], s[3]);
    let out = new_like(ctx, q);
    // The logsumexp and the per-thread buffers in the accumulate type (`toOpMathType`): float64
    // for float64 inputs, else float32.
    let acc = flash_acc(q.dt());
    let lse = new(ctx, &[b, h, l], acc);
    let (qs, kvs) = (flash_split(l), 512.min(k.shape()[2]));
    let per_thread = qs * kvs + 2 * qs + qs * hd;
    let buffer = new(ctx, &[ctx.threads as i64 * per_thread], acc);
    // In low precision the scores also go through a buffer of the input's dtype.
    let reduced = is_low(q.dt().0).then(|| new(ctx, &[ctx.threads as i64 * qs * kvs], q.dt()));
    drop((reduced, buffer));
    let rule = Rule::Flash { q: s.clone(), k: k.shape(), v: v.shape() };
    record(ctx, rule, &[q, k, v], &[q, k, v, &out, &lse], &[&out]);
    out
}
