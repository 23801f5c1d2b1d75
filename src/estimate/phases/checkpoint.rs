//! Activation checkpointing, replayed: what `nn::checkpoint` allocates and frees. Its forward
//! keeps only segment boundaries (then, for `{ sequential = S }`, runs the plain units as the
//! plain forward does); its backward runs the tail's graph (the plain units, if any, and the
//! head), then recomputes each segment (last first) with grad tracking and pushes the
//! boundary's gradient through it with `(out * g).sum().backward()`.
//!
//! So, against the plain step: the forward keeps one hidden activation per checkpointed segment
//! instead of one per layer (and while a segment runs, a layer's input, output and ReLU at most),
//! and every activation of the plain units (`checkpoint_sequential`'s last segment, which PyTorch
//! does not checkpoint); the backward's peak is in the tail's backward or in the recompute of a
//! segment: the boundaries not yet used, the segment's own activations, its incoming gradient
//! and the product that carries it, then the usual AddmmBackward peak inside the segment.
//!
//! Under autocast the same, in low precision, with autocast's casts (`super::amp`): the forward
//! caches every weight's cast until its end, and the backward phase, which `train_step` also
//! runs under autocast, caches them again as the segments are recomputed, until it ends.
use std::ops::Range;

use super::Sim;
use crate::estimate::ledger::Category::{Activations, AmpCopies, Transient};
use crate::estimate::ledger::Held;
use crate::estimate::Target;
// The trainer's own cut, so that the replay recomputes the segments the trainer does.
use crate::spec::Segments;

impl Sim<'_> {
    /// `checkpoint::forward`: each segment under no_grad, keeping its output (the next
    /// segment's input; the last one is the tail's), then the plain units, the head and the
    /// loss with grad tracking. Returns the bytes kept for backward.
    pub(super) fn checkpointed_forward(&mut self, cut: &Segments) -> u64 {
        let mut kept = 0;
        let mut cache_only = Vec::new(); // under autocast: the casts, until autocast exits
        for segment in &cut.checkpointed {
            // Under no_grad nothing is saved: `h = linear(h)` frees the previous `h` (unless it
            // is the segment's input, which is kept), `h = relu(h)` the Linear's output, and
            // the batch's cast goes as soon as the Linear has read it.
            let mut previous = 0;
            for i in segment.clone() {
                let batch_cast = self.cast_if_autocast(i, &mut cache_only);
                let a = self.act(i);
                self.ledger.alloc(Transient, a); // linear
                self.ledger.free(Transient, previous);
                self.ledger.free(AmpCopies, batch_cast);
                self.ledger.alloc(Transient, a); // relu
                self.ledger.free(Transient, a); // the linear's output
                previous = a;
            }
            // The segment's output is kept, as the next segment's input or the tail's.
            self.ledger.recategorize(Transient, Activations, previous);
            kept += previous;
        }
        // The plain units, as `Sim::forward` runs them: each ReLU output saved.
        kept += self.plain_units_forward(cut.plain.clone(), &mut cache_only);
        kept += self.head_and_loss(&mut cache_only);
        self.exit_autocast(cache_only); // autocast exits: its cache goes
        kept
    }

    /// `Checkpointed::backward`.
    pub(super) fn checkpointed_backward(&mut self, cut: &Segments, first_micro: bool) {
        let t = self.t;
        let depth = t.depth();
        // The tail's graph, as in the plain backward: the head, then the plain units last
        // first; the gradient at the tail's input is left in its `.grad`.
        let (seed, logits_grad) = self.loss_backward();
        let mut upstream = self.linear_backward(depth, logits_grad, first_micro, false);
        for i in cut.plain.clone().rev() {
            upstream = self.relu_backward(i, upstream);
            upstream = self.linear_backward(i, upstream, first_micro, false);
        }
        self.ledger.release(seed);
        let Some(last) = cut.checkpointed.last() else {
            return;
        };
        // `take_head_grad` empties the tail's input (the last boundary) in place; its
        // gradient lives on as the upstream gradient of the last segment.
        self.ledger.free(Activations, self.act(last.end - 1));
        // Under autocast (which `train_step` keeps on through the backward phase, so that the
        // recompute runs in the same precision) the recompute's casts are cached again, until
        // the phase ends.
        let mut cache = Vec::new();
        for segment in cut.checkpointed.iter().rev() {
            upstream = self.backprop_segment(segment.clone(), upstream, first_micro, &mut cache);
        }
        self.exit_autocast(cache);
    }

    /// The buffer a CPU `sum` of `numel` elements to one number takes on the way: one partial
    /// result (of `elt` bytes) per thread, when libtorch splits the work (`two_pass_reduction`
    /// in `TensorIteratorReduce.cpp`: at least `GRAIN_SIZE`, 32768, elements and more than one
    /// thread). CUDA's reductions are not modelled.
    fn sum_buffer(&self, numel: u64, elt: u64) -> u64 {
        let split = self.t.target == Target::Cpu && self.threads > 1 && numel >= 32_768;
        if split {
            self.threads as u64 * elt
        } else {
            0
        }
    }

    /// `backprop_segment`: recompute with grad tracking, then backward from `(out * g).sum()`.
    /// Returns the gradient at the segment's input (0 for the first segment, whose input is the
    /// batch).
    fn backprop_segment(
        &mut self,
        layers: Range<usize>,
        upstream: Held,
        first_micro: bool,
        cache: &mut Vec<u64>,
    ) -> Held {
        let last = layers.end - 1;
        // The recompute saves what a plain forward saves: every ReLU output of the segment
        // (and under autocast the batch's cast at layer 0; the weights' casts are in the cache).
        for i in layers.clone() {
            self.cast_if_autocast(i, cache);
            let a = self.act(i);
            self.ledger.alloc(Transient, a); // linear
            self.ledger.alloc(Activations, a); // relu, saved
            self.ledger.free(Transient, a);
        }
        // inner = (out * upstream).sum(): the product is freed at once; MulBackward saves
        // `upstream` (the factor that needs no grad), ReluBackward saves `out`. Both, and the
        // sum and its seed, are of the activations' dtype.
        let (out, scalar) = (self.act(last), self.act_scalar());
        let product = self.ledger.hold(Transient, out);
        let inner = self.ledger.hold(Transient, scalar);
        let buffer = self.sum_buffer(self.t.batch * self.t.layers[last].outputs, scalar);
        let buffer = self.ledger.hold(Transient, buffer);
        self.ledger.release(buffer);
        self.ledger.release(product);
        // inner.backward(): the seed; SumBackward expands it (a view); MulBackward makes
        // `grad * upstream` and releases `upstream`.
        let seed = self.ledger.hold(Transient, scalar);
        let mut incoming = self.ledger.hold(Transient, out);
        self.ledger.release(upstream);
        for i in layers.clone().rev() {
            incoming = self.relu_backward(i, incoming);
            // Under autocast the weights' casts stay in the cache until the phase ends.
            incoming = self.linear_backward(i, incoming, first_micro, true);
        }
        // The seed goes when inner.backward() returns; on return from the segment, `inner` goes,
        // and the saved input (a boundary, or the caller's batch); its gradient lives on in the
        // handle returned.
        self.ledger.release(seed);
        self.ledger.release(inner);
        if layers.start > 0 {
            self.ledger.free(Activations, self.act(layers.start - 1));
        }
        incoming
    }
}
