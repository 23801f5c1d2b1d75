//! The optimizer step, replayed: `torch.optim`'s SGD, Adam and AdamW of PyTorch 2.11 in each
//! implementation, as `train::optim` runs them (`crates/torch/src/ffi/optim.cpp`, which mirrors
//! `torch/optim/{sgd,adam}.py` op for op, Python's variable lifetimes included).
//!
//! What differs between the implementations is the temporaries:
//! - **for-loop**: one parameter at a time. Adam's `denom` is `exp_avg_sq.sqrt() / c` (the
//!   square root and the quotient live together) and the previous parameter's `denom` is freed
//!   only when the new one is bound: three parameter-sized temporaries at the peak, two of them
//!   the current parameter's. A weight-decayed gradient `grad.add(p, wd)` lives until the next
//!   parameter's `grad = grads[i]`.
//! - **foreach**: whole-model lists. Adam's `_foreach_sqrt` holds a square root of every
//!   parameter at once (one more copy of the model), weight decay a decayed copy of every
//!   gradient until `del device_grads`. On the CPU each `_foreach_*` op falls back to a loop of
//!   the plain op, whose scalar arguments are wrapped in 0-dim tensors one by one.
//! - **fused**: one kernel; no temporaries. Adam's `step` counters live on the device.
//!
//! State is made for every parameter at the first step, before any update (`_init_group`):
//! Adam's `step` (a 0-dim float32, on the CPU unless fused), `exp_avg`, `exp_avg_sq`; SGD's
//! momentum buffers come with the first update (a clone of the gradient; `empty_like` when
//! fused).
use super::Sim;
use crate::estimate::ledger::Category::{OptimizerState, Transient};
use crate::estimate::ledger::Held;
use crate::estimate::terms::Target;
use crate::spec::{OptimizerImpl, OptimizerSpec};

