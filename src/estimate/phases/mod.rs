//! The trial, replayed: every allocation and free a trial makes, in the order libtorch makes
//! them, phase by phase, with the reason for each. What is allocated when follows
//! `train::step` (the loop), `train::data` and `train::model` (oomlab's side), and libtorch's
//! own code for the rest (ATen kernels, the autograd engine, `torch::optim`); the comments name
//! the function each event comes from.
//!
//! Sizes come from [`Terms`]; the [`Ledger`] turns the events into per-phase peaks.
mod amp;
mod checkpoint;
mod net;
pub(crate) use net::parameter_numels;
mod optim;

use super::caching::OutOfMemory;
use super::ledger::{BlockEvent, Category, Held, Ledger, Shared};
use super::terms::{Target, Terms};
use super::{cuda_reduce, Gather, GpuArch, Options, PhasePrediction};
use crate::schema::Phase;
use crate::spec::{Amp, Config, DataLocation, DataSpec, Dtype, History, Mode, OptimizerImpl, Segments};

use Category::{Activations, AmpCopies, Batch, Data, Grads, Params, Transient};

/// A trial replayed: its phases, and on CUDA what the allocator held before it and the first
/// phase in which the limit refused an allocation.
pub(super) struct Replay {
    pub phases: Vec<PhasePrediction>,
    /// Every allocation and free, when recorded ([`Sim::record`]).
    pub blocks: Vec<BlockEvent>,
    /// Allocated and reserved bytes before the trial (the workspaces).
    pub baseline: (u64, u64),
    /// The index in `phases` of the first refusal, and the refused request.
    pub oom: Option<(usize, OutOfMemory)>,
}

pub(super) struct Sim<'a> {
    t: &'a Terms,
    oom: Option<(usize, OutOfMemory)>,
    config: &'a Config,
    gather: Gather,
    /// libtorch's intra-op threads (see [`Options::threads`]).
    threads: usize,
    /// CUDA: the GPU (see [`Options::gpu`]).
    gpu: GpuArch,
    ledger: Shared,
    out: Vec<PhasePrediction>,
    /// The optimizer has allocated its state (it does at its first step).
    has_state: bool,
    /// The grad scaler has made its scale and growth tracker (at its first `scale()`).
    has_scaler: bool,
    /// Training runs under autocast: activations in low precision.
    autocast: bool,
    /// A model that is not an MLP, replayed through its own code over symbolic tensors.
    net: Option<net::Net>,
}

/// How a training step's forward and backward run.
#[derive(Debug, Clone)]
enum Pass {
    Plain,
    /// Checkpointed segments of hidden layers, then plain ones ([`checkpoint`]).
    Checkpointed(Segments),
}

/// What a forward pass left alive until the end of its (micro-)step.
#[derive(Debug, Clone, Copy, Default)]
struct Kept {
    /// The batch, when it was copied.
    batch: u64,
    /// The loss and, when no backward freed it, the graph's saved tensors.
    graph: u64,
}

impl<'a> Sim<'a> {
    pub fn new(config: &'a Config, t: &'a Terms, options: &Options) -> Self {
        let autocast = config.training.techniques.amp != Amp::Off;
        let (gather, threads, gpu) = (options.gather, options.threads, options.gpu);
        let ledger = Shared::new(match options.target {
            Target::Cpu => Ledger::cpu(options.limit),
            Target::Cuda => Ledger::cuda(options.limit, options.workspaces.in_order()),
        });
        let mut sim = Sim {
            t,
            oom: None,
            config,
            gather,
            threads,
            gpu,
            ledger,
            out: Vec::new(),
            has_state: false,
            has_scaler: false,
            autocast,
            net: None,
        };
        if config.model.mlp_widths().is_none() {
            sim.net = Some(net::Net::new(&sim));
        }
        sim
    }

    /// Replays the whole trial.
    /// Records every allocation and free of the replay into [`Replay::blocks`].
    pub fn record(self) -> Self {
        self.ledger.record();
        self
    }

