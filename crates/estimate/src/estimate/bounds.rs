//! What the estimate refuses before it replays a trial, so that its own memory, time and
//! integers stay bounded whatever the config.
//!
//! - Integers: every size the replay adds up is a sum of at most [`tensors_at_once`] tensors of
//!   at most [`largest_tensor`] bytes. When their product fits in 64 bits (with room to spare),
//!   no sum or product in the replay can overflow; a config beyond that could hold more than
//!   8 EiB at once, which no machine has, and is refused with the reason.
//! - Memory: the replay keeps one [`PhasePrediction`](super::PhasePrediction) (about 200 bytes)
//!   per phase it replays, 2 + steps * (3 * accumulation + 2) of them for a training trial. A
//!   prediction keeps at most [`MAX_PHASES`] (20 MB), and a whole estimate (every point of every
//!   variant's sweep) at most [`MAX_TOTAL_PHASES`] (200 MB).
//! - Time: each phase visits every tensor of the model a few times (on CUDA, each visit looks
//!   through the allocator's blocks too): at most [`MAX_WORK`] visits a prediction (a second
//!   or so) and [`MAX_TOTAL_WORK`] an estimate.
//!
//! Memory reaches its steady state within two or three steps, so a config refused here is
//! estimated as well with fewer steps; the message says so.
use anyhow::{bail, Result};

use super::{DataShape, Target};
use crate::spec::{csv_data, limits, Config, DataSpec, History, Mode};

pub const MAX_PHASES: u64 = 100_000;
pub const MAX_WORK: u64 = 100_000_000;
pub const MAX_TOTAL_PHASES: u64 = 1_000_000;
pub const MAX_TOTAL_WORK: u64 = 400_000_000;

/// What replaying one trial costs: the phases it keeps and the layer visits it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    pub phases: u64,
    pub work: u64,
}

/// The cost of replaying `config` on `target` (saturating: a cost too large to count is too
/// large to run). A phase visits each of the model's tensors a few times; on CUDA each visit
/// also looks through the allocator's live blocks for the best fit, about as many again.
pub fn cost(config: &Config, target: Target) -> Cost {
    let t = &config.training;
    let steps = t.steps as u64;
    let per_step = match t.techniques.mode {
        Mode::Train => (t.techniques.accumulation as u64).saturating_mul(3).saturating_add(2),
        Mode::Forward | Mode::ForwardNoGrad => 2,
    };
    let phases = steps.saturating_mul(per_step).saturating_add(2);
    let tensors = (config.model.units() as u64).saturating_add(2).saturating_mul(4);
    let per_phase = match target {
        Target::Cpu => tensors,
        Target::Cuda => tensors.saturating_mul(tensors / 8).max(tensors),
    };
    Cost { phases, work: phases.saturating_mul(per_phase) }
}

/// The largest tensor the replay counts, in bytes (8 bytes an element, the largest dtype, and a
/// CUDA segment's 20 MiB of rounding on top).
pub fn largest_tensor(config: &Config, shape: DataShape) -> u128 {
    let n = |v: usize| v as u128;
    let (h, b) = (n(config.model.width()), n(config.training.batch_size));
    let (s, f, k) = (n(shape.samples), n(shape.features), n(shape.classes));
    let widest = h.max(f).max(k);
    let elements = [h * h, s * f, s * k, f * k, f * h, k * h, b * widest, s, b];
    elements.into_iter().max().unwrap_or(0).saturating_mul(8).saturating_add(20 << 20)
}

/// How many tensors can be live at once: a few per layer (parameters, gradients, optimizer
/// state, activations, gradients in flight), and with `history = "loss_tensor"` a graph a step.
pub fn tensors_at_once(config: &Config) -> u128 {
    let t = &config.training;
    let kept_graphs = match t.techniques.history {
        History::LossTensor => (t.steps as u128) * (t.techniques.accumulation as u128),
        History::None | History::LossValue => 1,
    };
    (kept_graphs + 4).saturating_mul(config.model.units() as u128 + 16).saturating_mul(8)
}

/// Refuses a config whose replay would overflow the estimate's integers or exceed its bounds;
/// returns its cost otherwise.
pub fn check(config: &Config, shape: DataShape, target: Target) -> Result<Cost> {
    config.within_limits().map_err(|e| anyhow::anyhow!("{e}"))?;
    let shape_limits = [
        ("samples", shape.samples, limits::MAX_SAMPLES),
        ("features", shape.features, limits::MAX_FEATURES),
        ("classes", shape.classes, limits::MAX_CLASSES),
    ];
    for (what, value, max) in shape_limits {
        if value > max {
            bail!("the data set has {value} {what}, more than the limit of {max}");
        }
    }
    if let DataSpec::Csv { path, .. } = &config.data {
        csv_data::enough_rows(path, shape.samples, config.training.batch_size)?;
    }
    let bytes = largest_tensor(config, shape).saturating_mul(tensors_at_once(config));
    if bytes > (u64::MAX / 2) as u128 {
        bail!(
            "this configuration could hold more than 8 EiB at once, more than any machine and more than \
             the estimate counts in 64 bits; lower model.hidden, training.batch_size or model.depth"
        );
    }
    let cost = cost(config, target);
    if cost.phases > MAX_PHASES || cost.work > MAX_WORK {
        bail!(
            "replaying {} steps of {} micro-batches over {} layers is more than the estimate replays \
             ({MAX_PHASES} phases, {MAX_WORK} tensor visits a trial); memory reaches its steady state in \
             two or three steps: lower training.steps (or training.accumulation, or model.depth) to estimate it",
            config.training.steps,
            config.training.techniques.accumulation,
            config.model.units()
        );
    }
    Ok(cost)
}

