//! How many training steps a probe needs for its peak to be every longer run's peak, and why
//! each of them is needed: what a finder's summary says about its probes.
//!
//! Read off `train::step` and the ledger it is replayed into:
//!
//! - Step 1's forward and backward run without optimizer state; its `optimizer_step` makes the
//!   state (Adam and AdamW: `exp_avg` and `exp_avg_sq`, two copies of the parameters; SGD with
//!   momentum: `momentum_buffer`, one). Step 2 is the first forward and backward with the state
//!   held: for any batch whose activations outweigh the parameters, the peak is there. From
//!   then on every step allocates and frees the same tensors (zero_grad frees the gradients,
//!   the batch and graph go with the step), so step 3 onwards repeats step 2: **2 steps**.
//! - Plain SGD (no momentum) keeps nothing between steps: every step repeats step 1: **1 step**.
//!   So does a forward-only step (`mode = "forward"` or `"forward_no_grad"`).
//! - The fp16 grad scaler skips the optimizer step when the gradients overflow; the state then
//!   arrives a step later, at a step nobody can name in advance: **every step** the spec asks
//!   for can hold the peak.
//! - `history = "loss_tensor"` keeps each step's graph alive: memory grows every step and the
//!   peak is at the last: **every step**.
//!
//! oomlab does not shorten a probe to this count: a probe is a trial of the spec, with its
//! trace, step time and loss as the spec asks, and on CUDA the budget caps reserved memory,
//! whose segments the caching allocator may still rearrange after step 2. It says instead, in
//! the run's summary, whether the spec's `steps` are too few (the answer may be too high) or
//! more than needed (the same answer, slower). The tests hold the counts against the replay.
use crate::spec::{Amp, Config, History, Mode, OptimizerSpec};

/// The fewest steps a probe needs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepsNeeded {
    /// The fewest steps whose peak equals any longer run's; `None`: any step can hold the peak.
    pub steps: Option<usize>,
    /// Why, in words.
    pub why: String,
}

/// The optimizer's state in words, or `None` for plain SGD.
fn state(opt: &OptimizerSpec) -> Option<&'static str> {
    match *opt {
        OptimizerSpec::Sgd { momentum, .. } if momentum != 0.0 => Some("SGD's momentum buffer"),
        OptimizerSpec::Sgd { .. } => None,
        OptimizerSpec::Adam { .. } => Some("Adam's state (two copies of the parameters)"),
        OptimizerSpec::AdamW { .. } => Some("AdamW's state (two copies of the parameters)"),
    }
}

/// How many steps a trial of `config` needs for its peak to be that of any longer trial.
pub fn steps_needed(config: &Config) -> StepsNeeded {
    let t = &config.training;
    let tech = &t.techniques;
    let (steps, why) = if tech.history == History::LossTensor {
        (None, "history = \"loss_tensor\" keeps every step's graph, so memory grows each step and the peak is at the last".into())
    } else if tech.mode != Mode::Train {
        (Some(1), "a forward-only step frees all it makes, so every step repeats step 1".into())
    } else {
        match (state(&t.optimizer), tech.amp) {
            (None, _) => (
                Some(1),
                "plain SGD keeps nothing between steps (zero_grad frees the gradients), so every step repeats step 1"
                    .into(),
            ),
            (Some(s), Amp::Fp16 { .. }) => (
                None,
                format!(
                    "the fp16 grad scaler skips a step whose gradients overflow, and {s} then arrives a step \
                     later, so any step can hold the peak; 2 steps suffice where the first is not skipped \
                     (summary.csv's skipped_steps)"
                ),
            ),
            (Some(s), _) => (
                Some(2),
                format!(
                    "step 1's optimizer_step makes {s}; step 2 is the first forward and backward with it \
                     held (the peak, at any batch whose activations outweigh the parameters); later steps \
                     repeat step 2"
                ),
            ),
        }
    };
    StepsNeeded { steps, why }
}

