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
    /// The CPU flash-attention calls whose starts the events mark (`(0, ffi::ATTN_MARK + i)`).
    pub attns: Vec<ffi::Attn>,
    /// The phases, in the order of the marks.
    pub phases: Vec<(usize, usize, Phase)>,
    /// The trial's summary: parameters, peaks, status.
    pub row: SummaryRow,
    /// Where the step ran: on the meta device (shapes only), or on the CPU.
    pub on: RecordedOn,
}

/// Where a recorded step ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedOn {
    /// On the meta device: every op's outputs made as shapes, no arithmetic and no memory, its
    /// bytes counted ([`record_on_meta`]).
    Meta,
    /// On this CPU, through its kernels; where a recording on meta was asked for, why it was not
    /// made there (an op without a meta kernel, a technique meta cannot run).
    Cpu { not_meta: Option<String> },
}

/// Runs `config` on the CPU with the counting allocator's event log on. Without a budget: a
/// budget a run has set is lifted while it records, and put back after. An out-of-memory or
/// another error in the trial is an error here: a recording is of a trial that ran.
pub fn record(config: &Config) -> Result<Recording> {
    crate::probe::cpu_exclusive(|| record_here(config))
}

/// [`record`], of the step as it stands for a CUDA run: a TorchScript module's attention
/// without dropout, so that the CPU runs its flash kernel, whose outputs are CUDA's fused
/// kernels' (which keep no mask), where with dropout it would run the math path and keep
/// `[L, L]` scores that no CUDA kernel keeps (`nn::script::as_cuda_recording`).
///
/// The step runs on the meta device where it can ([`record_on_meta`]: in seconds, whatever the
/// model's size), else on this CPU, the recording saying why not on meta.
pub fn record_for_cuda(config: &Config) -> Result<Recording> {
    crate::nn::script::as_cuda_recording(|| match meta_for(true) {
        true => on_meta_or_cpu(config),
        false => record(config),
    })
}

/// [`record`], of the step as it stands for a CPU run: through this CPU's kernels, which count
/// their libraries' scratch too, unless the meta device was asked for ([`choose`]).
pub fn record_for_cpu(config: &Config) -> Result<Recording> {
    match meta_for(false) {
        true => on_meta_or_cpu(config),
        false => record(config),
    }
}

/// [`record_on_meta`], else [`record`] with the reason meta could not record it.
fn on_meta_or_cpu(config: &Config) -> Result<Recording> {
    let under_cuda_autocast =
        config.training.techniques.amp != crate::spec::Amp::Off && crate::nn::script::recording_for_cuda();
    record_on_meta(config).or_else(|why| {
        // The CPU's autocast casts other ops, to other dtypes: its recording is not CUDA's step.
        if under_cuda_autocast {
            bail!(
                "under training.amp a step for CUDA is recorded on the meta device, with CUDA's autocast (a CPU \
                 recording would run the CPU's), and there it stopped: {}",
                no_meta_kernel(&format!("{why:#}"))
            );
        }
        let not_meta = Some(no_meta_kernel(&format!("{why:#}")));
        Ok(Recording { on: RecordedOn::Cpu { not_meta }, ..record(config)? })
    })
}

/// Where recordings are made: a command's choice (`estimate --record-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordWhere {
    /// On the meta device for a CUDA estimate; through the CPU's kernels for a CPU one, whose
    /// libraries' scratch a meta recording leaves out.
    Default,
    /// On the meta device for both (where the step can run there).
    Meta,
    /// Through the CPU's kernels for both: the check of a meta recording.
    Cpu,
}

/// The choice [`choose`] set, as a number: 0 default, 1 meta, 2 cpu.
static RECORD_WHERE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets where recordings are made, once, for the command.
pub fn choose(at: RecordWhere) {
    let n = match at {
        RecordWhere::Default => 0,
        RecordWhere::Meta => 1,
        RecordWhere::Cpu => 2,
    };
    RECORD_WHERE.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a recording for a CUDA (`for_cuda`) or a CPU estimate is made on the meta device
/// (where the step can run there).
pub fn meta_for(for_cuda: bool) -> bool {
    match RECORD_WHERE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => for_cuda,
        1 => true,
        _ => false,
    }
}

