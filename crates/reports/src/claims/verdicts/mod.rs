//! One function per claim: which experiment tests it, what number it reads, and the rule for
//! the verdict (stated in each `why`, so a reader can check it).
//!
//! Here: every claim in the report's order ([`ALL`]) and what several of them share (the
//! `Claim` builders, how sizes and shares are written, the default Adam, the optimizer state
//! and the activations a trial keeps). The claims themselves are in files by subject.
mod cache;
mod checkpointing;
mod devices;
mod examples;
mod finder;
mod inference;
mod lesson;
mod models;
mod optimizers;
mod own_model;
mod precision;
mod scaling;
mod troubleshooting;

use super::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::{Phase, Status};
use crate::spec::{format_size, Dtype, Named, OptimizerImpl, OptimizerKind};
use cache::{empty_cache, reserved};
use checkpointing::{accumulation, checkpoint_memory, checkpoint_time};
use devices::{cuda_context, multi_gpu};
use examples::{answer004_accumulation, answer004_oom, checkpoint_example};
use finder::finder;
use inference::{leak, no_grad};
use lesson::{depth, whole_dataset};
use models::{activations_biggest, breakdown, depthwise, smaller_models, smaller_models_batch};
use optimizers::{gradients, optimizer_state};
use own_model::own_model;
use precision::{amp_batch, amp_memory, amp_models_batch};
use scaling::{batch_linear, memory_equation, width_quadratic};
use troubleshooting::{backward_oom, quick_reference_memory, quick_reference_time};

type Get<'a> = &'a dyn Fn(&str) -> Option<&'a Experiment>;

/// Every claim, in the report's order.
pub const ALL: [fn(Get) -> Claim; 32] = [
    whole_dataset,
    depth,
    memory_equation,
    batch_linear,
    width_quadratic,
    optimizer_state,
    gradients,
    amp_memory,
    amp_batch,
    amp_models_batch,
    checkpoint_memory,
    checkpoint_time,
    checkpoint_example,
    quick_reference_memory,
    quick_reference_time,
    backward_oom,
    accumulation,
    answer004_oom,
    answer004_accumulation,
    breakdown,
    activations_biggest,
    smaller_models,
    smaller_models_batch,
    depthwise,
    reserved,
    empty_cache,
    cuda_context,
    no_grad,
    leak,
    finder,
    own_model,
    multi_gpu,
];

fn claim(
    claim: &'static str,
    experiment: &'static str,
    measured: String,
    verdict: Verdict,
    why: String,
) -> Claim {
    Claim { claim, experiment, measured, verdict, why, conditions: super::Conditions::ANY, runs: Vec::new() }
}

fn not_run(c: &'static str, experiment: &'static str) -> Claim {
    claim(
        c,
        experiment,
        "-".into(),
        Verdict::NotRun,
        format!("run `oomlab run experiments/{experiment}.toml` first."),
    )
}

/// A trial that neither fitted nor ran out of memory (an error, or skipped as `predicted_oom`
/// without training) says nothing of whether it fits: said, not judged.
fn neither_fit_nor_oom(
    c: &'static str,
    experiment: &'static str,
    r: &crate::schema::SummaryRow,
) -> Option<Claim> {
    let why = match r.status {
        Status::Ok | Status::Diverged | Status::Oom => return None,
        Status::PredictedOom => "the trial was skipped as predicted to run out (`run.skip_predicted_oom`), \
                                 never trained: a prediction does not judge the claim; run it without the \
                                 skip."
            .to_string(),
        Status::Error => "the trial failed with an error other than out of memory (the run printed it), \
                          so whether it fits is not known."
            .to_string(),
    };
    Some(claim(c, experiment, format!("trial {} {}", r.trial, r.status), Verdict::NotJudged, why))
}

/// How a row's optimizer is named, and what it keeps per parameter besides the parameter and
/// its gradient: claims count bytes from the run's own optimizer and dtype, not Adam's fp32.
struct Kept {
    /// "Adam", "SGD with momentum".
    optimizer: &'static str,
    /// "Adam's two moments", "no optimizer state".
    state: &'static str,
    /// Bytes per parameter: itself, its gradient and the state, in the row's dtype.
    bytes: u64,
}

