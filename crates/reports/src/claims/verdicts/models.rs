//! Guide 002's model advice: smaller models (ResNet-18 for ResNet-152, a 6 x 512 Transformer for
//! a 12 x 1024 one) and depthwise separable convolutions, and its memory breakdown by category.
use super::{budget, claim, not_run, pct, size, Get, Kept};
use crate::chart::CategoryBar;
use crate::claims::band::Band;
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::SummaryRow;

/// The guide's pairs: (smaller, larger) variant names.
const PAIRS: [(&str, &str); 2] = [("resnet18", "resnet152"), ("transformer_512x6", "transformer_1024x12")];

pub(super) fn smaller_models(get: Get) -> Claim {
    const C: &str = "Smaller models use less memory: ResNet-18 instead of ResNet-152, a Transformer of \
                     d_model 512, 8 heads, 6 layers instead of 1024, 16, 12";
    const E: &str = "smaller_models";
    let Some(e) = get(E) else { return not_run(C, E) };
    let ok = |v: &str| e.variant(v).filter(|r| r.status.fitted());
    let mut parts = Vec::new();
    let mut ratios = Vec::new();
    for (small, large) in PAIRS {
        let (Some(s), Some(l)) = (ok(small), ok(large)) else { return not_run(C, E) };
        let ratio = s.max_memory_allocated as f64 / l.max_memory_allocated as f64;
        ratios.push(ratio);
        parts.push(format!(
            "{small} {} params, peak {} vs {large} {} params, peak {} ({} of it)",
            millions(s.param_count),
            size(s.max_memory_allocated as f64),
            millions(l.param_count),
            size(l.max_memory_allocated as f64),
            pct(ratio)
        ));
    }
    let Some(first) = e.rows.first() else { return not_run(C, E) };
    let batch = first.batch_size;
    let per_parameter = Kept::of(first).map_or_else(
        || "every parameter costs itself, its gradient and the optimizer's state".to_string(),
        |k| {
            format!(
                "with {} every parameter costs {} bytes (itself, its gradient, {})",
                k.optimizer, k.bytes, k.state
            )
        },
    );
    let verdict = if ratios.iter().all(|&r| r < 1.0) { Verdict::Confirmed } else { Verdict::Refuted };
    let why = format!(
        "each model trained at batch {batch}; confirmed when the smaller model's peak is below the larger's \
         in both pairs. How much smaller depends on what dominates: {per_parameter} whatever the batch, \
         while activations grow with the batch and the input (small images keep ResNets' activations \
         small, so their peaks follow the parameters)."
    );
    claim(C, E, parts.join("; "), verdict, why)
}

