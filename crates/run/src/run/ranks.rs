//! A `[parallel]` trial's ranks on one machine, started as `torchrun --standalone` starts them:
//! one process each (this binary's hidden `rank-worker`), told its place by `RANK`,
//! `WORLD_SIZE` and `LOCAL_RANK` and meeting the others at a `FileStore` of their own (or, in a
//! world torchrun or srun started, at its store: see [`super::launch`]). Each rank
//! trains the trial through torch.distributed's own engine (gloo on the CPU), measures its own
//! allocator phase by phase, and sends its records and its summary back as JSON lines.
//!
//! What can go wrong across ranks ends the trial on every rank, as data or as an error, never a
//! hang: a rank that runs out of memory ends its process, and the others' next collective fails
//! at once (the peer closed); a rank that dies or cannot start gets the others killed; a rank
//! that hangs makes the others' collectives fail after [`COLLECTIVE_TIMEOUT`].
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::launch::Launch;
use crate::ffi::dist::{Group, Rendezvous};
use crate::interrupt;
use crate::probe::CpuProbe;
use crate::schema::{PhaseRecord, Status, SummaryRow, TraceLevel};
use crate::spec::{Field, Spec, SweepMode};
use crate::train;

/// How long a rank waits at the rendezvous and in any collective for the others: a rank that
/// hangs fails the rest after this long. Generous, as a CPU rank's step of a large model can be
/// long while the others wait in its all-reduce.
pub const COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// What every rank of a trial is told (as JSON, on its stdin): the spec as the run read it, the
/// trial's place in it, and where the ranks meet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankJob {
    /// The spec's path (relative paths in it resolve from there) and its text as the run read
    /// it: a file edited since does not change the trial.
    pub spec_path: PathBuf,
    pub source: String,
    /// The trial's variant (`""` for none) and swept value, as its summary row names them.
    pub variant: String,
    pub value: Option<f64>,
    pub trial: usize,
    pub trace: TraceLevel,
    /// Each rank's budget (its own device's).
    pub budget: Option<u64>,
    /// Where the ranks meet.
    pub meet: Meet,
    pub world_size: usize,
    pub timeout_seconds: f64,
}

/// Where a trial's ranks meet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Meet {
    /// A `FileStore`, made by the first rank and gone with the trial: ranks oomlab started.
    File(PathBuf),
    /// The keys under `prefix` of a launched world's store at `host:port`: ranks torchrun or
    /// srun started, each trial under a prefix of its own.
    Store { host: String, port: u16, prefix: String },
}

impl Meet {
    fn rendezvous(&self) -> Rendezvous {
        match self {
            Meet::File(path) => Rendezvous::File(path.clone()),
            Meet::Store { host, port, prefix } => {
                Rendezvous::Served { host: host.clone(), port: *port, prefix: prefix.clone() }
            }
        }
    }
}

/// One line a rank writes on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Record(PhaseRecord),
    Row(Box<SummaryRow>),
}

/// What one rank left: its phases, its summary (none when it died or failed outside the
/// trial), and its stderr's last lines.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RankOutcome {
    pub rank: usize,
    pub records: Vec<PhaseRecord>,
    pub row: Option<SummaryRow>,
    pub stderr: String,
    pub exit: Option<i32>,
    /// Killed by oomlab because another rank's process had failed (it could only wait for that
    /// one): never the rank a lost trial is blamed on while one that failed by itself exists.
    #[serde(default)]
    pub stopped: bool,
}

