//! Predict before you run: an analytic model of the memory a trial allocates, phase by phase and
//! by category, without training and without a GPU (milliseconds for a whole sweep).
//!
//! The model is a replay. [`phases`] walks the trial the way `train::step` runs it and, for
//! every tensor libtorch allocates or frees on the way, records the event in a [`Ledger`]
//! that keeps live bytes per [`Category`] and each phase's peak. The sizes are in [`terms`];
//! each event is there for a reason that the code's comments name (an ATen kernel's output,
//! what autograd saves, what the engine releases when, what `torch::optim` allocates). In
//! short, for an MLP of `depth` hidden layers of width `H`, batch `B`, `K` classes, `P`
//! parameter bytes and element size `e`:
//!
//! | category | what | bytes |
//! |---|---|---|
//! | data | `x [S,D]`, `y [S]` int64 | `S·D·e + 8S` |
//! | batch | `index_select` copies of the rows | `B·D·e + 8B` |
//! | params | weight `[out,in]` + bias `[out]` per layer | `P` |
//! | grads | `.grad` from backward to `zero_grad` | `P` |
//! | opt_state | momentum: `momentum_buffer`; Adam/AdamW: `exp_avg`, `exp_avg_sq` | `0, P, 2P` |
//! | activations | ReLU outputs (saved by ReLU's backward and the next Linear's), log-softmax `[B,K]` (saved by its backward and NLL's), loss, NLL's `total_weight` | `depth·B·H·e + B·K·e + 2e` |
//! | amp_copies | autocast's casts: every weight and bias while autocast is on, the weights after the first until backward, the batch | `P/2` at most, `B·D·2` |
//! | transient | a Linear's output before its ReLU; logits; gradients in flight (at a Linear's backward: incoming `[B,out]`, input grad `[B,in]`, weight and bias grads); Adam's `sqrt` and quotient; index tensors; 0-dim wrapped scalars | phase-local |
//!
//! The peak of a training step is one of: the forward at a hidden layer (activations so far +
//! the Linear's output + its ReLU), the backward at a Linear (remaining activations + grads so
//! far + incoming gradient + input gradient + this layer's weight and bias gradients), or the
//! optimizer step (params + grads + state, plus for Adam two temporaries of the largest
//! parameter; at the first step the state is allocated parameter by parameter, so the peak comes
//! at the largest weight late in the list).
//!
//! On the CPU, oomlab's counting allocator counts exactly these bytes, so the model is exact
//! there for fp32 (see `tests/estimate_accuracy.rs`). On CUDA each block is rounded to 512
//! bytes ([`Target::Cuda`]); cuBLAS workspaces and whole cached blocks are not modelled.
//!
//! Covered: the plain step (SGD, momentum, Adam, AdamW, with or without weight decay), any
//! dtype (exact for fp32 and fp64 on CPU; fp16/bf16 kernels may add temporaries), gradient
//! accumulation, activation checkpointing (`phases::checkpoint`: the boundaries kept, one
//! segment recomputed at a time), mixed precision (`phases::amp`: autocast's cached casts, the
//! fp32 loss and gradients, the fp16 grad scaler; exact for fp16 on the CPU, and for bf16 but
//! for oneDNN's matmul workspace), both together, modes `forward` and `forward_no_grad`, and
//! the loss history, in any combination, as `train::step` composes them. Not covered
//! ([`predict`] says so): mixed precision over parameters that are not float32.
//! [`Prediction::notes`] says where a prediction is less than exact.
pub mod caching;
mod ledger;
mod phases;
mod sweeps;
pub mod terms;
pub mod workspace;

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub use ledger::{Categories, Category, Ledger};
pub use sweeps::{largest_fit, predict_spec, predict_sweep, SweepPoint, SweepPrediction};
pub use terms::{DataShape, Target};
pub use workspace::{GpuArch, Workspaces};

use crate::schema::Phase;
use crate::spec::{Amp, Config, DataSpec, Dtype, Mode, Named, OptimizerImpl};

/// How a step's batch is taken from the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gather {
    /// `index_select` with an int64 index, always: a copy of the rows (the plain loop's
    /// `gather` today).
    Copy,
    /// `narrow` views when the window does not wrap around the data set's end (nothing
    /// allocated), the `index_select` copy when it does.
    ViewUnlessWrapped,
}

