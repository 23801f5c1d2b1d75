//! Runs one phase at a time and measures it as the trace level asks, whether the phase succeeded
//! or ran out of memory.
//!
//! - `phases`: the peak is reset at each phase's start and the allocator read at its end, with no
//!   wait for the device (its counters are kept on the host). Durations come from marks on the
//!   device's clock (CUDA events), read once the next step is under way, so the host never waits
//!   for the device it is feeding. Records go out when their times are known.
//! - `sync`: the same, but the device is synchronised at each phase's end and the host's clock
//!   times the phase (how PyTorch users time with `torch.cuda.synchronize()`).
//! - `steps`: one record per training step (its peak, the memory at its end); set-up phases as
//!   in `phases`.
//! - `off`: no records; one mark per step for step times, the trial's peak read at its end.
//!
//! The memory numbers do not depend on the level: only what is read, and when the host waits.
use anyhow::Result;
use tch::TchError;

use super::clock::{minor_faults, Clock, Mark};
use crate::probe::MemoryProbe;
use crate::schema::{MemSnapshot, Phase, PhaseRecord, TraceLevel};

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

/// Seconds a trial spent in each stage, for the manifest's timings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageSeconds {
    pub data: f64,
    pub model: f64,
    pub steps: f64,
}

/// A record whose duration waits for its marks.
struct Pending {
    rec: PhaseRecord,
    start: Mark,
    end: Mark,
}

/// Faults between two counts, when both were read.
fn faults_between(start: Option<u64>, end: Option<u64>) -> Option<u64> {
    Some(end?.saturating_sub(start?))
}

/// Under `steps` and `off`: the step under way, since its first phase began.
struct OpenStep {
    step: usize,
    start: Mark,
    faults: Option<u64>,
}

pub struct Recorder<'a> {
    probe: &'a dyn MemoryProbe,
    level: TraceLevel,
    clock: Clock,
    trial: usize,
    /// The trial's start, on the device's clock (elapsed_seconds).
    origin: Mark,
    sink: &'a mut dyn FnMut(&PhaseRecord) -> Result<()>,
    pending: Vec<Pending>,
    open: Option<OpenStep>,
    finished: bool,
    /// Highest peaks seen over the trial.
    pub peak: MemSnapshot,
    /// Duration of each training step (sum of its phases).
    pub step_seconds: Vec<f64>,
    /// The last step a phase ran in (0: set-up only): where a trial that stopped stopped.
    last_step: usize,
    /// Seconds in data, model and steps, as far as timed.
    pub stages: StageSeconds,
    /// The micro-batch the next phases belong to (gradient accumulation); the step sets it.
    pub micro: usize,
    /// For benchmarks: when set, each step's end waits for the device and the host's clock
    /// is read, the same way at every level (and as `scripts/bench`'s PyTorch loop does).
    pub step_ends: Option<Vec<std::time::Instant>>,
}

impl<'a> Recorder<'a> {
    pub fn new(
        probe: &'a dyn MemoryProbe,
        trial: usize,
        level: TraceLevel,
        sink: &'a mut dyn FnMut(&PhaseRecord) -> Result<()>,
    ) -> Result<Self> {
        // `sync` times on the host, after waiting: what it has always measured.
        let clock = if level == TraceLevel::Sync { Clock::Host } else { Clock::of(probe.device()) };
        Ok(Recorder {
            probe,
            level,
            clock,
            trial,
            origin: clock.mark()?,
            sink,
            pending: Vec::new(),
            open: None,
            finished: false,
            peak: MemSnapshot::default(),
            step_seconds: Vec::new(),
            last_step: 0,
            stages: StageSeconds::default(),
            micro: 0,
            step_ends: None,
        })
    }

    /// Runs `f` as `phase` of `step`, recording its memory even when it fails.
    pub fn phase<T>(
        &mut self,
        step: usize,
        phase: Phase,
        f: impl FnOnce() -> Result<T, TchError>,
    ) -> Result<T, Stop> {
        // Set-up phases are measured one by one at every level: once a trial, they cost nothing.
        let per_phase = step == 0 || matches!(self.level, TraceLevel::Phases | TraceLevel::Sync);
        self.last_step = self.last_step.max(step);
        super::position::enter(step, phase);
        let out = if per_phase {
            self.flush_before(step.saturating_sub(1))?;
            self.probe.reset_peak()?;
            let faults = minor_faults();
            let start = self.clock.mark()?;
            let out = f();
            if self.level == TraceLevel::Sync {
                self.probe.wait()?;
            }
            let mem = self.probe.snapshot()?;
            let end = self.clock.mark()?;
            let mut rec = self.record(step, phase, mem);
            rec.page_faults = faults_between(faults, minor_faults());
            self.pending.push(Pending { rec, start, end });
            if self.level == TraceLevel::Sync {
                self.flush_before(usize::MAX)?;
            }
            out
        } else {
            self.enter_step(step)?;
            f()
        };
        if out.is_err() {
            // The trial ends here: measure what is still alive before it is dropped.
            self.finish()?;
        }
        // A signal stops the trial here, at a phase boundary: what the phase made is dropped
        // with the rest of the trial, so memory is freed as on any other stop.
        crate::interrupt::check().map_err(|e| Stop::Infra(e.into()))?;
        out.map_err(|error| Stop::Torch(PhaseError { phase, step, error }))
    }