/// Refuses, before anything starts, the `[parallel]` trials this machine cannot run: on a GPU
/// (ranks run over gloo on the CPU so far; NCCL is not built), more ranks than the machine
/// hosts. In a
/// world torchrun or srun `launched`, every trial must be one of that world's size.
pub fn refuse(
    spec: &Spec,
    device: tch::Device,
    budget: Option<u64>,
    launched: Option<&Launch>,
) -> Result<()> {
    if let Some(launch) = launched {
        super::launch::refuse(spec, launch)?;
    }
    for (variant, config) in spec.configs() {
        let p = &config.parallel;
        if !p.is_distributed() {
            continue;
        }
        let name = variant.map(|v| format!(" (variant {v:?})")).unwrap_or_default();
        let at = format!("{}{name}: [parallel] strategy = \"{}\"", spec.path.display(), p.strategy.name());
        if device != tch::Device::Cpu {
            bail!(
                "{at} runs its ranks on the CPU over gloo; ranks on GPUs (NCCL) are not built yet: run it with \
                 --device cpu"
            );
        }
        if launched.is_some() {
            // The launcher placed the ranks, on this machine or others: theirs to host.
            continue;
        }
        let most = match &spec.sweep {
            Some(s) if s.field == Field::WorldSize => match &s.mode {
                SweepMode::List(values) => values.iter().fold(0.0f64, |a, &b| a.max(b)) as usize,
                SweepMode::Search { max, .. } => *max as usize,
                SweepMode::Halve { start } => *start as usize,
            },
            _ => p.world_size,
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let host = MAX_RANKS_PER_CORE * cores;
        if most > host {
            bail!(
                "{at} asks for {most} ranks, and this machine hosts at most {host} ({MAX_RANKS_PER_CORE} processes a \
                 core, {cores} cores): lower parallel.world_size, or ask `oomlab estimate`, which predicts a rank at \
                 any world size without starting one"
            );
        }
        if let (Some(budget), Some((available, _))) = (budget, crate::device::host_available()) {
            if budget.saturating_mul(most as u64) > available {
                bail!(
                    "{at}: {most} ranks of a {} budget each need {} of host memory, and {} is available: lower \
                     the budget or the world size",
                    bytesize::ByteSize::b(budget).display().iec(),
                    bytesize::ByteSize::b(budget.saturating_mul(most as u64)).display().iec(),
                    bytesize::ByteSize::b(available).display().iec()
                );
            }
        }
    }
    Ok(())
}

/// Rank processes a core may hold: each trains while the others wait in collectives, so a few
/// a core still finish, slowly; more only thrash.
const MAX_RANKS_PER_CORE: usize = 4;

/// Runs every rank of `job`'s trial as a process of `exe` (this binary), and waits for all of
/// them. A rank that exits without its summary (a crash, a kill, a failure before the trial)
/// gets the others killed: they could only wait for it.
pub fn run_world(exe: &Path, job: &RankJob) -> Result<Vec<RankOutcome>> {
    let mut procs: Vec<RankProcess> = Vec::new();
    for rank in 0..job.world_size {
        let local = [("LOCAL_WORLD_SIZE", job.world_size.to_string())];
        match RankProcess::start(exe, job, rank, rank, &local) {
            Ok(p) => procs.push(p),
            Err(e) => {
                procs.iter_mut().for_each(RankProcess::kill);
                return Err(e);
            }
        }
    }
    // A rank's process that failed ends the trial: the others would wait on it.
    wait_all(&mut procs, Ok)?;
    procs.into_iter().map(RankProcess::outcome).collect()
}

/// One rank's process, with threads of their own reading its stdout and stderr (so that no
/// pipe fills).
pub(crate) struct RankProcess {
    rank: usize,
    child: Child,
    lines: std::thread::JoinHandle<Result<(Vec<PhaseRecord>, Option<SummaryRow>)>>,
    text: std::thread::JoinHandle<String>,
    exit: Option<ExitStatus>,
    /// Whether [`RankProcess::kill`] ended it (it was still running).
    stopped: bool,
}

impl RankProcess {
    /// Starts rank `rank` of `job` as this binary's `rank-worker`, with `env` besides its place.
    pub(crate) fn start(
        exe: &Path,
        job: &RankJob,
        rank: usize,
        local_rank: usize,
        env: &[(&str, String)],
    ) -> Result<RankProcess> {
        let mut child = Command::new(exe)
            .arg("rank-worker")
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local_rank.to_string())
            .env("WORLD_SIZE", job.world_size.to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting rank {rank} of {} ({})", job.world_size, exe.display()))?;
        let mut stdin = child.stdin.take().expect("piped");
        // The job is small; a rank that died at once makes this fail, which its exit reports.
        let _ = stdin.write_all(serde_json::to_string(job)?.as_bytes());
        drop(stdin);
        let out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let lines = std::thread::spawn(move || read_lines(rank, out));
        let text = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Ok(RankProcess { rank, child, lines, text, exit: None, stopped: false })
    }

    /// Whether it has ended, and how.
    fn poll(&mut self) -> Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait()?;
        }
        Ok(self.exit)
    }

    pub(crate) fn kill(&mut self) {
        // A process that ended by itself meanwhile is not one this kill stopped.
        if self.poll().ok().flatten().is_none() {
            self.stopped = true;
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    pub(crate) fn outcome(self) -> Result<RankOutcome> {
        let rank = self.rank;
        let (records, row) = self.lines.join().map_err(|_| anyhow!("reading rank {rank}'s output"))??;
        let stderr = self.text.join().unwrap_or_default();
        let exit = self.exit.and_then(|s| s.code());
        Ok(RankOutcome { rank, records, row, stderr, exit, stopped: self.stopped })
    }
}

/// Waits until every process has ended. `stop` is asked every 20 ms and once more at the end,
/// told whether one of them failed, and answers whether the rest must be killed now (they could only wait for a peer that
/// is gone). A signal to this process kills them all and is the error.
pub(crate) fn wait_all(procs: &mut [RankProcess], mut stop: impl FnMut(bool) -> Result<bool>) -> Result<()> {
    loop {
        if let Err(e) = interrupt::check() {
            procs.iter_mut().for_each(RankProcess::kill);
            return Err(e.into());
        }
        let mut failed = false;
        let mut running = false;
        for p in procs.iter_mut() {
            match p.poll()? {
                Some(status) => failed |= !status.success(),
                None => running = true,
            }
        }
        // Asked even when every process has ended: a failure must still be told (a launched
        // rank's only process, killed before it joined the others, ends its wait at once).
        let stop_now = stop(failed)?;
        if !running {
            return Ok(());
        }
        if stop_now {
            procs.iter_mut().for_each(RankProcess::kill);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A rank's JSON lines: its records in order, then its summary.
fn read_lines(rank: usize, out: impl Read) -> Result<(Vec<PhaseRecord>, Option<SummaryRow>)> {
    let (mut records, mut row) = (Vec::new(), None);
    for line in BufReader::new(out).lines() {
        let line = line.with_context(|| format!("reading rank {rank}'s output"))?;
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::Record(r)) => records.push(r),
            Ok(Line::Row(r)) => row = Some(*r),
            // Anything else a library printed on stdout is not the rank's report.
            Err(_) => {}
        }
    }
    Ok((records, row))
}

/// The trial's rows from its ranks' outcomes: every rank's records (rank by rank), and the one
/// summary row of the rank that decides the trial: the first to run out of memory, else the
/// first that failed on its own (not because a peer left), else the one with the highest peak;
/// its final loss the ranks' mean. A rank without a summary is an error naming it and its last
/// words.
pub fn combine(outcomes: Vec<RankOutcome>) -> Result<(Vec<PhaseRecord>, SummaryRow)> {
    let world = outcomes.len();
    // The rank that died by itself, not one oomlab stopped after it (that one has no summary
    // either when it was killed before it noticed its peer was gone).
    let lost = outcomes.iter().filter(|o| o.row.is_none()).min_by_key(|o| o.stopped);
    if let Some(lost) = lost {
        let words: Vec<&str> = lost.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = words[words.len().saturating_sub(3)..].join(" | ");
        let how = match lost.exit {
            Some(code) => format!("exited with status {code}"),
            None => "was killed".to_string(),
        };
        bail!(
            "rank {} of {world} {how} before it reported its trial{}; the other ranks were stopped",
            lost.rank,
            if tail.is_empty() { String::new() } else { format!(": {tail}") }
        );
    }
    let rank_of = |o: &RankOutcome| {
        let row = o.row.as_ref().expect("checked above");
        let severity = match row.status {
            Status::Oom => 4,
            Status::Error if !peer_left(&row.message) => 3,
            Status::Error => 2,
            Status::Diverged => 1,
            _ => 0,
        };
        (severity, row.max_memory_allocated, o.rank)
    };
    let decide = outcomes
        .iter()
        .max_by(|a, b| {
            let ((sa, pa, ra), (sb, pb, rb)) = (rank_of(a), rank_of(b));
            // Failures: the lowest rank among the worst; fits: the highest peak.
            sa.cmp(&sb).then(if sa > 1 { rb.cmp(&ra) } else { pa.cmp(&pb).then(rb.cmp(&ra)) })
        })
        .expect("a world has ranks");
    let mut row = decide.row.clone().expect("checked above");
    (row.rank, row.world_size) = (Some(decide.rank), Some(world));
    row.trial_seconds = outcomes.iter().filter_map(|o| o.row.as_ref()?.trial_seconds).reduce(f64::max);
    // The ranks' mean loss is the loss of the whole (global) batch, as accumulation's mean of its
    // micro-batches is: comparable with one process's at any world size.
    let losses: Option<Vec<f64>> = outcomes.iter().map(|o| o.row.as_ref()?.final_loss).collect();
    if let Some(l) = losses.filter(|l| !l.is_empty()) {
        row.final_loss = Some(l.iter().sum::<f64>() / l.len() as f64);
    }
    let records = outcomes.into_iter().flat_map(|o| o.records).collect();
    Ok((records, row))
}

/// gloo's words when a collective failed because another rank's process went away or stopped
/// answering: that rank's outcome explains the trial, not this one's.
fn peer_left(message: &str) -> bool {
    let m = message.to_lowercase();
    [
        "connection closed by peer",
        "connection reset",
        "broken pipe",
        "timed out",
        "timeout",
        "connection refused",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// The hidden `rank-worker`: one rank of a trial, told its place by `RANK` and `WORLD_SIZE`
/// and the job on stdin; its records and summary go to stdout as JSON lines.
pub fn worker() -> Result<()> {
    let env = |name: &str| -> Result<usize> {
        let v = std::env::var(name)
            .with_context(|| format!("{name} is not set: rank-worker is started by oomlab run"))?;
        v.parse().with_context(|| format!("{name}={v:?} is not a whole number"))
    };
    let (rank, world) = (env("RANK")?, env("WORLD_SIZE")?);
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).context("reading the job from stdin")?;
    let job: RankJob = serde_json::from_str(&text).context("the job on stdin is not a rank's JSON")?;
    if world != job.world_size || rank >= world {
        bail!("RANK={rank} WORLD_SIZE={world} is not a place in the job's world of {}", job.world_size);
    }
    let spec = crate::spec::parse(&job.source, &job.spec_path).map_err(|e| anyhow!(e.0))?;
    let config = spec
        .trial_config(&job.variant, job.value)
        .with_context(|| format!("the spec has no trial {:?} {:?}", job.variant, job.value))?;
    let probe = CpuProbe::new(job.budget)?;
    let timeout = Duration::from_secs_f64(job.timeout_seconds);
    let group =
        Arc::new(Group::join(&job.meet.rendezvous(), rank, world, timeout).map_err(anyhow::Error::msg)?);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut send = |line: &Line| -> Result<()> {
        serde_json::to_writer(&mut out, line)?;
        out.write_all(b"\n")?;
        out.flush().context("writing to oomlab run")
    };
    let row = train::run_rank(
        &config,
        &probe,
        job.trial,
        job.trace,
        &mut |rec| send(&Line::Record(PhaseRecord { rank: Some(rank), ..rec.clone() })),
        &group,
    )?;
    send(&Line::Row(Box::new(row)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rank: usize, status: Status, peak: u64, message: &str) -> RankOutcome {
        let row = SummaryRow {
            status,
            max_memory_allocated: peak,
            message: message.into(),
            ..SummaryRow::default()
        };
        RankOutcome { rank, row: Some(row), ..RankOutcome::default() }
    }

    #[test]
    fn the_rank_that_decides_is_the_first_to_fail_else_the_highest_peak() {
        let (_, row) = combine(vec![
            outcome(0, Status::Ok, 10, ""),
            outcome(1, Status::Ok, 30, ""),
            outcome(2, Status::Ok, 20, ""),
        ])
        .unwrap();
        assert_eq!((row.rank, row.world_size, row.max_memory_allocated), (Some(1), Some(3), 30));
        let peer = "Connection closed by peer [127.0.0.1]:1234";
        let (_, row) = combine(vec![
            outcome(0, Status::Error, 50, peer),
            outcome(1, Status::Error, 5, "shape mismatch"),
            outcome(2, Status::Oom, 7, "out of memory"),
        ])
        .unwrap();
        assert_eq!((row.rank, row.status), (Some(2), Status::Oom));
        let (_, row) = combine(vec![
            outcome(0, Status::Error, 50, peer),
            outcome(1, Status::Error, 5, "shape mismatch"),
        ])
        .unwrap();
        assert_eq!(row.rank, Some(1), "its own failure, not the peer's");
    }

    #[test]
    fn a_rank_without_a_summary_is_an_error_naming_it() {
        let lost = RankOutcome {
            rank: 1,
            stderr: "\nerror: boom\n".into(),
            exit: Some(1),
            ..RankOutcome::default()
        };
        let e = combine(vec![outcome(0, Status::Ok, 1, ""), lost]).unwrap_err().to_string();
        assert_eq!(e, "rank 1 of 2 exited with status 1 before it reported its trial: error: boom; the other ranks were stopped");
        // Rank 0, killed by oomlab once rank 1 had died, is not the one to blame.
        let stopped = RankOutcome { rank: 0, stopped: true, ..RankOutcome::default() };
        let died = RankOutcome { rank: 1, ..RankOutcome::default() };
        let e = combine(vec![stopped, died]).unwrap_err().to_string();
        assert!(e.starts_with("rank 1 of 2 was killed before it reported its trial"), "{e}");
    }
}