/// What is left of a whole estimate's bounds ([`MAX_TOTAL_PHASES`], [`MAX_TOTAL_WORK`]).
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    phases: u64,
    work: u64,
}

impl Default for Allowance {
    fn default() -> Self {
        Allowance { phases: MAX_TOTAL_PHASES, work: MAX_TOTAL_WORK }
    }
}

impl Allowance {
    /// Takes a prediction's cost off what is left; `kept`: its phases are kept (a sweep's
    /// points), not only looked at (a bisection's).
    pub fn spend(&mut self, cost: Cost, kept: bool) -> Result<()> {
        let phases = if kept { cost.phases } else { 0 };
        if phases > self.phases || cost.work > self.work {
            bail!(
                "the estimate would replay more than {MAX_TOTAL_PHASES} phases or {MAX_TOTAL_WORK} tensor \
                 visits in all; fewer sweep values, variants or training.steps bring it under"
            );
        }
        self.phases -= phases;
        self.work -= cost.work;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{predict, predict_with, Options, Target};
    use crate::spec::examples::mlp as config;
    use crate::spec::{DataSpec, OptimizerSpec};

    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };

    fn err(c: &Config) -> String {
        format!("{:#}", predict(c).unwrap_err())
    }

    #[test]
    fn sizes_past_the_spec_limits_are_refused_not_wrapped() {
        // Built in code, past the parser: the estimate checks the limits itself.
        let e = err(&config(usize::MAX, 64, 8, ADAM));
        assert!(e.contains("model.depth must be at most 10000"), "{e}");
        let e = err(&config(1, 2_000_000_000, 8, ADAM));
        assert!(e.contains("model.hidden must be at most 1000000"), "{e}");
    }

    #[test]
    fn the_largest_sizes_within_the_limits_count_without_overflow() {
        // 10^4 layers of 10^6 x 10^6 fp32 weights: 4 * 10^16 bytes, and Adam's two copies (on
        // CUDA 10^3 layers: its replay looks through every block).
        for (target, depth) in [(Target::Cpu, limits::MAX_DEPTH), (Target::Cuda, 1_000)] {
            let mut c = config(depth, limits::MAX_HIDDEN, 1, ADAM);
            c.training.steps = 1;
            c.data = DataSpec::Synthetic { samples: 1, features: 1, classes: 2, seed: 0 };
            let options = Options { target, ..Options::default() };
            let p = predict_with(&c, DataShape { samples: 1, features: 1, classes: 2 }, &options).unwrap();
            assert!(p.peak > 4 * 10u64.pow(12) * depth as u64, "{target:?}: {}", p.peak);
            assert!(p.peak >= p.param_bytes + p.optimizer_state_bytes, "{target:?}");
        }
        // One history graph a step over wide layers could pass 8 EiB: refused with the reason.
        let mut c = config(limits::MAX_DEPTH, limits::MAX_HIDDEN, 100_000_000, ADAM);
        c.data = DataSpec::Synthetic { samples: 100_000_000, features: 1, classes: 2, seed: 0 };
        assert!(err(&c).contains("more than 8 EiB"), "{}", err(&c));
    }

    #[test]
    fn a_replay_longer_than_the_bound_is_refused_before_it_starts() {
        let mut c = config(2, 16, 8, ADAM);
        // Within the spec's limits (a trial of at most 2,000,000 phases), past the replay's.
        c.training.steps = 400_000;
        c.training.techniques.accumulation = 1;
        let e = err(&c);
        assert!(e.contains("lower training.steps"), "{e}");
        assert_eq!(cost(&c, Target::Cpu).phases, 400_000 * 5 + 2);
        // Within the bound, the phases kept are the ones counted.
        c.training.steps = 3;
        c.training.techniques.accumulation = 2;
        assert_eq!(predict(&c).unwrap().phases.len() as u64, cost(&c, Target::Cpu).phases);
        // On CUDA a deep model's replay costs the square of its tensors.
        let deep = config(limits::MAX_DEPTH, 16, 8, ADAM);
        let cuda = Options { target: Target::Cuda, ..Options::default() };
        let shape = DataShape { samples: 32, features: 32, classes: 4 };
        let e = format!("{:#}", predict_with(&deep, shape, &cuda).unwrap_err());
        assert!(e.contains("model.depth) to estimate it"), "{e}");
    }

    #[test]
    fn an_estimate_stops_at_its_total_allowance() {
        let mut a = Allowance::default();
        let big = Cost { phases: MAX_PHASES, work: 1 };
        for _ in 0..(MAX_TOTAL_PHASES / MAX_PHASES) {
            a.spend(big, true).unwrap();
        }
        assert!(a.spend(big, true).is_err());
        assert!(a.spend(Cost { phases: 1, work: 1 }, false).is_ok(), "looked-at phases are not kept");
        let mut a = Allowance::default();
        let slow = Cost { phases: 1, work: MAX_WORK };
        for _ in 0..(MAX_TOTAL_WORK / MAX_WORK) {
            a.spend(slow, false).unwrap();
        }
        assert!(a.spend(slow, false).is_err());
    }
}
