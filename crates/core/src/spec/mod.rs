//! Experiment specs: TOML files parsed with unknown keys rejected ([`raw`]) and validated once
//! ([`validate`]) into the typed values below, which need no more checks downstream.
//!
//! A spec describes a base [`Config`] (model, data, training), how to run it ([`RunSpec`]) and
//! optionally a [`Sweep`] that varies one numeric field across trials.
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::device::DeviceChoice;

mod config;
pub mod csv_data;
pub mod examples;
pub mod limits;
mod model;
mod names;
mod raw;
pub mod size;
mod validate;

pub use config::Invalid;
pub use model::{
    CnnSpec, ConvKind, Loss, MlpSpec, ModelKind, ModelSpec, ResNet, ScriptSpec, ScriptUnits, TransformerSpec,
};
pub use names::Named;
pub use size::{against, exact_bytes, format_against, format_size, parse_size, typed_size};
pub use validate::{parse, SpecError};

/// Reads and validates the spec at `path`.
pub fn load(path: &Path) -> Result<Spec, SpecError> {
    let cannot = |why: String| SpecError(format!("{}: cannot read the spec: {why}", path.display()));
    // Checked before reading: a device (/dev/zero) or a FIFO would never end, and a huge file
    // would be read whole.
    let meta = std::fs::metadata(path).map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(cannot("not a regular file; give the path of a .toml spec".into()));
    }
    if meta.len() > limits::MAX_SPEC_BYTES {
        return Err(cannot(format!(
            "{} bytes is more than the limit of {} for a spec",
            meta.len(),
            limits::MAX_SPEC_BYTES
        )));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limits::MAX_SPEC_BYTES + 1), &mut bytes)
        })
        .map_err(|e| cannot(e.to_string()))?;
    if bytes.len() as u64 > limits::MAX_SPEC_BYTES {
        return Err(cannot(format!("more than the limit of {} bytes for a spec", limits::MAX_SPEC_BYTES)));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        cannot(format!("not UTF-8 text (invalid bytes at byte {})", e.utf8_error().valid_up_to()))
    })?;
    parse(&text, path)
}

/// A validated experiment spec.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// The file it was read from.
    pub path: PathBuf,
    /// The TOML text as read, kept for the manifest.
    #[serde(skip)]
    pub source: String,
    /// `[a-z0-9_-]+`; names the results folder.
    pub name: String,
    pub description: String,
    pub base: Config,
    pub run: RunSpec,
    pub sweep: Option<Sweep>,
    /// Named variations of the base, run in turn (each with the whole sweep); empty: the base.
    pub variants: Vec<Variant>,
}

/// A `[[variant]]`: a name and the base with the variant's keys laid over it, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    /// `[a-z0-9_-]+`, unique in the spec.
    pub name: String,
    pub config: Config,
    /// Not run on a CPU without this precision's matrix instructions, where its trials would take
    /// tens of times fp32's (`device::CpuCaps`); the run records why (`Manifest::not_run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_on_cpu_without: Option<crate::device::HalfPrecision>,
}

impl Variant {
    /// Why this variant is not run on a CPU with `caps` (`None`: it runs).
    pub fn skipped_on(&self, caps: crate::device::CpuCaps) -> Option<String> {
        let p = self.skip_on_cpu_without.filter(|&p| !caps.has(p))?;
        Some(format!(
            "this CPU has no {} matrix instructions ({}), without which libtorch takes tens of times \
             fp32's time (skip_on_cpu_without = \"{}\" in the spec; remove it to run the variant anyway)",
            p.key(),
            p.instructions(),
            p.key()
        ))
    }
}

impl Spec {
    /// The configurations to run, each with its variant name (`None` for the base alone).
    pub fn configs(&self) -> Vec<(Option<&str>, &Config)> {
        if self.variants.is_empty() {
            vec![(None, &self.base)]
        } else {
            self.variants.iter().map(|v| (Some(v.name.as_str()), &v.config)).collect()
        }
    }

    /// The configuration of one trial, as a summary row names it: its variant (`""` for none)
    /// and swept value. `None` when the spec has no such variant or the value does not apply.
    pub fn trial_config(&self, variant: &str, value: Option<f64>) -> Option<Config> {
        let (_, base) = self.configs().into_iter().find(|(v, _)| v.unwrap_or("") == variant)?;
        match (self.sweep.as_ref(), value) {
            (Some(sweep), Some(value)) => base.with(sweep.field, value).ok(),
            _ => Some(base.clone()),
        }
    }
}

