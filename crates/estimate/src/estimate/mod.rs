//! Predict before you run: a model of the memory a trial allocates, phase by phase and by
//! category, without training and without a GPU (milliseconds for a whole sweep).
//!
//! The model is a replay, one for every kind oomlab builds (MLP, CNN, ResNet, Transformer).
//! [`phases`] walks the trial the way `train::step` runs it, and runs the model's own code
//! (`nn`, the same code `run` trains) over symbolic tensors ([`graph`]): shapes, strides and
//! dtypes over storages the [`Ledger`] counts, with libtorch's ops (what each allocates, saves
//! and frees; [`graph::kernels`] for what a kernel takes besides its output), its autograd engine
//! (the order nodes run and when saved tensors and gradients go), autocast (its casts and their
//! cache) and `torch.utils.checkpoint`'s recompute. The optimizer's and the grad scaler's steps
//! are replayed from `torch.optim`'s code over the parameters' sizes ([`terms`]). The comments
//! name the libtorch function each event comes from.
//!
//! The ledger files every byte under a [`Category`]:
//!
//! | category | what |
//! |---|---|
//! | data | the data set: `x`, `y` (int64 labels) |
//! | batch | each micro-batch's `index_select` copies (moved to the device when the set is on the host) |
//! | params | the model's parameters (and buffers) |
//! | grads | `.grad`, from backward to `zero_grad` |
//! | optimizer_state | momentum buffers; Adam's `exp_avg`, `exp_avg_sq` and step; the grad scaler's scale |
//! | activations | what the graph saved for backward (an MLP's ReLU outputs, a norm's statistics, attention's logsumexp), a checkpointed forward's boundaries, the loss |
//! | amp_copies | autocast's casts: the parameters' (cached until the forward ends) and what the graph saved of them |
//! | transient | an op's output before a node saves it; gradients in flight; kernel scratch and workspaces per call; optimizer temporaries; wrapped 0-dim scalars |
//! | history | losses the loop keeps (`history = "loss_tensor"`), with whatever their graphs still hold |
//!
//! A tensor is often known for what it is only just after it is made (a node saves its output,
//! a gradient becomes a leaf's `.grad`); a phase's categories at its peak count it as what it
//! became. For an MLP of `depth` hidden layers of width `H`, batch `B`, `K` classes and element
//! size `e`, a training step's forward keeps `depth·B·H·e + B·K·e + 2e` of activations, and its
//! peak is one of: the forward's last hidden layer (its Linear's output and its ReLU's live
//! together), a Linear's backward (incoming gradient, input gradient and the weight's and bias's
//! together), or the optimizer's step (Adam's temporaries of the largest parameter).
//!
//! On the CPU, oomlab's counting allocator counts exactly these bytes, so the model is exact
//! there (`tests/suite/estimate_accuracy.rs`, `tests/suite/estimate_kinds.rs`; bf16 products through oneDNN
//! take a scratch buffer the replay knows per CPU: [`onednn`]). On CUDA the replay runs through
//! libtorch's caching allocator ([`caching`]: 512-byte blocks, pools, segments) with the cuBLAS
//! and cuBLASLt workspaces libtorch keeps ([`workspace`]) and the kernels' own buffers (the
//! reduction's staging, [`cuda_reduce`]; cuDNN's attention workspaces); [`evidence`] says which
//! of its rules a GPU has confirmed and bounds the rest.
//!
//! Covered: every optimizer and implementation, any dtype, gradient accumulation, activation
//! checkpointing (oomlab's cut and `checkpoint_sequential`'s), mixed precision with the fp16
//! grad scaler, modes `forward` and `forward_no_grad`, and the loss history, in any combination;
//! a TorchScript module, whose code oomlab does not have, from its own step recorded on the CPU
//! and fitted over the batch ([`recorded`]; the CPU only). Not covered ([`predict`] says so):
//! mixed precision over parameters that are not float32. [`Prediction::notes`] says where a
//! prediction is less than exact.
pub mod bounds;
pub mod caching;
pub mod cuda_reduce;
pub mod cudnn_conv;
pub mod ddp;
pub mod evidence;
pub mod graph;
mod ledger;
pub mod onednn;
mod options;
mod phases;
mod prediction;
mod recorded;
pub mod report;
mod steps;
mod sweeps;
pub mod terms;
pub mod timing;
pub mod workspace;

