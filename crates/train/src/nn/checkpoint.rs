//! Activation checkpointing for any [`Model`]: PyTorch's `checkpoint_sequential` over the
//! model's units, written by hand because tch has no custom autograd `Function`.
//!
//! The units (an MLP's hidden layers; a CNN's stem and blocks; a Transformer's embedding and
//! encoder layers) are cut as [`Segments`] says: checkpointed segments from the first unit, then
//! possibly some units that run plain. `checkpoint = K` and `"sqrt"` checkpoint every unit, in
//! segments of `segment_len` units (the last one may be shorter). `{ sequential = S }` cuts as
//! PyTorch's `checkpoint_sequential(units, S, x)` does: `units / S` units a segment, the first
//! `S - 1` segments checkpointed and the last one (the rest of the units) not, as its source
//! says, "the last chunk has to be non-volatile"; with `S = 1` nothing is checkpointed, and the
//! step takes the plain path instead.
//!
//! - **Kept** between forward and backward: each checkpointed segment's input (the batch `x` for
//!   the first, then the output of the segment before), and the input of the plain tail (the
//!   plain units, then the head). The forward runs every segment under no_grad, so none of the
//!   activations inside a segment are kept; the next op uses one and it is freed. The plain
//!   units keep what a forward without checkpointing keeps.
//! - **Recomputed** in backward: each segment, last first, from its saved input with grad
//!   tracking on. The gradient at its output (from the segment after it, or from the tail) is
//!   pushed through it with `(out * g).sum().backward()`, because `backward` only starts from a
//!   scalar and the gradient of `<out, g>` with respect to `out` is `g`. The parameters' grads
//!   accumulate in their `.grad`, and the gradient at the segment's input becomes the next `g`.
//! - **Random draws** (a Transformer's dropout) are drawn again alike: a segment keeps the
//!   generator's state from before its forward, and its recompute runs from that state and then
//!   puts the generator back as it found it, as `torch.utils.checkpoint`'s `preserve_rng_state`
//!   does. A model that draws nothing keeps no state (a TorchScript module, whose ops oomlab
//!   does not read, is taken to draw).
//!
//! The trade: with `n` units and `s` segments, a plain forward keeps every unit's activations
//! for backward and a checkpointed one keeps `s` boundaries, plus one segment's worth while it is
//! recomputed, so segments of about `sqrt(n)` units keep about `2 sqrt(n)` unit outputs. It costs
//! a second forward through every checkpointed unit: about a third more compute per step, since
//! backward costs about twice a forward.
//!
//! The tail (the plain units, if any, then the head and the loss) is not checkpointed: the
//! head's recompute would save only its output (the logits, `batch x classes`, small next to an
//! activation), and the tail's backward is where the gradient at the last boundary comes from,
//! so it simply runs with grad tracking from the last segment's output, detached so that the
//! graph stops there.
//!
//! Everything is freed as soon as backward is done with it: each saved input after its segment,
//! each gradient once the node that needs it has run, and the tail's input and its gradient
//! right after the tail's backward (the caller's graph would otherwise keep them to the end).
//!
//! Autocast is left as the caller set it: a caller that keeps an autocast guard alive around
//! both calls gets the recompute under autocast too, in the same precision as the first pass, as
//! PyTorch's checkpoint does.
use std::ops::Range;

use tch::Device;

use super::ops::{Ops, Result};
use super::Model;
use crate::spec::Segments;

/// A segment of units and the input it was first run on.
struct Segment<T> {
    input: T,
    units: Range<usize>,
    /// Whether to make `input` a leaf that requires grad in the recompute, to read the gradient
    /// at the segment's input. False for the first segment, whose input is the batch: the
    /// backward ends there, and `x` is used as it is, so it gets a grad only if it asked for
    /// one, as in the plain path.
    wants_input_grad: bool,
    /// The generators' states before the segment's forward, when the model draws random numbers.
    rng: Option<RngStates<T>>,
}

/// A forward pass that kept only segment boundaries, waiting for its backward.
pub struct Checkpointed<T> {
    /// Handles on the model's own tensors (not copies): the recompute builds its graph on them,
    /// so their grads land in the model's `.grad`.
    model: Model<T>,
    segments: Vec<Segment<T>>,
    /// The last segment's output, detached and requiring grad: backward through the tail (the
    /// plain units and the head) stops here and leaves the gradient at the last boundary in its
    /// `.grad`. With no checkpointed segment it is the batch itself.
    head_input: T,
    pub loss: T,
}

