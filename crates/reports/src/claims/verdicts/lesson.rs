//! The lesson's two challenges: the whole training set as one batch runs out of memory, and
//! about 5 hidden layers of 5000 fit at batch 32.
use super::{budget, claim, default_adam, neither_fit_nor_oom, not_run, size, Get};
use crate::claims::conditions::{Conditions, Setting};
use crate::claims::{Claim, Verdict};
use crate::schema::Status;
use crate::spec::{Dtype, Field};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The lesson's GPU: 16 GB, of which 15.90 GiB are PyTorch's.
const LESSON_GPU: (&str, &str) = ("15.90GiB", "the lesson's 15.90 GiB GPU");

/// Challenge 1: the whole training set through the 2000-wide network.
/// Its request is one fp32 `[N, 2000]` tensor.
const WHOLE_DATASET: Conditions = Conditions {
    budget: Some(LESSON_GPU),
    sizes: &[(Field::Hidden, 2000.0, "its 2000-wide hidden layer")],
    settings: &[(Setting::Dtype(Dtype::Float32), "fp32"), (Setting::Amp("off"), "no autocast")],
};

/// Challenge 2: 5000-wide layers at batch 32, trained as the lesson does (Adam, fp32), which
/// the explanation's bytes per layer count.
const DEPTH: Conditions = Conditions {
    budget: Some(LESSON_GPU),
    sizes: &[(Field::Hidden, 5000.0, "5000-wide hidden layers"), (Field::BatchSize, 32.0, "batch 32")],
    settings: &[
        (Setting::Optimizer("adam"), "Adam"),
        (Setting::Dtype(Dtype::Float32), "fp32"),
        (Setting::Amp("off"), "no autocast"),
    ],
};

pub(super) fn whole_dataset(get: Get) -> Claim {
    whole_dataset_judged(get).under(WHOLE_DATASET)
}

pub(super) fn depth(get: Get) -> Claim {
    depth_judged(get).under(DEPTH)
}

fn whole_dataset_judged(get: Get) -> Claim {
    const C: &str = "The whole training set as one batch runs out of memory (lesson, challenge 1)";
    const E: &str = "whole_dataset_batch";
    let Some(r) = get(E).and_then(|e| e.rows.first()) else { return not_run(C, E) };
    if let Some(unknown) = neither_fit_nor_oom(C, E, r) {
        return unknown;
    }
    if r.status != Status::Oom {
        let m = format!("{} (peak {})", r.status, size(r.max_memory_allocated as f64));
        return claim(C, E, m, Verdict::Refuted, "the batch of the whole set fitted the budget.".into());
    }
    let (req, alloc) = (r.oom_requested.unwrap_or(0) as f64, r.oom_allocated.unwrap_or(0) as f64);
    let measured = format!(
        "OOM in {}: tried to allocate {} (lesson 8.74 GiB) with {} allocated (lesson 8.84 GiB)",
        r.phase.map(|p| p.to_string()).unwrap_or_default(),
        size(req),
        size(alloc)
    );
    let close = (req / (8.74 * GIB) - 1.0).abs() < 0.01;
    let verdict = if close { Verdict::Confirmed } else { Verdict::Partly };
    let why = format!(
        "the data set is sized from the lesson's own error message (its 8.74 GiB request is one \
         [N, hidden] fp32 tensor), so this reproduces the lesson's OOM rather than testing whether some \
         whole data set fits: {} samples x {} features as one batch: the hidden layer's [N, {}] output \
         fits, the ReLU's copy of it does not; the request matches the lesson's to 1% ({}), and \"allocated\" \
         differs from the lesson's by what the device holds besides (on CPU the host copy of the data).",
        r.samples,
        r.features,
        r.hidden,
        if close { "yes" } else { "no" }
    );
    claim(C, E, measured, verdict, why)
}

