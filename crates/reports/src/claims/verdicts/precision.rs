//! Mixed precision: how much memory autocast saves, and how much larger a batch it lets fit, on
//! the lesson's MLP (`amp`) and on a ResNet-18 and a Transformer encoder (`amp_models`).
use super::{budget, claim, not_run, pct, search_kind, size, Get};
use crate::claims::band::Band;
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;

/// "~40-50%".
const AMP_SAVING: Band = Band::new(0.40, 0.50, 0.05);
/// The ratio of largest batches at which "double the batch" counts as confirmed, and partly.
const DOUBLED: f64 = 1.8;
const LARGER: f64 = 1.2;

/// How `variant`'s largest batch was found, for a claim's `why`.
fn how_searched(e: &Experiment, variant: &str) -> &'static str {
    match search_kind(e, variant) {
        "guided search" => "a search guided by the estimate",
        "bisection" => "a bisecting search",
        _ => "a grow-then-bisect search",
    }
}

/// The peak of each variant at the largest swept value where all of them trained.
fn common_peaks<'a>(e: &Experiment, variants: &[&'a str]) -> Option<(f64, Vec<(&'a str, f64)>)> {
    let sets: Vec<Vec<(f64, f64)>> = variants.iter().map(|v| e.peaks(v)).collect();
    let x = sets[0].iter().map(|p| p.0).rfind(|x| sets.iter().all(|s| s.iter().any(|p| p.0 == *x)))?;
    let peaks =
        variants.iter().zip(&sets).map(|(v, s)| (*v, s.iter().find(|p| p.0 == x).unwrap().1)).collect();
    Some((x, peaks))
}

pub(super) fn amp_memory(get: Get) -> Claim {
    const C: &str = "Mixed precision reduces memory usage by ~40-50%";
    const E: &str = "amp";
    let Some(e) = get(E) else { return not_run(C, E) };
    let variants = ["fp32", "fp16", "bf16"];
    if variants.iter().any(|v| e.answer(v).is_none()) {
        return not_run(C, E); // a variant that never ran (an interrupted run)
    }
    let Some((x, peaks)) = common_peaks(e, &variants) else {
        // It ran, but no batch trained in every variant (a budget the anchor does not fit in
        // fp32): a saving needs peaks at one batch, so the run cannot judge it.
        let largest: Vec<String> = variants
            .iter()
            .map(|v| match e.answer(v).and_then(|a| a.largest_fit) {
                Some(b) => format!("{v} {b}"),
                None => format!("{v} none"),
            })
            .collect();
        let measured =
            format!("no batch trained in all three; largest in {}: {}", budget(e), largest.join(", "));
        let why = "a saving compares the peaks at one batch, and no batch trained in every variant under \
                   this budget (the spec's anchor, tried first by each, did not fit them all): a larger \
                   budget, or an anchor all three fit, measures it."
            .to_string();
        return claim(C, E, measured, Verdict::NotJudged, why);
    };
    let saving = |i: usize| 1.0 - peaks[i].1 / peaks[0].1;
    let (s16, sbf) = (saving(1), saving(2));
    let measured = format!(
        "at batch {x}: fp32 {}, fp16 {} ({} less), bf16 {} ({} less)",
        size(peaks[0].1),
        size(peaks[1].1),
        pct(s16),
        size(peaks[2].1),
        pct(sbf)
    );
    let verdict = AMP_SAVING.judge(s16.max(sbf));
    let why = format!(
        "autocast halves the activations it produces, but keeps fp32 parameters, gradients and \
         optimizer state and adds a half-precision copy of each weight while it is on, so the saving \
         depends on how much of the peak is activations; on the larger of the two savings: {}.",
        AMP_SAVING.rule()
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn amp_batch(get: Get) -> Claim {
    const C: &str = "Mixed precision can often double the batch size";
    const E: &str = "amp";
    let Some(e) = get(E) else { return not_run(C, E) };
    let fit = |v: &str| e.answer(v).and_then(|a| a.largest_fit);
    let (Some(f32_), Some(f16), Some(bf16)) = (fit("fp32"), fit("fp16"), fit("bf16")) else {
        return not_run(C, E);
    };
    let (r16, rbf) = (f16 as f64 / f32_ as f64, bf16 as f64 / f32_ as f64);
    let budget = budget(e);
    let measured =
        format!("largest batch in {budget}: fp32 {f32_}, fp16 {f16} ({r16:.2}x), bf16 {bf16} ({rbf:.2}x)");
    if let Some(why) = super::capped(e, &["fp32", "fp16", "bf16"]) {
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let verdict = match r16.max(rbf) {
        r if r >= DOUBLED => Verdict::Confirmed,
        r if r >= LARGER => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let why = format!(
        "exact largest batches from {} under the same budget; confirmed at {DOUBLED}x or more.",
        how_searched(e, "fp32")
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn amp_models_batch(get: Get) -> Claim {
    const C: &str =
        "Mixed precision can often double the batch size: on a ResNet-18 and a Transformer encoder";
    const E: &str = "amp_models";
    let Some(e) = get(E) else { return not_run(C, E) };
    let fit = |v: &str| e.answer(v).and_then(|a| a.largest_fit);
    let left_out = |v: &str| e.manifest.not_run.iter().find(|n| n.variant == v);
    let mut parts = Vec::new();
    let mut ratios = Vec::new();
    let mut skipped = Vec::new();
    for model in ["resnet18", "transformer"] {
        let (full, half) = (format!("{model}_fp32"), format!("{model}_bf16"));
        if let Some(n) = left_out(&full).or(left_out(&half)) {
            parts.push(format!("{model}: {} not run here", n.variant));
            skipped.push(format!("{} was not run here: {}", n.variant, n.why));
            continue;
        }
        let (Some(full), Some(half)) = (fit(&full), fit(&half)) else {
            return not_run(C, E);
        };
        let r = half as f64 / full as f64;
        ratios.push(r);
        parts.push(format!("{model} fp32 {full}, bf16 {half} ({r:.2}x)"));
    }
    let measured = format!("largest batch in {}: {}", budget(e), parts.join("; "));
    if !skipped.is_empty() {
        let why = format!(
            "not judged here: the claim is about both models, and {}. The spec leaves such variants out on \
             a CPU like this one because their trials would take tens of minutes; their memory is what \
             `oomlab estimate experiments/{E}.toml` predicts (exact on the CPU), or run them on a CPU with \
             those instructions or a GPU.",
            skipped.join("; ")
        );
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let variants = ["resnet18_fp32", "resnet18_bf16", "transformer_fp32", "transformer_bf16"];
    if let Some(why) = super::capped(e, &variants) {
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let verdict = if ratios.iter().all(|&r| r >= DOUBLED) {
        Verdict::Confirmed
    } else if ratios.iter().any(|&r| r >= LARGER) {
        Verdict::Partly
    } else {
        Verdict::Refuted
    };
    let why = format!(
        "exact largest batches from {} under the same budget. Autocast halves the activations these \
         models are mostly made of, but the fixed costs stay (fp32 parameters, gradients and optimizer state, \
         plus its bf16 copy of the weights and, on the CPU, oneDNN's fp32 buffers for each bf16 weight \
         gradient), and on the CPU attention with dropout computes in fp32; confirmed at {DOUBLED}x or more \
         for both models, partly where one reaches {LARGER}x.",
        how_searched(e, "resnet18_fp32")
    );
    claim(C, E, measured, verdict, why)
}