/// Forward with only segment boundaries kept, cut as `cut` says: its checkpointed segments
/// (each of at least one unit, one after another from unit 0), then its plain units to the last.
pub fn forward<T: Ops>(model: &Model<T>, x: &T, y: &T, cut: &Segments) -> Result<Checkpointed<T>> {
    let mut next = 0;
    for r in &cut.checkpointed {
        if r.is_empty() || r.start != next {
            return Err(tch::TchError::Torch("checkpoint: a segment needs at least one unit".into()));
        }
        next = r.end;
    }
    if cut.plain.start != next || cut.plain.end != model.units() {
        return Err(tch::TchError::Torch(format!(
            "checkpoint: the segments and plain units {:?} do not cover the model's {} units",
            cut.plain,
            model.units()
        )));
    }
    let (segments, last) = run_segments(model, x, cut.checkpointed.clone())?;
    let head_input = if segments.is_empty() {
        // No segment: the tail reads the batch, which must stay as the caller made it.
        last
    } else {
        last.f_detach()?.f_set_requires_grad(true)?
    };
    // The plain units keep their activations for backward, as a forward without checkpointing.
    let h = model.forward_units(head_input.shallow_clone(), cut.plain.clone())?;
    let logits = model.head(h)?;
    let loss = model.loss(&logits, y)?;
    Ok(Checkpointed { model: model.handles(), segments, head_input, loss })
}

impl<T: Ops> Checkpointed<T> {
    /// Backward from `to_backprop` (a scalar computed from `self.loss`), recomputing each
    /// segment. Accumulates into the parameters' `.grad`, like `backward()`.
    pub fn backward(self, to_backprop: &T) -> Result<()> {
        let Checkpointed { model, segments, head_input, loss } = self;
        // The tail's graph (the plain units and the head): their grads, and the gradient at the
        // last boundary.
        to_backprop.backward()?;
        drop(loss);
        if segments.is_empty() {
            return Ok(());
        }
        let mut upstream = take_head_grad(head_input)?;
        // The recompute must record a graph even if the caller runs backward under no_grad.
        let _grad = T::enable_grad();
        // Last segment first; each saved input is dropped as soon as its segment is done, and
        // the earlier ones stay in the iterator until their turn.
        for segment in segments.into_iter().rev() {
            match backprop_segment(&model, segment, upstream)? {
                Some(g) => upstream = g,
                None => break,
            }
        }
        Ok(())
    }

    /// The segment boundaries held between forward and backward: each segment's input (the
    /// first is the batch itself), then the tail's.
    pub fn boundaries(&self) -> impl Iterator<Item = &T> {
        self.segments.iter().map(|s| &s.input).chain(std::iter::once(&self.head_input))
    }

    /// How many segment boundaries are held between forward and backward: one input per
    /// segment (the first is the batch `x` itself) plus the tail's input (the last segment's
    /// output). With no segment, just the tail's input, which is `x`. The plain units' own
    /// activations are not counted.
    pub fn saved_tensors(&self) -> usize {
        self.segments.len() + 1
    }
}

/// Runs the segments under no_grad, keeping each one's input; returns them and the last output
/// (`x` when there is no segment).
fn run_segments<T: Ops>(model: &Model<T>, x: &T, ranges: Vec<Range<usize>>) -> Result<(Vec<Segment<T>>, T)> {
    // No graph: inside a segment each activation is freed once the next op has read it.
    // A guard, so grad mode comes back even on a panic.
    let _no_grad = T::no_grad();
    let device = x.device();
    let mut h = x.shallow_clone();
    let mut segments = Vec::with_capacity(ranges.len());
    for (i, units) in ranges.into_iter().enumerate() {
        let rng = if model.draws_random() { Some(RngStates::save(device)?) } else { None };
        let out = model.forward_units(h.shallow_clone(), units.clone())?;
        segments.push(Segment { input: h, units, wants_input_grad: i > 0, rng });
        h = out;
    }
    Ok((segments, h))
}