/// Everything one trial needs to train.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub model: ModelSpec,
    pub data: DataSpec,
    /// Where the data set lives (`data.location`).
    pub location: DataLocation,
    pub training: TrainingSpec,
    /// How the trial spreads over ranks (`[parallel]`); one process when absent.
    pub parallel: Parallel,
}

/// `[parallel]`: how many ranks train the trial and how they share the work. The strategy is a
/// table of its own knobs so that part 2's strategies (ZeRO, FSDP, DataParallel, a model split)
/// follow as variants beside DDP's.
///
/// Invariants: `world_size >= 1`; `world_size > 1` only with a strategy; with a global batch,
/// `training.batch_size` is the per-rank share (`global_batch / world_size`, which divides).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Parallel {
    pub strategy: Strategy,
    /// Ranks in the world (`parallel.world_size`), one process each.
    pub world_size: usize,
    /// `batch = "global"`: the batch as written, split evenly over the ranks (a sweep of the
    /// world size then keeps the effective batch); `None`: `training.batch_size` is each rank's
    /// (`batch = "per_rank"`, the default, as a DataLoader per process gives it).
    pub global_batch: Option<usize>,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel { strategy: Strategy::None, world_size: 1, global_batch: None }
    }
}

impl Parallel {
    /// The DDP knobs when the model is wrapped in DistributedDataParallel (DDP itself, or ZeRO's
    /// optimizer over a DDP model).
    pub fn ddp(&self) -> Option<DdpSpec> {
        match self.strategy {
            Strategy::Ddp(d) | Strategy::Zero(d) => Some(d),
            Strategy::None => None,
        }
    }

    /// Whether each rank's optimizer holds state for its shard of the parameters only
    /// (ZeroRedundancyOptimizer), the shards broadcast from their owners after each step.
    pub fn shards_optimizer(&self) -> bool {
        matches!(self.strategy, Strategy::Zero(_))
    }

    /// Whether the trial runs as several ranks (a world of one with DDP runs the reducer too,
    /// as PyTorch's DDP does at world size 1).
    pub fn is_distributed(&self) -> bool {
        self.strategy != Strategy::None
    }
}

/// `parallel.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum Strategy {
    /// One process, as without `[parallel]`.
    None,
    /// `DistributedDataParallel`: every rank holds the whole model and optimizer, trains on its
    /// shard of the data, and all-reduces the gradients through the reducer's buckets.
    Ddp(DdpSpec),
    /// `torch.distributed.optim.ZeroRedundancyOptimizer` (ZeRO stage 1) over a DDP model: the
    /// gradients all-reduced as DDP does, each rank's optimizer over its shard of the parameters
    /// (PyTorch's sorted-greedy partition, [`crate::zero`]), so its state is the shard's; after
    /// each step every shard is broadcast from its owner.
    Zero(DdpSpec),
}

impl Strategy {
    /// The strategy's name in `parallel.strategy`.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Ddp(_) => "ddp",
            Strategy::Zero(_) => "zero",
        }
    }
}

/// DistributedDataParallel's knobs that change what a rank holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DdpSpec {
    /// `bucket_cap_mb` in bytes (`int(bucket_cap_mb * 1024 * 1024)`, as DDP computes it); `None`:
    /// DDP's default, 25 MiB, the first bucket 1 MiB.
    pub bucket_cap_bytes: Option<u64>,
    /// `gradient_as_bucket_view`: the gradients are views into the buckets, not a second copy.
    pub gradient_as_bucket_view: bool,
    /// `find_unused_parameters`: the graph searched after each forward for parameters it skips.
    pub find_unused_parameters: bool,
    /// `static_graph`: the graph the same every step (the buckets rebuilt once, as usual).
    pub static_graph: bool,
}

/// Where the data set lives during training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataLocation {
    /// In host memory, as the lesson's DataLoader keeps it: each step's batch is gathered there
    /// and moved to the device. On the CPU the host is the device: the same as `Device`.
    #[default]
    Host,
    /// Made on the device whole; batches are gathered there.
    Device,
}

