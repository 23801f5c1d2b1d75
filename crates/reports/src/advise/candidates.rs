//! The options `advise` weighs: every combination of the changes the guides suggest, as
//! configurations, each with the list of what it changes from the spec and whether that keeps
//! the training the same.
//!
//! - **Same training**: gradient accumulation at the same effective batch (micro-batches of
//!   equal size, so the mean of their gradients is the full batch's), activation checkpointing
//!   (the forward is recomputed, not changed), the optimizer's implementation (the same update,
//!   summed in another order), the data set kept on the host (the same batches).
//! - **Same training, lower precision**: mixed precision (fp16 with the grad scaler, bf16): the
//!   same model and hyperparameters, its matrix products in 16 bits.
//! - **Changes the training**: a smaller batch (another gradient noise, and learning rate to
//!   retune), another optimizer (another update rule).
//!
//! A forward-only spec (inference) is offered lower precision, `no_grad` where it keeps a graph,
//! and a smaller batch: none changes its outputs per sample.
//!
//! The same-training knobs are crossed with each other; the training-changing ones are offered
//! alone, with everything else as the spec writes it, so that a user sees what giving up the
//! batch or the optimizer buys without them being mixed into the ranking of the rest.
use serde::Serialize;

use crate::spec::{
    Amp, AmpKind, Checkpoint, CnnSpec, Config, DataLocation, Mode, ModelSpec, Named, OptimizerImpl,
    OptimizerSpec, ScalerSpec, ScriptUnits,
};

/// The most micro-batches per step `advise` proposes: past this, a step is mostly overhead.
pub const MAX_ACCUMULATION: usize = 1024;

/// How far a change takes the training from the spec's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The same computation (up to the order of floating-point sums).
    Same,
    /// The same training with autocast turned off: in the parameters' own precision (32 bits
    /// where the spec wrote float32), more exact and more memory, never less exact.
    FullPrecision,
    /// The same training in lower precision.
    Precision,
    /// Another training: hyperparameters to retune, results not comparable one to one.
    Changed,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Same => "same",
            Effect::FullPrecision => "full precision",
            Effect::Precision => "lower precision",
            Effect::Changed => "CHANGED",
        }
    }
}

/// One change from the spec as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// `accumulation` micro-batches of `micro_batch` per optimizer step.
    Accumulation { accumulation: usize, micro_batch: usize },
    /// `training.amp`.
    Amp { amp: AmpKind },
    /// `training.checkpoint`.
    Checkpoint { checkpoint: String },
    /// `training.optimizer_impl`.
    OptimizerImpl { optimizer_impl: OptimizerImpl },
    /// `data.location = "host"`.
    DataOnHost,
    /// A smaller batch, everything else as written.
    Batch { batch_size: usize, was: usize },
    /// Another optimizer.
    Optimizer { optimizer: String, was: String },
    /// A forward-only spec run under `no_grad` (`training.mode = "forward_no_grad"`): the same
    /// outputs, no graph kept.
    NoGrad,
    /// A forward-only spec's smaller batch: the same outputs per sample, in more batches.
    InferenceBatch { batch_size: usize, was: usize },
}

impl Change {
    pub fn effect(&self) -> Effect {
        match self {
            Change::Accumulation { .. }
            | Change::Checkpoint { .. }
            | Change::OptimizerImpl { .. }
            | Change::DataOnHost
            | Change::NoGrad
            | Change::InferenceBatch { .. } => Effect::Same,
            // Turning autocast off gives precision back; any other amp lowers it.
            Change::Amp { amp: AmpKind::Off } => Effect::FullPrecision,
            Change::Amp { .. } => Effect::Precision,
            Change::Batch { .. } | Change::Optimizer { .. } => Effect::Changed,
        }
    }

