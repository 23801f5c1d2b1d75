//! A trial's phase durations gathered from its trace records as they come: for each timed step
//! (after the warm-up), each phase's seconds summed over micro-batches. What `bench` reports per
//! phase and what `advise`'s calibration times passes and updates from.
use std::collections::BTreeMap;

use crate::schema::{Phase, PhaseRecord};

/// Each timed step's seconds per phase, summed over micro-batches.
pub struct PhaseTimes {
    warmup: usize,
    steps: usize,
    by_phase: BTreeMap<&'static str, Vec<f64>>,
}

impl PhaseTimes {
    pub fn new(warmup: usize, steps: usize) -> Self {
        PhaseTimes { warmup, steps, by_phase: BTreeMap::new() }
    }

    pub fn add(&mut self, rec: &PhaseRecord) {
        // Set-up (step 0), warm-up steps and whole-step records (`--trace steps`) are not phases
        // of a timed step.
        if rec.step <= self.warmup || rec.phase == Phase::Step {
            return;
        }
        let i = rec.step - self.warmup - 1;
        if i >= self.steps {
            return;
        }
        let times = self.by_phase.entry(rec.phase.as_str()).or_insert_with(|| vec![0.0; self.steps]);
        times[i] += rec.phase_seconds;
    }

    /// Per timed step, the seconds of `phases` together (0 for a phase never recorded).
    pub fn sum_per_step(&self, phases: &[Phase]) -> Vec<f64> {
        (0..self.steps)
            .map(|i| phases.iter().filter_map(|p| self.by_phase.get(p.as_str())).map(|t| t[i]).sum())
            .collect()
    }

    /// Whether any timed step recorded `phase`.
    pub fn has(&self, phase: Phase) -> bool {
        self.by_phase.contains_key(phase.as_str())
    }

    pub fn into_map(self) -> BTreeMap<String, Vec<f64>> {
        self.by_phase.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: usize, micro: usize, phase: Phase, secs: f64) -> PhaseRecord {
        PhaseRecord {
            trial: 1,
            variant: String::new(),
            value: None,
            step,
            micro,
            phase,
            memory_allocated: 0,
            memory_reserved: 0,
            max_memory_allocated: 0,
            max_memory_reserved: 0,
            device_used: None,
            phase_seconds: secs,
            elapsed_seconds: 0.0,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        }
    }

    #[test]
    fn phase_times_keep_the_timed_steps_and_sum_micro_batches() {
        let _alone = crate::probe::cpu_alone();
        let mut p = PhaseTimes::new(1, 2);
        for r in [
            rec(0, 0, Phase::Model, 9.0),
            rec(1, 0, Phase::Forward, 9.0),
            rec(2, 0, Phase::Forward, 1.0),
            rec(2, 1, Phase::Forward, 0.5),
            rec(3, 0, Phase::Forward, 2.0),
            rec(3, 0, Phase::Step, 7.0),
            rec(4, 0, Phase::Forward, 9.0),
        ] {
            p.add(&r);
        }
        let m = p.into_map();
        assert_eq!(m.len(), 1);
        assert_eq!(m["forward"], [1.5, 2.0]);
    }

    #[test]
    fn phases_add_up_per_step_and_a_missing_one_counts_nothing() {
        let _alone = crate::probe::cpu_alone();
        let mut p = PhaseTimes::new(1, 2);
        for r in
            [rec(2, 0, Phase::Forward, 1.0), rec(3, 0, Phase::Forward, 2.0), rec(3, 0, Phase::Backward, 0.25)]
        {
            p.add(&r);
        }
        assert_eq!(p.sum_per_step(&[Phase::Forward, Phase::Backward, Phase::ZeroGrad]), [1.0, 2.25]);
        assert!(p.has(Phase::Backward) && !p.has(Phase::ZeroGrad));
    }
}