/// Where the training data comes from. The model's kind decides which: an MLP reads features
/// (synthetic or CSV), a CNN images, a Transformer tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DataSpec {
    /// Seeded random features with labels from a fixed random linear teacher, made on the
    /// device. Invariants: all counts >= 1, `classes >= 2`.
    Synthetic { samples: usize, features: usize, classes: usize, seed: u64 },
    /// Seeded standard-normal images `[channels, size, size]`, labelled by a fixed random
    /// linear teacher over their pixels. Invariants: all counts >= 1, `classes >= 2`.
    Images { samples: usize, channels: usize, size: usize, classes: usize, seed: u64 },
    /// Seeded random token ids in `0..vocab`, `seq_len` per sample; a sample's label is its
    /// first token modulo `classes`, which a model can learn. Invariants: all counts >= 1,
    /// `classes >= 2`.
    Tokens { samples: usize, seq_len: usize, vocab: usize, classes: usize, seed: u64 },
    /// A CSV file with a header: one integer label column, every other column a feature.
    Csv {
        /// Resolved against the spec's folder.
        path: PathBuf,
        label: String,
    },
    /// Seeded tensors for a TorchScript module's forward, one per input in order, each
    /// `[samples, *shape]`; and a target `[samples, *target]`: class indices in `0..classes`
    /// (cross_entropy) or, without classes, standard-normal values in the training dtype (mse).
    /// Invariants: `samples >= 1`, at least one input, every dimension >= 1, `classes >= 2`,
    /// an int64 input's `high >= 1`.
    Tensors {
        samples: usize,
        inputs: Vec<TensorInput>,
        target: Vec<usize>,
        classes: Option<usize>,
        seed: u64,
    },
}

/// One input of `data.kind = "tensors"`: `data.inputs[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorInput {
    /// For messages (`input0`, `input1`, ... when the spec gives none).
    pub name: String,
    /// One sample's shape, without the batch dimension.
    pub shape: Vec<usize>,
    pub dtype: InputDtype,
}

/// What an input of `data.kind = "tensors"` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputDtype {
    /// Standard normal, in the training dtype (`training.dtype`).
    Float,
    /// Uniform ids in `0..high` (token ids, indices).
    Int64 { high: usize },
    /// Uniform true or false (masks).
    Bool,
}

impl DataSpec {
    /// `"synthetic"`, `"images"`, `"tokens"`, `"csv"` or `"tensors"`, as `data.kind` says it.
    pub fn kind(&self) -> &'static str {
        match self {
            DataSpec::Synthetic { .. } => "synthetic",
            DataSpec::Images { .. } => "images",
            DataSpec::Tokens { .. } => "tokens",
            DataSpec::Csv { .. } => "csv",
            DataSpec::Tensors { .. } => "tensors",
        }
    }

    /// The rows of a data set oomlab makes; `None` for a CSV (the file decides).
    pub fn samples(&self) -> Option<usize> {
        match *self {
            DataSpec::Synthetic { samples, .. }
            | DataSpec::Images { samples, .. }
            | DataSpec::Tokens { samples, .. }
            | DataSpec::Tensors { samples, .. } => Some(samples),
            DataSpec::Csv { .. } => None,
        }
    }

    /// The same data with at most `n` rows where oomlab makes them (a CSV is the file's).
    pub fn with_samples_at_most(&self, n: usize) -> DataSpec {
        let mut data = self.clone();
        if let DataSpec::Synthetic { samples, .. }
        | DataSpec::Images { samples, .. }
        | DataSpec::Tokens { samples, .. }
        | DataSpec::Tensors { samples, .. } = &mut data
        {
            *samples = (*samples).min(n);
        }
        data
    }
}

/// Invariants: `batch_size >= 1`, `steps >= 1`; for synthetic data `batch_size <= samples`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainingSpec {
    pub optimizer: OptimizerSpec,
    pub batch_size: usize,
    pub steps: usize,
    pub dtype: Dtype,
    /// Seeds parameter initialisation and batch order.
    pub seed: u64,
    /// How the step is trained: accumulation, mixed precision, checkpointing, mode, history.
    pub techniques: Techniques,
}

/// The memory techniques of the lesson's guides: mixed precision in `train::amp`, checkpointing
/// in `nn::checkpoint`, accumulation, mode and history in `train::step`.
/// They compose: e.g. fp16 autocast with checkpointing and accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Techniques {
    /// Micro-batches per optimizer step (`training.accumulation`); `batch_size` is the micro-batch,
    /// so the effective batch is `batch_size * accumulation`. >= 1.
    pub accumulation: usize,
    /// Mixed precision (`training.amp`).
    pub amp: Amp,
    /// Activation checkpointing (`training.checkpoint`).
    pub checkpoint: Checkpoint,
    /// What a step does (`training.mode`).
    pub mode: Mode,
    /// What the loop keeps of each step's loss (`training.history`).
    pub history: History,
    /// How `torch.optim` runs the update (`training.optimizer_impl`); None: what PyTorch picks
    /// for the device ([`OptimizerImpl::pytorch_default`]).
    pub optimizer_impl: Option<OptimizerImpl>,
}