impl Kept {
    /// `None` for a row that does not name its optimizer and dtype (a summary.csv from before
    /// those columns): nothing is counted for it.
    fn of(r: &crate::schema::SummaryRow) -> Option<Kept> {
        let kind = r.optimizer?;
        let (optimizer, state) = match kind {
            OptimizerKind::Adam => ("Adam", "Adam's two moments"),
            OptimizerKind::AdamW => ("AdamW", "AdamW's two moments"),
            OptimizerKind::SgdMomentum => ("SGD with momentum", "its momentum buffer"),
            OptimizerKind::Sgd => ("plain SGD", "no optimizer state"),
        };
        // The weights and their gradients, then the optimizer's state tensors.
        let copies = 2 + kind.state_tensors();
        Some(Kept { optimizer, state, bytes: copies * r.dtype?.bytes() })
    }
}

fn size(bytes: f64) -> String {
    format_size(bytes.max(0.0).round() as u64)
}

/// The budget the experiment ran under, as a size ("no budget" without one).
fn budget(e: &Experiment) -> String {
    e.manifest.device.budget_bytes.map_or_else(|| "no budget".into(), |b| size(b as f64))
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The search that found a variant's answer, as its manifest records it: "guided search" or
/// "bisection"; results from before the manifest said were found by growing then bisecting.
fn search_kind(e: &Experiment, variant: &str) -> &'static str {
    match e.answer(variant).and_then(|a| a.strategy) {
        Some(s) if s.starts_with("guided") => "guided search",
        Some(_) => "bisection",
        None => "grow-then-bisect",
    }
}

/// The variant of the depth sweep PyTorch itself would run on the results' device (the
/// lesson's readers write `Adam(params)`: foreach on CUDA, the for-loop on a CPU), with the
/// implementation's name; `""` for results from before the sweep had variants.
fn default_adam(e: &Experiment) -> (&'static str, &'static str) {
    let cuda = e.manifest.device.is_cuda();
    let name = OptimizerImpl::pytorch_default(cuda).as_str();
    if e.answer(name).is_some() {
        (name, name)
    } else {
        ("", "libtorch's C++ Adam")
    }
}

/// What the first step leaves behind once gradients are freed and the micro-batch is gone:
/// allocated after the first zero_grad minus after the model phase, less the 4-byte loss the
/// loop still holds. torch.optim makes its state at the first step, so this is the state.
fn state_ratio_of(e: &Experiment, r: &crate::schema::SummaryRow) -> Option<f64> {
    let after_model = e.allocated_after(r.trial, 0, Phase::Model)? as f64;
    let after_zero_grad = e.allocated_after(r.trial, 1, Phase::ZeroGrad)? as f64;
    let loss = r.dtype.map_or(4, Dtype::loss_bytes) as f64;
    Some((after_zero_grad - after_model - loss) / r.param_bytes as f64)
}

/// What the forward pass keeps for backward: allocated after forward minus after to_device.
fn kept_by_forward(e: &Experiment, variant: &str) -> Option<f64> {
    let r = e.variant(variant)?;
    Some(
        e.allocated_after(r.trial, 1, Phase::Forward)? as f64
            - e.allocated_after(r.trial, 1, Phase::ToDevice)? as f64,
    )
}