    pub fn run(mut self) -> Replay {
        if self.net.is_some() {
            return self.run_net();
        }
        self.phase(0, 0, Phase::Data, Self::data);
        self.phase(0, 0, Phase::Model, Self::model);
        let tech = self.config.training.techniques;
        let accumulation = tech.accumulation.max(1);
        let pass = match tech.checkpoint.segments(self.t.depth()) {
            None => Pass::Plain,
            Some(cut) => Pass::Checkpointed(cut),
        };
        let mut micro_index = 0usize;
        for step in 1..=self.config.training.steps {
            match tech.mode {
                Mode::Train => {
                    let keep = tech.history == History::LossTensor;
                    let mut kept = Kept::default();
                    for micro in 0..accumulation {
                        let batch = self.phase(step, micro, Phase::ToDevice, |s| s.gather(micro_index));
                        micro_index += 1;
                        let first = micro == 0;
                        let graph = self.phase(step, micro, Phase::Forward, |s| match &pass {
                            Pass::Plain => s.forward(),
                            Pass::Checkpointed(cut) => s.checkpointed_forward(cut),
                        });
                        self.phase(step, micro, Phase::Backward, |s| {
                            let scaled_loss = s.scale_loss();
                            match &pass {
                                Pass::Plain => s.backward(first),
                                Pass::Checkpointed(cut) => s.checkpointed_backward(cut, first),
                            }
                            s.ledger.free(Transient, scaled_loss);
                        });
                        // After backward the graph has released everything but the loss.
                        debug_assert!(graph >= self.t.scalar());
                        // `train::step`: the micro-batch goes when its iteration ends, and its
                        // loss too, but the last one's, which lives on through optimizer_step and
                        // zero_grad.
                        self.ledger.free(Batch, batch);
                        let loss = Kept { batch: 0, graph: self.t.scalar() };
                        if micro + 1 == accumulation {
                            kept = loss;
                        } else {
                            self.end_of_iteration(loss, keep);
                        }
                    }
                    // The recorder files the step's own phases under micro-batch 0.
                    self.phase(step, 0, Phase::OptimizerStep, Self::optimizer_step);
                    self.phase(step, 0, Phase::ZeroGrad, Self::zero_grad);
                    self.end_of_iteration(kept, keep);
                }
                Mode::Forward | Mode::ForwardNoGrad => {
                    let batch = self.phase(step, 0, Phase::ToDevice, |s| s.gather(micro_index));
                    micro_index += 1;
                    let graph = self.phase(step, 0, Phase::Forward, |s| match tech.mode {
                        Mode::Forward => s.forward(),
                        _ => s.forward_no_grad(),
                    });
                    self.end_of_iteration(Kept { batch, graph }, tech.history == History::LossTensor);
                }
            }
        }
        Replay {
            phases: self.out,
            blocks: self.ledger.take_log(),
            baseline: self.ledger.baseline(),
            oom: self.oom,
        }
    }

    /// Runs one phase as the recorder does: the peak restarts at its start, and the end is read
    /// when it returns.
    fn phase<T>(&mut self, step: usize, micro: usize, phase: Phase, f: impl FnOnce(&mut Self) -> T) -> T {
        self.ledger.reset_peak();
        self.ledger.label(step, micro, phase);
        let out = f(self);
        self.ledger.unlabel();
        if let (None, Some(refused)) = (self.oom, self.ledger.refused()) {
            self.oom = Some((self.out.len(), refused));
        }
        let (reserved_end, reserved_peak) = self.ledger.reserved();
        self.out.push(PhasePrediction {
            step,
            micro,
            phase,
            allocated_end: self.ledger.live().total(),
            peak: self.ledger.peak(),
            reserved_end,
            reserved_peak,
            by_category: self.ledger.at_peak(),
            end_by_category: self.ledger.live(),
        });
        out
    }