pub(super) fn smaller_models_batch(get: Get) -> Claim {
    const C: &str = "A smaller model trains a larger batch in the same memory";
    const E: &str = "smaller_models_batch";
    let Some(e) = get(E) else { return not_run(C, E) };
    let budget = budget(e);
    let largest = |v: &str| e.answer(v).map(|a| (a.largest_fit.unwrap_or(0), a.first_oom.is_none()));
    let mut parts = Vec::new();
    let mut larger = true;
    for (small, large) in PAIRS {
        let (Some(s), Some(l)) = (largest(small), largest(large)) else { return not_run(C, E) };
        larger &= s.0 > l.0;
        // A search that reached its max without running out found a floor.
        let word = |(b, floor): (u64, bool)| match (b, floor) {
            (0, _) => "none".to_string(),
            (b, true) => format!("at least {b}"),
            (b, false) => b.to_string(),
        };
        parts.push(format!("{small} {} vs {large} {}", word(s), word(l)));
    }
    let measured = format!("largest batch in {budget}: {}", parts.join("; "));
    // The larger model's largest batch must be exact; the smaller's may be a floor (a search that
    // reached its max): above the larger's, it answers the claim all the same.
    let variants: Vec<&str> = PAIRS.iter().map(|(_, l)| *l).collect();
    if let Some(why) = super::capped(e, &variants) {
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let verdict = if larger { Verdict::Confirmed } else { Verdict::Refuted };
    let why = format!(
        "largest batches from a {} (\"at least\" where a search reached its max without running out); \
         a model whose parameters, gradients and optimizer state alone exceed the budget fits no batch \
         at all, which no batch size can fix. Confirmed when the smaller model fits the larger batch in \
         both pairs.",
        super::search_kind(e, PAIRS[0].1)
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn depthwise(get: Get) -> Claim {
    const C: &str = "Depthwise separable convolutions have fewer parameters than standard ones";
    const E: &str = "depthwise_separable";
    let Some(e) = get(E) else { return not_run(C, E) };
    let (Some(std), Some(dws)) = (e.variant("standard"), e.variant("depthwise_separable")) else {
        return not_run(C, E);
    };
    let params = dws.param_count as f64 / std.param_count as f64;
    let peak = dws.max_memory_allocated as f64 / std.max_memory_allocated as f64;
    let measured = format!(
        "parameters {} vs {} ({:.1}x fewer); peak {} vs {} ({:+.1}%)",
        dws.param_count,
        std.param_count,
        1.0 / params,
        size(dws.max_memory_allocated as f64),
        size(std.max_memory_allocated as f64),
        100.0 * (peak - 1.0)
    );
    let verdict = match (params < 1.0, peak < 1.0) {
        (true, true) => Verdict::Confirmed,
        (true, false) => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let why = "the parameters fall as the arithmetic says (3 x 3 x C + C x C against 3 x 3 x C x C); \
               confirmed when the peak falls with them, partly when it does not: the depthwise and \
               pointwise pair makes two outputs per block where a standard convolution makes one, so \
               its activations are larger, and where activations dominate the peak the saving on \
               parameters, gradients and Adam's state does not show."
        .to_string();
    claim(C, E, measured, verdict, why)
}

/// The guide's shares, each of the memory a training step uses.
const PARAMS: Band = Band::new(0.10, 0.40, 0.05);
const ACTIVATIONS: Band = Band::new(0.20, 0.60, 0.05);

/// A variant's categories as shares of their sum (data excluded: on a GPU it stays on the host),
/// with the categories as [`CategoryBar`] measures them from the trace.
struct Shares {
    label: String,
    params: f64,
    grads: f64,
    state: f64,
    activations: f64,
}

fn shares(e: &Experiment) -> Vec<Shares> {
    let mut out = Vec::new();
    for r in e.rows.iter().filter(|r| r.status.fitted()) {
        let bar = CategoryBar::from_trace(r.variant.clone(), r, &e.trace);
        let [_, params, state, grads, batch, activations] = bar.bytes.map(|b| b as f64);
        let sum = params + state + grads + batch + activations;
        if sum > 0.0 {
            out.push(Shares {
                label: label(r),
                params: params / sum,
                grads: grads / sum,
                state: state / sum,
                activations: activations / sum,
            });
        }
    }
    out
}

fn label(r: &SummaryRow) -> String {
    if r.variant.is_empty() {
        r.model.clone()
    } else {
        r.variant.clone()
    }
}

pub(super) fn breakdown(get: Get) -> Claim {
    const C: &str = "Parameters take 10-40% of the memory, gradients 10-40%, activations 20-60%";
    const E: &str = "memory_breakdown";
    let Some(e) = get(E) else { return not_run(C, E) };
    let all = shares(e);
    if all.is_empty() {
        return not_run(C, E);
    }
    let measured = all
        .iter()
        .map(|s| {
            format!(
                "{}: parameters {}, gradients {}, optimizer state {}, activations {}",
                s.label,
                pct(s.params),
                pct(s.grads),
                pct(s.state),
                pct(s.activations)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let judged: Vec<Verdict> = all
        .iter()
        .flat_map(|s| [PARAMS.judge(s.params), PARAMS.judge(s.grads), ACTIVATIONS.judge(s.activations)])
        .collect();
    let verdict = if judged.iter().all(|v| *v == Verdict::Confirmed) {
        Verdict::Confirmed
    } else if judged.iter().any(|v| *v != Verdict::Refuted) {
        Verdict::Partly
    } else {
        Verdict::Refuted
    };
    let why = format!(
        "each category measured at the first training step from the trace (as categories.png draws \
         them), as a share of their sum (parameters, gradients, optimizer state, batch, activations; \
         the CUDA context is outside the allocator). Parameters and gradients: {}; activations: {}. \
         Confirmed when every model's three shares are inside, partly when some are: the shares \
         follow the batch and the input size, not the kind of model.",
        PARAMS.rule(),
        ACTIVATIONS.rule()
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn activations_biggest(get: Get) -> Claim {
    const C: &str = "Activations are the biggest memory consumer";
    const E: &str = "memory_breakdown";
    let Some(e) = get(E) else { return not_run(C, E) };
    let all = shares(e);
    if all.is_empty() {
        return not_run(C, E);
    }
    let biggest = |s: &Shares| {
        [
            ("parameters", s.params),
            ("gradients", s.grads),
            ("optimizer state", s.state),
            ("activations", s.activations),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("-", |(n, _)| n)
    };
    let measured = all.iter().map(|s| format!("{}: {}", s.label, biggest(s))).collect::<Vec<_>>().join("; ");
    let yes = all.iter().filter(|s| biggest(s) == "activations").count();
    let verdict = match yes {
        n if n == all.len() => Verdict::Confirmed,
        0 => Verdict::Refuted,
        _ => Verdict::Partly,
    };
    let batch = e.rows.first().map_or(0, |r| r.batch_size);
    let why = format!(
        "the largest category of each model at batch {batch} ({yes} of {} models: activations). A wide \
         MLP on a small input holds little but its parameters and what the optimizer keeps of them; \
         convolutions over large images and attention over long sequences keep far more.",
        all.len()
    );
    claim(C, E, measured, verdict, why)
}

fn millions(n: u64) -> String {
    format!("{:.1} M", n as f64 / 1e6)
}
