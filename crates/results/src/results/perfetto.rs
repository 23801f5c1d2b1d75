//! `trace.json`: the run in Chrome's trace event format, to open in ui.perfetto.dev (or
//! chrome://tracing) and see each phase's time and memory on a timeline.
//!
//! What is in it:
//! - one track (`tid`) per trial, named by `thread_name` metadata ("trial 3 · depth 4 · ok"),
//!   holding a complete event (`"ph":"X"`) for the trial, one per step inside it, and one per
//!   phase inside those, named after the phase, with step, micro-batch and the memory numbers as
//!   `args`; an instant event ("OOM") where a trial ran out of memory;
//! - counters (`"ph":"C"`) `memory_allocated` and `memory_reserved` (and `device_used` when NVML
//!   gave it) at the end of every phase, so that the UI draws memory as a graph under the tracks.
//!
//! Times: each trial's clock starts at 0 (`elapsed_seconds`), so trials are laid end to end in
//! the order they ran, each one [`GAP_NS`] after the end of the one before; `ts` and `dur` are
//! in microseconds, computed from whole nanoseconds so that a phase never sticks out of its
//! step by a rounding error.
//!
//! Kill-safety: the file is a JSON array, one event a line, that is closed (`\n]\n`) after every
//! trial. A trial's events are kept in memory until the trial ends and then written over the
//! closing bracket, with a new one after them, in one write: a run killed at any moment leaves
//! a file that parses, holding every trial that had finished. Dropping the writer (a run that
//! stopped on an error) writes the trial under way as "incomplete". A write that fails (a full
//! disk) is taken back: the closing bracket is put back where the last whole trial ended and the
//! file cut there, within bytes the file already had, so that it parses still. `oomlab plot`
//! writes the whole file anew beside the old one and renames it over it.
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{Exporter, Manifest};
use crate::schema::{Phase, PhaseRecord, Status, SummaryRow};

pub const TRACE_JSON: &str = "trace.json";

/// The gap left between two trials on the shared timeline, in nanoseconds (1 ms).
pub const GAP_NS: u64 = 1_000_000;

const PID: u64 = 1;
const CLOSE: &[u8] = b"\n]\n";

/// Writes `trace.json` as a run goes; see the module's documentation.
pub struct PerfettoTrace {
    path: PathBuf,
    file: File,
    /// Where the closing `\n]\n` starts: the next events are written from here.
    end: u64,
    /// Where it started before the last trial was written (what [`Exporter::undo`] goes back to).
    before: u64,
    /// The records of the trial under way.
    pending: Vec<PhaseRecord>,
    /// Where the next trial starts on the shared timeline, in nanoseconds.
    offset_ns: u64,
}

impl PerfettoTrace {
    /// Creates `dir/trace.json`, naming the process after the experiment and device in
    /// `dir/manifest.json` when there is one.
    pub fn create(dir: &Path) -> Result<PerfettoTrace> {
        let name = match Manifest::read(dir) {
            Ok(m) => format!("oomlab {} on {}", m.experiment, m.device.name),
            Err(_) => "oomlab".to_string(),
        };
        PerfettoTrace::create_named(dir, &name)
    }

    /// Creates `dir/trace.json` with `process_name` as the name of its one process.
    pub fn create_named(dir: &Path, process_name: &str) -> Result<PerfettoTrace> {
        PerfettoTrace::create_at(dir.join(TRACE_JSON), process_name, crate::fsio::create_new)
    }