/// What `train::step::gather` does in this version of the code. `tests/estimate_accuracy.rs`
/// checks it against the real thing.
pub const CURRENT_GATHER: Gather = Gather::Copy;

/// What the model assumes about the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Options {
    pub target: Target,
    pub gather: Gather,
    /// libtorch's intra-op threads: a CPU reduction of a whole tensor to one number (the
    /// checkpointed backward's `sum`) takes a buffer of one result per thread.
    pub threads: usize,
    /// CUDA: the caching allocator's limit (the budget's memory fraction), if any. A trial
    /// fits when the replay never needs a segment past it.
    pub limit: Option<u64>,
    /// CUDA: the workspaces libtorch keeps for the process, there before every trial.
    pub workspaces: Workspaces,
}

impl Default for Options {
    /// The CPU, the current gather, and this process's thread count.
    fn default() -> Self {
        Options {
            target: Target::Cpu,
            gather: CURRENT_GATHER,
            threads: tch::get_num_threads().max(1) as usize,
            limit: None,
            workspaces: Workspaces::default(),
        }
    }
}

impl Options {
    /// CUDA on a GPU of `arch`, for a run of `configs` (whose warm-up makes the workspaces).
    pub fn cuda<'a>(arch: GpuArch, configs: impl IntoIterator<Item = &'a Config>) -> Self {
        Options { target: Target::Cuda, workspaces: Workspaces::for_run(arch, configs), ..Options::default() }
    }

    /// With `budget` as the CUDA allocator's limit (the CPU's cap needs none: a trial fits when
    /// its peak does).
    pub fn under(self, budget: Option<u64>) -> Self {
        match self.target {
            Target::Cuda => Options { limit: budget, ..self },
            Target::Cpu => self,
        }
    }
}

/// One phase of one (micro-)step, as the trace records it, predicted. Bytes are the trial's own:
/// add the allocator's baseline to compare with `memory_allocated`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhasePrediction {
    /// 0 for `data` and `model`, then 1, 2, ...
    pub step: usize,
    /// The micro-batch (gradient accumulation), from 0.
    pub micro: usize,
    pub phase: Phase,
    /// Allocated when the phase ends.
    pub allocated_end: u64,
    /// The highest allocated during the phase (the probe resets its peak at the phase's start).
    pub peak: u64,
    /// Reserved memory (segments) when the phase ends and its highest during it, over the
    /// baseline's; on the CPU, which has no cache, the allocated figures.
    pub reserved_end: u64,
    pub reserved_peak: u64,
    /// What was live at that peak.
    pub by_category: Categories,
    /// What is live when the phase ends.
    pub end_by_category: Categories,
}

/// A trial, predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Every phase in the order the trial runs them.
    pub phases: Vec<PhasePrediction>,
    /// The highest of the phases' peaks: the trial's `max_memory_allocated` over its baseline.
    pub peak: u64,
    /// The highest reserved memory over the baseline's (CUDA: segments; CPU: as `peak`).
    pub reserved_peak: u64,
    /// What the allocator holds before the trial, allocated and reserved: the workspaces on
    /// CUDA, nothing on the CPU.
    pub baseline_allocated: u64,
    pub baseline_reserved: u64,
    /// CUDA with a limit: where the allocator refused a segment even with its cache emptied.
    pub oom: Option<PredictedOom>,
    pub param_count: u64,
    pub param_bytes: u64,
    /// Optimizer state once allocated.
    pub optimizer_state_bytes: u64,
    pub shape: DataShape,
    pub options: Options,
    /// Where the prediction is less than exact, in words (empty: exact on the CPU).
    pub notes: Vec<String>,
}

impl Prediction {
    /// What `max_memory_allocated` reads at the trial's peak: the baseline (workspaces) and the
    /// trial's own bytes.
    pub fn peak_allocated(&self) -> u64 {
        self.baseline_allocated + self.peak
    }

    /// What `max_memory_reserved` reads at the trial's highest.
    pub fn peak_reserved(&self) -> u64 {
        self.baseline_reserved + self.reserved_peak
    }

