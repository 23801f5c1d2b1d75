//! Memory outside the training step: a forward under no_grad keeps nothing for backward, and a
//! loss kept step after step keeps its graph (a leak).
use super::{claim, kept_by_forward, not_run, pct, size, Get};
use crate::claims::{fit, Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::Phase;
use crate::spec::ModelKind;

pub(super) fn no_grad(get: Get) -> Claim {
    const C: &str = "torch.no_grad() during validation saves memory";
    const E: &str = "inference_vs_training";
    let Some(e) = get(E) else { return not_run(C, E) };
    let peak = |v: &str| e.variant(v).and_then(|r| e.phase_peak(r.trial, Phase::Forward)).map(|p| p as f64);
    let (Some(grad), Some(nog)) = (peak("forward_grad"), peak("forward_no_grad")) else {
        return not_run(C, E);
    };
    let (kg, kn) = (kept_by_forward(e, "forward_grad"), kept_by_forward(e, "forward_no_grad"));
    let saving = 1.0 - nog / grad;
    let measured = format!(
        "forward peak {} with gradient tracking, {} under no_grad ({} less); kept after forward {} vs {}",
        size(grad),
        size(nog),
        pct(saving),
        kg.map_or("-".into(), size),
        kn.map_or("-".into(), size)
    );
    let verdict = if saving > 0.2 { Verdict::Confirmed } else { Verdict::Partly };
    // What is kept is the model's: an MLP's saved inputs are its ReLUs' outputs.
    let kept = match e.rows.first().and_then(|r| r.model_kind) {
        Some(ModelKind::Mlp) => {
            "one activation per hidden layer (the ReLU's output, which the next Linear saves as \
                        its input)"
        }
        _ => "what each layer's backward would need (its saved inputs and outputs)",
    };
    let why = format!(
        "with gradient tracking autograd keeps {kept} for a backward that never comes; under no_grad each \
         activation is freed once used (confirmed above 20% less)."
    );
    claim(C, E, measured, verdict, why)
}

fn growth(e: &Experiment, variant: &str) -> Option<f64> {
    let r = e.variant(variant)?;
    let pts: Vec<(f64, f64)> =
        e.end_of_steps(r.trial).into_iter().map(|(s, a)| (s as f64, a as f64)).collect();
    Some(fit::line(&pts)?.slope)
}

pub(super) fn leak(get: Get) -> Claim {
    const C: &str = "Memory that grows step after step is a leak: keeping tensors that hold the graph";
    const E: &str = "leak";
    let Some(e) = get(E) else { return not_run(C, E) };
    let names = ["forward_keep_tensor", "forward_keep_value", "train_keep_tensor", "train_keep_value"];
    let g: Vec<(&str, Option<f64>)> = names.iter().map(|v| (*v, growth(e, v))).collect();
    let measured = g
        .iter()
        .map(|(v, s)| {
            format!(
                "{v} {}/step",
                s.map_or("-".into(), |s| if s < 0.0 { format!("-{}", size(-s)) } else { size(s) })
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (Some(tensor), Some(value)) = (g[0].1, g[1].1) else { return not_run(C, E) };
    let verdict =
        if tensor > 1e6 && value.abs() < 0.01 * tensor { Verdict::Confirmed } else { Verdict::Partly };
    let why = format!(
        "slope of allocated memory at the end of each step: keeping the loss tensor in a forward-only \
         loop keeps its graph, {} a step; keeping loss.item() keeps nothing; in a training loop \
         backward has already freed the graph's saved tensors, so a kept loss costs only its own bytes.",
        size(tensor)
    );
    claim(C, E, measured, verdict, why)
}