    /// The loop's iteration ends: its batch and loss are dropped, and with the loss whatever graph
    /// it still holds, unless the history keeps the loss (and so the graph and the batch the
    /// graph saved: layer 0's Linear saves `x`, the NLL saves `y`).
    ///
    /// Under autocast the graph saved the batch's cast instead of the batch's features (NLL
    /// still saves the labels), and the weights' casts: the autocast copies still live.
    fn end_of_iteration(&mut self, kept: Kept, keep_loss: bool) {
        let copies = self.ledger.requested(AmpCopies);
        if keep_loss {
            self.ledger.recategorize(Activations, Category::History, kept.graph);
            self.ledger.recategorize(AmpCopies, Category::History, copies);
            let saved_batch = match (kept.graph > self.t.scalar(), self.autocast) {
                (false, _) => 0,
                (true, false) => kept.batch,
                (true, true) => kept.batch.min(self.t.batch_y()),
            };
            self.ledger.recategorize(Batch, Category::History, saved_batch);
            self.ledger.free(Batch, kept.batch - saved_batch);
        } else {
            self.ledger.free(Activations, kept.graph);
            self.ledger.free(AmpCopies, copies);
            self.ledger.free(Batch, kept.batch);
        }
    }

    /// Whether the data set lives in host memory on a device that is not the host: then the
    /// device sees only each batch, moved there by `to_device`.
    fn data_on_host(&self) -> bool {
        self.config.location == DataLocation::Host && self.t.target == Target::Cuda
    }

    /// `train::data::make`.
    fn data(&mut self) {
        let t = self.t;
        if self.data_on_host() {
            return; // made in host memory, which the device's allocator does not count
        }
        match &self.config.data {
            DataSpec::Tokens { .. } => {
                // x = randint [S, L] int64; y = x.select(1, 0).remainder(K): remainder wraps K
                // in a 0-dim int64 tensor, made before its output and gone with the statement.
                let tokens = (t.shape.samples as u64).saturating_mul(t.shape.features as u64);
                self.ledger.alloc(Data, t.index_bytes(tokens));
                self.ledger.alloc(Transient, t.wrapped_index_scalar());
                self.ledger.alloc(Data, t.data_y());
                self.ledger.free(Transient, t.wrapped_index_scalar());
            }
            DataSpec::Synthetic { .. } | DataSpec::Images { .. } => {
                // x = randn [S, D]; teacher = randn [D, K]; y = x.matmul(teacher).argmax(1)
                // (images: D = C x H x W, x viewed flat): the logits [S, K] live until the
                // statement ends, the teacher until the function returns.
                self.ledger.alloc(Data, t.data_x());
                let teacher = t.bytes((t.shape.features as u64).saturating_mul(t.shape.classes as u64));
                let logits = t.bytes((t.shape.samples as u64).saturating_mul(t.shape.classes as u64));
                self.ledger.alloc(Transient, teacher);
                self.ledger.alloc(Transient, logits);
                self.ledger.alloc(Data, t.data_y());
                self.ledger.free(Transient, logits);
                self.ledger.free(Transient, teacher);
            }
            DataSpec::Csv { .. } => {
                // from_slice(f32 values) -> reshape (a view) -> to_kind -> to_device; then the
                // labels from_slice(i64) -> to_device.
                let numel = (t.shape.samples as u64).saturating_mul(t.shape.features as u64);
                match t.target {
                    Target::Cpu if t.dtype == Dtype::Float32 => {
                        // to_kind and to_device are no-ops: x is the f32 tensor itself.
                        self.ledger.alloc(Data, t.data_x());
                    }
                    Target::Cpu => {
                        let staging = numel.saturating_mul(4);
                        self.ledger.alloc(Transient, staging);
                        self.ledger.alloc(Data, t.data_x());
                        self.ledger.free(Transient, staging);
                    }
                    // The staging copy is on the CPU, which the CUDA allocator does not count.
                    Target::Cuda => self.ledger.alloc(Data, t.data_x()),
                }
                self.ledger.alloc(Data, t.data_y());
            }
        }
    }

