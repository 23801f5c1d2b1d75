//! oomlab's side of a bench worker (`oomlab bench-worker`): one trial of the requested
//! configuration at one trace level, through the same trainer and recorder as `oomlab run`,
//! timed by [`train::run_trial_timed`].
//!
//! The trace records go to a sink that keeps each phase's duration, in place of the exporters a
//! run has, which hold a trial's records in memory until it ends (as this does); a run's writing
//! of `trace.csv` once a trial is over is outside the steps, so outside what is timed.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::protocol::{Report, Request};
use crate::device::DeviceChoice;
use crate::schema::{Phase, PhaseRecord, Status, TraceLevel};
use crate::{ffi, run, spec, train};

/// Runs the request at `level` and returns what it measured.
pub fn run(level: TraceLevel, request: &Request) -> Result<Report> {
    if request.threads > 0 {
        tch::set_num_threads(request.threads);
    }
    let parsed = spec::parse(&request.spec, Path::new("bench.toml")).context("the bench's spec")?;
    let mut config = parsed.base;
    config.training.steps = request.warmup + request.steps;
    let choice: DeviceChoice = request.device.parse().map_err(anyhow::Error::msg)?;
    let device = choice.resolve().map_err(anyhow::Error::msg)?;
    let probe = run::open_probe(device, None)?;

    let warmup = request.warmup;
    let mut phases = PhaseTimes::new(warmup, request.steps);
    let mut sink = |rec: &PhaseRecord| {
        phases.add(rec);
        Ok(())
    };
    let (row, seconds) = train::run_trial_timed(&config, &*probe, level, &mut sink)?;
    if row.status != Status::Ok {
        bail!("the trial did not run: {}", run::describe(&row));
    }
    if seconds.len() != request.warmup + request.steps {
        return Err(anyhow!("timed {} steps, expected {}", seconds.len(), request.warmup + request.steps));
    }
    Ok(Report {
        step_seconds: seconds[warmup..].to_vec(),
        phase_seconds: phases.into_map(),
        param_count: row.param_count,
        final_loss: row.final_loss,
        threads: tch::get_num_threads(),
        torch: ffi::torch_version(),
        python: String::new(),
        device_name: probe.name(),
    })
}

/// Each timed step's seconds per phase, summed over micro-batches.
struct PhaseTimes {
    warmup: usize,
    steps: usize,
    by_phase: BTreeMap<&'static str, Vec<f64>>,
}

impl PhaseTimes {
    fn new(warmup: usize, steps: usize) -> Self {
        PhaseTimes { warmup, steps, by_phase: BTreeMap::new() }
    }

    fn add(&mut self, rec: &PhaseRecord) {
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

    fn into_map(self) -> BTreeMap<String, Vec<f64>> {
        self.by_phase.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: usize, micro: usize, phase: Phase, secs: f64) -> PhaseRecord {
        PhaseRecord {
            trial: 1,
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
        }
    }

    #[test]
    fn phase_times_keep_the_timed_steps_and_sum_micro_batches() {
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
}