/// [`record`], with the step on libtorch's meta device: every op's outputs made as shapes (its
/// meta kernel, oomlab's own where libtorch has none: `crates/torch/src/ffi/meta.cpp`), no arithmetic and no
/// memory, each meta tensor's bytes counted and logged as a CPU tensor's would be, the CPU's own
/// allocations (the module as loaded, before it moves to meta) not counted. What a kernel makes
/// besides its outputs (the CPU libraries' scratch) is not in it; the CUDA replay leaves that out
/// anyway. No value is read there: the grad scaler never finds an inf, so no step is skipped.
/// libtorch's autocast casts no meta tensor, so under `training.amp` CUDA's op lists run on meta
/// instead (`ffi::meta_autocast`), for a step recorded for CUDA only; a CPU step under autocast is
/// refused here (and recorded on the CPU, with the CPU's autocast).
pub fn record_on_meta(config: &Config) -> Result<Recording> {
    if config.training.techniques.amp != crate::spec::Amp::Off && !crate::nn::script::recording_for_cuda() {
        bail!("mixed precision runs on the meta device with CUDA's op lists only (for a CUDA estimate)");
    }
    ffi::meta_install().map_err(anyhow::Error::msg)?;
    crate::probe::cpu_exclusive(|| {
        ffi::cpu_pause(true);
        let r = record_on(config, ffi::META);
        ffi::cpu_pause(false);
        let r = r?;
        Ok(Recording { on: RecordedOn::Meta, ..summed_in_place(r) })
    })
}

/// Why a step did not run on the meta device, in a few words: the op libtorch found no meta kernel
/// for, where that was it (its message goes on about PT2 compilation), else the error as said.
fn no_meta_kernel(error: &str) -> String {
    const NONE: &str = ": attempted to run this operator with Meta tensors";
    match error.find(NONE) {
        Some(at) => {
            let op = error[..at].rsplit([' ', '\n']).next().unwrap_or_default();
            format!("{op} has no meta kernel")
        }
        None => crate::nn::script::libtorch_words(error).lines().next().unwrap_or_default().to_string(),
    }
}

/// Whether an op, as the log names it, is the autograd engine's sum of two gradients for one
/// input (`InputBuffer::accumulate`): an `aten::add` outside any backward node's ops.
fn engine_sum(op: &str) -> bool {
    op == "aten::add" || (op.starts_with("autograd::engine") && op.ends_with("> aten::add"))
}

/// A meta recording with the autograd engine's gradient sums made as the CPU (and CUDA) makes
/// them. Where two gradients for one input meet and the first is held by nothing else, the engine
/// adds the second into it in place; but libtorch counts a meta tensor as "subclass-like"
/// (`kTensorSubclassLike` has the meta backend), for which it adds out of place: a new sum, then
/// the old buffer freed. Such an allocation in a backward, freed buffer right after, is taken back
/// to the in-place add: both events go, and the sum is the old buffer under its old identity.
fn summed_in_place(mut r: Recording) -> Recording {
    let n = r.events.len();
    let (mut events, mut ops, mut tags) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let mut same: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut phase = 0;
    let mut i = 0;
    while i < n {
        let (delta, ptr) = r.events[i];
        if (delta, ptr) == (0, END) {
            phase += 1;
        }
        let backward = r.phases.get(phase).is_some_and(|p| p.2 == Phase::Backward);
        let op = r.ops.get(i).map_or("", String::as_str);
        if delta > 0 && backward && engine_sum(op) && r.events.get(i + 1).is_some_and(|e| e.0 == -delta) {
            let old = r.events[i + 1].1;
            same.insert(ptr, *same.get(&old).unwrap_or(&old));
            i += 2;
            continue;
        }
        let ptr = if delta < 0 { same.remove(&ptr).unwrap_or(ptr) } else { ptr };
        events.push((delta, ptr));
        ops.push(op.to_string());
        tags.push(r.tags.get(i).copied().unwrap_or_default());
        i += 1;
    }
    (r.events, r.ops, r.tags) = (events, ops, tags);
    r
}

fn record_here(config: &Config) -> Result<Recording> {
    record_on(config, tch::Device::Cpu)
}

/// A recording of `config`'s step run on `device`: the CPU, or the meta device.
fn record_on(config: &Config, device: tch::Device) -> Result<Recording> {
    ffi::cpu_install().map_err(anyhow::Error::msg)?;
    let cap = ffi::cpu_cap();
    ffi::cpu_set_cap(None);
    let probe = Unguarded { device };
    let mut phases = Vec::new();
    let (row, log) = ffi::cpu_events_with_ops(|| {
        super::run_trial(config, &probe, 0, TraceLevel::Phases, &mut |r: &PhaseRecord| {
            phases.push((r.step, r.micro, r.phase));
            Ok(())
        })
    });
    ffi::cpu_set_cap(cap);
    // A kept module's tensors are counted like any other: let go of once the log closes, they
    // neither stay in the process's allocated bytes (a later run's budget) nor are freed inside
    // the next recording's log.
    crate::nn::script::release_kept();
    let row = row?;
    let ffi::Log { events, ops, tags, reduces, convs, threads, attns } = log;
    let (events, ops, tags) = in_one_order(events, ops, tags, &threads);
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
    Ok(Recording {
        events,
        ops,
        tags,
        reduces,
        convs,
        attns,
        phases,
        row,
        on: RecordedOn::Cpu { not_meta: None },
    })
}