    /// The peak in words: allocated, and on CUDA reserved too.
    pub fn describe_peak(&self) -> String {
        let size = crate::spec::format_size;
        match self.options.target {
            Target::Cpu => size(self.peak_allocated()),
            Target::Cuda => {
                format!("{} allocated, {} reserved", size(self.peak_allocated()), size(self.peak_reserved()))
            }
        }
    }

    /// The first phase that reaches the trial's peak.
    pub fn peak_phase(&self) -> &PhasePrediction {
        self.phases.iter().find(|p| p.peak == self.peak).expect("a trial has phases")
    }

    /// Whether the trial fits under a budget. On the CPU, counting from an allocator at zero:
    /// the counting allocator refuses an allocation that would take it past the budget, so the
    /// trial fits exactly when its peak does (subtract a nonzero baseline from the budget
    /// first). On CUDA the budget caps reserved memory, workspaces included: replayed under it
    /// (`Options::under`), the trial fits when no segment was refused; otherwise when reserved
    /// memory, never given back, stays under it.
    pub fn fits(&self, budget: u64) -> bool {
        match self.options.target {
            Target::Cpu => self.peak <= budget,
            Target::Cuda if self.options.limit == Some(budget) => self.oom.is_none(),
            Target::Cuda => self.baseline_reserved + self.reserved_peak <= budget,
        }
    }

    /// Where the trial is predicted to run out of memory under `budget`: the first phase whose
    /// peak is over it (CUDA: the phase of the refusal, or whose reserved peak is over it).
    pub fn first_over(&self, budget: u64) -> Option<&PhasePrediction> {
        match self.options.target {
            Target::Cpu => self.phases.iter().find(|p| p.peak > budget),
            Target::Cuda if self.options.limit == Some(budget) => {
                self.oom.map(|o| &self.phases[o.phase_index])
            }
            Target::Cuda => self.phases.iter().find(|p| self.baseline_reserved + p.reserved_peak > budget),
        }
    }

    /// The prediction for one phase of the trace.
    pub fn phase(&self, step: usize, micro: usize, phase: Phase) -> Option<&PhasePrediction> {
        self.phases.iter().find(|p| p.step == step && p.micro == micro && p.phase == phase)
    }
}

/// Where a CUDA replay ran out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictedOom {
    /// Into [`Prediction::phases`].
    pub phase_index: usize,
    /// The segment refused ("Tried to allocate").
    pub requested: u64,
    /// Reserved memory when it was refused, workspaces included.
    pub reserved: u64,
}

/// `(predicted - measured) / measured`: the error column a summary can show. 0 when both are 0.
pub fn relative_error(predicted: u64, measured: u64) -> f64 {
    if measured == 0 {
        return if predicted == 0 { 0.0 } else { f64::INFINITY };
    }
    (predicted as f64 - measured as f64) / measured as f64
}

/// Predicts a trial of `config` on the CPU, with the current `gather`. For CSV data the file's
/// shape is read (header, labels, rows); see [`predict_with`] to give it instead.
pub fn predict(config: &Config) -> Result<Prediction> {
    let shape = data_shape(&config.data)?;
    predict_with(config, shape, &Options::default())
}