use anyhow::{bail, Result};

pub use graph::flash_backward_racy;
pub use graph::kernels::announce_profiling;
pub use ledger::{BlockAction, BlockEvent, Categories, Category, Ledger};
pub use options::Options;
pub use prediction::{relative_error, PhasePrediction, PredictedOom, Prediction};
pub use recorded::ADVISE_LADDER_BUDGET;
pub use steps::{describe_steps, steps_needed, StepsNeeded};
pub use sweeps::{
    largest_fit, largest_sure_fit, predict_each, predict_spec, predict_sweep, search_guide, Guide,
    SweepPoint, SweepPrediction,
};
pub use terms::{DataShape, Target};
pub use workspace::{GpuArch, NamedGpu, Workspaces};

use crate::spec::{Amp, Config, DataSpec, Dtype, Mode, ModelSpec, Named, OptimizerImpl};

/// Why the symbolic replay has no TorchScript module: its ops are in its file. (The estimate
/// records its step instead: [`recorded`].)
pub const NOT_REPLAYED_SCRIPT: &str = "the symbolic replay cannot run a TorchScript module (model.kind = \
     \"torchscript\"): its ops are in the file, not in oomlab's code";

/// Predicts a trial of `config` on the CPU. For CSV data the file's
/// shape is read (header, labels, rows); see [`predict_with`] to give it instead.
pub fn predict(config: &Config) -> Result<Prediction> {
    let shape = data_shape(&config.data)?;
    predict_with(config, shape, &Options::default())
}

/// Predicts a trial of `config` whose data set has `shape` (the synthetic spec's own shape is
/// ignored in favour of it).
pub fn predict_with(config: &Config, shape: DataShape, options: &Options) -> Result<Prediction> {
    Ok(replay(config, shape, options, false)?.0)
}

/// [`predict_with`], and every allocation and free of its replay in order (`estimate --blocks`):
/// the sequence a GPU's allocation history is held against.
pub fn predict_blocks(
    config: &Config,
    shape: DataShape,
    options: &Options,
) -> Result<(Prediction, Vec<BlockEvent>)> {
    replay(config, shape, options, true)
}