/// The first id [`in_one_order`] gives an allocation in place of its address: far above any
/// mark's (`END`, `CONV_MARK` ...), and never an address a log holds.
const OWN_IDS: u64 = 1 << 62;

/// The log with each parallel region's events in one order, whatever the machine's load did
/// with its threads. A region (a run of events that the threads of an OpenMP region made:
/// `threads` is 1 + the thread's number, 0 outside one) interleaves its threads' events as they
/// were scheduled, differently at each recording, so that two recordings of one step could not be
/// told the same step (MobileNetV2's depthwise convolutions, the CPU flash attention's backward).
/// Each thread runs a fixed chunk (a static schedule), in a fixed order; the region is given back
/// as its threads' events dealt in turn, the first of each thread's, then the second of each,
/// and so on: the threads running side by side, as on a quiet machine, so that a buffer each
/// thread holds over its chunk is live in all of them at once, as the estimate counts it (on a
/// busy machine a run may peak lower). An allocation is known by an id of its own, not its
/// address, which another thread may have freed and been given again in between.
fn in_one_order(
    events: Vec<(i64, u64)>,
    ops: Vec<String>,
    tags: Vec<ffi::Where>,
    threads: &[u16],
) -> (Vec<(i64, u64)>, Vec<String>, Vec<ffi::Where>) {
    if !threads.iter().any(|&t| t != 0) {
        return (events, ops, tags);
    }
    // Addresses to ids, in the order the log has them.
    let mut live: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut next = OWN_IDS;
    let events: Vec<(i64, u64)> = events
        .into_iter()
        .map(|(delta, ptr)| match delta {
            0 => (delta, ptr),
            d if d > 0 => {
                live.insert(ptr, next);
                next += 1;
                (d, next - 1)
            }
            d => (d, live.remove(&ptr).unwrap_or(ptr)),
        })
        .collect();
    let n = events.len();
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        if threads.get(i).copied().unwrap_or(0) == 0 {
            order.push(i);
            i += 1;
            continue;
        }
        let end = (i..n).find(|&j| threads.get(j).copied().unwrap_or(0) == 0).unwrap_or(n);
        // Each thread's events of the region, in its own order, threads by their number.
        let mut by_thread: std::collections::BTreeMap<u16, Vec<usize>> = std::collections::BTreeMap::new();
        for (j, &t) in threads.iter().enumerate().take(end).skip(i) {
            by_thread.entry(t).or_default().push(j);
        }
        let longest = by_thread.values().map(Vec::len).max().unwrap_or(0);
        for k in 0..longest {
            order.extend(by_thread.values().filter_map(|v| v.get(k)));
        }
        i = end;
    }
    let pick = |v: &[String], i: usize| v.get(i).cloned().unwrap_or_default();
    // Ids renumbered in the new order, so that one order gives one log, to its ids.
    let mut renamed: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let ordered_events = order
        .iter()
        .map(|&i| match events[i] {
            (d, id) if d != 0 && id >= OWN_IDS => {
                let n = renamed.len() as u64;
                (d, *renamed.entry(id).or_insert(OWN_IDS + n))
            }
            other => other,
        })
        .collect();
    let ordered_ops = order.iter().map(|&i| pick(&ops, i)).collect();
    let ordered_tags = order.iter().map(|&i| tags.get(i).copied().unwrap_or_default()).collect();
    (ordered_events, ordered_ops, ordered_tags)
}

/// The CPU's counters without `CpuProbe`'s one-at-a-time lock: a recording may be made while a
/// run holds its probe (a guided search asks the estimate between trials).
struct Unguarded {
    /// The CPU, or the meta device, whose bytes the CPU's counters count too.
    device: tch::Device,
}