impl Default for Techniques {
    fn default() -> Self {
        Techniques {
            accumulation: 1,
            amp: Amp::Off,
            checkpoint: Checkpoint::None,
            mode: Mode::Train,
            history: History::None,
            optimizer_impl: None,
        }
    }
}

/// The implementations of `torch.optim`'s SGD, Adam and AdamW. TOML:
/// `optimizer_impl = "for_loop" | "foreach" | "fused"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerImpl {
    /// One parameter at a time (`foreach=False`): a parameter's temporaries at once.
    ForLoop,
    /// `_foreach_*` ops over every parameter (`foreach=True`): whole-model temporaries.
    Foreach,
    /// One `_fused_*_` kernel (`fused=True`): no temporaries; the grad scaler's unscale inside.
    Fused,
}

impl OptimizerImpl {
    /// What `torch.optim.Adam(params)` (and SGD, AdamW) picks when told nothing
    /// (`_default_to_fused_or_foreach`): foreach when every parameter is on CUDA, else the
    /// for-loop; never fused.
    pub fn pytorch_default(cuda: bool) -> OptimizerImpl {
        if cuda {
            OptimizerImpl::Foreach
        } else {
            OptimizerImpl::ForLoop
        }
    }

    /// The implementation a configuration runs on a device.
    pub fn resolve(choice: Option<OptimizerImpl>, cuda: bool) -> OptimizerImpl {
        choice.unwrap_or(Self::pytorch_default(cuda))
    }
}

/// Autocast for the forward pass; fp16 also scales the loss with a dynamic grad scaler.
/// TOML: `amp = "off" | "fp16" | "bf16"`, and for fp16 an optional
/// `scaler = { init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000 }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "dtype", rename_all = "snake_case")]
pub enum Amp {
    Off,
    Fp16 { scaler: ScalerSpec },
    Bf16,
}

/// Autocast's dtype, without the grad scaler's settings: summary.csv's `amp` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmpKind {
    Off,
    Fp16,
    Bf16,
}

impl Amp {
    /// Autocast's dtype: the one table of it, for the trainer, the estimate and its rules;
    /// `None` without mixed precision.
    pub fn autocast(&self) -> Option<tch::Kind> {
        match self {
            Amp::Off => None,
            Amp::Fp16 { .. } => Some(tch::Kind::Half),
            Amp::Bf16 => Some(tch::Kind::BFloat16),
        }
    }

    pub fn kind(&self) -> AmpKind {
        match self {
            Amp::Off => AmpKind::Off,
            Amp::Fp16 { .. } => AmpKind::Fp16,
            Amp::Bf16 => AmpKind::Bf16,
        }
    }
}

/// Which optimizer, as summary.csv names it: plain SGD and SGD with momentum apart, since
/// only the second keeps state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    SgdMomentum,
    Adam,
    #[serde(rename = "adamw")]
    AdamW,
}

impl OptimizerKind {
    /// State tensors the optimizer keeps per parameter, each the parameter's size: the one
    /// table of them (momentum's buffer; Adam's and AdamW's two moments).
    pub fn state_tensors(self) -> u64 {
        match self {
            OptimizerKind::Sgd => 0,
            OptimizerKind::SgdMomentum => 1,
            OptimizerKind::Adam | OptimizerKind::AdamW => 2,
        }
    }
}

/// PyTorch's GradScaler settings (same defaults). Invariants: init_scale > 0,
/// growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScalerSpec {
    pub init_scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    pub growth_interval: usize,
}

impl Default for ScalerSpec {
    fn default() -> Self {
        ScalerSpec { init_scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000 }
    }
}