    /// In words, as the spec would say it: "micro-batch 8192 x 4" (micro-batch x accumulation
    /// steps, the project's notation).
    pub fn describe(&self) -> String {
        match self {
            Change::Accumulation { accumulation, micro_batch } => {
                format!("micro-batch {micro_batch} x {accumulation}")
            }
            Change::Amp { amp } => format!("amp {}", amp.as_str()),
            Change::Checkpoint { checkpoint } => format!("checkpoint {checkpoint}"),
            Change::OptimizerImpl { optimizer_impl } => format!("{} optimizer", optimizer_impl.as_str()),
            Change::DataOnHost => "data on host".into(),
            Change::Batch { batch_size, was } => format!("batch {batch_size} (was {was})"),
            Change::Optimizer { optimizer, was } => format!("{optimizer} (was {was})"),
            Change::NoGrad => "no_grad".into(),
            Change::InferenceBatch { batch_size, was } => format!("batch {batch_size} (was {was})"),
        }
    }
}

/// An option: a configuration and what it changes from the spec's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub config: Config,
    pub changes: Vec<Change>,
}

impl Candidate {
    /// The furthest any of its changes takes the training. Accumulating micro-batches through
    /// BatchNorm (a ResNet's) normalises each by its own statistics, so the gradient is not the
    /// full batch's: another training.
    pub fn effect(&self) -> Effect {
        let batch_statistics = matches!(self.config.model, ModelSpec::Cnn(CnnSpec::Resnet(_)));
        self.changes
            .iter()
            .map(|c| match c {
                Change::Accumulation { .. } if batch_statistics => Effect::Changed,
                c => c.effect(),
            })
            .max()
            .unwrap_or(Effect::Same)
    }

    /// "as written", or its changes joined with " + ".
    pub fn describe(&self) -> String {
        if self.changes.is_empty() {
            return "as written".into();
        }
        self.changes.iter().map(Change::describe).collect::<Vec<_>>().join(" + ")
    }
}

/// The knobs that keep the training, as one option sets them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Knobs {
    accumulation: usize,
    amp: Amp,
    checkpoint: Checkpoint,
    optimizer_impl: OptimizerImpl,
    location: DataLocation,
}

/// Every option for `base` on a device (`cuda`: where PyTorch's defaults and the data's place
/// differ from the CPU's), the spec as written first. `smaller_batch` is the largest batch
/// predicted to fit with everything else as written, when there is one below the spec's.
pub fn enumerate(base: &Config, cuda: bool, smaller_batch: Option<usize>) -> Vec<Candidate> {
    let t = &base.training;
    let tech = t.techniques;
    let written = Knobs {
        accumulation: tech.accumulation,
        amp: tech.amp,
        checkpoint: tech.checkpoint,
        optimizer_impl: OptimizerImpl::resolve(tech.optimizer_impl, cuda),
        location: base.location,
    };
    let train = tech.mode == Mode::Train;
    let effective = t.batch_size * tech.accumulation;
    let accumulations = if train { accumulation_ladder(effective, t.steps) } else { vec![1] };
    let amps = amps(base);
    let checkpoints = match &base.model {
        _ if !train => vec![tech.checkpoint],
        // Cut into its children, a module has as many units as its file says, which the spec
        // does not: "sqrt" is about sqrt(n) of them whatever n is, where a segment of one child
        // (a ReLU's input kept too) can keep more than no checkpointing.
        ModelSpec::Torchscript(s) if s.units == ScriptUnits::Children => {
            let mut c = vec![Checkpoint::None, Checkpoint::Sqrt];
            if !c.contains(&tech.checkpoint) {
                c.push(tech.checkpoint);
            }
            c
        }
        _ => checkpoints(base.model.units(), tech.checkpoint),
    };
    let impls: Vec<OptimizerImpl> =
        if train { OptimizerImpl::ALL.to_vec() } else { vec![written.optimizer_impl] };
    let locations = match (cuda, base.location) {
        (true, DataLocation::Device) => vec![DataLocation::Device, DataLocation::Host],
        _ => vec![base.location],
    };
    let mut out = vec![Candidate { config: base.clone(), changes: Vec::new() }];
    for &accumulation in &accumulations {
        for &amp in &amps {
            for &checkpoint in &checkpoints {
                for &optimizer_impl in &impls {
                    for &location in &locations {
                        let knobs = Knobs { accumulation, amp, checkpoint, optimizer_impl, location };
                        if knobs == written {
                            continue;
                        }
                        if let Some(c) = with_knobs(base, effective, written, knobs) {
                            out.push(c);
                        }
                    }
                }
            }
        }
    }
    // Inference: the graph a forward keeps for no backward is what no_grad drops.
    if tech.mode == Mode::Forward {
        let mut config = base.clone();
        config.training.techniques.mode = Mode::ForwardNoGrad;
        if config.check().is_ok() {
            out.push(Candidate { config, changes: vec![Change::NoGrad] });
        }
    }
    if let Some(batch) = smaller_batch.filter(|&b| b < t.batch_size) {
        let mut config = base.clone();
        config.training.batch_size = batch;
        if config.check().is_ok() {
            let (batch_size, was) = (batch, t.batch_size);
            // A forward's smaller batch gives the same outputs per sample; a training's, another
            // gradient noise.
            let change = if train {
                Change::Batch { batch_size, was }
            } else {
                Change::InferenceBatch { batch_size, was }
            };
            out.push(Candidate { config, changes: vec![change] });
        }
    }
    if train {
        for optimizer in other_optimizers(&t.optimizer) {
            let mut config = base.clone();
            config.training.optimizer = optimizer;
            let changes = vec![Change::Optimizer {
                optimizer: optimizer_words(&optimizer),
                was: optimizer_words(&t.optimizer),
            }];
            out.push(Candidate { config, changes });
        }
    }
    out
}

