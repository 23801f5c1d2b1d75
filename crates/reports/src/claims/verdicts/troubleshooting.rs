//! Guide 002's quick reference on gradient checkpointing ("30-50% memory, 10-20% slower") and its
//! troubleshooting table ("OOM during backward pass: use gradient checkpointing"), on ResNet-50.
use super::checkpointing::{cpu_times, Steps};
use super::{claim, not_run, pct, Get};
use crate::claims::band::Band;
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::{Phase, Status, SummaryRow};

const E: &str = "resnet_checkpointing";
/// "30-50% memory".
const MEMORY: Band = Band::new(0.30, 0.50, 0.05);
/// "10-20% slower".
const SLOWER: Band = Band::new(0.10, 0.20, 0.05);
const CHECKPOINTED: [&str; 2] = ["every1", "sqrt"];
/// Every variant whose largest batch the two claims compare.
const COMPARED: [&str; 3] = ["none", CHECKPOINTED[0], CHECKPOINTED[1]];

/// A variant's largest batch that fits and its row.
fn fit<'a>(e: &'a Experiment, variant: &str) -> Option<(u64, &'a SummaryRow)> {
    let n = e.answer(variant)?.largest_fit?;
    let row =
        e.rows.iter().find(|r| r.variant == variant && r.status.fitted() && r.value == Some(n as f64))?;
    Some((n, row))
}

pub(super) fn quick_reference_memory(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing: 30-50% memory (guide 002's quick reference, on ResNet-50)";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some((none, _)) = fit(e, "none") else { return not_run(C, E) };
    let mut parts = vec![format!("largest batch: none {none}")];
    let mut sqrt = None;
    for v in CHECKPOINTED {
        let Some((n, _)) = fit(e, v) else { return not_run(C, E) };
        let saved = 1.0 - none as f64 / n as f64;
        parts.push(format!("{v} {n} ({} less memory a sample)", pct(saved)));
        if v == "sqrt" {
            sqrt = Some(saved);
        }
    }
    if let Some(why) = super::capped(e, &COMPARED) {
        return claim(C, E, parts.join(", "), Verdict::NotJudged, why);
    }
    let verdict = sqrt.map_or(Verdict::NotRun, |s| MEMORY.judge(s));
    let why = format!(
        "the budget left after the fixed costs (parameters, gradients, optimizer state) is the same for \
         every variant, so the memory a sample needs falls as the largest batch grows: 1 - \
         none's / the variant's. Checkpointing every block keeps only the blocks' inputs; sqrt(n) \
         segments of four blocks recompute a whole segment at once and keep its insides while they \
         are differentiated. Verdict on sqrt(n): {}.",
        MEMORY.rule()
    );
    claim(C, E, parts.join(", "), verdict, why)
}

pub(super) fn quick_reference_time(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing: 10-20% slower (guide 002's quick reference, on ResNet-50)";
    let Some(e) = get(E) else { return not_run(C, E) };
    // Each variant at its largest batch: its steps, and that batch.
    let steps = |v: &str| {
        let (n, r) = fit(e, v)?;
        Some((Steps::of_trials(e, std::iter::once(r.trial))?, n))
    };
    let Some((none, n_none)) = steps("none") else { return not_run(C, E) };
    let mut parts = vec![format!(
        "step time a sample: none {:.2} ms ({} timed steps)",
        1e3 * none.median() / n_none as f64,
        none.count()
    )];
    let mut sqrt = None;
    for v in CHECKPOINTED {
        let Some((s, n)) = steps(v) else { return not_run(C, E) };
        let Some(slower) = s.against_scaled(&none, n_none as f64 / n as f64) else { return not_run(C, E) };
        parts.push(format!("{v} {:.2} ms {}", 1e3 * s.median() / n as f64, slower.describe()));
        if v == "sqrt" {
            sqrt = Some(slower);
        }
    }
    let Some(sqrt) = sqrt else { return not_run(C, E) };
    if let Some(why) = super::capped(e, &COMPARED) {
        // Each variant's time is taken at its largest batch: a floor is not that batch.
        return claim(C, E, parts.join(", "), Verdict::NotJudged, why);
    }
    let verdict = sqrt.verdict(&SLOWER);
    let lead = sqrt.unjudged(&SLOWER).map(|u| u + ". ").unwrap_or_default();
    let why = format!(
        "{lead}the step time a sample (the steps after the first) at each variant's largest batch, \
         with a 90% interval from resampling the steps; recomputing every checkpointed block's forward \
         costs up to one more forward pass, a third of a step. Verdict on sqrt(n) only where the \
         interval clears the band's edges: {}.{}",
        SLOWER.rule(),
        cpu_times(e)
    );
    claim(C, E, parts.join(", "), verdict, why)
}

pub(super) fn backward_oom(get: Get) -> Claim {
    const C: &str = "OOM during the backward pass: use gradient checkpointing (guide 002's troubleshooting)";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(a) = e.answer("none") else { return not_run(C, E) };
    // A search that never ran out, or whose first OOM was only predicted, has no OOM to place.
    if let Some(why) = super::capped(e, &["none"]) {
        let fit = a.largest_fit.map_or("none".into(), |n| n.to_string());
        return claim(
            C,
            E,
            format!("without checkpointing the largest batch found is {fit}"),
            Verdict::NotJudged,
            why,
        );
    }
    let Some(first) = a.first_oom else { return not_run(C, E) };
    let Some(oom) = e
        .rows
        .iter()
        .find(|r| r.variant == "none" && r.status == Status::Oom && r.value == Some(first as f64))
    else {
        return not_run(C, E);
    };
    let fits: Vec<(&str, Option<u64>)> =
        CHECKPOINTED.iter().map(|v| (*v, e.answer(v).and_then(|a| a.largest_fit))).collect();
    let measured = format!(
        "without checkpointing batch {first} ran out in {} (step {}); with it: {}",
        oom.phase.map_or("-".into(), |p| p.to_string()),
        oom.step.map_or("-".into(), |s| s.to_string()),
        fits.iter()
            .map(|(v, n)| format!("{v} fits {}", n.map_or("none".into(), |n| n.to_string())))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let fixed = fits.iter().any(|(_, n)| n.is_some_and(|n| n >= first));
    let verdict = match (oom.phase == Some(Phase::Backward), fixed) {
        (true, true) => Verdict::Confirmed,
        (false, true) => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let why = "the batch one above the largest that fits without checkpointing: confirmed when it ran out \
               in backward (where the saved activations and the gradients being made are all alive) and \
               checkpointing makes it fit, partly when checkpointing helps an OOM elsewhere."
        .to_string();
    claim(C, E, measured, verdict, why)
}