impl Sim<'_> {
    /// The implementation this trial's step runs: the spec's, or PyTorch's default for the
    /// target (foreach on CUDA).
    pub(super) fn optimizer_impl(&self) -> OptimizerImpl {
        let choice = self.config.training.techniques.optimizer_impl;
        OptimizerImpl::resolve(choice, self.t.target == Target::Cuda)
    }

    /// A 0-dim float32 on the host (Adam's step counter unless fused).
    fn host_f32(&self) -> u64 {
        self.t.target.host(4)
    }

    /// `op_(scalar)` on a 0-dim float32 on the host: the scalar wrapped as a double, then cast
    /// to float32 (see `Terms::wrapped_scalar`).
    fn host_f32_wrap(&self) -> u64 {
        self.t.target.host(8 + 4)
    }

    /// On the CPU, a `_foreach_*` op with a scalar argument is a loop of the plain op, each
    /// wrapping the scalar for a moment; on CUDA the fused kernel takes it as an argument.
    fn foreach_scalar_op(&mut self, wrap: u64) {
        if self.t.target == Target::Cpu {
            let t = self.t;
            for _ in t.optimizer_numels() {
                self.ledger.alloc(Transient, wrap);
                self.ledger.free(Transient, wrap);
            }
        }
    }

    /// One wrapped scalar for a moment (an in-place op with a scalar).
    fn scalar_op(&mut self, wrap: u64) {
        self.ledger.alloc(Transient, wrap);
        self.ledger.free(Transient, wrap);
    }

    /// `optimizer.step()` without a grad scaler's help (a fused step with one is
    /// [`Self::scaled_fused_step`]).
    pub(super) fn torch_optimizer_step(&mut self, implementation: OptimizerImpl) {
        if self.t.optimizer_numels().is_empty() {
            // A ZeRO rank that owns no parameter: torch.optim's step over an empty list makes
            // nothing (the multi-tensor and fused implementations return first).
            return;
        }
        let first = !self.has_state;
        match (self.config.training.optimizer, implementation) {
            (OptimizerSpec::Sgd { momentum, weight_decay, .. }, OptimizerImpl::ForLoop) => {
                self.sgd_for_loop(first, momentum != 0.0, weight_decay != 0.0)
            }
            (OptimizerSpec::Sgd { momentum, weight_decay, .. }, OptimizerImpl::Foreach) => {
                self.sgd_foreach(first, momentum != 0.0, weight_decay != 0.0)
            }
            (OptimizerSpec::Sgd { momentum, .. }, OptimizerImpl::Fused) => {
                self.sgd_fused(first, momentum != 0.0)
            }
            (opt, implementation) => {
                let (decoupled, wd) = match opt {
                    OptimizerSpec::AdamW { weight_decay, .. } => (true, weight_decay != 0.0),
                    OptimizerSpec::Adam { weight_decay, .. } => (false, weight_decay != 0.0),
                    OptimizerSpec::Sgd { .. } => unreachable!("matched above"),
                };
                if first {
                    self.adam_state(implementation == OptimizerImpl::Fused);
                }
                match implementation {
                    OptimizerImpl::ForLoop => self.adam_for_loop(decoupled, wd),
                    OptimizerImpl::Foreach => self.adam_foreach(decoupled, wd),
                    OptimizerImpl::Fused => self.adam_fused(),
                }
            }
        }
        self.has_state = true;
    }

    /// `Adam._init_group` at the first step: per parameter, `step`, `exp_avg`, `exp_avg_sq`.
    fn adam_state(&mut self, fused: bool) {
        let step = if fused { self.t.target.counted(4) } else { self.host_f32() };
        let t = self.t;
        for &n in t.optimizer_numels() {
            self.ledger.alloc(OptimizerState, step);
            self.ledger.alloc(OptimizerState, self.t.bytes(n)); // exp_avg
            self.ledger.alloc(OptimizerState, self.t.bytes(n)); // exp_avg_sq
        }
    }

    /// `_single_tensor_adam`.
    fn adam_for_loop(&mut self, decoupled: bool, wd: bool) {
        let (t, w, step_wrap) = (self.t, self.t.wrapped_scalar(), self.host_f32_wrap());
        let (mut grad, mut denom): (Option<Held>, Option<Held>) = (None, None);
        for &n in t.optimizer_numels() {
            let s = t.bytes(n);
            if let Some(g) = grad.take() {
                self.ledger.release(g); // `grad = grads[i]`
            }
            self.scalar_op(step_wrap); // step_t += 1
            if wd && decoupled {
                self.scalar_op(w); // param.mul_(1 - lr * wd)
            } else if wd {
                grad = Some(self.ledger.hold(Transient, s)); // grad.add(param, alpha=wd)
            }
            self.scalar_op(w); // exp_avg_sq.mul_(beta2); lerp_ and addcmul_ take Scalars
            let root = self.ledger.hold(Transient, s); // exp_avg_sq.sqrt()
            self.ledger.alloc(Transient, w);
            let quotient = self.ledger.hold(Transient, s); // ... / bias_correction2_sqrt
            self.ledger.free(Transient, w);
            self.ledger.release(root);
            self.scalar_op(w); // .add_(eps)
            if let Some(d) = denom.replace(quotient) {
                self.ledger.release(d); // the previous denom, on rebinding
            }
        }
        for held in [denom, grad].into_iter().flatten() {
            self.ledger.release(held);
        }
    }

    /// `_multi_tensor_adam`, the state steps on the CPU.
    fn adam_foreach(&mut self, decoupled: bool, wd: bool) {
        let (t, w) = (self.t, self.t.wrapped_scalar());
        let one = self.host_f32();
        self.ledger.alloc(Transient, one); // torch.tensor(1.0) for _foreach_add_(steps, ...)
        self.ledger.free(Transient, one);
        let mut decayed = 0;
        if wd && decoupled {
            self.foreach_scalar_op(w); // _foreach_mul_(params, 1 - lr * wd)
        } else if wd {
            for &n in t.optimizer_numels() {
                self.ledger.alloc(Transient, t.bytes(n)); // _foreach_add(grads, params, wd)
                decayed += t.bytes(n);
            }
        }
        self.foreach_scalar_op(w); // _foreach_mul_(exp_avg_sqs, beta2)
        self.ledger.free(Transient, decayed); // del device_grads
        let mut roots = 0;
        for &n in t.optimizer_numels() {
            self.ledger.alloc(Transient, t.bytes(n)); // _foreach_sqrt(exp_avg_sqs)
            roots += t.bytes(n);
        }
        self.foreach_scalar_op(w); // _foreach_div_(roots, bias_correction2_sqrt)
        self.foreach_scalar_op(w); // _foreach_add_(roots, eps)
        self.ledger.free(Transient, roots); // after _foreach_addcdiv_, on return
    }

    /// `_fused_adam`: the steps counted on the device, then one kernel. With a grad scaler the
    /// steps of a skipped update are taken back (`_foreach_sub_` of a tensor: nothing made).
    fn adam_fused(&mut self) {
        let wrap = self.host_f32_wrap();
        self.foreach_scalar_op(wrap); // _foreach_add_(steps, 1)
    }

    /// `_single_tensor_sgd`.
    fn sgd_for_loop(&mut self, first: bool, momentum: bool, wd: bool) {
        let (t, w) = (self.t, self.t.wrapped_scalar());
        let mut grad: Option<Held> = None;
        for &n in t.optimizer_numels() {
            let s = t.bytes(n);
            if let Some(g) = grad.take() {
                self.ledger.release(g); // `grad = grads[i]`
            }
            if wd {
                grad = Some(self.ledger.hold(Transient, s)); // grad.add(param, alpha=wd)
            }
            if momentum {
                if first {
                    self.ledger.alloc(OptimizerState, s); // grad.detach().clone()
                } else {
                    self.scalar_op(w); // buf.mul_(momentum)
                }
                if let Some(g) = grad.take() {
                    self.ledger.release(g); // `grad = buf`
                }
            }
        }
        if let Some(g) = grad {
            self.ledger.release(g);
        }
    }

    /// `_multi_tensor_sgd`.
    fn sgd_foreach(&mut self, first: bool, momentum: bool, wd: bool) {
        let (t, w) = (self.t, self.t.wrapped_scalar());
        let mut decayed = 0;
        if wd {
            for &n in t.optimizer_numels() {
                self.ledger.alloc(Transient, t.bytes(n)); // _foreach_add(grads, params, wd)
                decayed += t.bytes(n);
            }
        }
        if momentum {
            if first {
                for &n in t.optimizer_numels() {
                    self.ledger.alloc(OptimizerState, t.bytes(n)); // clone of each gradient
                }
            } else {
                self.foreach_scalar_op(w); // _foreach_mul_(bufs, momentum)
            }
        }
        // `device_grads = bufs` (or the function's return) lets the decayed copies go.
        self.ledger.free(Transient, decayed);
    }

    /// `_fused_sgd`: the first step with momentum makes the buffers (`empty_like`).
    fn sgd_fused(&mut self, first: bool, momentum: bool) {
        if first && momentum {
            let t = self.t;
            for &n in t.optimizer_numels() {
                self.ledger.alloc(OptimizerState, self.t.bytes(n));
            }
        }
    }

    /// `GradScaler.step` with a fused optimizer (`_step_supports_amp_scaling`):
    /// `_check_inf_per_device` (a dummy inv_scale of 1 and a found_inf, the check in place),
    /// `sum([found_inf])` and `scale * 1` (each a wrapped scalar and a 0-dim result), the
    /// optimizer's step with both, then the two go; found_inf lives through `update()`.
    pub(super) fn scaled_fused_step(&mut self) {
        let (single, wrap) = (self.t.target.counted(4), self.host_f32_wrap());
        let dummy_inv_scale = self.ledger.hold(Transient, single);
        let found_inf = self.ledger.hold(Transient, single);
        self.ledger.release(dummy_inv_scale); // when _check_inf_per_device returns
        let copy = || {
            self.ledger.alloc(Transient, wrap);
            let made = self.ledger.hold(Transient, single);
            self.ledger.free(Transient, wrap);
            made
        };
        let summed = copy(); // sum([found_inf]): 0 + found_inf
        let grad_scale = copy(); // scale * 1
        let implementation = self.optimizer_impl();
        self.torch_optimizer_step(implementation);
        for held in [grad_scale, summed, found_inf] {
            self.ledger.release(held); // `del optimizer.grad_scale`, step's return, after update()
        }
    }

    /// `GradScaler::step` before the optimizer's: `inv_scale` (the scale to fp64, its
    /// reciprocal, back to fp32, each intermediate gone once the next exists) and `found_inf`;
    /// the unscale itself is in place, and `inv_scale` goes when `unscale_grads` returns.
    /// Returns the bytes held through the optimizer's step: `found_inf`.
    pub(super) fn unscale(&mut self) -> u64 {
        let (double, single) = (self.t.target.counted(8), self.t.target.counted(4));
        let as_double = self.ledger.hold(Transient, double);
        let reciprocal = self.ledger.hold(Transient, double);
        self.ledger.release(as_double);
        let inv_scale = self.ledger.hold(Transient, single);
        self.ledger.release(reciprocal);
        self.ledger.alloc(Transient, single); // found_inf
        self.ledger.release(inv_scale);
        single
    }
}
