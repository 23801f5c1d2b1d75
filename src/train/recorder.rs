//! Runs one phase at a time: resets the peak at its start, synchronizes and reads the allocator
//! at its end, and hands the record on, whether the phase succeeded or ran out of memory.
use std::time::Instant;

use anyhow::Result;
use tch::TchError;

use crate::probe::MemoryProbe;
use crate::schema::{MemSnapshot, Phase, PhaseRecord};

/// A phase that failed inside libtorch: where, and libtorch's message.
#[derive(Debug)]
pub struct PhaseError {
    pub phase: Phase,
    pub step: usize,
    pub error: TchError,
}

/// Why a trial stopped early: a libtorch error is data (`Torch`), anything else ends the run.
#[derive(Debug)]
pub enum Stop {
    Torch(PhaseError),
    Infra(anyhow::Error),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        Stop::Infra(e)
    }
}

pub struct Recorder<'a> {
    probe: &'a dyn MemoryProbe,
    trial: usize,
    start: Instant,
    sink: &'a mut dyn FnMut(&PhaseRecord) -> Result<()>,
    /// Highest peaks seen over the trial.
    pub peak: MemSnapshot,
    /// Wall time of each training step (sum of its phases).
    pub step_seconds: Vec<f64>,
    /// The micro-batch the next phases belong to (gradient accumulation); the step sets it.
    pub micro: usize,
}

impl<'a> Recorder<'a> {
    pub fn new(
        probe: &'a dyn MemoryProbe,
        trial: usize,
        sink: &'a mut dyn FnMut(&PhaseRecord) -> Result<()>,
    ) -> Self {
        Recorder {
            probe,
            trial,
            start: Instant::now(),
            sink,
            peak: MemSnapshot::default(),
            step_seconds: Vec::new(),
            micro: 0,
        }
    }

    /// Runs `f` as `phase` of `step`, recording its memory even when it fails.
    pub fn phase<T>(
        &mut self,
        step: usize,
        phase: Phase,
        f: impl FnOnce() -> Result<T, TchError>,
    ) -> Result<T, Stop> {
        self.probe.reset_peak()?;
        let t0 = Instant::now();
        let out = f();
        // snapshot() synchronizes, so the time includes the queued GPU work.
        let mem = self.probe.snapshot()?;
        let secs = t0.elapsed().as_secs_f64();
        self.peak.max_memory_allocated = self.peak.max_memory_allocated.max(mem.max_memory_allocated);
        self.peak.max_memory_reserved = self.peak.max_memory_reserved.max(mem.max_memory_reserved);
        if step > 0 {
            if self.step_seconds.len() < step {
                self.step_seconds.resize(step, 0.0);
            }
            self.step_seconds[step - 1] += secs;
        }
        let rec = PhaseRecord {
            trial: self.trial,
            step,
            micro: self.micro,
            phase,
            memory_allocated: mem.memory_allocated,
            memory_reserved: mem.memory_reserved,
            max_memory_allocated: mem.max_memory_allocated,
            max_memory_reserved: mem.max_memory_reserved,
            device_used: self.probe.device_used(),
            phase_seconds: secs,
            elapsed_seconds: self.start.elapsed().as_secs_f64(),
        };
        (self.sink)(&rec)?;
        // A signal stops the trial here, at a phase boundary: what the phase made is dropped
        // with the rest of the trial, so memory is freed as on any other stop.
        crate::interrupt::check().map_err(|e| Stop::Infra(e.into()))?;
        out.map_err(|error| Stop::Torch(PhaseError { phase, step, error }))
    }

    /// Mean step time, leaving out the first step (warm-up, optimizer state) when there are more.
    pub fn mean_step_seconds(&self) -> Option<f64> {
        let s = match self.step_seconds.as_slice() {
            [] => return None,
            [only] => return Some(*only),
            [_, rest @ ..] => rest,
        };
        Some(s.iter().sum::<f64>() / s.len() as f64)
    }
}