/// Predicts a trial of `config` whose data set has `shape` (the synthetic spec's own shape is
/// ignored in favour of it).
pub fn predict_with(config: &Config, shape: DataShape, options: &Options) -> Result<Prediction> {
    let t = &config.training;
    let tech = t.techniques;
    if tech.amp != Amp::Off && t.dtype != Dtype::Float32 {
        bail!("estimate models mixed precision (training.amp) over float32 parameters only");
    }
    if shape.samples == 0 || shape.features == 0 || shape.classes == 0 {
        bail!("estimate needs a data set with samples, features and classes, not {shape:?}");
    }
    let terms = terms::Terms::new(
        shape,
        config.model.hidden,
        config.model.depth,
        t.batch_size,
        t.dtype,
        options.target,
    );
    let replay = phases::Sim::new(config, &terms, options).run();
    let phases = replay.phases;
    let peak = phases.iter().map(|p| p.peak).max().unwrap_or(0);
    let reserved_peak = phases.iter().map(|p| p.reserved_peak).max().unwrap_or(0);
    let oom = replay.oom.map(|(phase_index, o)| PredictedOom {
        phase_index,
        requested: o.requested,
        reserved: o.reserved,
    });
    let mut notes = Vec::new();
    if options.target == Target::Cuda {
        notes.push(format!(
            "cuda: libtorch 2.11's caching allocator replayed (512-byte blocks, pools, segments, splits, the \
             budget as a cap on reserved memory), with {} of cuBLAS/cuBLASLt workspaces kept for the process; \
             block addresses are assumed in the order made",
            crate::spec::format_size(options.workspaces.total())
        ));
    }
    if tech.mode == Mode::Train {
        let cuda = options.target == Target::Cuda;
        let implementation = OptimizerImpl::resolve(tech.optimizer_impl, cuda);
        let why = match tech.optimizer_impl {
            Some(_) => "as the spec names it",
            None if cuda => "PyTorch's default on CUDA",
            None => "PyTorch's default on the CPU",
        };
        notes.push(format!(
            "optimizer: torch.optim's {} in its {} implementation ({why})",
            t.optimizer.name(),
            implementation.as_str()
        ));
    }
    if matches!(t.dtype, Dtype::Float16 | Dtype::Bfloat16) {
        notes.push(
            format!("{:?}: kernels that accumulate in float32 may add temporaries", t.dtype).to_lowercase(),
        );
    }
    if matches!(tech.amp, Amp::Fp16 { .. }) && terms::state_tensors_per_param(&t.optimizer) > 0 {
        notes.push(
            "fp16: assumes the grad scaler skips no step; a skipped first step (inf/NaN gradients) \
             makes the optimizer's state arrive a step later"
                .into(),
        );
    }
    if tech.amp == Amp::Bf16 && options.target == Target::Cpu {
        notes.push(
            "bf16 on the CPU: oneDNN's matmul workspace (up to ~3 MB, by the shapes) is not modelled; it can put \
             the forward and backward peaks that much above this"
                .into(),
        );
    }
    Ok(Prediction {
        phases,
        peak,
        reserved_peak,
        baseline_allocated: replay.baseline.0,
        baseline_reserved: replay.baseline.1,
        oom,
        param_count: terms.param_count(),
        param_bytes: terms.param_bytes(),
        optimizer_state_bytes: terms::optimizer_state_bytes(&t.optimizer, &terms),
        shape,
        options: *options,
        notes,
    })
}