    /// `Mlp::new`: `empty` then `uniform_` in place, weight then bias, layer by layer. Building
    /// the optimizer and the grad scaler allocates nothing: the optimizer's state comes at the
    /// first step, the scaler's at the first `scale()`.
    fn model(&mut self) {
        for n in self.t.param_numels() {
            self.ledger.alloc(Params, self.t.bytes(n));
        }
    }

    /// `train::step::gather`: the batch's rows. Returns the bytes of the batch it allocated.
    fn gather(&mut self, micro_index: usize) -> u64 {
        let t = self.t;
        let n = t.shape.samples.max(1);
        // Both factors below n (at most 10^9, `bounds::check`): the product fits.
        let start = ((micro_index % n) * (t.batch as usize % n)) % n;
        let wraps = start.saturating_add(t.batch as usize) > n;
        if self.data_on_host() {
            // Gathered on the host, then x.to_device and y.to_device: the device gets the copies.
            self.ledger.alloc(Batch, t.batch_x());
            self.ledger.alloc(Batch, t.batch_y());
            return t.batch_x() + t.batch_y();
        }
        if self.gather == Gather::ViewUnlessWrapped && !wraps {
            // x.narrow and y.narrow: views of the data set, nothing allocated.
            return 0;
        }
        // idx = arange(start, start + B) [int64] .remainder(n): remainder wraps n in a 0-dim
        // int64 tensor; the arange goes when the statement ends.
        let idx = t.index_bytes(t.batch);
        self.ledger.alloc(Transient, idx);
        self.ledger.alloc(Transient, t.wrapped_index_scalar());
        self.ledger.alloc(Transient, idx);
        self.ledger.free(Transient, t.wrapped_index_scalar());
        self.ledger.free(Transient, idx);
        // x.index_select(0, idx), y.index_select(0, idx); idx is dropped on return.
        let batch = t.batch_x() + t.batch_y();
        self.ledger.alloc(Batch, t.batch_x());
        self.ledger.alloc(Batch, t.batch_y());
        self.ledger.free(Transient, idx);
        batch
    }

    /// `Mlp::forward` then `Mlp::loss`, with grad tracking. Returns the bytes the graph keeps
    /// (its saved tensors and the loss).
    ///
    /// - `linear` is `addmm(bias, h, weight.t())`: a new `[B, out]`. Autograd saves `h` (the
    ///   layer's input, for the weight's gradient) and `weight.t()` (a view of the parameter):
    ///   nothing new.
    /// - `relu` is `clamp_min(h, 0)`: a new `[B, out]`, which ReLU's backward saves (it needs the
    ///   output, not the input). The Linear's output is then unreferenced and freed: one hidden
    ///   activation per layer survives, and two are live at once inside the layer.
    /// - `cross_entropy` is `nll_loss(log_softmax(logits))`: log_softmax's output `[B, K]` is
    ///   saved (by its own backward and by NLL's), NLL adds the loss and a `total_weight`
    ///   scalar it saves; the logits are saved by nobody and go when the closure returns.
    /// - Accumulation's division of the loss happens in the backward phase ([`Self::scale_loss`]).
    fn forward(&mut self) -> u64 {
        let mut cache_only = Vec::new(); // under autocast: the casts only the cache holds
        let mut kept = self.plain_units_forward(0..self.t.depth(), &mut cache_only);
        kept += self.head_and_loss(&mut cache_only);
        self.exit_autocast(cache_only); // autocast exits: its cache goes
        kept
    }

