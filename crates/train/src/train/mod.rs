//! Training a trial: the real model, trained through libtorch in phases, with out-of-memory
//! caught as data.
//!
//! A trial makes its data and model, runs `steps` training steps (to_device, forward, backward,
//! optimizer_step, zero_grad), then drops everything, empties the cache and records what is
//! still allocated (`after_allocated`), which the runner refuses as a leak past the baseline.
pub mod amp;
mod clock;
pub mod data;
mod diverged;
pub mod optim;
mod phase_times;
pub mod position;
pub mod preflight;
pub mod record;
mod recorder;
mod step;
mod warmup;

use std::panic::{catch_unwind, AssertUnwindSafe};

use anyhow::Result;

use crate::oom;
use crate::probe::MemoryProbe;
use crate::schema::{PhaseRecord, Status, SummaryRow, TraceLevel};
use crate::spec::Config;
pub use phase_times::PhaseTimes;
pub use recorder::PhaseError;
pub use recorder::StageSeconds;
use recorder::{Recorder, Stop};
pub use warmup::{warm_up, Workspace};

/// Facts a trial learns as it goes, kept even when it stops early.
#[derive(Default)]
struct Learned {
    samples: usize,
    features: usize,
    classes: usize,
    param_count: u64,
    param_bytes: u64,
    final_loss: Option<f64>,
    skipped_steps: Option<usize>,
    final_scale: Option<f64>,
}

/// Trains `config` on the probe's device and returns the parameters after its last step, in
/// the model's order (each layer's weight, then bias): what the tests hold against PyTorch's.
pub fn trained_parameters(config: &Config, probe: &dyn MemoryProbe) -> Result<Vec<tch::Tensor>> {
    let mut sink = |_: &PhaseRecord| Ok(());
    let mut rec = Recorder::new(probe, 1, TraceLevel::Phases, &mut sink)?;
    let mut learned = Learned::default();
    match step::train(config, probe.device(), &mut rec, &mut learned, None) {
        Ok(model) => Ok(model.parameters().iter().map(|p| p.detach()).collect()),
        Err(Stop::Infra(e)) => Err(e),
        Err(Stop::Torch(e)) => Err(anyhow::anyhow!("{} in step {}: {}", e.phase.as_str(), e.step, e.error)),
    }
}

/// Runs one trial of `config` on the probe's device, measured as `level` asks, handing every
/// trace record to `sink`.
/// Returns the trial's summary row with what happened filled in (status, peaks, baseline and
/// after, parameters, data shape, times, the grad scaler, the OOM message's fields); the
/// configuration's own columns are the caller's to fill. Errors are infrastructure failures
/// (the probe, the sink); OOM and other libtorch errors are in the row.
pub fn run_trial(
    config: &Config,
    probe: &dyn MemoryProbe,
    trial: usize,
    level: TraceLevel,
    sink: &mut dyn FnMut(&PhaseRecord) -> Result<()>,
) -> Result<SummaryRow> {
    trial_with(config, probe, trial, level, sink, None, None)
}

/// [`run_trial`] as one rank of a `[parallel]` trial, in the process group `world` (which
/// every other rank has joined): the same phases, measured on this rank's own device.
pub fn run_rank(
    config: &Config,
    probe: &dyn MemoryProbe,
    trial: usize,
    level: TraceLevel,
    sink: &mut dyn FnMut(&PhaseRecord) -> Result<()>,
    world: &std::sync::Arc<crate::ffi::dist::Group>,
) -> Result<SummaryRow> {
    trial_with(config, probe, trial, level, sink, None, Some(world))
}

/// [`run_trial`] for a benchmark: also returns each step's host wall time, the device waited
/// for at every step's end (the same at every level, and as a PyTorch loop times a step).
pub fn run_trial_timed(
    config: &Config,
    probe: &dyn MemoryProbe,
    level: TraceLevel,
    sink: &mut dyn FnMut(&PhaseRecord) -> Result<()>,
) -> Result<(SummaryRow, Vec<f64>)> {
    let mut ends = Vec::new();
    let row = trial_with(config, probe, 1, level, sink, Some(&mut ends), None)?;
    let secs = ends.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64()).collect();
    Ok((row, secs))
}