impl MemoryProbe for Unguarded {
    fn device(&self) -> tch::Device {
        self.device
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording of a model phase and a backward phase, each event with its op.
    fn recording(events: &[(i64, u64, &str)], phases: &[Phase]) -> Recording {
        Recording {
            events: events.iter().map(|&(d, p, _)| (d, p)).collect(),
            ops: events.iter().map(|&(.., op)| op.to_string()).collect(),
            tags: vec![ffi::Where::default(); events.len()],
            reduces: Vec::new(),
            convs: Vec::new(),
            attns: Vec::new(),
            phases: phases.iter().map(|&p| (1, 0, p)).collect(),
            row: SummaryRow::default(),
            on: RecordedOn::Meta,
        }
    }

    /// In a backward, the engine's out-of-place sum whose old buffer is freed straight after is
    /// the CPU's in-place add: both events go, and the sum's free is the old buffer's. The same
    /// pattern in a forward (a module's own `x = x + y`) is the module's, and stays.
    #[test]
    fn a_meta_recordings_engine_sums_are_taken_back_in_place() {
        let _alone = crate::probe::cpu_alone();
        let events = [
            (0, START, ""),
            (8, 100, "aten::add"),
            (-4, 50, ""),
            (4, 60, "aten::add"),
            (-4, 100, ""),
            (0, END, ""),
            (0, START, ""),
            (16, 200, "AddmmBackward0 > aten::mm"),
            (16, 300, "AddmmBackward0 > aten::mm"),
            (16, 400, "aten::add"),
            (-16, 200, ""),
            (16, 500, "aten::add"),
            (-16, 400, ""),
            (-16, 300, ""),
            (-16, 500, ""),
            (0, END, ""),
        ];
        let got = summed_in_place(recording(&events, &[Phase::Forward, Phase::Backward]));
        let want: Vec<(i64, u64)> = vec![
            (0, START),
            (8, 100),
            (-4, 50),
            (4, 60),
            (-4, 100),
            (0, END),
            (0, START),
            (16, 200),
            (16, 300),
            (-16, 300),
            (-16, 200),
            (0, END),
        ];
        assert_eq!(got.events, want);
        assert_eq!(got.ops.len(), want.len());
        assert_eq!(got.ops[7], "AddmmBackward0 > aten::mm");
    }

    #[test]
    fn a_missing_meta_kernel_is_named_in_a_few_words() {
        let _alone = crate::probe::cpu_alone();
        let said = "recording x.pt at batch 4: Internal torch error: aten::index_select: attempted to run this \
                    operator with Meta tensors, but there was no fake impl or Meta kernel registered. You may have \
                    run into this message while using an operator with PT2 compilation APIs";
        assert_eq!(no_meta_kernel(said), "aten::index_select has no meta kernel");
        assert_eq!(no_meta_kernel("mixed precision does not run"), "mixed precision does not run");
    }

    /// Two threads' chunks, each a buffer held over its work, interleaved two ways by the
    /// scheduler (side by side, one after the other, the second thread first), give one log; an
    /// address freed by one thread and given again to the other is two allocations still.
    #[test]
    fn a_parallel_regions_events_come_in_one_order_whatever_the_load() {
        let _alone = crate::probe::cpu_alone();
        let none = |n: usize| vec![ffi::Where::default(); n];
        let ops = |n: usize| vec![String::new(); n];
        // (delta, address, thread): before, thread 1's chunk, thread 2's chunk, after.
        let logs: [&[(i64, u64, u16)]; 3] = [
            &[(8, 100, 0), (4, 200, 1), (4, 300, 2), (-4, 200, 1), (-4, 300, 2), (-8, 100, 0)],
            &[(8, 100, 0), (4, 200, 1), (-4, 200, 1), (4, 200, 2), (-4, 200, 2), (-8, 100, 0)],
            &[(8, 100, 0), (4, 300, 2), (-4, 300, 2), (4, 200, 1), (-4, 200, 1), (-8, 100, 0)],
        ];
        let ordered: Vec<Vec<(i64, u64)>> = logs
            .iter()
            .map(|log| {
                let events = log.iter().map(|&(d, p, _)| (d, p)).collect();
                let threads: Vec<u16> = log.iter().map(|&(.., t)| t).collect();
                in_one_order(events, ops(log.len()), none(log.len()), &threads).0
            })
            .collect();
        let want = vec![
            (8, OWN_IDS),
            (4, OWN_IDS + 1),
            (4, OWN_IDS + 2),
            (-4, OWN_IDS + 1),
            (-4, OWN_IDS + 2),
            (-8, OWN_IDS),
        ];
        for got in &ordered {
            assert_eq!(got, &want, "both buffers live at once, in one order");
        }
        // No parallel region: the log as it was.
        let plain = vec![(8, 100), (-8, 100)];
        assert_eq!(in_one_order(plain.clone(), ops(2), none(2), &[0, 0]).0, plain);
    }
}