/// Which activations are kept for backward. TOML: `checkpoint = "none" | "sqrt" | K |
/// { sequential = S }`: K >= 1 makes a segment of every K units; "sqrt" makes about sqrt(units)
/// segments; `{ sequential = S }` cuts as PyTorch's `checkpoint_sequential(units, S, x)` does
/// (see [`Checkpoint::segments`]). The head is never checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpoint {
    None,
    Every(usize),
    Sqrt,
    /// `torch.utils.checkpoint.checkpoint_sequential`'s `segments` (1 <= S <= units): S - 1
    /// checkpointed segments of `units / S` units each, then the rest of the units plain.
    Sequential(usize),
}

impl Checkpoint {
    /// Units per checkpointed segment for a model of `depth` units (the last segment of
    /// `Every` and `Sqrt` may be shorter); `None` when nothing is checkpointed.
    pub fn segment_len(self, depth: usize) -> Option<usize> {
        match self {
            Checkpoint::None => None,
            Checkpoint::Every(k) => Some(k.max(1)),
            Checkpoint::Sqrt => Some(((depth as f64).sqrt().ceil() as usize).max(1)),
            Checkpoint::Sequential(_) => {
                self.segments(depth).and_then(|s| s.checkpointed.first().map(|r| r.len()))
            }
        }
    }

    /// How a training step cuts a model of `units` units; `None` when it runs the plain
    /// forward: no checkpointing, or `Sequential(1)`, whose one segment PyTorch runs plain.
    ///
    /// `Every` and `Sqrt` checkpoint every unit ([`segment_ranges`]). `Sequential(s)` follows
    /// `checkpoint_sequential`: `segment_size = units / s` (integer division); the first
    /// `s - 1` segments of `segment_size` units are checkpointed, and the rest (`units -
    /// segment_size * (s - 1)` units, at least one segment's worth) runs plain, keeping its
    /// activations as a forward without checkpointing does. An `s` above `units` (which the
    /// spec refuses, and PyTorch fails on) is taken as `units`.
    pub fn segments(self, units: usize) -> Option<Segments> {
        match self {
            Checkpoint::None => None,
            Checkpoint::Every(_) | Checkpoint::Sqrt => Some(Segments::every(units, self.segment_len(units)?)),
            Checkpoint::Sequential(s) => {
                let s = s.min(units);
                if s <= 1 {
                    return None;
                }
                let size = units / s;
                let end = size * (s - 1);
                Some(Segments {
                    checkpointed: (0..s - 1).map(|i| i * size..(i + 1) * size).collect(),
                    plain: end..units,
                })
            }
        }
    }
}

/// A checkpointed forward's cut of the units `0..units`: the checkpointed segments, in order
/// from unit 0, then the units that run plain (with grad tracking, keeping their activations,
/// like the head after them) from the last segment's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments {
    pub checkpointed: Vec<std::ops::Range<usize>>,
    /// Empty but for `Checkpoint::Sequential`; starts where the last segment ends.
    pub plain: std::ops::Range<usize>,
}

impl Segments {
    /// Every unit checkpointed, in segments of `len` ([`segment_ranges`]).
    pub fn every(units: usize, len: usize) -> Segments {
        Segments { checkpointed: segment_ranges(units, len), plain: units..units }
    }
}

/// `0..depth` cut into consecutive segments of `len` hidden layers, the last one possibly
/// shorter: what the trainer checkpoints and the estimate replays.
pub fn segment_ranges(depth: usize, len: usize) -> Vec<std::ops::Range<usize>> {
    (0..depth).step_by(len.max(1)).map(|start| start..start.saturating_add(len).min(depth)).collect()
}

/// What a step does. TOML: `mode = "train" | "forward" | "forward_no_grad"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Forward, backward, optimizer step, zero_grad.
    Train,
    /// Forward and loss with gradient tracking, no backward (a validation loop without no_grad).
    Forward,
    /// Forward and loss under no_grad.
    ForwardNoGrad,
}

/// What the loop keeps of each step's loss. TOML: `history = "none" | "loss_tensor" | "loss_value"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    None,
    /// The loss tensor, and with it its autograd graph (the guide's leak: `losses.append(loss)`).
    LossTensor,
    /// A plain number (`losses.append(loss.item())`).
    LossValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum OptimizerSpec {
    Sgd {
        lr: f64,
        momentum: f64,
        weight_decay: f64,
    },
    Adam {
        lr: f64,
        weight_decay: f64,
    },
    #[serde(rename = "adamw")]
    AdamW {
        lr: f64,
        weight_decay: f64,
    },
}

/// The dtype of parameters and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Float32,
    Float64,
    Bfloat16,
    Float16,
}

