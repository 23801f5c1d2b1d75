//! Training a trial: the real model, trained through libtorch in phases, with out-of-memory
//! caught as data.
//!
//! A trial makes its data and model, runs `steps` training steps (to_device, forward, backward,
//! optimizer_step, zero_grad), then drops everything, empties the cache and checks that the
//! allocator is back at the baseline it started from.
pub mod amp;
pub mod checkpoint;
pub mod data;
pub mod model;
pub mod optim;
mod recorder;
mod step;
mod warmup;

use std::panic::{catch_unwind, AssertUnwindSafe};

use anyhow::Result;

use crate::oom::{self, OomInfo};
use crate::probe::MemoryProbe;
use crate::record::{MemSnapshot, Phase, PhaseRecord, Status};
use crate::spec::Config;
pub use recorder::PhaseError;
use recorder::{Recorder, Stop};
pub use warmup::{warm_up, Workspace};

/// What a trial did.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    pub status: Status,
    /// Where it failed.
    pub phase: Option<Phase>,
    pub step: Option<usize>,
    /// The highest peaks over all phases.
    pub peak: MemSnapshot,
    /// Allocated bytes before the trial and after its clean-up.
    pub baseline_allocated: u64,
    pub after_allocated: u64,
    pub param_count: u64,
    pub param_bytes: u64,
    /// The data set's shape, once it was made (zero before).
    pub samples: usize,
    pub features: usize,
    pub classes: usize,
    pub step_seconds: Option<f64>,
    pub final_loss: Option<f64>,
    /// Steps the grad scaler skipped, and its final scale (fp16 only).
    pub skipped_steps: Option<usize>,
    pub final_scale: Option<f64>,
    pub oom: Option<OomInfo>,
    /// libtorch's message without its C++ backtrace; empty when the trial ran.
    pub message: String,
}

impl TrialOutcome {
    /// Bytes still allocated after clean-up that were not there before: a leak.
    pub fn leaked(&self) -> Option<u64> {
        (self.after_allocated > self.baseline_allocated)
            .then(|| self.after_allocated - self.baseline_allocated)
    }
}

/// Facts a trial learns as it goes, kept even when it stops early.
#[derive(Default)]
struct Progress {
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
    let mut rec = Recorder::new(probe, 1, &mut sink);
    let mut progress = Progress::default();
    match step::train(config, probe.device(), &mut rec, &mut progress) {
        Ok(model) => Ok(model.parameters().map(|p| p.detach()).collect()),
        Err(Stop::Infra(e)) => Err(e),
        Err(Stop::Torch(e)) => Err(anyhow::anyhow!("{} in step {}: {}", e.phase.as_str(), e.step, e.error)),
    }
}

/// Runs one trial of `config` on the probe's device, handing every phase record to `sink`.
/// Errors are infrastructure failures (the probe, the sink); OOM and other libtorch errors are
/// in the outcome.
pub fn run_trial(
    config: &Config,
    probe: &dyn MemoryProbe,
    trial: usize,
    sink: &mut dyn FnMut(&PhaseRecord) -> Result<()>,
) -> Result<TrialOutcome> {
    probe.empty_cache()?;
    let baseline = probe.snapshot()?.memory_allocated;
    let mut rec = Recorder::new(probe, trial, sink);
    let mut progress = Progress::default();
    // Everything the trial allocates lives inside this call, so it is all dropped when it
    // returns, however it returns. catch_unwind is a last guard: only fallible calls are used.
    let result = catch_unwind(AssertUnwindSafe(|| {
        step::train(config, probe.device(), &mut rec, &mut progress).map(drop)
    }));
    let (peak, step_seconds) = (rec.peak, rec.mean_step_seconds());
    drop(rec);
    probe.empty_cache()?;
    let after = probe.snapshot()?.memory_allocated;

    let mut out = TrialOutcome {
        status: Status::Ok,
        phase: None,
        step: None,
        peak,
        baseline_allocated: baseline,
        after_allocated: after,
        param_count: progress.param_count,
        param_bytes: progress.param_bytes,
        samples: progress.samples,
        features: progress.features,
        classes: progress.classes,
        step_seconds,
        final_loss: progress.final_loss,
        skipped_steps: progress.skipped_steps,
        final_scale: progress.final_scale,
        oom: None,
        message: String::new(),
    };
    match result {
        Ok(Ok(())) => {}
        Ok(Err(Stop::Infra(e))) => return Err(e),
        Ok(Err(Stop::Torch(PhaseError { phase, step, error }))) => {
            let text = error.to_string();
            let clean = oom::clean(&text);
            out.oom = oom::parse(clean);
            out.status = if out.oom.is_some() { Status::Oom } else { Status::Error };
            out.phase = Some(phase);
            out.step = Some(step);
            out.message = clean.lines().next().unwrap_or_default().to_string();
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
