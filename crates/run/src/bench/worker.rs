//! oomlab's side of a bench worker (`oomlab bench-worker`): one trial of the requested
//! configuration at one trace level, through the same trainer and recorder as `oomlab run`,
//! timed by [`train::run_trial_timed`].
//!
//! The trace records go to a sink that keeps each phase's duration, in place of the exporters a
//! run has, which hold a trial's records in memory until it ends (as this does); a run's writing
//! of `trace.csv` once a trial is over is outside the steps, so outside what is timed.
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::protocol::{Report, Request};
use crate::device::DeviceChoice;
use crate::schema::{PhaseRecord, Status, TraceLevel};
use crate::train::PhaseTimes;
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
    let device = choice.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
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