/// Where a search reached its max without running out of memory, its largest fit is a floor,
/// not the answer (a GPU far larger than the budget's batches were sized for); where its first
/// OOM is a trial skipped as `predicted_oom`, its boundary is the estimate's, not a measurement.
/// The reason a comparison of largest fits over `variants` is not judged, or None when every
/// one is measured exactly.
pub(super) fn capped(e: &Experiment, variants: &[&str]) -> Option<String> {
    let named = |v: &str, n: u64| if v.is_empty() { format!("{n}") } else { format!("{v} {n}") };
    let mut floors = Vec::new();
    let mut predicted = Vec::new();
    for v in variants {
        let Some(a) = e.answer(v) else { continue };
        match (a.largest_fit, a.first_oom) {
            (Some(fit), None) => floors.push(named(v, fit)),
            (_, Some(oom)) => {
                let skipped = e.rows.iter().any(|r| {
                    r.variant == *v && r.value == Some(oom as f64) && r.status == Status::PredictedOom
                });
                if skipped {
                    predicted.push(named(v, oom));
                }
            }
            (None, None) => {}
        }
    }
    if !floors.is_empty() {
        return Some(format!(
            "the search reached its max without running out of memory ({}), so the largest value that \
             fits is not known; a larger `search.max` or a smaller budget judges it.",
            floors.join(", ")
        ));
    }
    (!predicted.is_empty()).then(|| {
        format!(
            "the first OOM of the search ({}) is a trial skipped as predicted to run out \
             (`run.skip_predicted_oom`), not trained, so the boundary is the estimate's; run without the \
             skip to judge it.",
            predicted.join(", ")
        )
    })
}

#[cfg(test)]
mod kept_tests {
    use super::*;

    /// Bytes per parameter: itself and its gradient, and the optimizer's state, in the dtype.
    #[test]
    fn each_optimizer_keeps_its_copies_in_the_rows_dtype() {
        let row = |optimizer: &str, dtype: &str| crate::schema::SummaryRow {
            optimizer: crate::spec::OptimizerKind::from_name(optimizer),
            dtype: crate::spec::Dtype::from_name(dtype),
            ..Default::default()
        };
        for (optimizer, dtype, bytes) in [
            ("adam", "float32", 16),
            ("adamw", "bfloat16", 8),
            ("sgd_momentum", "float32", 12),
            ("sgd", "float64", 16),
            ("sgd", "float16", 4),
        ] {
            assert_eq!(Kept::of(&row(optimizer, dtype)).map(|k| k.bytes), Some(bytes), "{optimizer} {dtype}");
        }
        assert!(Kept::of(&row("", "float32")).is_none());
        assert!(Kept::of(&row("adam", "")).is_none());
    }
}

#[cfg(test)]
mod capped_tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use crate::results::manifest::Answer;

    /// A search that ran out of memory somewhere has an exact answer; one that never did has a
    /// floor, which is named.
    #[test]
    fn a_search_that_never_ran_out_is_named_as_a_floor() {
        let mut m = manifest("amp", "NVIDIA H200", Some(1 << 30), 1 << 37);
        let answer = |v: &str, first_oom| Answer {
            largest_fit: Some(1024),
            first_oom,
            ..Answer::new(v, crate::spec::Field::BatchSize)
        };
        m.answers = vec![answer("fp32", Some(1025)), answer("bf16", None)];
        let e = Experiment {
            dir: "amp".into(),
            manifest: m,
            rows: Vec::new(),
            trace: Vec::new(),
            cut_row: false,
        };
        assert_eq!(capped(&e, &["fp32"]), None);
        let why = capped(&e, &["fp32", "bf16"]).expect("bf16 reached the max");
        assert!(why.contains("bf16 1024") && !why.contains("fp32"), "{why}");
    }

    /// A boundary whose first OOM was skipped as predicted, not trained, is the estimate's.
    #[test]
    fn a_boundary_at_a_skipped_trial_is_named_as_the_estimates() {
        let mut m = manifest("amp", "NVIDIA H200", Some(1 << 30), 1 << 37);
        m.answers = vec![Answer {
            largest_fit: Some(1024),
            first_oom: Some(1025),
            ..Answer::new("fp32", crate::spec::Field::BatchSize)
        }];
        let row = |status| crate::schema::SummaryRow {
            trial: 1,
            variant: "fp32".into(),
            value: Some(1025.0),
            status,
            ..Default::default()
        };
        let mut e = Experiment {
            dir: "amp".into(),
            manifest: m,
            rows: vec![row(Status::Oom)],
            trace: Vec::new(),
            cut_row: false,
        };
        assert_eq!(capped(&e, &["fp32"]), None);
        e.rows = vec![row(Status::PredictedOom)];
        let why = capped(&e, &["fp32"]).expect("the boundary was predicted");
        assert!(why.contains("fp32 1025") && why.contains("skip_predicted_oom"), "{why}");
    }
}
