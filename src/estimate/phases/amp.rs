//! Mixed precision, replayed: autocast's casts and what the graph saves of them, the fp32 loss,
//! the gradients cast back to fp32, and the fp16 grad scaler (`train::amp`). Parameters,
//! gradients and optimizer state stay fp32; the activations are low precision (2 bytes).
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
use crate::estimate::ledger::Category::{Activations, AmpCopies, Grads, OptimizerState, Transient};

impl Sim<'_> {
    /// Bytes of a low-precision tensor of `numel` elements.
    fn low(&self, numel: u64) -> u64 {
        self.t.target.counted(numel * 2)
    }

    /// Bytes of an fp32 tensor of `numel` elements.
    fn full(&self, numel: u64) -> u64 {
        self.t.target.counted(numel * 4)
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
    pub(super) fn cast_for_linear(&mut self, i: usize) -> (u64, u64, u64) {
        let layer = self.t.layers[i];
        let (b, w) = (self.low(layer.bias_numel()), self.low(layer.weight_numel()));
        let x = if i == 0 { self.low(self.t.batch * layer.inputs) } else { 0 };
        self.ledger.alloc(AmpCopies, b);
        self.ledger.alloc(AmpCopies, w);
        self.ledger.alloc(AmpCopies, x);
        (b, w, x)
    }

    /// The casts for layer `i` with grad tracking: AddmmBackward saves the batch's cast (layer
    /// 0) or the weight's (the others). Adds what only the cache holds to `cache_only`.
    fn cast_and_save(&mut self, i: usize, cache_only: &mut u64) {
        let (b, w, _) = self.cast_for_linear(i);
        *cache_only += if i == 0 { b + w } else { b };
    }

    /// The forward under autocast, head and loss included; the cache is cleared at the end.
    /// Returns the activations the graph keeps; the casts it saved are what is left of
    /// `amp_copies`.
    pub(super) fn autocast_forward(&mut self) -> u64 {
        let mut kept = 0;
        let mut cache_only = 0;
        for i in 0..self.t.depth() {
            self.cast_and_save(i, &mut cache_only);
            let out = self.act(i);
            self.ledger.alloc(Transient, out); // addmm
            self.ledger.alloc(Activations, out); // relu, saved
            self.ledger.free(Transient, out);
            kept += out;
        }
        kept += self.autocast_head_and_loss(&mut cache_only);
        self.ledger.free(AmpCopies, cache_only); // autocast exits: its cache goes
        kept
    }

    /// The head under autocast (low-precision logits), then cross_entropy in fp32: the logits
    /// cast up (freed at its return) and the plain loss. Returns the activations the graph
    /// keeps of them.
    pub(super) fn autocast_head_and_loss(&mut self, cache_only: &mut u64) -> u64 {
        let t = self.t;
        self.cast_and_save(t.depth(), cache_only);
        let (low, full) = (self.low(t.batch * t.shape.classes as u64), t.logits());
        self.ledger.alloc(Transient, low); // addmm
        self.ledger.alloc(Transient, full);
        let loss = self.loss();
        self.ledger.free(Transient, full);
        self.ledger.free(Transient, low); // the logits, at the closure's return
        loss
    }

    /// The same forward under no_grad (`forward_no_grad` with autocast): the weights' casts
    /// are still cached (they are leaves that require grad; grad mode does not matter), the
    /// batch's goes once layer 0 has read it, and each activation once the next exists.
    /// Returns the bytes kept: the loss.
    pub(super) fn autocast_forward_no_grad(&mut self) -> u64 {
        let t = self.t;
        let (mut cache, mut input) = (0, 0);
        for i in 0..=t.depth() {
            let (b, w, x) = self.cast_for_linear(i);
            cache += b + w;
            let out = if i < t.depth() { self.act(i) } else { self.low(t.batch * t.shape.classes as u64) };
            self.ledger.alloc(Transient, out); // z = linear(h)
            self.ledger.free(AmpCopies, x);
            self.ledger.free(Transient, input); // h = z drops the previous h
            if i < t.depth() {
                self.ledger.alloc(Transient, out); // relu(z)
                self.ledger.free(Transient, out); // z
            }
            input = out;
        }
        // cross_entropy in fp32: the cast up, log_softmax, the loss and a total_weight that
        // nothing saves.
        let full = t.logits();
        self.ledger.alloc(Transient, full);
        self.ledger.alloc(Transient, full); // log_softmax
        self.ledger.alloc(Activations, t.scalar()); // the loss
        self.ledger.alloc(Transient, t.scalar()); // total_weight
        self.ledger.free(Transient, t.scalar());
        self.ledger.free(Transient, 2 * full);
        self.ledger.free(Transient, input); // the logits, at the closure's return
        self.ledger.free(AmpCopies, cache); // autocast exits
        t.scalar()
    }

    /// The backward of an autocast forward.
    pub(super) fn autocast_backward(&mut self, first_micro: bool) {
        let mut incoming = self.autocast_loss_backward();
        for i in (0..self.t.layers.len()).rev() {
            incoming = self.autocast_linear_backward(i, incoming, first_micro, false);
            if i > 0 {
                incoming = self.relu_backward(i - 1, incoming);
            }
        }
        self.ledger.free(Transient, self.t.scalar()); // the seed
    }

    /// The loss's backward in fp32, then ToCopyBackward of the logits' cast: the gradient goes
    /// down to the low dtype. Returns it.
    pub(super) fn autocast_loss_backward(&mut self) -> u64 {
        let logits_grad = self.loss_backward();
        let low = self.low(self.t.batch * self.t.shape.classes as u64);
        self.ledger.alloc(Transient, low);
        self.ledger.free(Transient, logits_grad);
        low
    }

    /// AddmmBackward of layer `i` in low precision, then ToCopyBackward of its weight's and
    /// bias's casts: fp32 gradients, stolen as `.grad` at the first micro-batch, added in place
    /// and freed after. The cast the node saved goes with it, unless the cache still holds it
    /// (`weight_cached`: a checkpointed segment recomputed under autocast). Returns the input's
    /// gradient.
    pub(super) fn autocast_linear_backward(
        &mut self,
        i: usize,
        incoming: u64,
        first_micro: bool,
        weight_cached: bool,
    ) -> u64 {
        let t = self.t;
        let layer = t.layers[i];
        let input_grad = if i > 0 { self.low(t.batch * layer.inputs) } else { 0 };
        let (w, b) = (self.low(layer.weight_numel()), self.low(layer.bias_numel()));
        self.ledger.alloc(Transient, input_grad);
        self.ledger.alloc(Transient, w);
        self.ledger.alloc(Transient, b);
        self.ledger.free(Transient, incoming);
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

    /// `GradScaler::new`: the scale (fp32) and the growth tracker (int32), 0-dim each.
    pub(super) fn scaler_state(&mut self) {
        self.ledger.alloc(OptimizerState, self.full(1));
        self.ledger.alloc(OptimizerState, self.t.target.counted(4));
    }

    /// `GradScaler::step` before the optimizer's: `inv_scale` (the scale to fp64, its
    /// reciprocal, back to fp32) and `found_inf`; the unscale itself is in place, and
    /// `inv_scale` goes when `unscale_grads` returns. Returns the bytes held through the
    /// optimizer's step: `found_inf`.
    pub(super) fn unscale(&mut self) -> u64 {
        let (double, single) = (self.t.target.counted(8), self.full(1));
        self.ledger.alloc(Transient, double);
        self.ledger.alloc(Transient, double);
        self.ledger.alloc(Transient, single); // inv_scale
        self.ledger.free(Transient, 2 * double);
        self.ledger.alloc(Transient, single); // found_inf
        self.ledger.free(Transient, single); // inv_scale
        single
    }
}