    /// Creates the file at `path` with `open` (a new file, or one made for it beforehand).
    fn create_at(
        path: PathBuf,
        process_name: &str,
        open: fn(&Path) -> Result<File>,
    ) -> Result<PerfettoTrace> {
        let mut file = open(&path)?;
        let meta =
            json!({"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": process_name}});
        let head = format!("[\n{meta}");
        file.write_all(head.as_bytes())
            .and_then(|()| file.write_all(CLOSE))
            .with_context(|| format!("writing {}", path.display()))?;
        let end = head.len() as u64;
        Ok(PerfettoTrace { path, file, end, before: end, pending: Vec::new(), offset_ns: 0 })
    }

    /// Writes the trial under way, if any, as incomplete (a trial that has records but never
    /// ended), and closes the file. Used when rebuilding from `trace.csv` of a killed run.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.flush_pending(None)?;
        Ok(self.path.clone())
    }

    /// Writes the pending records as one trial, with `row` if it is theirs.
    fn flush_pending(&mut self, row: Option<&SummaryRow>) -> Result<()> {
        let records = std::mem::take(&mut self.pending);
        let Some(trial) = records.first().map(|r| r.trial).or(row.map(|r| r.trial)) else {
            return Ok(());
        };
        let (events, end_ns) = trial_events(trial, &records, row, self.offset_ns);
        if !records.is_empty() {
            self.offset_ns = end_ns + GAP_NS;
        }
        self.append(&events)
    }

    /// Writes `events` over the closing bracket and closes the array again, in one write.
    fn append(&mut self, events: &[Value]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut chunk = String::new();
        for e in events {
            chunk.push_str(",\n");
            chunk.push_str(&e.to_string());
        }
        let mut bytes = chunk.into_bytes();
        let advance = bytes.len() as u64;
        bytes.extend_from_slice(CLOSE);
        self.before = self.end;
        let written = self.file.seek(SeekFrom::Start(self.end)).and_then(|_| self.file.write_all(&bytes));
        if let Err(e) = written {
            // Leave what parses: whatever part of the events got out is cut away.
            let _ = self.close_at(self.end);
            return Err(e).with_context(|| format!("writing {}", self.path.display()));
        }
        self.end += advance;
        Ok(())
    }

    /// Puts the closing bracket at `at` and cuts the file after it. The bracket goes over bytes
    /// the file already had, so this works on a full disk too.
    fn close_at(&mut self, at: u64) -> std::io::Result<()> {
        self.file.seek(SeekFrom::Start(at))?;
        self.file.write_all(CLOSE)?;
        self.file.set_len(at + CLOSE.len() as u64)
    }
}

impl Exporter for PerfettoTrace {
    fn phase(&mut self, record: &PhaseRecord) -> Result<()> {
        // A record of another trial while one is pending: that one never ended (a trace.csv
        // from a killed run, read back); it is written as incomplete.
        if self.pending.first().is_some_and(|p| p.trial != record.trial) {
            self.flush_pending(None)?;
        }
        self.pending.push(record.clone());
        Ok(())
    }

    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        if self.pending.first().is_some_and(|p| p.trial != row.trial) {
            self.flush_pending(None)?;
        }
        self.flush_pending(Some(row))
    }

    fn undo(&mut self) -> Result<()> {
        let before = self.before;
        self.close_at(before)
            .with_context(|| format!("cutting {} back to its last whole trial", self.path.display()))?;
        self.end = before;
        Ok(())
    }
}

impl Drop for PerfettoTrace {
    fn drop(&mut self) {
        // Best effort: an error here has nowhere to go, and the file is valid either way. A
        // trial dropped by a signal is left out, as from the CSVs.
        if crate::interrupt::requested().is_none() {
            let _ = self.flush_pending(None);
        }
    }
}

/// Rewrites `dir/trace.json` from records and summary rows read back from the CSVs, with the
/// same writer a run uses; trials with records but no row are written as incomplete.
pub fn write_trace_json(dir: &Path, trace: &[PhaseRecord], rows: &[SummaryRow]) -> Result<PathBuf> {
    let name = match Manifest::read(dir) {
        Ok(m) => format!("oomlab {} on {}", m.experiment, m.device.name),
        Err(_) => "oomlab".to_string(),
    };
    let path = dir.join(TRACE_JSON);
    // Written whole beside the old file, then renamed over it.
    let tmp = crate::fsio::temp_beside(&path)?;
    let open = |p: &Path| {
        File::options().write(true).truncate(true).open(p).with_context(|| format!("writing {}", p.display()))
    };
    let mut out = PerfettoTrace::create_at(tmp.to_path_buf(), &name, open)?;
    let mut done = std::collections::HashSet::new();
    let mut i = 0;
    while i < trace.len() {
        let trial = trace[i].trial;
        let n = trace[i..].iter().take_while(|r| r.trial == trial).count();
        for r in &trace[i..i + n] {
            out.phase(r)?;
        }
        if let Some(row) = rows.iter().find(|r| r.trial == trial) {
            out.trial(row)?;
            done.insert(trial);
        }
        i += n;
    }
    for row in rows.iter().filter(|r| !done.contains(&r.trial)) {
        out.trial(row)?;
    }
    out.finish()?;
    crate::fsio::persist(tmp, &path)?;
    Ok(path)
}