impl Dtype {
    /// Bytes per element: the one table of element sizes.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float64 => 8,
            Dtype::Bfloat16 | Dtype::Float16 => 2,
        }
    }

    /// Bytes per element of the loss and the other values reduced in full precision: float64 in
    /// a float64 model, float32 in every other (a half-precision model's and autocast's losses
    /// are computed in float32).
    pub fn loss_bytes(self) -> u64 {
        if self == Dtype::Float64 {
            8
        } else {
            4
        }
    }

    pub fn kind(self) -> tch::Kind {
        match self {
            Dtype::Float32 => tch::Kind::Float,
            Dtype::Float64 => tch::Kind::Double,
            Dtype::Bfloat16 => tch::Kind::BFloat16,
            Dtype::Float16 => tch::Kind::Half,
        }
    }
}

/// How to run the spec. The command line may override device and budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSpec {
    #[serde(serialize_with = "crate::spec::display")]
    pub device: DeviceChoice,
    /// A memory budget in bytes on the CPU (oomlab's counting allocator's cap): `budget`, or
    /// its `cpu` key.
    pub budget: Option<u64>,
    /// On CUDA (the caching allocator's per-process cap): `budget`, or its `cuda` key. The same
    /// as `budget` unless the spec sizes the two apart, because a GPU keeps tens of MiB of
    /// workspaces that a CPU-sized budget would mostly be.
    pub cuda_budget: Option<u64>,
    pub on_oom: OnOom,
    /// Skip a trial whose predicted peak (`oomlab estimate`) exceeds the budget by more than this
    /// fraction, recording it as `predicted_oom` (`run.skip_predicted_oom`; needs a budget).
    pub skip_predicted_oom: Option<f64>,
    /// How many times the spec's trials run, round after round (every variant and value once a
    /// round), so that step times compare across the same stretch of time: a machine that
    /// speeds up or slows down over a minute (another process, a VM's host) would otherwise
    /// time the first variant against a different machine than the last. Memory is the same
    /// every round. 1 unless `run.rounds` says; only without a search or halving, whose
    /// trials depend on the ones before.
    #[serde(skip_serializing_if = "is_one")]
    pub rounds: usize,
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl RunSpec {
    /// The budget for a run on CUDA (`cuda`) or the CPU.
    pub fn budget_on(&self, cuda: bool) -> Option<u64> {
        if cuda {
            self.cuda_budget
        } else {
            self.budget
        }
    }

    /// Both budgets set to one value (a command line's `--budget`, or what a run used).
    pub fn set_budget(&mut self, budget: Option<u64>) {
        (self.budget, self.cuda_budget) = (budget, budget);
    }
}

/// What a sweep does after a trial runs out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOom {
    /// Go on with the next point.
    Continue,
    /// End the sweep.
    Stop,
}

/// One field varied across trials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    pub field: Field,
    pub mode: SweepMode,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepMode {
    /// These values, in this order. Integer fields hold whole numbers.
    List(Vec<f64>),
    /// The exact largest value that fits (`sweep::Search`): guided by the estimate's predicted
    /// largest value where it covers the configuration and `guided` (the default), else by
    /// bisection from `start` and `max`. `factor` is how fast a guided search widens away from a
    /// wrong guess. Integer fields only; `1 <= start <= max`, `factor >= 2`. `anchor`, if set
    /// (`1 <= anchor <= max`), is tried first by every variant, so that their memory compares
    /// at one value besides each one's own boundary.
    Search {
        start: u64,
        factor: u64,
        max: u64,
        guided: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        anchor: Option<u64>,
        /// `max` was left out: it is the largest value every config of the spec takes (a batch
        /// no larger than the data set, a depth within oomlab's limits), and the search grows
        /// from `start` (or the estimate's guess) until out of memory instead of trying `max`,
        /// so that on a larger device it finds the boundary a fixed `max` would have cut off.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        implied_max: bool,
    },
    /// The guide's batch-size strategy: try `start`, then halve until a trial fits.
    /// Integer fields only; `start >= 1`.
    Halve { start: u64 },
}