/// The configuration with `knobs` set, and its changes; `None` when it breaks an invariant.
fn with_knobs(base: &Config, effective: usize, written: Knobs, knobs: Knobs) -> Option<Candidate> {
    let mut config = base.clone();
    let t = &mut config.training;
    t.batch_size = effective / knobs.accumulation;
    t.techniques.accumulation = knobs.accumulation;
    t.techniques.amp = knobs.amp;
    t.techniques.checkpoint = knobs.checkpoint;
    t.techniques.optimizer_impl = Some(knobs.optimizer_impl);
    config.location = knobs.location;
    config.check().ok()?;
    let mut changes = Vec::new();
    if knobs.accumulation != written.accumulation {
        changes.push(Change::Accumulation {
            accumulation: knobs.accumulation,
            micro_batch: config.training.batch_size,
        });
    }
    if knobs.amp != written.amp {
        changes.push(Change::Amp { amp: knobs.amp.kind() });
    }
    if knobs.checkpoint != written.checkpoint {
        changes.push(Change::Checkpoint { checkpoint: knobs.checkpoint.name() });
    }
    if knobs.optimizer_impl != written.optimizer_impl {
        changes.push(Change::OptimizerImpl { optimizer_impl: knobs.optimizer_impl });
    }
    if knobs.location != written.location {
        changes.push(Change::DataOnHost);
    }
    Some(Candidate { config, changes })
}

/// Micro-batches per step that split `effective` into equal micro-batches: for each power of
/// two up to [`MAX_ACCUMULATION`], the smallest divisor of `effective` at least that large
/// (1,173,000 gives 1, 2, 4, 8, 17, 34, ...), within the phases a trial may record.
pub fn accumulation_ladder(effective: usize, steps: usize) -> Vec<usize> {
    let fits_phases = |k: usize| {
        steps.saturating_mul(k.saturating_mul(3).saturating_add(2)) <= crate::spec::limits::MAX_PHASES
    };
    let mut out: Vec<usize> = Vec::new();
    let mut p = 1usize;
    while p <= MAX_ACCUMULATION.min(effective) {
        if let Some(k) = (p..=effective.min(MAX_ACCUMULATION)).find(|&k| effective.is_multiple_of(k)) {
            if fits_phases(k) && out.last() != Some(&k) {
                out.push(k);
            }
        }
        p *= 2;
    }
    out
}