/// `ends`: when given, the host's clock at the model's set-up end and at every step's end.
fn trial_with(
    config: &Config,
    probe: &dyn MemoryProbe,
    trial: usize,
    level: TraceLevel,
    sink: &mut dyn FnMut(&PhaseRecord) -> Result<()>,
    ends: Option<&mut Vec<std::time::Instant>>,
    world: Option<&std::sync::Arc<crate::ffi::dist::Group>>,
) -> Result<SummaryRow> {
    let started = std::time::Instant::now();
    probe.empty_cache()?;
    let baseline = probe.snapshot()?.memory_allocated;
    let ooms_before = probe.counters()?.num_ooms;
    let mut rec = Recorder::new(probe, trial, level, sink)?;
    if ends.is_some() {
        rec.step_ends = Some(Vec::new());
    }
    let mut learned = Learned::default();
    // Everything the trial allocates lives inside this call, so it is all dropped when it
    // returns, however it returns. catch_unwind is a last guard: only fallible calls are used.
    let result = catch_unwind(AssertUnwindSafe(|| {
        step::train(config, probe.device(), &mut rec, &mut learned, world).map(drop)
    }));
    // A stop outside any phase (a kept loss that ran out of memory) leaves times to read.
    let finished = rec.finish();
    let stopped = !matches!(result, Ok(Ok(()))) || finished.is_err();
    let (peak, step_seconds, stages) = (rec.peak, rec.mean_step_seconds(stopped), rec.stages);
    if let (Some(out), Some(got)) = (ends, rec.step_ends.take()) {
        *out = got;
    }
    drop(rec);
    let released = probe.snapshot()?.memory_reserved;
    probe.empty_cache()?;
    let emptied = probe.snapshot()?;
    let after = emptied.memory_allocated;
    finished?;
    let timed = |s: f64| (s > 0.0).then_some(s);

    let mut out = SummaryRow {
        trial,
        status: Status::Ok,
        max_memory_allocated: peak.max_memory_allocated,
        max_memory_reserved: peak.max_memory_reserved,
        baseline_allocated: baseline,
        after_allocated: after,
        released_reserved: Some(released),
        emptied_reserved: Some(emptied.memory_reserved),
        param_count: learned.param_count,
        param_bytes: learned.param_bytes,
        samples: learned.samples,
        features: learned.features,
        classes: learned.classes,
        step_seconds,
        data_seconds: timed(stages.data),
        model_seconds: timed(stages.model),
        steps_total_seconds: timed(stages.steps),
        trial_seconds: Some(started.elapsed().as_secs_f64()),
        final_loss: learned.final_loss,
        skipped_steps: learned.skipped_steps,
        final_scale: learned.final_scale,
        ..SummaryRow::default()
    };
    match result {
        Ok(Ok(())) => {
            // Memory was measured, so the trial fits; a loss that is not a number marks it
            // diverged (a grad scaler's skipped steps explain theirs, and are recorded apart).
            match out.final_loss {
                Some(loss) if !loss.is_finite() && out.skipped_steps.is_none() => {
                    out.status = Status::Diverged;
                    out.message = diverged::message(loss, config, probe.device());
                }
                _ => {}
            }
        }
        Ok(Err(Stop::Infra(e))) => return Err(e),
        Ok(Err(Stop::Torch(PhaseError { phase, step, error }))) => {
            let text = error.to_string();
            let clean = oom::clean(&text);
            let parsed = oom::parse(clean);
            out.status = if parsed.is_some() { Status::Oom } else { Status::Error };
            // The message rounds to two decimals; the CPU's allocator kept the bytes.
            let refused = probe.last_refusal().filter(|r| r.ordinal > ooms_before);
            if let Some(o) = parsed.map(|o| o.with_exact(refused)) {
                (out.oom_requested, out.oom_total_capacity, out.oom_free) =
                    (o.requested, o.total_capacity, o.free);
                (out.oom_allocated, out.oom_reserved) = (o.allocated, o.reserved);
            }
            out.phase = Some(phase);
            out.step = Some(step);
            out.message = oom::headline(&text);
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("panic");
            out.status = Status::Error;
            out.message = format!("panic: {}", oom::clean(what).lines().next().unwrap_or_default());
        }
    }
    Ok(out)
}