/// Recomputes `segment` with grad tracking and pushes `upstream` (the gradient at its output)
/// through it. Returns the gradient at its input, or `None` for the first segment. Takes
/// `upstream` by value so that it is freed as soon as backward has used it.
fn backprop_segment<T: Ops>(model: &Model<T>, segment: Segment<T>, upstream: T) -> Result<Option<T>> {
    let Segment { input, units, wants_input_grad, rng } = segment;
    // The saved input was made under no_grad, so it is already a leaf with no history.
    let input = if wants_input_grad { input.f_set_requires_grad(true)? } else { input };
    let out = match rng {
        None => model.forward_units(input.shallow_clone(), units)?,
        Some(stashed) => {
            // torch.random.fork_rng: the generators as they are now, put back after the
            // recompute has drawn from the forward's states.
            let now = RngStates::<T>::save(input.device())?;
            stashed.restore()?;
            drop(stashed);
            let out = model.forward_units(input.shallow_clone(), units);
            now.restore()?;
            out?
        }
    };
    // <out, upstream>: its gradient with respect to `out` is `upstream`. The product is a
    // temporary, freed before backward runs. `out` and `upstream` are held by the graph only
    // (dropping our handles frees each as soon as the node that saved it has run).
    let inner = out.f_mul(&upstream)?.f_sum()?;
    drop((out, upstream));
    inner.backward()?;
    if wants_input_grad {
        grad_of(&input).map(Some)
    } else {
        Ok(None)
    }
}

/// The random generators' states: the CPU's always (`torch.get_rng_state()`), and a CUDA
/// device's too when the segment's input is on one.
struct RngStates<T> {
    cpu: T,
    cuda: Option<(Device, T)>,
}

impl<T: Ops> RngStates<T> {
    fn save(device: Device) -> Result<Self> {
        let cpu = T::rng_state(Device::Cpu)?;
        let cuda = match device {
            Device::Cuda(_) => Some((device, T::rng_state(device)?)),
            _ => None,
        };
        Ok(RngStates { cpu, cuda })
    }

    fn restore(&self) -> Result<()> {
        T::set_rng_state(Device::Cpu, &self.cpu)?;
        if let Some((device, state)) = &self.cuda {
            T::set_rng_state(*device, state)?;
        }
        Ok(())
    }
}

/// The gradient that backward left at the tail's input; frees the input and its `.grad`.
///
/// Dropping our handle would free neither: the caller still holds `to_backprop`, and its graph
/// keeps the head's input alive, `.grad` included, through the node that accumulated that
/// gradient, until the caller drops it. So both are emptied in place (`set_()`, under no_grad
/// because the input is a leaf that requires grad); the gradient's storage lives on only in the
/// returned handle, which backward frees as soon as it has used it. That is two activations
/// less for the whole backward, the recompute's peak included.
fn take_head_grad<T: Ops>(mut head_input: T) -> Result<T> {
    let mut grad = grad_of(&head_input)?;
    let upstream = grad.f_detach()?;
    let _no_grad = T::no_grad();
    grad.set_empty()?;
    head_input.set_empty()?;
    Ok(upstream)
}

