//! Mixed precision, replayed: autocast's casts and what the graph saves of them, the fp32 loss,
//! the gradients cast back to fp32, and the fp16 grad scaler (`train::amp`). Parameters,
//! gradients and optimizer state stay fp32; the activations are low precision (2 bytes).
//!
//! libtorch's CPU and CUDA autocast (`aten/src/ATen/autocast_mode.cpp`):
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

    /// The forward under autocast, head and loss included; the cache is cleared at the end.
    /// Returns the bytes the graph keeps.
    pub(super) fn autocast_forward(&mut self) -> u64 {
        let t = self.t;
        let depth = t.depth();
        let mut kept = 0;
        let mut cached_only = 0; // casts only the cache holds
        for (i, layer) in t.layers.iter().enumerate() {
            let (w, b) = (self.low(layer.weight_numel()), self.low(layer.bias_numel()));
            self.ledger.alloc(AmpCopies, b);
            self.ledger.alloc(AmpCopies, w);
            cached_only += b;
            if i == 0 {
                // The batch's cast: saved by layer 0 for its weight's gradient.
                let x = self.low(t.batch * layer.inputs);
                self.ledger.alloc(AmpCopies, x);
                kept += x;
                cached_only += w;
            } else {
                kept += w;
            }
            let out = self.low(t.batch * layer.outputs);
            self.ledger.alloc(Transient, out); // addmm
            if i < depth {
                self.ledger.alloc(Activations, out); // relu, saved
                self.ledger.free(Transient, out);
                kept += out;
            }
        }
        // cross_entropy in fp32: the logits cast up (freed at its return), then the plain loss.
        self.ledger.alloc(Transient, self.full(t.batch * t.shape.classes as u64));
        kept += self.loss();
        self.ledger.free(Transient, self.full(t.batch * t.shape.classes as u64));
        self.ledger.free(Transient, self.low(t.batch * t.shape.classes as u64)); // the logits
        self.ledger.free(AmpCopies, cached_only); // autocast exits: its cache goes
        kept
    }

    /// The backward of an autocast forward.
    pub(super) fn autocast_backward(&mut self, first_micro: bool) {
        let t = self.t;
        let logits_grad = self.loss_backward();
        // ToCopyBackward of the logits' cast: the gradient goes down to the low dtype.
        let mut incoming = self.low(t.batch * t.shape.classes as u64);
        self.ledger.alloc(Transient, incoming);
        self.ledger.free(Transient, logits_grad);
        for i in (0..t.layers.len()).rev() {
            let layer = t.layers[i];
            // AddmmBackward in low precision, then its saved tensors go.
            let input_grad = if i > 0 { self.low(t.batch * layer.inputs) } else { 0 };
            let (w, b) = (self.low(layer.weight_numel()), self.low(layer.bias_numel()));
            self.ledger.alloc(Transient, input_grad);
            self.ledger.alloc(Transient, w);
            self.ledger.alloc(Transient, b);
            self.ledger.free(Transient, incoming);
            if i > 0 {
                self.ledger.free(AmpCopies, w); // the weight's cast
            } else {
                self.ledger.free(AmpCopies, self.low(t.batch * layer.inputs)); // the batch's
            }
            // ToCopyBackward of the weight's and the bias's casts: fp32 gradients, stolen as
            // `.grad` at the first micro-batch, added in place and freed after.
            let grad_cat = if first_micro { Grads } else { Transient };
            for (low, full) in [(w, self.full(layer.weight_numel())), (b, self.full(layer.bias_numel()))] {
                self.ledger.alloc(grad_cat, full);
                self.ledger.free(Transient, low);
                if !first_micro {
                    self.ledger.free(Transient, full);
                }
            }
            incoming = input_grad;
            if i > 0 {
                // ReluBackward, in low precision.
                let a = self.low(t.batch * t.layers[i - 1].outputs);
                self.ledger.alloc(Transient, a);
                self.ledger.free(Activations, a);
                self.ledger.free(Transient, incoming);
                incoming = a;
            }
        }
        self.ledger.free(Transient, t.scalar()); // the seed
    }

    /// `GradScaler::new`: the scale (fp32) and the growth tracker (int32), 0-dim each.
    pub(super) fn scaler_state(&mut self) {
        self.ledger.alloc(OptimizerState, self.full(1));
        self.ledger.alloc(OptimizerState, self.t.target.counted(4));
    }

    /// `GradScaler::step` before the optimizer's: `inv_scale` (the scale to fp64, its
    /// reciprocal, back to fp32) and `found_inf`; the unscale itself is in place. Returns the
    /// bytes held through the optimizer's step.
    pub(super) fn unscale(&mut self) -> u64 {
        let double = self.t.target.counted(8);
        self.ledger.alloc(Transient, double);
        self.ledger.alloc(Transient, double);
        self.ledger.alloc(Transient, self.full(1));
        self.ledger.free(Transient, 2 * double);
        self.ledger.alloc(Transient, self.full(1));
        2 * self.full(1)
    }
}