    /// Closes the trial's measuring while its tensors are alive: the last step's record, the
    /// durations still waiting on the device, the trial's peak. Idempotent.
    pub fn finish(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        self.close_open()?;
        // Under `off` no step was read: the peak since the last reset (the model's set-up) is
        // the trial's.
        let mem = self.probe.snapshot()?;
        self.peak_with(&mem);
        self.flush_before(usize::MAX)
    }

    /// Ends the step under way (`steps`/`off`), while what the loop keeps of it is alive: the
    /// step's last phase left memory as the step's record says.
    pub fn end_step(&mut self) -> Result<()> {
        self.close_open()?;
        if let Some(ends) = &mut self.step_ends {
            self.probe.wait()?;
            ends.push(std::time::Instant::now());
        }
        Ok(())
    }

    fn close_open(&mut self) -> Result<()> {
        if let Some(open) = self.open.take() {
            let end = self.clock.mark()?;
            self.close_step(open, end)?;
        }
        Ok(())
    }

    /// Under `steps`/`off`: the first phase of a new step opens it (closing one left open).
    fn enter_step(&mut self, step: usize) -> Result<()> {
        if self.open.as_ref().is_some_and(|o| o.step == step) {
            return Ok(());
        }
        self.close_open()?;
        self.flush_before(step.saturating_sub(1))?;
        if self.level == TraceLevel::Steps {
            self.probe.reset_peak()?;
        }
        self.open = Some(OpenStep { step, start: self.clock.mark()?, faults: minor_faults() });
        Ok(())
    }

    fn close_step(&mut self, open: OpenStep, end: Mark) -> Result<()> {
        // Under `off` nothing is read: the record only carries the step's time.
        let mem =
            if self.level == TraceLevel::Steps { self.probe.snapshot()? } else { MemSnapshot::default() };
        let mut rec = self.record(open.step, Phase::Step, mem);
        rec.page_faults = faults_between(open.faults, minor_faults());
        self.pending.push(Pending { rec, start: open.start, end });
        Ok(())
    }

    fn record(&self, step: usize, phase: Phase, mem: MemSnapshot) -> PhaseRecord {
        PhaseRecord {
            trial: self.trial,
            variant: String::new(),
            value: None,
            step,
            micro: if phase == Phase::Step { 0 } else { self.micro },
            phase,
            memory_allocated: mem.memory_allocated,
            memory_reserved: mem.memory_reserved,
            max_memory_allocated: mem.max_memory_allocated,
            max_memory_reserved: mem.max_memory_reserved,
            device_used: if self.level == TraceLevel::Off { None } else { self.probe.device_used() },
            phase_seconds: 0.0,
            elapsed_seconds: 0.0,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        }
    }

    fn peak_with(&mut self, mem: &MemSnapshot) {
        self.peak.max_memory_allocated = self.peak.max_memory_allocated.max(mem.max_memory_allocated);
        self.peak.max_memory_reserved = self.peak.max_memory_reserved.max(mem.max_memory_reserved);
    }

    /// Times and hands on the records of steps before `step` (a step late under `phases`, so
    /// the device has long reached their marks and reading them does not stall the host).
    fn flush_before(&mut self, step: usize) -> Result<()> {
        let ready = self.pending.iter().take_while(|p| p.rec.step < step).count();
        for Pending { mut rec, start, end } in self.pending.drain(..ready).collect::<Vec<_>>() {
            rec.phase_seconds = start.seconds_to(&end)?;
            rec.elapsed_seconds = self.origin.seconds_to(&end)?;
            let secs = rec.phase_seconds;
            match (rec.step, rec.phase) {
                (0, Phase::Data) => self.stages.data += secs,
                (0, _) => self.stages.model += secs,
                (s, _) => {
                    self.stages.steps += secs;
                    if self.step_seconds.len() < s {
                        self.step_seconds.resize(s, 0.0);
                    }
                    self.step_seconds[s - 1] += secs;
                }
            }
            self.peak_with(&rec.mem());
            if self.level != TraceLevel::Off {
                (self.sink)(&rec)?;
            }
        }
        Ok(())
    }

    /// Mean step time over the steps that completed (`stopped`: the trial ran out of memory or
    /// failed in its last step, which is left out), leaving out the first (warm-up, optimizer
    /// state) when there are more. `None` when no step completed: a cut step is no step's time.
    pub fn mean_step_seconds(&self, stopped: bool) -> Option<f64> {
        let complete = if stopped { self.last_step.saturating_sub(1) } else { self.step_seconds.len() };
        let s = match &self.step_seconds[..complete.min(self.step_seconds.len())] {
            [] => return None,
            [only] => return Some(*only),
            [_, rest @ ..] => rest,
        };
        Some(s.iter().sum::<f64>() / s.len() as f64)
    }
}
