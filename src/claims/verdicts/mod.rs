//! One function per claim: which experiment tests it, what number it reads, and the rule for
//! the verdict (stated in each `why`, so a reader can check it).
//!
//! Here: every claim in the report's order ([`all`]) and what several of them share (the
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
use crate::schema::Phase;
use crate::spec::{format_size, Named, OptimizerImpl};
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
    let cuda = e.manifest.device.resolved.starts_with("cuda");
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
    let loss = if r.dtype == "float64" { 8.0 } else { 4.0 };
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
/// not the answer (a GPU far larger than the budget's batches were sized for): the reason a
/// comparison of largest fits over `variants` is not judged, or None when every one is exact.
pub(super) fn capped(e: &Experiment, variants: &[&str]) -> Option<String> {
    let capped: Vec<String> = variants
        .iter()
        .filter_map(|v| {
            let a = e.answer(v)?;
            let fit = a.largest_fit.filter(|_| a.first_oom.is_none())?;
            Some(if v.is_empty() { format!("{fit}") } else { format!("{v} {fit}") })
        })
        .collect();
    (!capped.is_empty()).then(|| {
        format!(
            "the search reached its max without running out of memory ({}), so the largest batch that \
             fits is not known; a larger `search.max` or a smaller budget judges it.",
            capped.join(", ")
        )
    })
}

#[cfg(test)]
mod capped_tests {
    use super::*;
    use crate::comparison::tests::manifest;
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
}