    /// The head's Linear and the loss, with grad tracking, from the last hidden activation.
    /// Under autocast the logits are low precision and `cross_entropy` (on autocast's fp32
    /// list) casts them up first, a temporary. Returns the activations the graph keeps of them:
    /// log-probabilities, loss, `total_weight`.
    /// Hidden layers `units` with grad tracking: each Linear's input cast and saved (under
    /// autocast), its output, and ReLU's output saved. Returns the bytes saved.
    pub(super) fn plain_units_forward(
        &mut self,
        units: std::ops::Range<usize>,
        cache_only: &mut Vec<u64>,
    ) -> u64 {
        let mut kept = 0;
        for i in units {
            self.cast_and_save(i, cache_only);
            let a = self.act(i);
            self.ledger.alloc(Transient, a); // the Linear's output
            self.ledger.alloc(Activations, a); // ReLU's output, saved
            self.ledger.free(Transient, a);
            kept += a;
        }
        kept
    }

    fn head_and_loss(&mut self, cache_only: &mut Vec<u64>) -> u64 {
        self.cast_and_save(self.t.depth(), cache_only);
        let (logits, up) = (self.act_logits(), if self.autocast { self.t.logits() } else { 0 });
        self.ledger.alloc(Transient, logits);
        self.ledger.alloc(Transient, up);
        let kept = self.loss();
        self.ledger.free(Transient, up);
        self.ledger.free(Transient, logits); // at the closure's return
        kept
    }

    /// `cross_entropy` = `nll_loss(log_softmax(logits))` on logits of the training dtype:
    /// log_softmax's output is saved (by its own backward and by NLL's), NLL adds the loss and a
    /// `total_weight` it saves. Returns those bytes.
    fn loss(&mut self) -> u64 {
        let t = self.t;
        self.ledger.alloc(Activations, t.logits()); // log_softmax, saved
        self.ledger.alloc(Activations, t.scalar()); // the loss
        self.ledger.alloc(Activations, t.scalar()); // total_weight, saved by NLL
        t.logits() + 2 * t.scalar()
    }

    /// What `train_step` makes of the loss before backward, in the backward phase: with
    /// accumulation `loss / n` (a wrapped scalar and a new 0-dim loss), with the fp16 grad
    /// scaler `loss * scale`. Returns the bytes left until the phase ends.
    fn scale_loss(&mut self) -> u64 {
        let (divided, scaled) = self.loss_scalings();
        let t = self.t;
        if divided {
            self.ledger.alloc(Transient, t.wrapped_scalar());
            self.ledger.alloc(Transient, t.scalar());
            self.ledger.free(Transient, t.wrapped_scalar());
        }
        if scaled {
            if !self.has_scaler {
                self.scaler_state(); // `_lazy_init_scale_growth_tracker`
                self.has_scaler = true;
            }
            self.ledger.alloc(Transient, t.scalar());
        }
        // The divided loss is freed once the scaled one exists: nothing else holds it.
        if divided && scaled {
            self.ledger.free(Transient, t.scalar());
        }
        if divided || scaled {
            t.scalar()
        } else {
            0
        }
    }

    /// Whether the loss is divided (accumulation) and multiplied by the grad scaler's scale.
    fn loss_scalings(&self) -> (bool, bool) {
        let tech = &self.config.training.techniques;
        (tech.accumulation > 1, matches!(tech.amp, Amp::Fp16 { .. }))
    }

