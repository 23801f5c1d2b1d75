//! A trial recorded allocation by allocation: what the recorded estimate (`estimate::recorded`)
//! fits for a model it cannot replay, a TorchScript module. The trial runs on the CPU through
//! the counting allocator with its event log on; its probe puts a mark in the log wherever the
//! allocator is read ([`END`]: at `--trace phases`, the trial's baseline and each phase's end)
//! and wherever its peak is reset ([`START`]: each phase's start), so the log reads as the
//! phases the recorder wrote.
use anyhow::{bail, Result};

use crate::ffi;
use crate::probe::{Counters, MemoryProbe};
use crate::schema::{MemSnapshot, Phase, PhaseRecord, Status, SummaryRow, TraceLevel};
use crate::spec::Config;

/// The mark where a phase ends (and, first, where the baseline is read): `(0, END)`.
pub const END: u64 = 0;
/// The mark where a phase starts, its peak reset: `(0, START)`.
pub const START: u64 = 1;
// Marks from `ffi::REDUCE_MARK` on are reductions' (`Recording::reduces`), from
// `ffi::CONV_MARK` on convolutions' (`Recording::convs`).

/// One recorded trial.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Every counted allocation (`+bytes`) and free (`-bytes`) with its data pointer, in order,
    /// from the baseline's read to the last phase's end; `(0, START)` marks a phase's start,
    /// `(0, END)` its end.
    pub events: Vec<(i64, u64)>,
    /// The op each event came from (`ffi::cpu_events_with_ops`): `""` for a mark, or outside
    /// any op; for messages that say where two recordings part.
    pub ops: Vec<String>,
    /// Where each event's memory would live in a CUDA run, where the trial's code said
    /// (`ffi::Where`): the recorded estimate's CUDA replay keeps the device's alone.
    pub tags: Vec<ffi::Where>,
    /// The reductions whose ends the events mark (`(0, ffi::REDUCE_MARK + i)`).
    pub reduces: Vec<ffi::Reduce>,
    /// The convolutions whose starts the events mark (`(0, ffi::CONV_MARK + i)`).
    pub convs: Vec<ffi::Conv>,
    /// The phases, in the order of the marks.
    pub phases: Vec<(usize, usize, Phase)>,
    /// The trial's summary: parameters, peaks, status.
    pub row: SummaryRow,
}

/// Runs `config` on the CPU with the counting allocator's event log on. Without a budget: a
/// budget a run has set is lifted while it records, and put back after. An out-of-memory or
/// another error in the trial is an error here: a recording is of a trial that ran.
pub fn record(config: &Config) -> Result<Recording> {
    crate::probe::cpu_exclusive(|| record_here(config))
}

fn record_here(config: &Config) -> Result<Recording> {
    ffi::cpu_install().map_err(anyhow::Error::msg)?;
    let cap = ffi::cpu_cap();
    ffi::cpu_set_cap(None);
    let probe = Unguarded;
    let mut phases = Vec::new();
    let (row, log) = ffi::cpu_events_with_ops(|| {
        super::run_trial(config, &probe, 0, TraceLevel::Phases, &mut |r: &PhaseRecord| {
            phases.push((r.step, r.micro, r.phase));
            Ok(())
        })
    });
    ffi::cpu_set_cap(cap);
    let row = row?;
    let ffi::Log { events, ops, tags, reduces, convs } = log;
    if !row.status.fitted() && row.status != Status::Diverged {
        bail!(
            "recording {} at batch {}: {:?}: {}",
            config.model.describe(),
            config.training.batch_size,
            row.status,
            row.message
        );
    }
    // The first mark is the baseline's read, the next ones each phase's end; what follows the
    // last phase is the trial's teardown.
    let marks: Vec<usize> =
        events.iter().enumerate().filter(|(_, e)| **e == (0, END)).map(|(i, _)| i).collect();
    if marks.len() < phases.len() + 1 {
        bail!("recording: {} marks in the log for {} phases", marks.len(), phases.len());
    }
    let kept = marks[0] + 1..=marks[phases.len()];
    let (events, ops, tags) =
        (events[kept.clone()].to_vec(), ops[kept.clone()].to_vec(), tags[kept].to_vec());
    Ok(Recording { events, ops, tags, reduces, convs, phases, row })
}

/// The CPU's counters without `CpuProbe`'s one-at-a-time lock: a recording may be made while a
/// run holds its probe (a guided search asks the estimate between trials).
struct Unguarded;

impl MemoryProbe for Unguarded {
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }
    fn name(&self) -> String {
        "CPU (recording)".into()
    }
    fn capacity(&self) -> u64 {
        0
    }
    fn budget(&self) -> Option<u64> {
        None
    }
    fn snapshot(&self) -> Result<MemSnapshot> {
        ffi::cpu_events_mark(END);
        Ok(crate::probe::cpu_snapshot())
    }
    fn reset_peak(&self) -> Result<()> {
        ffi::cpu_events_mark(START);
        ffi::cpu_reset_peak();
        Ok(())
    }
    fn empty_cache(&self) -> Result<()> {
        Ok(())
    }
    fn counters(&self) -> Result<Counters> {
        Ok(crate::probe::cpu_counters())
    }
}