fn replay(
    config: &Config,
    shape: DataShape,
    options: &Options,
    record: bool,
) -> Result<(Prediction, Vec<BlockEvent>)> {
    let t = &config.training;
    let tech = t.techniques;
    if config.parallel.ddp().is_some() {
        // Modelled: the wrap's broadcast and buckets, their rebuild, the map of used parameters,
        // gradients as bucket views (`phases::net`), measured against CPU ranks.
        if matches!(config.model, ModelSpec::Torchscript(_)) {
            bail!(
                "estimate predicts DDP ranks of oomlab's own models; a TorchScript module is estimated from a \
                 recorded step of one process, which records no ranks yet: `oomlab run` measures every rank"
            );
        }
    }
    if let ModelSpec::Torchscript(_) = &config.model {
        // An mse target has no classes: only the rows matter to a recording.
        if shape.samples == 0 {
            bail!("estimate needs a data set with samples, not {shape:?}");
        }
        return recorded::predict(config, shape, options, record);
    }
    if tech.amp != Amp::Off && t.dtype != Dtype::Float32 {
        bail!("estimate models mixed precision (training.amp) over float32 parameters only");
    }
    if shape.samples == 0 || shape.features == 0 || shape.classes == 0 {
        bail!("estimate needs a data set with samples, features and classes, not {shape:?}");
    }
    // From here on no size can overflow the replay's integers, and the replay is bounded.
    bounds::check(config, shape, options.target)?;
    let input = crate::nn::Input::of(&config.data, shape.features, shape.classes);
    let params = phases::parameter_numels(config, input, options.target);
    let mut terms = terms::Terms::new(shape, params, t.batch_size, t.dtype, options.target);
    let mut zero_note = None;
    if config.parallel.shards_optimizer() {
        let world = config.parallel.world_size;
        let rank = zero_rank(options, &terms.params, world);
        if rank >= world {
            bail!("estimate of rank {rank} asked of a world of {world} ranks (0 to {})", world - 1);
        }
        let parts = crate::zero::partition(&terms.params, world);
        terms = terms.optimizing(&parts[rank]);
        let which = if options.rank.is_some() { "" } else { ", the one with the largest shard" };
        zero_note = Some(format!(
            "zero: rank {rank} of {world}{which}: ZeroRedundancyOptimizer's optimizer over {} of the {} parameter \
             tensors ({} of {}), PyTorch's sorted-greedy partition; every shard broadcast in place after each step",
            parts[rank].len(),
            terms.params.len(),
            crate::spec::format_size(terms.optimized_bytes()),
            crate::spec::format_size(terms.param_bytes()),
        ));
    }
    let sim = phases::Sim::new(config, &terms, options);
    let replay = if record { sim.record().run() } else { sim.run() };
    let blocks = replay.blocks;
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
    if config.model.mlp_widths().is_none() {
        notes.push(match options.target {
            Target::Cpu if matches!(config.model, crate::spec::ModelSpec::Cnn(_)) => format!(
                "{}: replayed op by op through the model's own code; oneDNN's convolution buffers and batch norm's \
                 were measured on this CPU at {} thread(s) (batches past {} extrapolated from two)",
                config.model.describe(),
                options.threads,
                graph::kernels::EXACT_UP_TO
            ),
            Target::Cpu => format!(
                "{}: replayed op by op through the model's own code, at {} thread(s)",
                config.model.describe(),
                options.threads
            ),
            Target::Cuda => format!(
                "{}: replayed op by op through the model's own code{}",
                config.model.describe(),
                match &config.model {
                    crate::spec::ModelSpec::Cnn(_) => format!("; {}", cudnn_note(replay.cudnn)),
                    crate::spec::ModelSpec::Transformer(m) => format!(
                        "; attention: {}",
                        evidence::attention(config, m, options.gpu).covers
                    ),
                    _ => String::new(),
                }
            ),
        });
        if let (Target::Cpu, crate::spec::ModelSpec::Transformer(m), DataSpec::Tokens { seq_len, .. }) =
            (options.target, &config.model, &config.data)
        {
            let acc_bytes = t.dtype.loss_bytes();
            let racy = flash_backward_racy(
                t.batch_size as i64,
                m.nhead as i64,
                *seq_len as i64,
                options.threads,
                acc_bytes,
            );
            if m.dropout == 0.0 && tech.mode == Mode::Train && racy > 0 {
                notes.push(format!(
                    "attention without dropout runs the CPU flash kernel, whose backward makes a buffer in each \
                     of its parallel chunks; they are counted live at once, as a quiet machine runs them (on a \
                     busy one the backward may peak up to {racy} B lower)"
                ));
            }
        }
        if tech.amp != Amp::Off && options.target == Target::Cuda {
            notes.push(
                "autocast on CUDA: its own op lists replayed (layer_norm and nll_loss in fp32, cross_entropy's \
                 log_softmax in the logits' dtype, no CPU upcasts)"
                    .into(),
            );
        }
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
    if config.parallel.ddp().is_some() {
        let world = config.parallel.world_size;
        notes.push(format!(
            "ddp: one rank of {world}, at its batch of {}: the wrap's shape check and broadcast and the reducer's \
             buckets (a second copy of the gradients) replayed as PyTorch 2.11's DDP makes them, held to CPU ranks \
             over gloo",
            t.batch_size
        ));
        notes.extend(zero_note);
        if options.target == Target::Cuda {
            notes.push(
                "ddp on cuda: NCCL's own buffers live outside PyTorch's allocator and are not counted; DDP on GPUs \
                 has not been measured by oomlab yet"
                    .into(),
            );
        }
    }
    if matches!(t.dtype, Dtype::Float16 | Dtype::Bfloat16) {
        notes.push(
            format!("{:?}: kernels that accumulate in float32 may add temporaries", t.dtype).to_lowercase(),
        );
    }
    if matches!(tech.amp, Amp::Fp16 { .. }) && t.optimizer.kind().state_tensors() > 0 {
        notes.push(
            "fp16: assumes the grad scaler skips no step; a skipped first step (inf/NaN gradients) \
             makes the optimizer's state arrive a step later"
                .into(),
        );
    }
    if options.target == Target::Cpu && onednn::lowp_matmul(&tech.amp) {
        notes.push(format!(
            "{} on this CPU: oneDNN's matmul scratch buffer (up to a few MB, by the shapes) is not modelled; it \
             can put the forward and backward peaks that much above this",
            tech.amp.as_str()
        ));
    }
    let rules = evidence::rules(config, &phases, options.target, options.gpu);
    let bound = evidence::bound(rules, &phases, replay.baseline);
    let prediction = Prediction {
        bound,
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
    };
    Ok((prediction, blocks))
}

/// The rank a prediction of `config` is of where ranks differ (ZeRO's shards): the one
/// `options` names, else the one with the largest shard. `None` where every rank is alike (one
/// process, DDP).
pub fn predicted_rank(config: &Config, shape: DataShape, options: &Options) -> Option<usize> {
    if !config.parallel.shards_optimizer() {
        return None;
    }
    let input = crate::nn::Input::of(&config.data, shape.features, shape.classes);
    let numels = phases::parameter_numels(config, input, options.target);
    Some(zero_rank(options, &numels, config.parallel.world_size))
}

/// The ZeRO rank `options` names, else the one whose shard of `numels` is the largest.
fn zero_rank(options: &Options, numels: &[u64], world: usize) -> usize {
    options.rank.unwrap_or_else(|| crate::zero::largest_part(numels, world))
}

/// What the CUDA replay of a convolutional model knew of cuDNN's workspaces: `(measured, calls)`.
fn cudnn_note((measured, calls): (usize, usize)) -> String {
    let table = "src/estimate/cudnn_workspaces.csv";
    if measured == 0 {
        return format!(
            "cuDNN's convolution workspaces are not modelled for this GPU and these shapes (none of its {calls} \
             cuDNN calls is in {table}; on an H200 they added up to 31% of a trial's bytes): a lower bound there"
        );
    }
    let measured = if measured == calls {
        format!("each of its {calls} cuDNN calls")
    } else {
        format!("{measured} of its {calls} cuDNN calls (the others take none here: a lower bound)")
    };
    format!(
        "cuDNN's convolution workspaces as an H200 measured them ({table}, PyTorch 2.11.0+cu130's cuDNN, \
         heuristics without cudnn.benchmark) for {measured}; under a budget cuDNN may pick plans that need less"
    )
}

/// The data set's shape: the synthetic spec's, or a CSV file's (read: features and classes as
/// `train::data` reads them, and the number of data rows).
pub fn data_shape(data: &DataSpec) -> Result<DataShape> {
    match data {
        DataSpec::Synthetic { samples, features, classes, .. } => {
            Ok(DataShape { samples: *samples, features: *features, classes: *classes })
        }
        DataSpec::Images { samples, channels, size, classes, .. } => {
            Ok(DataShape { samples: *samples, features: channels * size * size, classes: *classes })
        }
        DataSpec::Tokens { samples, seq_len, classes, .. } => {
            Ok(DataShape { samples: *samples, features: *seq_len, classes: *classes })
        }
        DataSpec::Csv { path, label } => {
            // Read and checked whole, as the trainer reads it.
            let t = crate::spec::csv_data::read(path, label)?;
            Ok(DataShape { samples: t.rows(), features: t.features, classes: t.classes })
        }
        DataSpec::Tensors { samples, .. } => {
            let (features, classes) = crate::spec::csv_data::shape(data)?;
            Ok(DataShape { samples: *samples, features, classes })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