/// The data set's shape: the synthetic spec's, or a CSV file's (read: features and classes as
/// `train::data` reads them, and the number of data rows).
pub fn data_shape(data: &DataSpec) -> Result<DataShape> {
    match data {
        DataSpec::Synthetic { samples, features, classes, .. } => {
            Ok(DataShape { samples: *samples, features: *features, classes: *classes })
        }
        DataSpec::Csv { path, .. } => {
            let (features, classes) = crate::spec::csv_data::shape(data)?;
            let mut rd =
                csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
            let samples = rd.records().count();
            Ok(DataShape { samples, features, classes })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{
        Checkpoint, DataLocation, DataSpec, History, Mode, ModelSpec, OptimizerSpec, Techniques, TrainingSpec,
    };

    pub(crate) fn config(depth: usize, hidden: usize, batch: usize, optimizer: OptimizerSpec) -> Config {
        Config {
            model: ModelSpec { hidden, depth },
            data: DataSpec::Synthetic { samples: 32, features: 32, classes: 4, seed: 0 },
            location: DataLocation::Host,
            training: TrainingSpec {
                optimizer,
                batch_size: batch,
                steps: 2,
                dtype: Dtype::Float32,
                seed: 0,
                techniques: Techniques::default(),
            },
        }
    }

    const SGD: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 };

    /// The exact bytes `tests/cpu_budget_oom.rs` measures for plain SGD, depth 6, width 256.
    #[test]
    fn plain_sgd_matches_the_measured_accounting() {
        let (d, h, k, n, b) = (32u64, 256u64, 4u64, 32u64, 4u64);
        let params = 4 * ((d * h + h) + 5 * (h * h + h) + (h * k + k));
        let p = predict(&config(6, 256, 4, SGD)).unwrap();
        let at = |phase, step| p.phase(step, 0, phase).unwrap().allocated_end;
        let data = n * d * 4 + n * 8;
        let batch = b * d * 4 + b * 8;
        assert_eq!(p.param_bytes, params);
        assert_eq!(at(Phase::Data, 0), data);
        assert_eq!(at(Phase::Model, 0), data + params);
        assert_eq!(at(Phase::ToDevice, 1), data + params + batch);
        assert_eq!(at(Phase::Backward, 1), data + 2 * params + batch + 4);
        // The micro-batch is gone once its backward is done; the loss lives on.
        assert_eq!(at(Phase::OptimizerStep, 1), data + 2 * params + 4);
        assert_eq!(at(Phase::ZeroGrad, 1), data + params + 4);
        assert_eq!(at(Phase::ToDevice, 2), data + params + batch, "step 1's batch and loss are gone");
        assert_eq!(p.phases.len(), 2 + 2 * 5);
    }

    #[test]
    fn the_notes_name_the_optimizer_implementation_and_why() {
        let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
        let mut c = config(2, 64, 8, adam);
        let note = |c: &Config, options: &Options| {
            let p = predict_with(c, data_shape(&c.data).unwrap(), options).unwrap();
            p.notes.into_iter().find(|n| n.starts_with("optimizer:")).expect("an optimizer note")
        };
        let cuda = Options::cuda(GpuArch::Hopper, [&c]);
        assert_eq!(
            note(&c, &cuda),
            "optimizer: torch.optim's adam in its foreach implementation (PyTorch's default on CUDA)"
        );
        assert!(
            note(&c, &Options::default()).contains("for_loop implementation (PyTorch's default on the CPU)")
        );
        c.training.techniques.optimizer_impl = Some(OptimizerImpl::Fused);
        assert!(note(&c, &cuda).contains("fused implementation (as the spec names it)"));
    }

    #[test]
    fn adam_state_is_twice_the_parameters_and_arrives_at_the_first_step() {
        let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
        let p = predict(&config(2, 64, 8, adam)).unwrap();
        assert_eq!(p.optimizer_state_bytes, 2 * p.param_bytes);
        let model = p.phase(0, 0, Phase::Model).unwrap();
        assert_eq!(model.end_by_category.optimizer_state, 0);
        let step = p.phase(1, 0, Phase::OptimizerStep).unwrap();
        // With a 4-byte `step` per parameter: PyTorch keeps the count in a float32 (on the CPU).
        assert_eq!(step.end_by_category.optimizer_state, 2 * p.param_bytes + 6 * 4);
        assert_eq!(step.end_by_category.grads, p.param_bytes);
        // The steady-state for-loop step: two temporaries of the largest parameter (64x64
        // floats) and a wrapped scalar with its float cast, over everything live and the
        // previous parameter's `denom` (the first bias's: 64 floats), which Python frees only
        // when the name is bound again.
        let step2 = p.phase(2, 0, Phase::OptimizerStep).unwrap();
        assert_eq!(step2.peak - step2.allocated_end, 2 * 64 * 64 * 4 + 12 + 64 * 4);
        assert_eq!(step2.by_category.transient, 2 * 64 * 64 * 4 + 12 + 64 * 4);
    }

    #[test]
    fn momentum_keeps_one_buffer_and_zero_grad_frees_the_grads() {
        let momentum = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0 };
        let p = predict(&config(1, 64, 4, momentum)).unwrap();
        assert_eq!(p.optimizer_state_bytes, p.param_bytes);
        let zero = p.phase(1, 0, Phase::ZeroGrad).unwrap();
        assert_eq!(zero.end_by_category.grads, 0);
        assert_eq!(zero.end_by_category.optimizer_state, p.param_bytes);
    }

    /// Depth 1, width 64, batch 4: the backward peak is at layer 0's Linear, where the
    /// 64x32 weight gradient and the bias's are made while the incoming [4, 64] gradient lives.
    #[test]
    fn backward_peak_is_at_the_first_layers_weight_gradient() {
        let p = predict(&config(1, 64, 4, SGD)).unwrap();
        let start = p.phase(1, 0, Phase::ToDevice).unwrap().allocated_end;
        let back = p.phase(1, 0, Phase::Backward).unwrap();
        let head_grads = 4 * (64 * 4 + 4);
        let incoming = 4 * 4 * 64;
        let w0 = 4 * 64 * 32;
        let b0 = 4 * 64;
        assert_eq!(
            back.peak - start,
            head_grads + incoming + w0 + b0 + 8,
            "+8: the loss and the seed gradient"
        );
        assert_eq!(back.by_category.activations, 4, "every activation but the loss is freed by then");
    }

    #[test]
    fn forward_keeps_one_activation_per_layer() {
        let p = predict(&config(3, 100, 8, SGD)).unwrap();
        let fwd = p.phase(1, 0, Phase::Forward).unwrap();
        assert_eq!(fwd.end_by_category.activations, 3 * 8 * 100 * 4 + 8 * 4 * 4 + 2 * 4);
        // Peak: at the last hidden layer, its Linear output and its ReLU output both live.
        assert_eq!(fwd.by_category.activations, 3 * 8 * 100 * 4);
        assert_eq!(fwd.by_category.transient, 8 * 100 * 4);
    }

    #[test]
    fn no_grad_forward_keeps_nothing_but_the_loss() {
        let mut c = config(3, 100, 8, SGD);
        c.training.techniques.mode = Mode::ForwardNoGrad;
        let p = predict(&c).unwrap();
        let phases: Vec<Phase> = p.phases.iter().map(|p| p.phase).collect();
        assert_eq!(
            phases,
            [Phase::Data, Phase::Model, Phase::ToDevice, Phase::Forward, Phase::ToDevice, Phase::Forward]
        );
        let fwd = p.phase(1, 0, Phase::Forward).unwrap();
        assert_eq!(fwd.end_by_category.activations, 4);
        assert_eq!(fwd.by_category.transient, 2 * 8 * 100 * 4, "two activations at a time");
    }

    #[test]
    fn a_kept_loss_tensor_keeps_its_graph_without_backward() {
        let mut c = config(2, 100, 8, SGD);
        c.training.techniques.mode = Mode::Forward;
        c.training.techniques.history = History::LossTensor;
        c.training.steps = 3;
        let p = predict(&c).unwrap();
        let graph = 2 * 8 * 100 * 4 + 8 * 4 * 4 + 2 * 4;
        let batch = 8 * 32 * 4 + 8 * 8;
        let last = p.phase(3, 0, Phase::ToDevice).unwrap();
        assert_eq!(last.end_by_category.history, 2 * (graph + batch));
        // With a backward, only the 4-byte losses stay.
        c.training.techniques.mode = Mode::Train;
        let p = predict(&c).unwrap();
        assert_eq!(p.phase(3, 0, Phase::ToDevice).unwrap().end_by_category.history, 2 * 4);
    }

    #[test]
    fn accumulation_adds_later_micro_batch_gradients_in_place() {
        let mut c = config(2, 64, 4, SGD);
        c.training.techniques.accumulation = 3;
        let p = predict(&c).unwrap();
        let micros: Vec<(usize, usize, Phase)> =
            p.phases.iter().map(|p| (p.step, p.micro, p.phase)).collect();
        assert_eq!(
            micros[2..9],
            [
                (1, 0, Phase::ToDevice),
                (1, 0, Phase::Forward),
                (1, 0, Phase::Backward),
                (1, 1, Phase::ToDevice),
                (1, 1, Phase::Forward),
                (1, 1, Phase::Backward),
                (1, 2, Phase::ToDevice),
            ]
        );
        let b0 = p.phase(1, 0, Phase::Backward).unwrap();
        let b1 = p.phase(1, 1, Phase::Backward).unwrap();
        assert_eq!(b0.end_by_category.grads, p.param_bytes);
        assert_eq!(b1.end_by_category.grads, p.param_bytes, "no second copy");
        assert!(b1.peak > b0.peak, "the existing grads are there from the start");
        // The micro-batch is the batch: the same forward peak as without accumulation.
        let plain = predict(&config(2, 64, 4, SGD)).unwrap();
        assert_eq!(
            p.phase(1, 1, Phase::Forward).unwrap().by_category.activations,
            plain.phase(1, 0, Phase::Forward).unwrap().by_category.activations
        );
    }

    #[test]
    fn mixed_precision_over_low_precision_parameters_is_refused() {
        let mut c = config(1, 8, 4, SGD);
        c.training.techniques.amp = Amp::Bf16;
        c.training.techniques.checkpoint = Checkpoint::Sqrt;
        assert!(predict(&c).is_ok());
        c.training.dtype = Dtype::Bfloat16;
        let err = predict(&c).unwrap_err().to_string();
        assert!(err.contains("mixed precision") && err.contains("float32"), "{err}");
    }

    /// sqrt(9) = 3 layers a segment, batch large enough for activations to set the peak: the
    /// forward keeps 3 boundaries instead of 9 activations, and the backward recomputes one
    /// segment at a time.
    #[test]
    fn checkpointing_keeps_the_boundaries_only() {
        let mut c = config(9, 100, 256, SGD);
        let a = 256 * 100 * 4;
        let head = 256 * 4 * 4 + 2 * 4;
        let plain = predict(&c).unwrap();
        c.training.techniques.checkpoint = Checkpoint::Sqrt;
        let ckpt = predict(&c).unwrap();
        let kept = |p: &Prediction| p.phase(1, 0, Phase::Forward).unwrap().end_by_category.activations;
        assert_eq!(kept(&plain), 9 * a + head);
        assert_eq!(kept(&ckpt), 3 * a + head);
        // At most: 2 boundaries not yet used, the segment's 3 recomputed activations.
        let back = ckpt.phase(1, 0, Phase::Backward).unwrap();
        assert!(back.by_category.activations <= 5 * a + head, "{:?}", back.by_category);
        assert!(ckpt.peak < plain.peak);
        // Checkpointing every layer keeps what the plain forward keeps.
        c.training.techniques.checkpoint = Checkpoint::Every(1);
        assert_eq!(kept(&predict(&c).unwrap()), kept(&plain));
    }

    /// Autocast halves what the forward keeps and adds its copies: after the forward, the
    /// casts of every weight but the first (saved for the input gradients) and of the batch
    /// (saved for layer 0's weight gradient); the biases' and the first weight's casts went with
    /// the cache. Parameters, gradients and Adam's state stay fp32.
    #[test]
    fn autocast_keeps_half_width_activations_and_the_saved_casts() {
        let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
        let mut c = config(3, 100, 256, adam);
        let plain = predict(&c).unwrap();
        c.training.techniques.amp = Amp::Bf16;
        let bf16 = predict(&c).unwrap();
        let fwd = |p: &Prediction| p.phase(1, 0, Phase::Forward).unwrap().end_by_category;
        let relu = 3 * 256 * 100;
        assert_eq!(fwd(&plain).activations - fwd(&bf16).activations, relu * 2, "4 bytes -> 2 per element");
        let weights_after_first = 2 * (100 * 100 + 100 * 100 + 4 * 100);
        assert_eq!(fwd(&bf16).amp_copies, weights_after_first + 2 * 256 * 32);
        assert_eq!(bf16.param_bytes, plain.param_bytes);
        let step = |p: &Prediction| p.phase(1, 0, Phase::OptimizerStep).unwrap().end_by_category;
        assert_eq!(step(&bf16).grads, bf16.param_bytes, "fp32 grads");
        assert_eq!(step(&bf16).optimizer_state, 2 * bf16.param_bytes + 8 * 4, "and 8 step counters");
        assert_eq!(step(&bf16).amp_copies, 0, "every cast gone by the optimizer step");
        // fp16 adds the grad scaler's scale and growth tracker, 4 bytes each, made at its first
        // scale() (step 1's backward), as PyTorch's GradScaler makes them.
        c.training.techniques.amp = Amp::Fp16 { scaler: Default::default() };
        let fp16 = predict(&c).unwrap();
        let state_after = |step, phase| fp16.phase(step, 0, phase).unwrap().end_by_category.optimizer_state;
        assert_eq!((state_after(0, Phase::Model), state_after(1, Phase::Forward)), (0, 0));
        assert_eq!(state_after(1, Phase::Backward), 8);
        let (a, b) = (fwd(&fp16), fwd(&bf16));
        assert_eq!((a.activations, a.amp_copies), (b.activations, b.amp_copies));
    }

    /// Every combination of techniques replays without freeing a byte it never allocated (the
    /// ledger's debug assertion), and each phase ends with nothing in flight: no transients, no
    /// autocast copies but those a forward's graph saved, no gradients after zero_grad.
    #[test]
    fn every_combination_balances_its_books() {
        let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
        let amps = [Amp::Off, Amp::Bf16, Amp::Fp16 { scaler: Default::default() }];
        let checkpoints = [Checkpoint::None, Checkpoint::Every(1), Checkpoint::Every(2), Checkpoint::Sqrt];
        let modes = [(Mode::Train, 1), (Mode::Train, 3), (Mode::Forward, 1), (Mode::ForwardNoGrad, 1)];
        let mut n = 0;
        for depth in 0..4 {
            for amp in amps {
                for checkpoint in checkpoints {
                    for (mode, accumulation) in modes {
                        for history in [History::None, History::LossTensor, History::LossValue] {
                            let mut c = config(depth, 16, 4, adam);
                            c.training.steps = 3;
                            c.training.techniques = Techniques {
                                amp,
                                checkpoint,
                                accumulation,
                                mode,
                                history,
                                optimizer_impl: None,
                            };
                            let p = predict(&c).unwrap();
                            // Between steps nothing of a step's graph is left but what the
                            // history keeps, and that grows by the same bytes every step.
                            let at_start: Vec<_> = (1..=3)
                                .map(|step| p.phase(step, 0, Phase::ToDevice).unwrap().end_by_category)
                                .collect();
                            for (i, cats) in at_start.iter().enumerate() {
                                let what = format!("{:?} at step {}", c.training.techniques, i + 1);
                                assert_eq!(
                                    (cats.activations, cats.amp_copies, cats.grads),
                                    (0, 0, 0),
                                    "{what}"
                                );
                            }
                            let growth = |i: usize| at_start[i + 1].history - at_start[i].history;
                            assert_eq!(growth(0), growth(1), "{:?}", c.training.techniques);
                            for ph in &p.phases {
                                let end = ph.end_by_category;
                                let what =
                                    format!("{:?} at {} {:?}", c.training.techniques, ph.step, ph.phase);
                                assert_eq!(end.transient, 0, "{what}");
                                // The casts the graph saved live from forward to backward (or
                                // on, with a kept loss, in its history).
                                if ph.phase != Phase::Forward {
                                    assert_eq!(end.amp_copies, 0, "{what}");
                                }
                                if ph.phase == Phase::ZeroGrad {
                                    assert_eq!(end.grads, 0, "{what}");
                                }
                            }
                            n += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(n, 4 * 3 * 4 * 4 * 3);
    }

    #[test]
    fn budget_helpers() {
        let p = predict(&config(1, 64, 4, SGD)).unwrap();
        assert!(p.fits(p.peak) && !p.fits(p.peak - 1));
        assert_eq!(p.first_over(p.peak - 1).map(|f| f.phase), Some(p.peak_phase().phase));
        assert_eq!(p.peak_phase().phase, Phase::Backward);
        assert_eq!(relative_error(102, 100), 0.02);
    }

    #[test]
    fn the_view_gather_allocates_only_when_the_window_wraps() {
        // 32 samples, batch 12: windows 0..12, 12..24, 24..36 (wraps).
        let mut c = config(1, 16, 12, SGD);
        c.training.steps = 3;
        let opts = Options { gather: Gather::ViewUnlessWrapped, ..Options::default() };
        let p = predict_with(&c, data_shape(&c.data).unwrap(), &opts).unwrap();
        let batch = |step| p.phase(step, 0, Phase::ToDevice).unwrap().end_by_category.batch;
        assert_eq!((batch(1), batch(2), batch(3)), (0, 0, 12 * 32 * 4 + 12 * 8));
    }
}