fn depth_judged(get: Get) -> Claim {
    const C: &str =
        "At batch 32, about 5 hidden layers of 5000 fit before out of memory (lesson, challenge 2)";
    const E: &str = "depth_sweep";
    let Some(e) = get(E) else { return not_run(C, E) };
    let (variant, implementation) = default_adam(e);
    let Some(a) = e.answer(variant) else { return not_run(C, E) };
    // A sweep that never ran out, or whose first OOM was only predicted, has no boundary.
    if let Some(why) = super::capped(e, &[variant]) {
        let fit = a.largest_fit.map_or("none".into(), |n| n.to_string());
        return claim(
            C,
            E,
            format!("largest depth found under {}: {fit} ({implementation})", budget(e)),
            Verdict::NotJudged,
            why,
        );
    }
    let (Some(fit), first) = (a.largest_fit, a.first_oom) else {
        return claim(
            C,
            E,
            "no depth fitted".into(),
            Verdict::Refuted,
            "even depth 1 ran out of memory.".into(),
        );
    };
    let oom_row = e
        .rows
        .iter()
        .find(|r| r.variant == variant && r.status == Status::Oom && r.value == first.map(|v| v as f64));
    let budget = budget(e);
    let others = e
        .manifest
        .answers
        .iter()
        .filter(|o| o.variant != variant)
        .map(|o| format!("{} {}", o.variant, o.largest_fit.map_or("-".into(), |f| f.to_string())))
        .collect::<Vec<_>>();
    let others =
        if others.is_empty() { String::new() } else { format!("; other Adams: {}", others.join(", ")) };
    let measured = format!(
        "largest depth that fits {budget} with PyTorch's default Adam here ({implementation}): {fit}; \
         first OOM at {} in {}{others}",
        first.map_or("-".into(), |v| v.to_string()),
        oom_row.and_then(|r| r.phase).map_or("-".into(), |p| p.to_string())
    );
    let verdict = if (4..=6).contains(&fit) { Verdict::Confirmed } else { Verdict::Refuted };
    // The conditions hold these runs to fp32 Adam: four copies of each 4-byte parameter.
    let per_layer = e.rows.iter().find(|r| r.status.fitted() && r.depth >= 2).map(|r| {
        let hidden = r.hidden as f64;
        4.0 * 4.0 * (hidden * hidden + hidden)
    });
    let why = format!(
        "a {0}x{0} fp32 layer with its gradient and Adam's two state tensors takes {1}; the budget holds \
         {fit} such layers with everything else a step keeps, {2:.1}x the lesson's 5, so the lesson's \
         figure would need layers about {3:.0}x wider in memory. Which Adam matters: the foreach step \
         (PyTorch's default on a GPU) holds a square root of every parameter at once, one more copy of \
         the model, and fits fewer layers than the for-loop.",
        e.rows.first().map_or(0, |r| r.hidden),
        per_layer.map_or("-".into(), size),
        fit as f64 / 5.0,
        fit as f64 / 5.0
    );
    claim(C, E, measured, verdict, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use crate::results::ExperimentDir;
    use crate::schema::SummaryRow;

    fn one_row(experiment: &str, variant: &str, status: Status) -> ExperimentDir {
        let row = SummaryRow { trial: 1, variant: variant.into(), status, ..SummaryRow::default() };
        let m = manifest(experiment, "NVIDIA H200", Some(8 << 30), 1 << 37);
        ExperimentDir {
            dir: experiment.into(),
            manifest: m,
            rows: vec![row],
            trace: Vec::new(),
            cut_row: false,
        }
    }

    /// A trial skipped as predicted, or failed on another error, neither fitted nor ran out:
    /// the lesson's and answer 004's OOM claims say so and judge nothing, where an OOM confirms
    /// and a fit refutes.
    #[test]
    fn a_trial_that_neither_fitted_nor_ran_out_judges_nothing() {
        for (status, verdict) in [
            (Status::PredictedOom, Verdict::NotJudged),
            (Status::Error, Verdict::NotJudged),
            (Status::Ok, Verdict::Refuted),
        ] {
            let whole = one_row("whole_dataset_batch", "", status);
            let c = whole_dataset_judged(&|e: &str| (e == "whole_dataset_batch").then_some(&whole));
            assert_eq!(c.verdict, verdict, "{status}: {c:#?}");
            let answer = one_row("answer004", "batch1024", status);
            let c = super::super::examples::answer004_oom(&|e: &str| (e == "answer004").then_some(&answer));
            assert_eq!(c.verdict, verdict, "{status}: {c:#?}");
            if verdict == Verdict::NotJudged {
                assert!(c.measured.contains(&format!("trial 1 {status}")), "{}", c.measured);
            }
        }
        let oom = one_row("answer004", "batch1024", Status::Oom);
        let c = super::super::examples::answer004_oom(&|e: &str| (e == "answer004").then_some(&oom));
        assert_eq!(c.verdict, Verdict::Confirmed, "{c:#?}");
    }
}