/// What a summary says about a probe's steps: how many ran, how many are needed and why, and
/// what a different count would change.
pub fn describe_steps(config: &Config) -> String {
    let n = config.training.steps;
    let need = steps_needed(config);
    let s = |k: usize| if k == 1 { "1 step".to_string() } else { format!("{k} steps") };
    match need.steps {
        None => format!("{} a probe, every one can matter: {}", s(n), need.why),
        Some(k) if k == n => format!("{} a probe, as needed: {}", s(n), need.why),
        Some(k) if k < n => {
            format!("{} a probe; {} would find the same answer sooner ({})", s(n), s(k), need.why)
        }
        Some(k) => format!(
            "{} a probe, fewer than the {} the peak needs ({}): the answer may be too high",
            s(n),
            s(k),
            need.why
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{predict_with, DataShape, Options, Prediction, Target};
    use crate::spec::examples::mlp as config;
    use crate::spec::{Checkpoint, DataSpec, OptimizerImpl, ScalerSpec, Techniques};

    const SGD: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 };
    const MOMENTUM: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.01 };
    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };
    const ADAMW: OptimizerSpec = OptimizerSpec::AdamW { lr: 0.001, weight_decay: 0.01 };

    /// Activations outweigh the parameters: 1024 rows through two layers of 64.
    fn wide_batch(opt: OptimizerSpec, techniques: Techniques, steps: usize) -> Config {
        let mut c = config(2, 64, 1024, opt);
        c.data = DataSpec::Synthetic { samples: 1024, features: 32, classes: 4, seed: 0 };
        c.training.techniques = techniques;
        c.training.steps = steps;
        c
    }

    fn predict(c: &Config, target: Target) -> Prediction {
        let shape = DataShape { samples: 1024, features: 32, classes: 4 };
        let options = Options { target, ..Options::default() };
        predict_with(c, shape, &options).unwrap()
    }

    fn every_technique() -> Vec<Techniques> {
        let d = Techniques::default();
        let fp16 = Amp::Fp16 { scaler: ScalerSpec::default() };
        let mut out = vec![];
        for amp in [Amp::Off, Amp::Bf16, fp16] {
            for accumulation in [1, 3] {
                for checkpoint in [Checkpoint::None, Checkpoint::Sqrt] {
                    for history in [History::None, History::LossValue, History::LossTensor] {
                        for optimizer_impl in [None, Some(OptimizerImpl::Foreach)] {
                            out.push(Techniques {
                                amp,
                                accumulation,
                                checkpoint,
                                history,
                                optimizer_impl,
                                ..d
                            });
                        }
                    }
                }
            }
        }
        for mode in [Mode::Forward, Mode::ForwardNoGrad] {
            for history in [History::None, History::LossTensor] {
                out.push(Techniques { mode, history, ..d });
            }
        }
        out
    }

    #[test]
    fn steps_past_the_count_repeat_its_peak() {
        for opt in [SGD, MOMENTUM, ADAM, ADAMW] {
            for tech in every_technique() {
                let need = steps_needed(&wide_batch(opt, tech, 1));
                let Some(k) = need.steps else { continue };
                for target in [Target::Cpu, Target::Cuda] {
                    let short = predict(&wide_batch(opt, tech, k), target);
                    let long = predict(&wide_batch(opt, tech, k + 3), target);
                    let what = format!("{opt:?} {tech:?} {target:?}: {k} steps");
                    assert_eq!(short.peak, long.peak, "{what}");
                    assert_eq!(short.reserved_peak, long.reserved_peak, "{what}");
                }
            }
        }
    }

    #[test]
    fn each_step_counted_is_needed() {
        for opt in [SGD, MOMENTUM, ADAM, ADAMW] {
            for tech in every_technique() {
                let what = format!("{opt:?} {tech:?}");
                match steps_needed(&wide_batch(opt, tech, 1)).steps {
                    // Without step 2 the peak is missed.
                    Some(2) => assert!(
                        predict(&wide_batch(opt, tech, 1), Target::Cpu).peak
                            < predict(&wide_batch(opt, tech, 2), Target::Cpu).peak,
                        "{what}"
                    ),
                    Some(k) => assert_eq!(k, 1, "{what}"),
                    // A growing history: each step adds to the peak.
                    None if tech.history == History::LossTensor => {
                        let peaks: Vec<u64> =
                            (1..=4).map(|n| predict(&wide_batch(opt, tech, n), Target::Cpu).peak).collect();
                        assert!(peaks.windows(2).all(|w| w[0] < w[1]), "{what}: {peaks:?}");
                    }
                    // fp16 with state: the replay assumes no skipped step, so the state comes at step 1
                    // and step 2 holds the peak; a skipped step 1 moves it to step 3.
                    None => {
                        assert!(matches!(tech.amp, Amp::Fp16 { .. }) && state(&opt).is_some(), "{what}")
                    }
                }
            }
        }
    }

    #[test]
    fn the_summary_says_too_few_enough_or_too_many() {
        let adam = |steps| wide_batch(ADAM, Techniques::default(), steps);
        assert!(describe_steps(&adam(2))
            .starts_with("2 steps a probe, as needed: step 1's optimizer_step makes Adam's state"));
        assert!(describe_steps(&adam(1)).contains("fewer than the 2 steps the peak needs"));
        assert!(describe_steps(&adam(5))
            .starts_with("5 steps a probe; 2 steps would find the same answer sooner"));
        assert!(describe_steps(&wide_batch(SGD, Techniques::default(), 1))
            .starts_with("1 step a probe, as needed"));
    }
}