    /// The same forward under no_grad: nothing is saved, so each activation goes as soon as the
    /// next one exists (`h` is reassigned). Returns the bytes kept: the loss.
    fn forward_no_grad(&mut self) -> u64 {
        let t = self.t;
        let (mut cache, mut input) = (Vec::new(), 0); // the batch is the caller's
        for i in 0..=t.depth() {
            // Under autocast the weights' casts are cached even under no_grad (they are leaves
            // that require grad), and the batch's goes once layer 0 has read it.
            let batch_cast = self.cast_if_autocast(i, &mut cache);
            let out = if i < t.depth() { self.act(i) } else { self.act_logits() };
            self.ledger.alloc(Transient, out); // z = linear(h)
            self.ledger.free(AmpCopies, batch_cast);
            self.ledger.free(Transient, input); // h = z drops the previous h
            if i < t.depth() {
                self.ledger.alloc(Transient, out); // relu(z)
                self.ledger.free(Transient, out); // z
            }
            input = out;
        }
        let up = if self.autocast { t.logits() } else { 0 }; // cross_entropy's cast to fp32
        self.ledger.alloc(Transient, up);
        self.ledger.alloc(Transient, t.logits()); // log_softmax
        self.ledger.alloc(Activations, t.scalar()); // the loss
        self.ledger.alloc(Transient, t.scalar()); // total_weight, dropped inside nll_loss
        self.ledger.free(Transient, t.scalar());
        self.ledger.free(Transient, t.logits() + up); // at cross_entropy's return
        self.ledger.free(Transient, input); // the logits, at the closure's return
        self.exit_autocast(cache); // autocast exits
        t.scalar()
    }

    /// `loss.backward()` through libtorch's autograd engine (CPU: one thread, nodes in
    /// decreasing sequence number, AccumulateGrad first). After each node runs, the engine
    /// releases its saved tensors (`release_variables`) and its input gradient; a saved tensor
    /// is freed when the last node that saved it has run.
    ///
    /// - The seed gradient `ones_like(loss)` lives to the end.
    /// - NllLossBackward: `zeros_like(log_probs)` filled at the targets; releases total_weight.
    /// - LogSoftmaxBackward: a new `[B, K]`; releases the log-probabilities.
    /// - AddmmBackward of layer i (from the head down): the gradient w.r.t. its input
    ///   `grad.mm(weight)` `[B, in]` (not for layer 0, whose input needs none), the weight's
    ///   `(grad.t().mm(h)).t()` (`mm_mat2_backward` computes it transposed so that it comes out
    ///   with the weight's own strides), and the bias's `sum_to` `[out]`, made in
    ///   `validate_outputs`. All live together with the incoming gradient: that is the peak of
    ///   the node. The weight and bias gradients are stolen by AccumulateGrad as `.grad` (no
    ///   copy: they obey the layout contract and nothing else holds them); with accumulation,
    ///   later micro-batches add them in place (`grad += new`) and free them.
    /// - ReluBackward of layer i-1: `threshold_backward` `[B, H]`; releases the ReLU output,
    ///   now unreferenced since the Linear above it has run.
    fn backward(&mut self, first_micro: bool) {
        let (seed, mut incoming) = self.loss_backward();
        for i in (0..self.t.layers.len()).rev() {
            incoming = self.linear_backward(i, incoming, first_micro, false);
            if i > 0 {
                incoming = self.relu_backward(i - 1, incoming);
            }
        }
        self.ledger.release(seed);
    }

    /// The seed, the backward of the loss's scalings (`DivBackward`: another wrapped scalar and
    /// `grad / n`; `MulBackward`: `grad * scale`), NllLossBackward and LogSoftmaxBackward.
    /// Returns the seed, which stays until the caller's backward ends, and the gradient at the
    /// logits, `[B, K]`. Each by its block: on CUDA which of two equal blocks goes decides what
    /// the next request finds free.
    fn loss_backward(&mut self) -> (Held, Held) {
        let t = self.t;
        let (divided, scaled) = self.loss_scalings();
        let seed = self.ledger.hold(Transient, t.scalar());
        let mut scalars = Vec::new();
        if scaled {
            scalars.push(self.ledger.hold(Transient, t.scalar()));
        }
        if divided {
            let wrapped = self.ledger.hold(Transient, t.wrapped_scalar());
            scalars.push(self.ledger.hold(Transient, t.scalar()));
            self.ledger.release(wrapped);
        }
        let nll = self.ledger.hold(Transient, t.logits()); // NllLossBackward
        self.ledger.free(Activations, t.scalar()); // total_weight
        for scalar in scalars.into_iter().rev() {
            self.ledger.release(scalar);
        }
        let log_softmax = self.ledger.hold(Transient, t.logits()); // LogSoftmaxBackward
        self.ledger.free(Activations, t.logits()); // the log-probabilities
        self.ledger.release(nll);
        // Under autocast, ToCopyBackward of the logits' cast up: the gradient goes back down.
        if self.autocast {
            let low = self.ledger.hold(Transient, self.act_logits());
            self.ledger.release(log_softmax);
            return (seed, low);
        }
        (seed, log_softmax)
    }