fn nanos(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9).round() as u64
    } else {
        0
    }
}

/// Microseconds, as the format wants them, from nanoseconds.
fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The name of a trial's track: "trial 3 · fp16 · depth 4 · OOM in backward".
pub fn track_name(trial: usize, records: &[PhaseRecord], row: Option<&SummaryRow>) -> String {
    let mut parts = vec![format!("trial {trial}")];
    if let Some(row) = row {
        if !row.variant.is_empty() {
            parts.push(row.variant.clone());
        }
        if let Some(v) = row.value {
            let key = row.field.map_or("value", crate::spec::Field::column);
            parts.push(format!("{key} {v}"));
        }
        parts.push(row.outcome());
    } else if !records.is_empty() {
        parts.push("incomplete".to_string());
    }
    parts.join(" · ")
}

/// The events of one trial, in time order, starting at `offset_ns` on the shared timeline,
/// and where the trial ends on it.
pub fn trial_events(
    trial: usize,
    records: &[PhaseRecord],
    row: Option<&SummaryRow>,
    offset_ns: u64,
) -> (Vec<Value>, u64) {
    let tid = trial;
    let mut events = vec![
        json!({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
               "args": {"name": track_name(trial, records, row)}}),
        json!({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid, "args": {"sort_index": trial}}),
    ];
    // Each phase on the shared clock, in order, never starting before the previous one ended.
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(records.len());
    let mut last_end = offset_ns;
    for r in records {
        let end = (offset_ns + nanos(r.elapsed_seconds)).max(last_end);
        let start = (offset_ns + nanos(r.elapsed_seconds - r.phase_seconds)).clamp(last_end, end);
        spans.push((start, end));
        last_end = end;
    }
    let Some(&(first, _)) = spans.first() else {
        return (events, offset_ns);
    };
    let complete = |name: String, cat: &str, start: u64, end: u64, args: Value| {
        json!({"ph": "X", "name": name, "cat": cat, "pid": PID, "tid": tid,
               "ts": micros(start), "dur": micros(end - start), "args": args})
    };
    let trial_args = match row {
        Some(row) => json!({
            "variant": row.variant, "field": row.field.map_or("", crate::spec::Field::key), "value": row.value, "status": row.status,
            "max_memory_allocated": row.max_memory_allocated, "max_memory_reserved": row.max_memory_reserved,
            "message": row.message,
        }),
        None => json!({"status": "incomplete"}),
    };
    events.push(complete(format!("trial {trial}"), "trial", first, last_end, trial_args));

    let mut i = 0;
    while i < records.len() {
        let step = records[i].step;
        let n = records[i..].iter().take_while(|r| r.step == step).count();
        let (step_start, step_end) = (spans[i].0, spans[i + n - 1].1);
        let name = if step == 0 { "setup".to_string() } else { format!("step {step}") };
        events.push(complete(name, "step", step_start, step_end, json!({"step": step})));
        for (r, &(start, end)) in records[i..i + n].iter().zip(&spans[i..i + n]) {
            let args = json!({
                "step": r.step, "micro": r.micro,
                "memory_allocated": r.memory_allocated, "memory_reserved": r.memory_reserved,
                "max_memory_allocated": r.max_memory_allocated, "max_memory_reserved": r.max_memory_reserved,
                "device_used": r.device_used,
            });
            events.push(complete(r.phase.to_string(), "phase", start, end, args));
            let counter = |name: &str, bytes: u64| json!({"ph": "C", "name": name, "pid": PID, "tid": tid, "ts": micros(end), "args": {"bytes": bytes}});
            events.push(counter("memory_allocated", r.memory_allocated));
            events.push(counter("memory_reserved", r.memory_reserved));
            if let Some(used) = r.device_used {
                events.push(counter("device_used", used));
            }
        }
        i += n;
    }

    if let Some(row) = row.filter(|r| r.status == Status::Oom) {
        // At the end of the phase it struck in, or of the last one.
        let at = |r: &PhaseRecord| Some(r.phase) == row.phase && Some(r.step) == row.step;
        let k = records.iter().rposition(at).unwrap_or(records.len() - 1);
        events.push(json!({"ph": "i", "s": "t", "name": "OOM", "cat": "oom", "pid": PID, "tid": tid,
            "ts": micros(spans[k].1),
            "args": {"phase": row.phase.map(Phase::as_str), "step": row.step,
                     "requested": row.oom_requested, "message": row.message}}));
    }
    (events, last_end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn rec(trial: usize, step: usize, phase: Phase, allocated: u64, secs: f64, elapsed: f64) -> PhaseRecord {
        PhaseRecord {
            trial,
            variant: String::new(),
            value: None,
            step,
            micro: 0,
            phase,
            memory_allocated: allocated,
            memory_reserved: allocated * 2,
            max_memory_allocated: allocated + 1,
            max_memory_reserved: allocated * 2 + 1,
            device_used: (trial == 1).then_some(allocated * 3),
            phase_seconds: secs,
            elapsed_seconds: elapsed,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        }
    }

    /// A trial of two steps, each phase 0.1 s.
    fn records(trial: usize) -> Vec<PhaseRecord> {
        let mut out =
            vec![rec(trial, 0, Phase::Data, 10, 0.1, 0.1), rec(trial, 0, Phase::Model, 20, 0.1, 0.2)];
        let mut t = 0.2;
        for step in 1..=2 {
            for (k, phase) in Phase::TRAINING.into_iter().enumerate() {
                t += 0.1;
                out.push(rec(trial, step, phase, 30 + k as u64, 0.1, t));
            }
        }
        out
    }

    fn row(trial: usize, status: Status) -> SummaryRow {
        SummaryRow {
            trial,
            variant: "fp16".into(),
            field: Some(crate::spec::Field::Depth),
            value: Some(trial as f64 * 2.0),
            status,
            phase: (status == Status::Oom).then_some(Phase::Backward),
            step: (status == Status::Oom).then_some(2),
            oom_requested: (status == Status::Oom).then_some(1 << 30),
            ..SummaryRow::default()
        }
    }

    fn parse(dir: &Path) -> Vec<Value> {
        let text = std::fs::read_to_string(dir.join(TRACE_JSON)).expect("trace.json readable");
        serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| panic!("not JSON: {e}\n{text}"))
    }

    fn of<'a>(events: &'a [Value], ph: &str) -> Vec<&'a Value> {
        events.iter().filter(|e| e["ph"] == ph).collect()
    }

    /// Runs two trials through the exporter, the second ending in an OOM in step 2's backward.
    fn two_trials(dir: &Path) -> PerfettoTrace {
        let mut out = PerfettoTrace::create_named(dir, "test run").expect("created");
        for r in records(1) {
            out.phase(&r).unwrap();
        }
        out.trial(&row(1, Status::Ok)).unwrap();
        for r in records(2).into_iter().take(10) {
            out.phase(&r).unwrap();
        }
        out.trial(&row(2, Status::Oom)).unwrap();
        out
    }

    #[test]
    fn trials_are_tracks_of_nested_phases_with_memory_counters() {
        let tmp = tempfile::tempdir().unwrap();
        drop(two_trials(tmp.path()));
        let events = parse(tmp.path());

        let names: HashMap<u64, &str> = of(&events, "M")
            .into_iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(names[&1], "trial 1 · fp16 · depth 2 · ok");
        assert_eq!(names[&2], "trial 2 · fp16 · depth 4 · OOM in backward");
        assert!(events.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "test run"));

        // Per track, complete events are in time order; phases sit inside their step, steps
        // inside the trial.
        for tid in [1, 2] {
            let xs: Vec<&Value> = of(&events, "X").into_iter().filter(|e| e["tid"] == tid).collect();
            let ts: Vec<f64> = xs.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "track {tid} out of order: {ts:?}");
            let trial = xs.iter().find(|e| e["cat"] == "trial").expect("a trial slice");
            let end = |e: &Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
            for e in &xs {
                assert!(e["ts"].as_f64().unwrap() >= trial["ts"].as_f64().unwrap());
                assert!(end(e) <= end(trial) + 1e-6);
            }
        }
        let phases: Vec<&Value> = of(&events, "X").into_iter().filter(|e| e["cat"] == "phase").collect();
        assert_eq!(phases.len(), 12 + 10);
        let forward = phases.iter().find(|e| e["name"] == "forward" && e["tid"] == 1).unwrap();
        assert_eq!(forward["args"]["step"], 1);
        assert_eq!(forward["args"]["memory_allocated"], 31);
        assert_eq!(forward["args"]["max_memory_reserved"], 63);
        assert!((forward["dur"].as_f64().unwrap() - 100_000.0).abs() < 1e-6, "0.1 s is 100000 µs");
        assert!((forward["ts"].as_f64().unwrap() - 300_000.0).abs() < 1e-6);

        // Trial 2 starts after trial 1 ends (1.2 s) and the gap.
        let trial2 = of(&events, "X").into_iter().find(|e| e["cat"] == "trial" && e["tid"] == 2).unwrap();
        assert!((trial2["ts"].as_f64().unwrap() - (1_200_000.0 + 1_000.0)).abs() < 1e-6);

        // Counters: allocated and reserved at every phase's end, device used where NVML said.
        let counters = of(&events, "C");
        let count = |name: &str| counters.iter().filter(|e| e["name"] == name).count();
        assert_eq!(count("memory_allocated"), 22);
        assert_eq!(count("memory_reserved"), 22);
        assert_eq!(count("device_used"), 12);
        let ts: Vec<f64> = counters
            .iter()
            .filter(|e| e["name"] == "memory_allocated")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert!(ts.windows(2).all(|w| w[0] < w[1]), "counter out of order: {ts:?}");

        let oom = of(&events, "i");
        assert_eq!(oom.len(), 1);
        assert_eq!(oom[0]["tid"], 2);
        assert_eq!(oom[0]["args"]["phase"], "backward");
        assert_eq!(oom[0]["args"]["requested"], 1u64 << 30);
    }

    #[test]
    fn a_killed_run_leaves_json_with_the_finished_trials() {
        let tmp = tempfile::tempdir().unwrap();
        let mut out = two_trials(tmp.path());
        // A third trial under way when the process dies: no destructor runs.
        for r in records(3).into_iter().take(4) {
            out.phase(&r).unwrap();
        }
        std::mem::forget(out);
        let events = parse(tmp.path());
        let tids: std::collections::BTreeSet<u64> =
            events.iter().filter_map(|e| e["tid"].as_u64()).filter(|&t| t > 0).collect();
        assert_eq!(tids.into_iter().collect::<Vec<_>>(), [1, 2], "trial 3 never finished");

        // Created, nothing written yet: still an array.
        let empty = tempfile::tempdir().unwrap();
        std::mem::forget(PerfettoTrace::create_named(empty.path(), "x").unwrap());
        assert_eq!(parse(empty.path()).len(), 1);
    }

    #[test]
    fn a_dropped_writer_keeps_the_trial_under_way_as_incomplete() {
        let tmp = tempfile::tempdir().unwrap();
        let mut out = two_trials(tmp.path());
        for r in records(3).into_iter().take(4) {
            out.phase(&r).unwrap();
        }
        drop(out);
        let events = parse(tmp.path());
        let name = events
            .iter()
            .find(|e| e["name"] == "thread_name" && e["tid"] == 3)
            .map(|e| e["args"]["name"].as_str().unwrap().to_string());
        assert_eq!(name.as_deref(), Some("trial 3 · incomplete"));
    }

    #[test]
    fn rebuilding_from_the_csvs_gives_what_the_run_wrote() {
        let live = tempfile::tempdir().unwrap();
        drop(two_trials(live.path()));
        let rebuilt = tempfile::tempdir().unwrap();
        let mut trace = records(1);
        trace.extend(records(2).into_iter().take(10));
        trace.extend(records(3).into_iter().take(3)); // killed in trial 3
        let rows = [row(1, Status::Ok), row(2, Status::Oom)];
        write_trace_json(rebuilt.path(), &trace, &rows).unwrap();
        let (a, b) = (parse(live.path()), parse(rebuilt.path()));
        // The same events, but the process name (no manifest here) and trial 3, incomplete.
        let trial3 = |e: &&Value| e["tid"] == 3;
        assert_eq!(a[1..], b.iter().filter(|e| !trial3(e)).skip(1).cloned().collect::<Vec<_>>()[..]);
        assert!(b.iter().filter(trial3).any(|e| e["args"]["name"] == "trial 3 · incomplete"));
        assert_eq!(b.iter().filter(trial3).filter(|e| e["cat"] == "phase").count(), 3);
    }
}
