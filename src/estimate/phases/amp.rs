//! Mixed precision, replayed: autocast's casts and what the graph saves of them, the fp32 loss,
//! the gradients cast back to fp32, and the fp16 grad scaler (`train::amp`). Parameters,
//! gradients and optimizer state stay fp32; the activations are low precision (2 bytes).
//!
//! There is no separate autocast pass: the plain and checkpointed passes ask these helpers for
//! activation sizes (`act`, `act_logits`) and casts (`cast_and_save`, `cast_if_autocast`), which
//! are the training dtype's and nothing without autocast, and `linear_backward` hands over to
//! [`Sim::autocast_linear_backward`] under it.
//!
//! libtorch's CPU autocast (`aten/src/ATen/autocast_mode.cpp`), as the counting allocator sees
//! it (`OOMLAB_ALLOC_LOG=1`); CUDA's op lists differ in places (the loss's among them) and are
//! not checked here:
//! - `linear` is on the low-precision list: its arguments are cast with `cached_cast`, right to
//!   left as the compiler evaluates them (bias, weight, input). The casts of fp32 leaves that
//!   require grad (the parameters) are cached until autocast exits (the end of the forward
//!   phase); the batch's cast is not (it is no such leaf). A cast that the graph saves outlives
//!   the cache: AddmmBackward saves its input when the weight needs a gradient (always: layer
//!   0 saves the batch's cast) and the weight when the input needs one (every layer but the
//!   first). Biases are never saved.
//! - `relu` is on no list: it runs in the dtype it is given.
//! - `cross_entropy_loss` is on the fp32 list: the logits are cast up (a temporary), then
//!   log_softmax and NLL run in fp32, as in the plain step.
//! - Backward: each cast has a ToCopyBackward that casts the gradient back (to fp32 for the
//!   parameters, whose `.grad` is fp32, and down to the low dtype at the logits).
//!
//! Not modelled: scratch buffers of the low-precision matmul kernels. oneDNN's bf16 GEMM on
//! the CPU takes a workspace of its own while it runs (measured: 150 KB for a 512x64 by 64x512
//! product, 820 KB for a 512x512 by 512x512 weight gradient), which sits on top of a matmul's
//! output at the layer that sets the peak; fp16 on the CPU takes none.
use super::Sim;
use crate::estimate::ledger::Category::{AmpCopies, Grads, OptimizerState, Transient};
use crate::estimate::ledger::Held;