/// Why `base` gets no gradient accumulation option, where it is a training of more than one
/// sample that the ladder cannot split: equal micro-batches are what keep the mean gradient
/// the full batch's, so a batch with no divisor from 2 to [`MAX_ACCUMULATION`] (a prime, say)
/// has none. Names the nearest batches that do split, so that a user who can move the batch
/// by a sample or two knows what that opens.
pub fn no_accumulation(base: &Config) -> Option<String> {
    let t = &base.training;
    let effective = t.batch_size * t.techniques.accumulation;
    // A spec that accumulates already has its split.
    if t.techniques.mode != Mode::Train
        || t.techniques.accumulation > 1
        || effective < 2
        || accumulation_ladder(effective, t.steps).len() > 1
    {
        return None;
    }
    let divisor = |b: usize| (2..=b.min(MAX_ACCUMULATION)).find(|&k| b.is_multiple_of(k));
    if divisor(effective).is_some() {
        // Split, but past the phases a trial may record: a limit of the tool, said as one.
        return Some(format!(
            "no gradient accumulation option: {} steps of {effective} split into micro-batches are more \
             phases than a trial records ({})",
            t.steps,
            crate::spec::limits::MAX_PHASES
        ));
    }
    let smallest = (2..).take_while(|d| d * d <= effective).find(|d| effective.is_multiple_of(*d));
    let why = match smallest {
        None => format!("it is prime: its only split is {effective} micro-batches of 1"),
        Some(k) => format!("its fewest micro-batches are {k} of {}", effective / k),
    };
    // The nearest batches below and above that split, each as its largest micro-batch x the
    // fewest micro-batches.
    let split = |b: usize| divisor(b).map(|k| format!("{b} (micro-batch {} x {k})", b / k));
    let below = (2..effective).rev().find_map(split);
    let above = (effective + 1..).find_map(split);
    let nearest: Vec<String> = below.into_iter().chain(above).collect();
    Some(format!(
        "no gradient accumulation option: a batch of {effective} splits into no more than \
         {MAX_ACCUMULATION} equal micro-batches, the most advise proposes ({why}), and equal micro-batches \
         are what keep the mean gradient the full batch's; a batch of {} would split",
        nearest.join(" or ")
    ))
}

/// Off, fp16 (with the spec's scaler settings, else PyTorch's) and bf16, over float32
/// parameters; otherwise only what the spec has (autocast is for float32 models).
fn amps(base: &Config) -> Vec<Amp> {
    if base.training.dtype != crate::spec::Dtype::Float32 {
        return vec![base.training.techniques.amp];
    }
    let scaler = match base.training.techniques.amp {
        Amp::Fp16 { scaler } => scaler,
        _ => ScalerSpec::default(),
    };
    vec![Amp::Off, Amp::Fp16 { scaler }, Amp::Bf16]
}

/// None, and segments of 1, 2, 4, ... hidden layers (fewer than `depth`), and sqrt where it
/// makes another length; the spec's own setting whatever it is.
fn checkpoints(depth: usize, written: Checkpoint) -> Vec<Checkpoint> {
    let mut out = vec![Checkpoint::None];
    if depth == 0 {
        return out;
    }
    let mut lens = Vec::new();
    let mut k = 1;
    while k < depth.max(2) {
        lens.push(k);
        out.push(Checkpoint::Every(k));
        k *= 2;
    }
    if let Some(len) = Checkpoint::Sqrt.segment_len(depth) {
        if !lens.contains(&len) {
            out.push(Checkpoint::Sqrt);
        }
    }
    if !out.contains(&written) {
        out.push(written);
    }
    out
}

/// The optimizers to offer instead: SGD with momentum 0.9 (one state tensor) and plain SGD
/// (none), at the spec's learning rate and weight decay, where they keep less than the spec's.
fn other_optimizers(spec: &OptimizerSpec) -> Vec<OptimizerSpec> {
    let (lr, weight_decay) = match *spec {
        OptimizerSpec::Sgd { lr, weight_decay, .. }
        | OptimizerSpec::Adam { lr, weight_decay }
        | OptimizerSpec::AdamW { lr, weight_decay } => (lr, weight_decay),
    };
    let momentum = OptimizerSpec::Sgd { lr, momentum: 0.9, weight_decay };
    let plain = OptimizerSpec::Sgd { lr, momentum: 0.0, weight_decay };
    match *spec {
        OptimizerSpec::Adam { .. } | OptimizerSpec::AdamW { .. } => vec![momentum, plain],
        OptimizerSpec::Sgd { momentum, .. } if momentum != 0.0 => vec![plain],
        OptimizerSpec::Sgd { .. } => vec![],
    }
}