/// A numeric field a sweep can vary, named by its TOML key. Each applies to the model and data
/// kinds that have it ([`Config::get`] is `None` elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Field {
    /// An MLP's hidden layers, a plain CNN's blocks.
    #[serde(rename = "model.depth")]
    Depth,
    /// A uniform MLP's width.
    #[serde(rename = "model.hidden")]
    Hidden,
    /// A plain CNN's channels.
    #[serde(rename = "model.channels")]
    Channels,
    #[serde(rename = "model.d_model")]
    DModel,
    #[serde(rename = "model.num_layers")]
    NumLayers,
    #[serde(rename = "training.batch_size")]
    BatchSize,
    #[serde(rename = "training.steps")]
    Steps,
    #[serde(rename = "data.samples")]
    Samples,
    #[serde(rename = "data.features")]
    Features,
    /// Images' side, in pixels.
    #[serde(rename = "data.size")]
    ImageSize,
    #[serde(rename = "data.seq_len")]
    SeqLen,
    #[serde(rename = "training.lr")]
    Lr,
    #[serde(rename = "training.accumulation")]
    Accumulation,
    /// The ranks of a `[parallel]` strategy.
    #[serde(rename = "parallel.world_size")]
    WorldSize,
}

impl Field {
    pub const ALL: [Field; 14] = [
        Field::Depth,
        Field::Hidden,
        Field::Channels,
        Field::DModel,
        Field::NumLayers,
        Field::BatchSize,
        Field::Steps,
        Field::Samples,
        Field::Features,
        Field::ImageSize,
        Field::SeqLen,
        Field::Lr,
        Field::Accumulation,
        Field::WorldSize,
    ];

    /// The TOML key, e.g. `model.depth`.
    pub fn key(self) -> &'static str {
        match self {
            Field::Depth => "model.depth",
            Field::Hidden => "model.hidden",
            Field::Channels => "model.channels",
            Field::DModel => "model.d_model",
            Field::NumLayers => "model.num_layers",
            Field::BatchSize => "training.batch_size",
            Field::Steps => "training.steps",
            Field::Samples => "data.samples",
            Field::Features => "data.features",
            Field::ImageSize => "data.size",
            Field::SeqLen => "data.seq_len",
            Field::Lr => "training.lr",
            Field::Accumulation => "training.accumulation",
            Field::WorldSize => "parallel.world_size",
        }
    }

    /// The short name used as a CSV column and axis label, e.g. `depth`.
    pub fn column(self) -> &'static str {
        self.key().rsplit('.').next().unwrap_or(self.key())
    }

    pub fn from_key(key: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.key() == key)
    }

    pub fn is_integer(self) -> bool {
        !matches!(self, Field::Lr)
    }

    /// What has this field, for a message about sweeping it where it does not apply.
    pub fn applies_to(self) -> &'static str {
        match self {
            Field::Depth => "an MLP's hidden layers (hidden and depth) or a plain CNN's blocks",
            Field::Hidden => "the width of an MLP given by hidden and depth (not widths)",
            Field::Channels => r#"a plain CNN's channels (kind = "cnn", arch = "plain")"#,
            Field::DModel | Field::NumLayers => r#"a Transformer's (kind = "transformer")"#,
            Field::Samples => "the size of a data set oomlab makes (not a CSV)",
            Field::Features => r#"synthetic data's (kind = "synthetic")"#,
            Field::ImageSize => r#"images' side (data kind = "images")"#,
            Field::SeqLen => r#"token sequences' length (data kind = "tokens")"#,
            Field::BatchSize | Field::Steps | Field::Lr | Field::Accumulation => "every model's",
            Field::WorldSize => r#"a [parallel] table with a strategy (strategy = "ddp")"#,
        }
    }
}

/// Serializes a value through its `Display`.
pub(crate) fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl OptimizerSpec {
    pub fn lr(&self) -> f64 {
        match *self {
            OptimizerSpec::Sgd { lr, .. }
            | OptimizerSpec::Adam { lr, .. }
            | OptimizerSpec::AdamW { lr, .. } => lr,
        }
    }

    fn set_lr(&mut self, value: f64) {
        match self {
            OptimizerSpec::Sgd { lr, .. }
            | OptimizerSpec::Adam { lr, .. }
            | OptimizerSpec::AdamW { lr, .. } => *lr = value,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    pub fn kind(&self) -> OptimizerKind {
        match self {
            OptimizerSpec::Sgd { momentum, .. } if *momentum != 0.0 => OptimizerKind::SgdMomentum,
            OptimizerSpec::Sgd { .. } => OptimizerKind::Sgd,
            OptimizerSpec::Adam { .. } => OptimizerKind::Adam,
            OptimizerSpec::AdamW { .. } => OptimizerKind::AdamW,
        }
    }
}