impl Sim<'_> {
    /// Bytes of a low-precision tensor of `numel` elements.
    fn low(&self, numel: u64) -> u64 {
        self.t.target.counted(numel.saturating_mul(2))
    }

    /// Bytes of an fp32 tensor of `numel` elements.
    fn full(&self, numel: u64) -> u64 {
        self.t.target.counted(numel.saturating_mul(4))
    }

    /// A hidden activation of layer `i` as this trial makes it: low precision under autocast.
    pub(super) fn act(&self, i: usize) -> u64 {
        if self.autocast {
            self.low(self.t.batch * self.t.layers[i].outputs)
        } else {
            self.t.activation(i)
        }
    }

    /// A 0-dim tensor of the activations' dtype.
    pub(super) fn act_scalar(&self) -> u64 {
        if self.autocast {
            self.low(1)
        } else {
            self.t.scalar()
        }
    }

    /// `linear`'s casts for layer `i`: its bias and weight (cached until autocast exits), then
    /// for layer 0 the batch (cached by nobody). Returns their bytes: (bias, weight, batch).
    fn cast_for_linear(&mut self, i: usize) -> (u64, u64, u64) {
        let layer = self.t.layers[i];
        let (b, w) = (self.low(layer.bias_numel()), self.low(layer.weight_numel()));
        let x = if i == 0 { self.low(self.t.batch * layer.inputs) } else { 0 };
        self.ledger.alloc(AmpCopies, b);
        self.ledger.alloc(AmpCopies, w);
        self.ledger.alloc(AmpCopies, x);
        (b, w, x)
    }

    /// The logits `[B, K]` as the head makes them: low precision under autocast.
    pub(super) fn act_logits(&self) -> u64 {
        if self.autocast {
            self.low(self.t.batch * self.t.shape.classes as u64)
        } else {
            self.t.logits()
        }
    }

    /// Under autocast, the casts for layer `i` with grad tracking: AddmmBackward saves the
    /// batch's cast (layer 0) or the weight's (the others). Adds what only the cache holds to
    /// `cache_only`. Nothing without autocast.
    pub(super) fn cast_and_save(&mut self, i: usize, cache_only: &mut Vec<u64>) {
        if self.autocast {
            let (b, w, _) = self.cast_for_linear(i);
            cache_only.push(b);
            if i == 0 {
                cache_only.push(w);
            }
        }
    }

    /// Autocast exits and its cache goes: each cast it alone held, one block at a time (freed
    /// as a sum, the CUDA replay could not tell which blocks they were).
    pub(super) fn exit_autocast(&mut self, cache: Vec<u64>) {
        for bytes in cache {
            self.ledger.free(AmpCopies, bytes);
        }
    }

    /// Under autocast, `linear`'s casts for layer `i` when nothing saves them (no_grad): the
    /// bias's and weight's go to `cache`; returns the batch's cast (layer 0), which nobody
    /// caches. Nothing without autocast.
    pub(super) fn cast_if_autocast(&mut self, i: usize, cache: &mut Vec<u64>) -> u64 {
        if !self.autocast {
            return 0;
        }
        let (b, w, x) = self.cast_for_linear(i);
        cache.extend([b, w]);
        x
    }

    /// AddmmBackward of layer `i` in low precision, then ToCopyBackward of its weight's and
    /// bias's casts: fp32 gradients, stolen as `.grad` at the first micro-batch, added in place
    /// and freed after. The cast the node saved goes with it, unless the cache still holds it
    /// (`weight_cached`: a checkpointed segment recomputed under autocast). Returns the input's
    /// gradient.
    pub(super) fn autocast_linear_backward(
        &mut self,
        i: usize,
        incoming: Held,
        first_micro: bool,
        weight_cached: bool,
    ) -> Held {
        let t = self.t;
        let layer = t.layers[i];
        let input_grad = if i > 0 { self.low(t.batch * layer.inputs) } else { 0 };
        let (w, b) = (self.low(layer.weight_numel()), self.low(layer.bias_numel()));
        let input_grad = self.ledger.hold(Transient, input_grad);
        self.ledger.alloc(Transient, w);
        self.ledger.alloc(Transient, b);
        self.bias_sum_staging(t.batch, layer.outputs);
        self.ledger.release(incoming);
        if i == 0 {
            self.ledger.free(AmpCopies, self.low(t.batch * layer.inputs)); // the batch's cast
        } else if !weight_cached {
            self.ledger.free(AmpCopies, w); // the weight's cast
        }
        let grad_cat = if first_micro { Grads } else { Transient };
        for (low, full) in [(w, self.full(layer.weight_numel())), (b, self.full(layer.bias_numel()))] {
            self.ledger.alloc(grad_cat, full);
            self.ledger.free(Transient, low);
            if !first_micro {
                self.ledger.free(Transient, full);
            }
        }
        input_grad
    }

    /// The grad scaler's first `scale()`: the scale (fp32) and the growth tracker (int32), 0-dim
    /// each.
    pub(super) fn scaler_state(&mut self) {
        self.ledger.alloc(OptimizerState, self.full(1));
        self.ledger.alloc(OptimizerState, self.t.target.counted(4));
    }

    /// `GradScaler::step` before the optimizer's: `inv_scale` (the scale to fp64, its
    /// reciprocal, back to fp32, each intermediate gone once the next exists) and `found_inf`; the unscale itself is in place, and
    /// `inv_scale` goes when `unscale_grads` returns. Returns the bytes held through the
    /// optimizer's step: `found_inf`.
    pub(super) fn unscale(&mut self) -> u64 {
        let (double, single) = (self.t.target.counted(8), self.full(1));
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