fn optimizer_words(spec: &OptimizerSpec) -> String {
    match *spec {
        OptimizerSpec::Sgd { momentum, .. } if momentum != 0.0 => format!("SGD momentum {momentum}"),
        OptimizerSpec::Sgd { .. } => "SGD".into(),
        OptimizerSpec::Adam { .. } => "Adam".into(),
        OptimizerSpec::AdamW { .. } => "AdamW".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::examples::mlp as config;

    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };

    #[test]
    fn the_ladder_splits_the_batch_into_equal_micro_batches() {
        assert_eq!(accumulation_ladder(32, 2), [1, 2, 4, 8, 16, 32]);
        assert_eq!(accumulation_ladder(1_173_000, 1)[..7], [1, 2, 4, 8, 17, 34, 68]);
        for k in accumulation_ladder(1_173_000, 1) {
            assert_eq!(1_173_000 % k, 0);
            assert!(k <= MAX_ACCUMULATION);
        }
        assert_eq!(accumulation_ladder(7, 1), [1, 7]);
        assert_eq!(accumulation_ladder(1, 1), [1]);
    }

    #[test]
    fn a_batch_no_micro_batch_splits_says_why_and_what_would() {
        let mut base = config(2, 16, 4099, ADAM);
        let note = no_accumulation(&base).expect("4099 is prime and past 1024");
        assert!(
            note.contains(
                "a batch of 4099 splits into no more than 1024 equal micro-batches, the most advise proposes (it \
                 is prime: its only split is 4099 micro-batches of 1)"
            ),
            "{note}"
        );
        assert!(
            note.contains("a batch of 4098 (micro-batch 2049 x 2) or 4100 (micro-batch 2050 x 2)"),
            "{note}"
        );
        assert!(enumerate(&base, false, None).iter().all(|o| o.config.training.techniques.accumulation == 1));
        // A prime within the ladder's reach splits as micro-batches of 1: offered, no note.
        base.training.batch_size = 7;
        assert!(no_accumulation(&base).is_none());
        // The product of two primes past 1024 has no divisor the ladder reaches.
        base.training.batch_size = 1031 * 1033;
        let note = no_accumulation(&base).unwrap();
        assert!(note.contains("(its fewest micro-batches are 1031 of 1033)"), "{note}");
        assert!(note.contains("1065022 (micro-batch 532511 x 2)"), "{note}");
        // A batch that splits, in a training of more steps than a trial records split.
        base.training.batch_size = 4;
        base.training.steps = 300_000;
        assert!(no_accumulation(&base).unwrap().contains("more phases than a trial records"));
        base.training.steps = 2;
        // Written as micro-batches of 1 x 4099 already: its split, no note.
        base.training.batch_size = 1;
        base.training.techniques.accumulation = 4099;
        assert!(no_accumulation(&base).is_none());
        base.training.techniques.accumulation = 1;
        // A forward has nothing to accumulate, a batch of 1 nothing to split, 4096 splits.
        base.training.batch_size = 4099;
        base.training.techniques.mode = Mode::Forward;
        assert!(no_accumulation(&base).is_none());
        base.training.techniques.mode = Mode::Train;
        for splits in [1, 4096] {
            base.training.batch_size = splits;
            assert!(no_accumulation(&base).is_none(), "{splits}");
        }
    }

    #[test]
    fn every_option_keeps_the_effective_batch_unless_it_says_so() {
        let base = config(3, 64, 32, ADAM);
        let options = enumerate(&base, false, Some(20));
        assert!(options[0].changes.is_empty() && options[0].config == base);
        let mut seen = std::collections::HashSet::new();
        for o in &options[1..] {
            assert!(!o.changes.is_empty(), "{o:?}");
            assert!(seen.insert(format!("{:?}", o.config)), "twice: {}", o.describe());
            let t = &o.config.training;
            let effective = t.batch_size * t.techniques.accumulation;
            let says_batch = o.changes.iter().any(|c| matches!(c, Change::Batch { .. }));
            assert_eq!(effective != 32, says_batch, "{}", o.describe());
            assert_eq!(
                o.effect() == Effect::Changed,
                o.changes.iter().any(|c| c.effect() == Effect::Changed)
            );
        }
        // 6 accumulations x 3 precisions x (none, 1, 2, sqrt = 2: no) x 3 implementations, less
        // the spec itself; a smaller batch; SGD with momentum and plain SGD.
        assert_eq!(options.len(), 6 * 3 * 3 * 3 - 1 + 1 + 1 + 2);
        assert!(options.iter().any(|o| o.describe() == "batch 20 (was 32)"));
        assert!(options.iter().any(|o| o.describe() == "micro-batch 8 x 4 + amp bf16 + checkpoint 1"));
    }

    #[test]
    fn a_module_cut_into_its_children_is_offered_sqrt_not_a_segment_a_child() {
        use crate::spec::{Loss, ScriptSpec};
        let mut base = config(2, 16, 8, ADAM);
        let units = ScriptUnits::Children;
        base.model =
            ModelSpec::Torchscript(ScriptSpec { path: "m.pt".into(), loss: Loss::CrossEntropy, units });
        let options = enumerate(&base, false, None);
        let checkpoints: std::collections::BTreeSet<String> =
            options.iter().map(|o| o.config.training.techniques.checkpoint.name()).collect();
        assert_eq!(checkpoints.into_iter().collect::<Vec<_>>(), ["none", "sqrt"]);
    }

    #[test]
    fn forward_only_specs_get_precision_only() {
        let mut base = config(2, 16, 8, ADAM);
        base.training.techniques.mode = Mode::ForwardNoGrad;
        let options = enumerate(&base, true, None);
        let described: Vec<String> = options.iter().map(Candidate::describe).collect();
        assert_eq!(described, ["as written", "amp fp16", "amp bf16"]);
        // A forward with grad kept is offered no_grad, and any forward a smaller batch: the same
        // outputs either way.
        base.training.techniques.mode = Mode::Forward;
        let options = enumerate(&base, true, Some(4));
        let described: Vec<String> = options.iter().map(Candidate::describe).collect();
        assert_eq!(described, ["as written", "amp fp16", "amp bf16", "no_grad", "batch 4 (was 8)"]);
        assert!(options.iter().all(|o| o.effect() != Effect::Changed));
        let no_grad = &options[3].config.training.techniques;
        assert_eq!(no_grad.mode, Mode::ForwardNoGrad);
    }

    /// Turning a spec's autocast off is no "lower precision": it trains in the parameters' own
    /// 32 bits. An option that also changes the batch is still CHANGED.
    #[test]
    fn autocast_off_is_full_precision_not_lower() {
        let mut base = config(2, 16, 8, ADAM);
        base.training.techniques.amp = crate::spec::Amp::Bf16;
        let options = enumerate(&base, false, Some(4));
        let effect = |d: &str| options.iter().find(|o| o.describe() == d).map(Candidate::effect);
        assert_eq!(effect("amp off"), Some(Effect::FullPrecision));
        assert_eq!(effect("amp off + fused optimizer"), Some(Effect::FullPrecision));
        assert_eq!(effect("amp fp16"), Some(Effect::Precision));
        assert_eq!(effect("fused optimizer"), Some(Effect::Same));
        assert_eq!(Effect::FullPrecision.as_str(), "full precision");
    }

    /// Accumulation keeps an MLP's training; through a ResNet's BatchNorm, which normalises each
    /// micro-batch by its own statistics, it is another training.
    #[test]
    fn accumulation_through_batch_norm_is_another_training() {
        let mlp = config(2, 16, 8, ADAM);
        let accumulate = |config: Config| Candidate {
            config,
            changes: vec![Change::Accumulation { accumulation: 4, micro_batch: 2 }],
        };
        assert_eq!(accumulate(mlp.clone()).effect(), Effect::Same);
        let mut resnet = mlp;
        resnet.model = ModelSpec::Cnn(CnnSpec::Resnet(crate::spec::ResNet::R18));
        assert_eq!(accumulate(resnet.clone()).effect(), Effect::Changed);
        let checkpoint =
            Candidate { config: resnet, changes: vec![Change::Checkpoint { checkpoint: "sqrt".into() }] };
        assert_eq!(checkpoint.effect(), Effect::Same);
    }

    #[test]
    fn data_on_host_is_offered_on_cuda_only() {
        let mut base = config(1, 16, 8, ADAM);
        base.location = DataLocation::Device;
        let host =
            |cuda| enumerate(&base, cuda, None).iter().any(|o| o.changes.contains(&Change::DataOnHost));
        assert!(host(true) && !host(false));
    }
}