/// The gradient a backward left in `t.grad`.
fn grad_of<T: Ops>(t: &T) -> Result<T> {
    let g = t.f_grad()?;
    if g.defined() {
        Ok(g)
    } else {
        Err(tch::TchError::Torch("checkpoint: backward left no gradient at a segment boundary".into()))
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;
    use crate::nn::{mlp::Mlp, CPU_F32};
    use crate::probe::{CpuProbe, MemoryProbe};
    use crate::spec::{segment_ranges, Checkpoint};
    use tch::Tensor;

    const CLASSES: usize = 4;

    /// `forward` with every unit checkpointed, in segments of `len`.
    fn forward_every(
        model: &Model<Tensor>,
        x: &Tensor,
        y: &Tensor,
        len: usize,
    ) -> Result<Checkpointed<Tensor>> {
        forward(model, x, y, &Segments::every(model.units(), len))
    }

    /// Two models with the same weights but their own tensors and grads. The weights are
    /// copied rather than re-drawn from a seed: tests run in parallel and share the generator.
    fn twins(features: usize, width: usize, depth: usize) -> (Model<Tensor>, Model<Tensor>) {
        let make =
            || Model::<Tensor>::Mlp(Mlp::new(features, &vec![width; depth], CLASSES, CPU_F32).unwrap());
        let (a, b) = (make(), make());
        tch::no_grad(|| {
            for (p, q) in a.parameters().into_iter().zip(b.parameters()) {
                q.shallow_clone().copy_(p);
            }
        });
        (a, b)
    }

    fn batch(features: usize, n: usize) -> (Tensor, Tensor) {
        let x = Tensor::randn([n as i64, features as i64], (Kind::Float, Device::Cpu));
        let y = Tensor::randint(CLASSES as i64, [n as i64], (Kind::Int64, Device::Cpu));
        (x, y)
    }

    /// The plain path: loss with the whole graph kept, then `to_backprop(loss).backward()`.
    fn plain_step(model: &Model<Tensor>, x: &Tensor, y: &Tensor, scale: f64) -> f64 {
        let loss = model.loss(&model.forward(x).unwrap(), y).unwrap();
        (&loss * scale).backward();
        loss.double_value(&[])
    }

    fn checkpointed_step(model: &Model<Tensor>, x: &Tensor, y: &Tensor, scale: f64, len: usize) -> f64 {
        let c = forward_every(model, x, y, len).unwrap();
        let value = c.loss.double_value(&[]);
        let to_backprop = &c.loss * scale;
        c.backward(&to_backprop).unwrap();
        value
    }

    /// The largest |a.grad - b.grad| over all parameters; panics if either has no grad.
    fn max_grad_diff(a: &Model<Tensor>, b: &Model<Tensor>) -> f64 {
        a.parameters()
            .into_iter()
            .zip(b.parameters())
            .enumerate()
            .map(|(i, (p, q))| {
                let (gp, gq) = (p.grad(), q.grad());
                assert!(gp.defined() && gq.defined(), "parameter {i} has no grad");
                (gp.to_kind(Kind::Float) - gq.to_kind(Kind::Float)).abs().max().double_value(&[])
            })
            .fold(0.0, f64::max)
    }

    /// Gradients of one fresh step on each twin, compared relatively. `step_peak` may have retried
    /// a step (when another test's allocations moved the process-wide count), accumulating into
    /// one twin's grads, so they are zeroed first.
    fn fresh_grad_rel_diff(
        plain: &Model<Tensor>,
        ckpt: &Model<Tensor>,
        x: &Tensor,
        y: &Tensor,
        len: usize,
    ) -> f64 {
        for p in plain.parameters().into_iter().chain(ckpt.parameters()) {
            let _ = p.grad().zero_();
        }
        plain_step(plain, x, y, 1.0);
        checkpointed_step(ckpt, x, y, 1.0, len);
        max_grad_rel_diff(plain, ckpt)
    }

    /// The largest gradient difference relative to the largest gradient: fp32 matmuls may split
    /// their sums differently from one call to the next (threads under load), so deep, wide
    /// cases compare relatively.
    fn max_grad_rel_diff(a: &Model<Tensor>, b: &Model<Tensor>) -> f64 {
        let scale =
            a.parameters().into_iter().map(|p| p.grad().abs().max().double_value(&[])).fold(0.0, f64::max);
        max_grad_diff(a, b) / scale.max(f64::MIN_POSITIVE)
    }

    #[test]
    fn segments_cover_the_hidden_layers_in_order() {
        let _alone = crate::probe::cpu_alone();
        assert_eq!(segment_ranges(5, 2), vec![0..2, 2..4, 4..5]);
        assert_eq!(segment_ranges(5, 5), vec![0..5]);
        assert_eq!(segment_ranges(5, 9), vec![0..5]);
        assert_eq!(segment_ranges(0, 3), Vec::<Range<usize>>::new());
    }

    #[test]
    fn gradients_and_loss_equal_the_plain_path() {
        let _alone = crate::probe::cpu_alone();
        let (depth, width) = (5, 32);
        let sqrt = Checkpoint::Sqrt.segment_len(depth).unwrap();
        for len in [1, 2, 3, sqrt, depth, depth + 2] {
            let (plain, ckpt) = twins(16, width, depth);
            let (x, y) = batch(16, 8);
            let plain_loss = plain_step(&plain, &x, &y, 1.0);
            let ckpt_loss = checkpointed_step(&ckpt, &x, &y, 1.0, len);
            assert_eq!(plain_loss, ckpt_loss, "segment_len {len}");
            let diff = max_grad_diff(&plain, &ckpt);
            assert!(diff < 1e-6, "segment_len {len}: grads differ by {diff}");
            assert!(!x.grad().defined(), "the batch got a grad it did not ask for");
        }
    }

    #[test]
    fn grads_accumulate_over_micro_batches() {
        let _alone = crate::probe::cpu_alone();
        let (plain, ckpt) = twins(16, 32, 5);
        let micro = [batch(16, 8), batch(16, 8)];
        // Two micro-batches, each loss halved and scaled like a grad scaler would.
        let scale = 0.5 * 1024.0;
        for (x, y) in &micro {
            plain_step(&plain, x, y, scale);
        }
        let first: Vec<Tensor> = {
            let (x, y) = &micro[0];
            checkpointed_step(&ckpt, x, y, scale, 2);
            ckpt.parameters().into_iter().map(|p| p.grad().copy()).collect()
        };
        let (x, y) = &micro[1];
        checkpointed_step(&ckpt, x, y, scale, 2);
        let diff = max_grad_diff(&plain, &ckpt);
        assert!(diff < 1e-6 * scale, "accumulated grads differ by {diff}");
        // And it really accumulated: the second call changed every grad.
        for (p, g1) in ckpt.parameters().into_iter().zip(&first) {
            assert!((p.grad() - g1).abs().max().double_value(&[]) > 0.0);
        }
    }

    #[test]
    fn keeps_one_tensor_per_segment_plus_the_head_input() {
        let _alone = crate::probe::cpu_alone();
        let depth = 8;
        let (model, _) = twins(16, 32, depth);
        let (x, y) = batch(16, 8);
        // Counted the same way, the plain graph keeps x and every hidden layer's output.
        let plain_saved = depth + 1;
        for (len, segments) in [(1, 8), (2, 4), (3, 3), (8, 1)] {
            let c = forward_every(&model, &x, &y, len).unwrap();
            assert_eq!(c.saved_tensors(), segments + 1, "segment_len {len}");
            assert_eq!(c.segments.len(), segments);
            // One layer a segment keeps every boundary, which is all the plain path keeps
            // (ReLU saves its output, the next Linear the same tensor); longer ones keep fewer.
            assert_eq!(c.saved_tensors() == plain_saved, len == 1, "segment_len {len}");
            let loss = c.loss.shallow_clone();
            c.backward(&loss).unwrap();
        }
        let sqrt = Checkpoint::Sqrt.segment_len(depth).unwrap();
        let c = forward_every(&model, &x, &y, sqrt).unwrap();
        assert!(2 * c.saved_tensors() < plain_saved, "sqrt keeps {} of {plain_saved}", c.saved_tensors());
    }

    /// `checkpoint_sequential`'s cut: `segments - 1` checkpointed segments of `units /
    /// segments` units, then the rest plain; one segment is no checkpointing at all.
    #[test]
    fn sequential_cuts_as_checkpoint_sequential() {
        let _alone = crate::probe::cpu_alone();
        let cut = |s, units| Checkpoint::Sequential(s).segments(units);
        let seq = |ranges: Vec<Range<usize>>, plain| Some(Segments { checkpointed: ranges, plain });
        assert_eq!(cut(1, 8), None);
        assert_eq!(cut(2, 8), seq(segment_ranges(4, 4), 4..8));
        assert_eq!(cut(3, 8), seq(vec![0..2, 2..4], 4..8));
        assert_eq!(cut(4, 8), seq(vec![0..2, 2..4, 4..6], 6..8));
        assert_eq!(cut(8, 8), seq((0..7).map(|i| i..i + 1).collect(), 7..8));
        assert_eq!(cut(3, 5), seq(vec![0..1, 1..2], 2..5));
        // More segments than units (refused by the spec) is taken as one a unit.
        assert_eq!(cut(9, 8), cut(8, 8));
        assert_eq!(cut(2, 0), None);
        assert_eq!(Checkpoint::Sequential(3).segment_len(8), Some(2));
        assert_eq!(Checkpoint::Sequential(1).segment_len(8), None);
    }

    #[test]
    fn sequential_gradients_and_loss_equal_the_plain_path() {
        let _alone = crate::probe::cpu_alone();
        let (depth, width) = (5, 32);
        for segments in 2..=depth {
            let cut = Checkpoint::Sequential(segments).segments(depth).unwrap();
            let (plain, ckpt) = twins(16, width, depth);
            let (x, y) = batch(16, 8);
            let plain_loss = plain_step(&plain, &x, &y, 1.0);
            let c = forward(&ckpt, &x, &y, &cut).unwrap();
            let ckpt_loss = c.loss.double_value(&[]);
            let to_backprop = &c.loss * 1.0;
            c.backward(&to_backprop).unwrap();
            assert_eq!(plain_loss, ckpt_loss, "sequential {segments}");
            let diff = max_grad_diff(&plain, &ckpt);
            assert!(diff < 1e-6, "sequential {segments}: grads differ by {diff}");
            assert!(!x.grad().defined(), "the batch got a grad it did not ask for");
        }
        // A cut that leaves a unit out, or an empty segment, is refused.
        let (model, _) = twins(16, width, depth);
        let (x, y) = batch(16, 8);
        let short = Segments { checkpointed: segment_ranges(2, 2), plain: 2..4 };
        assert!(forward(&model, &x, &y, &short).is_err());
        let gap = Segments { checkpointed: vec![0..2, 3..4], plain: 4..5 };
        assert!(forward(&model, &x, &y, &gap).is_err());
    }

    /// The checkpointed segments keep their inputs only; the plain tail keeps every activation,
    /// as the plain path does: `segments - 1` boundaries plus the tail's units, against `depth`.
    #[test]
    fn sequential_keeps_its_boundaries_and_the_plain_tails_activations() {
        let (depth, width, batch_size) = (8, 256, 64);
        let probe = CpuProbe::new(None).unwrap();
        let (plain, ckpt) = twins(width, width, depth);
        let (x, y) = batch(width, batch_size);
        let activation = (batch_size * width * 4) as u64;
        let plain_held = held_by(&probe, || plain.loss(&plain.forward(&x).unwrap(), &y).unwrap());
        for (segments, tail) in [(2, 4), (3, 4), (4, 2), (8, 1)] {
            let cut = Checkpoint::Sequential(segments).segments(depth).unwrap();
            assert_eq!(cut.plain.len(), tail, "sequential {segments}");
            let c = forward(&ckpt, &x, &y, &cut).unwrap();
            assert_eq!((c.segments.len(), c.saved_tensors()), (segments - 1, segments));
            let loss = c.loss.shallow_clone();
            c.backward(&loss).unwrap();
            let held = held_by(&probe, || forward(&ckpt, &x, &y, &cut).unwrap());
            // x is the caller's: the boundaries after it, then the tail's activations.
            let kept = (segments - 1 + tail) as u64;
            assert_eq!(plain_held - held, (depth as u64 - kept) * activation, "sequential {segments}");
        }
        let rel = {
            // The checkpointed twin's grads hold the loop's steps; the plain one has none yet.
            for p in ckpt.parameters() {
                let _ = p.grad().zero_();
            }
            plain_step(&plain, &x, &y, 1.0);
            let cut = Checkpoint::Sequential(4).segments(depth).unwrap();
            let c = forward(&ckpt, &x, &y, &cut).unwrap();
            let loss = c.loss.shallow_clone();
            c.backward(&loss).unwrap();
            max_grad_rel_diff(&plain, &ckpt)
        };
        assert!(rel < 1e-5, "gradients differ by {rel} of the largest");
        drop(probe);
    }

    #[test]
    fn depth_zero_has_nothing_to_checkpoint() {
        let _alone = crate::probe::cpu_alone();
        let (plain, ckpt) = twins(16, 32, 0);
        let (x, y) = batch(16, 8);
        let c = forward_every(&ckpt, &x, &y, 3).unwrap();
        assert_eq!(c.saved_tensors(), 1);
        let loss = c.loss.shallow_clone();
        c.backward(&loss).unwrap();
        let plain_loss = plain_step(&plain, &x, &y, 1.0);
        assert_eq!(plain_loss, loss.double_value(&[]));
        assert!(max_grad_diff(&plain, &ckpt) < 1e-6);
        assert!(!x.requires_grad(), "the batch was made to require grad");
    }

    #[test]
    fn zero_length_segments_are_refused() {
        let _alone = crate::probe::cpu_alone();
        let (model, _) = twins(16, 32, 2);
        let (x, y) = batch(16, 8);
        assert!(forward_every(&model, &x, &y, 0).is_err());
    }

    #[test]
    fn backward_under_no_grad_still_recomputes() {
        let _alone = crate::probe::cpu_alone();
        let (plain, ckpt) = twins(16, 32, 4);
        let (x, y) = batch(16, 8);
        plain_step(&plain, &x, &y, 1.0);
        let c = forward_every(&ckpt, &x, &y, 2).unwrap();
        let loss = c.loss.shallow_clone();
        {
            let _no_grad = tch::no_grad_guard();
            c.backward(&loss).unwrap();
            // And grad mode is off again afterwards.
            let leaf = Tensor::from(1.0f32).set_requires_grad(true);
            assert!(!(&leaf * 2.0).requires_grad(), "backward left grad mode on");
        }
        assert!(max_grad_diff(&plain, &ckpt) < 1e-6);
    }

    /// CPU autocast (oomlab's own switch; tch's only knows CUDA), off again on drop. In fp16,
    /// not CPU's usual bf16: bf16 matmuls on CPU (oneDNN) allocate through
    /// `Allocator::raw_allocate`, which oomlab's counting allocator fails (its data pointer is
    /// not its context), and a CpuProbe test in this process may have installed it for good.
    struct CpuAutocast;

    impl CpuAutocast {
        fn on() -> Self {
            crate::ffi::autocast_set(0, true, Kind::Half).unwrap();
            CpuAutocast
        }
    }

    impl Drop for CpuAutocast {
        fn drop(&mut self) {
            crate::ffi::autocast_set(0, false, Kind::Float).unwrap();
        }
    }

    #[test]
    fn recompute_runs_under_the_callers_autocast() {
        let _alone = crate::probe::cpu_alone();
        let (plain, ckpt) = twins(16, 32, 5);
        let (x, y) = batch(16, 8);
        let _autocast = CpuAutocast::on();
        let plain_loss = plain_step(&plain, &x, &y, 1024.0);
        let c = forward_every(&ckpt, &x, &y, 2).unwrap();
        // The boundaries are kept in the autocast precision, so autocast really was on.
        assert_eq!(c.head_input.kind(), Kind::Half);
        assert!(c.segments[1..].iter().all(|s| s.input.kind() == Kind::Half));
        let ckpt_loss = c.loss.double_value(&[]);
        let to_backprop = &c.loss * 1024.0;
        c.backward(&to_backprop).unwrap();
        assert_eq!(plain_loss, ckpt_loss);
        // Same fp16 ops on the same values: the grads agree (a recompute outside autocast would
        // not even run: the saved boundaries are fp16 and the weights fp32).
        let diff = max_grad_diff(&plain, &ckpt);
        assert!(diff < 1e-3, "grads under autocast differ by {diff}");
    }

    /// Bytes held by whatever `f` returns, measured as the allocator's growth while it is alive.
    /// Other tests in this process allocate too once the counting allocator is installed, so a
    /// measurement is only trusted if memory is back at its baseline once the result is dropped;
    /// otherwise it is taken again.
    fn held_by<T>(probe: &CpuProbe, f: impl Fn() -> T) -> u64 {
        let allocated = || probe.snapshot().unwrap().memory_allocated;
        for _ in 0..20 {
            let before = allocated();
            let kept = f();
            let during = allocated();
            drop(kept);
            if allocated() == before && during >= before {
                return during - before;
            }
        }
        panic!("memory never settled back to its baseline: something else is allocating");
    }

    /// The peak of `step` above what was allocated before it, once `step` leaves memory as it
    /// found it (the grads must already exist, so that it only accumulates into them); retried
    /// like `held_by`.
    fn step_peak(probe: &CpuProbe, step: impl Fn()) -> u64 {
        let allocated = || probe.snapshot().unwrap().memory_allocated;
        for _ in 0..20 {
            let before = allocated();
            probe.reset_peak().unwrap();
            step();
            if allocated() == before {
                return probe.snapshot().unwrap().max_memory_allocated - before;
            }
        }
        panic!("memory never settled back to its baseline: something else is allocating");
    }

    /// Peaks of one plain and one checkpointed training step, each after a first step that
    /// allocated the grads.
    fn step_peaks(
        probe: &CpuProbe,
        plain: &Model<Tensor>,
        ckpt: &Model<Tensor>,
        x: &Tensor,
        y: &Tensor,
        len: usize,
    ) -> (u64, u64) {
        plain_step(plain, x, y, 1.0);
        checkpointed_step(ckpt, x, y, 1.0, len);
        let plain_peak = step_peak(probe, || {
            plain_step(plain, x, y, 1.0);
        });
        let ckpt_peak = step_peak(probe, || {
            checkpointed_step(ckpt, x, y, 1.0, len);
        });
        (plain_peak, ckpt_peak)
    }

    #[test]
    fn checkpointing_holds_less_memory_after_forward() {
        let (depth, width, batch_size, len) = (8, 256, 64, 2);
        let probe = CpuProbe::new(None).unwrap();
        // Made after the probe, so the counting allocator sees (and frees) them.
        let (plain, ckpt) = twins(width, width, depth);
        let (x, y) = batch(width, batch_size);

        let plain_held = held_by(&probe, || plain.loss(&plain.forward(&x).unwrap(), &y).unwrap());
        let ckpt_held = held_by(&probe, || forward_every(&ckpt, &x, &y, len).unwrap());

        // A hidden activation is batch x width floats. The plain graph keeps all `depth` of
        // them; checkpointing keeps `saved_tensors()` minus x, which is not new. The rest (the
        // logits, the loss's saved log-softmax) is the same on both paths.
        let activation = (batch_size * width * 4) as u64;
        let saved = forward_every(&ckpt, &x, &y, len).unwrap().saved_tensors();
        let dropped = depth - (saved - 1);
        let expected_saving = dropped as u64 * activation;
        eprintln!(
            "after forward: plain {plain_held} B, checkpointed {ckpt_held} B, saving {} B \
             (expected {expected_saving} B = {dropped} activations of {activation} B)",
            plain_held.saturating_sub(ckpt_held),
        );
        assert!(
            ckpt_held + expected_saving / 2 < plain_held,
            "checkpointing held {ckpt_held} B against {plain_held} B plain, expected about \
             {expected_saving} B less"
        );

        // The whole step's peak, for the record only: here a layer's weights (256 KiB) outweigh
        // its activation (64 KiB), and the next test asserts the peak where activations weigh.
        let (plain_peak, ckpt_peak) = step_peaks(&probe, &plain, &ckpt, &x, &y, len);
        eprintln!("step peak above the warm grads: plain {plain_peak} B, checkpointed {ckpt_peak} B");
        let rel = fresh_grad_rel_diff(&plain, &ckpt, &x, &y, len);
        assert!(rel < 1e-5, "gradients differ by {rel} of the largest");
        drop(probe);
    }

    #[test]
    fn checkpointing_lowers_the_step_peak_when_activations_dominate() {
        let (depth, width, batch_size) = (16, 128, 1024);
        let len = Checkpoint::Sqrt.segment_len(depth).unwrap();
        let probe = CpuProbe::new(None).unwrap();
        let (plain, ckpt) = twins(width, width, depth);
        let (x, y) = batch(width, batch_size);
        let (plain_peak, ckpt_peak) = step_peaks(&probe, &plain, &ckpt, &x, &y, len);

        // The plain step peaks with all `depth` hidden activations alive; the checkpointed one
        // with the boundaries after x (segments - 1) and one recomputed segment (len). Both have
        // the same few transients (a Linear's output before its ReLU, gradients in flight).
        let activation = (batch_size * width * 4) as u64;
        let segments = depth.div_ceil(len);
        let spared = depth - (segments - 1) - len;
        let expected_saving = spared as u64 * activation;
        eprintln!(
            "step peak above the warm grads: plain {plain_peak} B, checkpointed {ckpt_peak} B, \
             saving {} B (expected about {expected_saving} B = {spared} activations of {activation} B)",
            plain_peak.saturating_sub(ckpt_peak)
        );
        // Within one activation of the model: holding the head's input and its gradient through
        // the whole backward (see `take_head_grad`) would cost two.
        assert!(
            ckpt_peak + expected_saving - activation < plain_peak,
            "checkpointed step peaked at {ckpt_peak} B against {plain_peak} B plain, expected about \
             {expected_saving} B less"
        );
        let rel = fresh_grad_rel_diff(&plain, &ckpt, &x, &y, len);
        assert!(rel < 1e-5, "gradients differ by {rel} of the largest");
        drop(probe);
    }
}
