//! The training step's fixed costs: the optimizers' state (Adam 2x the parameters, momentum 1x,
//! plain SGD none) and the gradients (1x, freed by zero_grad).
use super::{claim, not_run, size, state_ratio_of, Get};
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::Phase;

/// Bytes a trial's first optimizer step added (the optimizer's state), over its parameter bytes.
fn state_ratio(e: &Experiment, variant: &str) -> Option<f64> {
    state_ratio_of(e, e.variant(variant)?)
}

pub(super) fn optimizer_state(get: Get) -> Claim {
    const C: &str = "Adam keeps 2x the parameter size in state, SGD with momentum 1x, plain SGD none";
    const E: &str = "optimizers";
    let Some(e) = get(E) else { return not_run(C, E) };
    let expected = [("sgd", 0.0), ("sgd_momentum", 1.0), ("adam", 2.0), ("adamw", 2.0)];
    let got: Vec<(&str, f64, Option<f64>)> =
        expected.iter().map(|&(v, x)| (v, x, state_ratio(e, v))).collect();
    let measured = got
        .iter()
        .map(|(v, _, r)| format!("{v} {}", r.map_or("-".into(), |r| format!("{r:.3}x"))))
        .collect::<Vec<_>>()
        .join(", ");
    let ok = got.iter().all(|(_, x, r)| r.is_some_and(|r| (r - x).abs() < 0.02));
    let verdict = if ok { Verdict::Confirmed } else { Verdict::Partly };
    let why = "state = memory still allocated after the first zero_grad minus after the model phase \
               (less the 4-byte loss), over the parameter bytes: torch.optim makes the state at the first \
               step (Adam also a 4-byte step counter per parameter), and gradients and the batch are \
               gone by then; confirmed when each is within 0.02 of 0, 1, 2, 2."
        .to_string();
    claim(C, E, measured, verdict, why)
}

pub(super) fn gradients(get: Get) -> Claim {
    const C: &str = "Gradients take as much memory as the parameters (and are freed after the step)";
    const E: &str = "optimizers";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(r) = e.variant("sgd") else { return not_run(C, E) };
    let (Some(step), Some(zero)) =
        (e.allocated_after(r.trial, 1, Phase::OptimizerStep), e.allocated_after(r.trial, 1, Phase::ZeroGrad))
    else {
        return not_run(C, E);
    };
    let ratio = (step as f64 - zero as f64) / r.param_bytes as f64;
    let verdict = if (ratio - 1.0).abs() < 0.02 { Verdict::Confirmed } else { Verdict::Partly };
    let why = format!(
        "zero_grad (set to none, libtorch's default) freed {} against {} of parameters: {ratio:.3}x; \
         the gradients live from backward until zero_grad, not past the step.",
        size(step as f64 - zero as f64),
        size(r.param_bytes as f64)
    );
    claim(C, E, format!("gradients {ratio:.3}x the parameter bytes"), verdict, why)
}