    /// AddmmBackward of layer `i`, given the `incoming` gradient at its output: the input's
    /// gradient (none for layer 0, whose input needs none), the weight's and the bias's, all
    /// live with the incoming one. Returns the input's gradient.
    /// Under autocast [`Self::autocast_linear_backward`] does it, in low precision.
    fn linear_backward(&mut self, i: usize, incoming: Held, first_micro: bool, weight_cached: bool) -> Held {
        if self.autocast {
            return self.autocast_linear_backward(i, incoming, first_micro, weight_cached);
        }
        let t = self.t;
        let layer = t.layers[i];
        let input_grad = if i > 0 { t.layer_input(i) } else { 0 };
        let (w, b) = (t.bytes(layer.weight_numel()), t.bytes(layer.bias_numel()));
        // The first micro-batch's are stolen as `.grad`; later ones are added in place and go.
        let grad_cat = if first_micro { Grads } else { Transient };
        let input_grad = self.ledger.hold(Transient, input_grad);
        self.ledger.alloc(grad_cat, w);
        self.ledger.alloc(grad_cat, b);
        self.bias_sum_staging(t.batch, layer.outputs);
        self.ledger.release(incoming);
        if !first_micro {
            self.ledger.free(Transient, w);
            self.ledger.free(Transient, b);
        }
        input_grad
    }

    /// CUDA: the bias gradient's `sum_to` over the batch runs the reduction kernel, which takes
    /// a staging buffer and semaphores for its life ([`cuda_reduce`]), after the sum's output
    /// and before the node's incoming gradient goes. Nothing on the CPU.
    pub(super) fn bias_sum_staging(&mut self, rows: u64, cols: u64) {
        if self.t.target != Target::Cuda {
            return;
        }
        let acc = if self.t.dtype == Dtype::Float64 { 8 } else { 4 };
        if let Some((buffer, semaphores)) = cuda_reduce::sum_rows_staging(rows, cols, acc, self.gpu) {
            let buffer = self.ledger.hold(Transient, buffer);
            let semaphores = self.ledger.hold(Transient, semaphores);
            self.ledger.release(semaphores);
            self.ledger.release(buffer);
        }
    }

    /// ReluBackward of hidden layer `i`: `threshold_backward` makes its gradient and releases
    /// the saved output. Returns the gradient.
    fn relu_backward(&mut self, i: usize, incoming: Held) -> Held {
        let a = self.act(i);
        let grad = self.ledger.hold(Transient, a);
        self.ledger.free(Activations, a);
        // The incoming gradient, not the one just made: both are [B, H], and on CUDA which
        // block goes decides what the next request finds free.
        self.ledger.release(incoming);
        grad
    }

    /// `GradScaler.step` (with fp16) and the optimizer's step ([`optim`]).
    fn optimizer_step(&mut self) {
        let implementation = self.optimizer_impl();
        let scaled = self.loss_scalings().1;
        if scaled && implementation == OptimizerImpl::Fused {
            return self.scaled_fused_step();
        }
        let unscaled = if scaled { self.unscale() } else { 0 };
        self.torch_optimizer_step(implementation);
        self.ledger.free(Transient, unscaled);
    }

    /// `zero_grad()` sets every `.grad` to none (libtorch's default since 2.0), freeing them.
    fn zero_grad(&mut self) {
        self.ledger.free(Grads, self.t.param_bytes());
    }
}
