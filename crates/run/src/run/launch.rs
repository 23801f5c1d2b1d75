//! A world that `torchrun` or Slurm's `srun` started: every process runs the same
//! `oomlab run SPEC`, and the environment says which rank it is (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` from torchrun; `SLURM_PROCID`,
//! `SLURM_STEP_NUM_TASKS`, `SLURM_LOCALID` from srun). Rank 0 leads: it runs the spec as a
//! plain `oomlab run` does (the results folder, the manifest, the charts are its alone), and each
//! `[parallel]` trial it posts to the world's store. Every rank, rank 0 included, trains its
//! share of a posted trial in a process of its own (this binary's `rank-worker`, as when oomlab
//! starts the ranks itself, so that each trial starts from an empty allocator and an OOM ends
//! only that process), the trial's ranks meeting under a prefix of the store; the other ranks
//! post what theirs measured back, and rank 0 writes every rank's rows.
//!
//! The store is torch.distributed's own `TCPStore` at `MASTER_ADDR:MASTER_PORT`: torchrun's
//! agent serves it (`TORCHELASTIC_USE_AGENT_STORE=True`), else rank 0 does, as
//! `init_process_group("env://")` would. Keys, all under `oomlab/`: `job/N` (the N-th trial
//! posted), `failed/N` (a rank's process of trial N failed: the others stop theirs),
//! `outcome/N/R` (what rank R measured, in chunks `outcome/N/R/I` of up to 4 MiB), `stop`
//! (rank 0 is done, and how), `bye/R` (rank R read it, so rank 0 may close a store it serves).
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::ranks::{self, Meet, RankJob, RankOutcome, RankProcess, COLLECTIVE_TIMEOUT};
use crate::ffi::dist::Store;
use crate::interrupt;
use crate::spec::{Field, Spec};

/// Who started the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `torchrun` (or any launcher of `init_process_group("env://")`'s variables).
    Torchrun,
    /// Slurm's `srun`, one task a rank.
    Srun,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Srun => "srun",
        })
    }
}

/// This process's place in a launched world, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub by: Launcher,
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    /// Where the world's store is.
    pub host: String,
    pub port: u16,
    /// Whether rank 0 serves the store (else the launcher's agent does).
    pub rank0_serves: bool,
}

impl Launch {
    /// The launched world this process is a rank of, if any: a world of one is a plain run.
    pub fn from_env() -> Result<Option<Launch>> {
        Launch::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
        let number = |name: &str| -> Result<Option<usize>> {
            var(name)
                .map(|v| {
                    v.trim().parse::<usize>().with_context(|| format!("{name}={v:?} is not a whole number"))
                })
                .transpose()
        };
        let (by, rank, world, local_rank) = if let (Some(rank), Some(world)) =
            (number("RANK")?, number("WORLD_SIZE")?)
        {
            (Launcher::Torchrun, rank, world, number("LOCAL_RANK")?.unwrap_or(rank))
        } else if let (Some(rank), Some(world)) = (number("SLURM_PROCID")?, number("SLURM_STEP_NUM_TASKS")?) {
            // SLURM_STEP_NUM_TASKS, not SLURM_NTASKS: a batch script's own step has the job's
            // task count in SLURM_NTASKS though it is one process; srun's tasks have their step's.
            (Launcher::Srun, rank, world, number("SLURM_LOCALID")?.unwrap_or(rank))
        } else {
            return Ok(None);
        };
        if world <= 1 {
            return Ok(None);
        }
        if rank >= world {
            bail!("{by} started this process as rank {rank} of a world of {world}: there is no such rank");
        }
        let (host, port) = match by {
            Launcher::Torchrun => {
                let host = var("MASTER_ADDR").with_context(|| {
                    format!("{by} started rank {rank} of {world} (RANK, WORLD_SIZE) without MASTER_ADDR: set it to rank 0's host")
                })?;
                let port = var("MASTER_PORT").with_context(|| {
                    format!("{by} started rank {rank} of {world} (RANK, WORLD_SIZE) without MASTER_PORT: set it to a free port on rank 0's host")
                })?;
                (host, port)
            }
            Launcher::Srun => {
                // One node: rank 0 is on this one. Several: only the user knows which is rank 0's.
                let nodes = number("SLURM_STEP_NUM_NODES")?.or(number("SLURM_NNODES")?).unwrap_or(1);
                let host = match var("MASTER_ADDR") {
                    Some(h) => h,
                    None if nodes == 1 => "127.0.0.1".to_string(),
                    None => bail!(
                        "srun started rank {rank} of {world} on {nodes} nodes, and the ranks need to know rank 0's: \
                         export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) before srun"
                    ),
                };
                // A port of the job's own, so that two jobs on one node do not meet.
                let port = match var("MASTER_PORT") {
                    Some(p) => p,
                    None => (20000 + number("SLURM_JOB_ID")?.unwrap_or(0) % 20000).to_string(),
                };
                (host, port)
            }
        };
        let port =
            port.trim().parse::<u16>().map_err(|_| anyhow!("MASTER_PORT={port:?} is not a port number"))?;
        let agent_store = var("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(Some(Launch { by, rank, world, local_rank, host, port, rank0_serves: !agent_store }))
    }

    /// "rank 1 of 4 (started by srun)".
    pub fn describe(&self) -> String {
        format!("rank {} of {} (started by {})", self.rank, self.world, self.by)
    }
}

/// Refuses a spec a launched world cannot run: every trial must be a `[parallel]` one of the
/// world's size (the launcher fixed the ranks; a plain trial would run on every rank at once).
pub fn refuse(spec: &Spec, launch: &Launch) -> Result<()> {
    let (by, world) = (launch.by, launch.world);
    let at = spec.path.display();
    if let Some(s) = spec.sweep.as_ref().filter(|s| s.field == Field::WorldSize) {
        bail!(
            "{at}: {by} started {world} ranks, and the spec sweeps {}: a launched world has one size; run the sweep \
             without {by} (oomlab starts each trial's ranks itself), or drop the sweep",
            s.field.key()
        );
    }
    for (variant, config) in spec.configs() {
        let name = variant.map(|v| format!(" (variant {v:?})")).unwrap_or_default();
        if !config.parallel.is_distributed() {
            bail!(
                "{at}{name}: {by} started {world} ranks, and this trial is one process's (no [parallel] strategy): \
                 give it [parallel] strategy = \"ddp\" and world_size = {world}, or run it without {by}"
            );
        }
        if config.parallel.world_size != world {
            bail!(
                "{at}{name}: [parallel] world_size = {}, and {by} started {world} ranks: set world_size = {world}, or \
                 start {} ranks",
                config.parallel.world_size,
                config.parallel.world_size
            );
        }
    }
    Ok(())
}

/// How rank 0's run ended, for the other ranks.
#[derive(Debug, Serialize, Deserialize)]
struct Stop {
    ok: bool,
    message: String,
}

/// How long a rank that posted its trial waits for the others' outcomes after its own process
/// ended: theirs end within a collective's timeout of it.
const OUTCOME_WAIT: Duration = Duration::from_secs(COLLECTIVE_TIMEOUT.as_secs() + 60);
/// How long rank 0 keeps a store it serves open for the others to read `stop`.
const BYE_WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
/// The most a value of the store holds here: a TCPStore takes up to 8 MiB.
const STORE_CHUNK: usize = 4 << 20;

/// One rank's agent in a launched world: its place and the world's store.
pub struct Agent {
    launch: Launch,
    store: Store,
    /// Trials posted (rank 0) or followed (the others) so far.
    next: AtomicUsize,
    stopped: AtomicBool,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("launch", &self.launch).finish_non_exhaustive()
    }
}

impl Agent {
    /// Opens the world's store: rank 0 serves it unless the launcher's agent does (then it waits
    /// for every rank to arrive); the others connect to it.
    pub fn open(launch: Launch) -> Result<Agent> {
        let serves = launch.rank == 0 && launch.rank0_serves;
        let store = Store::tcp(&launch.host, launch.port, serves, launch.world, COLLECTIVE_TIMEOUT)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{}: meeting the other ranks", launch.describe()))?;
        Ok(Agent { launch, store, next: AtomicUsize::new(0), stopped: AtomicBool::new(false) })
    }

    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// Whether this rank runs the spec and writes the results (rank 0).
    pub fn leads(&self) -> bool {
        self.launch.rank == 0
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.store.set(&format!("oomlab/{key}"), value).map_err(|e| anyhow!("the ranks' store: {e}"))
    }

    fn check(&self, key: &str) -> Result<bool> {
        self.store.check(&format!("oomlab/{key}")).map_err(|e| {
            anyhow!(
                "the ranks' store at {}:{} is gone (rank 0 ended?): {e}",
                self.launch.host,
                self.launch.port
            )
        })
    }

    fn get<T: for<'a> Deserialize<'a>>(&self, key: &str) -> Result<T> {
        let bytes = self.store.get(&format!("oomlab/{key}")).map_err(|e| anyhow!("the ranks' store: {e}"))?;
        serde_json::from_slice(&bytes).with_context(|| format!("the ranks' store's {key} is not oomlab's"))
    }

    /// Sets `key` to `value` of any size: in chunks under `key/0`, `key/1`, ... (a TCPStore
    /// refuses a value over 8 MiB, and a long trial's phases are more), then `key` itself to
    /// their count, last, so that a reader who sees `key` finds every chunk.
    fn set_large(&self, key: &str, value: &[u8]) -> Result<()> {
        let chunks: Vec<&[u8]> =
            if value.is_empty() { vec![value] } else { value.chunks(STORE_CHUNK).collect() };
        for (i, chunk) in chunks.iter().enumerate() {
            self.set(&format!("{key}/{i}"), chunk)?;
        }
        self.set(key, chunks.len().to_string().as_bytes())
    }

    /// What [`Agent::set_large`] set at `key` (which is set).
    fn get_large<T: for<'a> Deserialize<'a>>(&self, key: &str) -> Result<T> {
        let count: usize = self.get(key)?;
        let mut bytes = Vec::new();
        for i in 0..count {
            let chunk =
                self.store.get(&format!("oomlab/{key}/{i}")).map_err(|e| anyhow!("the ranks' store: {e}"))?;
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).with_context(|| format!("the ranks' store's {key} is not oomlab's"))
    }

    /// Rank 0's side of one trial: posts `job` to the world, trains rank 0's share, and returns
    /// every rank's outcome (rank order).
    pub fn run_world(&self, exe: &Path, job: &RankJob) -> Result<Vec<RankOutcome>> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let job = RankJob {
            meet: Meet::Store {
                host: self.launch.host.clone(),
                port: self.launch.port,
                prefix: format!("oomlab/trial/{n}/"),
            },
            world_size: self.launch.world,
            ..job.clone()
        };
        self.set(&format!("job/{n}"), &serde_json::to_vec(&job)?)?;
        let mut outcomes = vec![self.run_own(exe, &job, n)?];
        let mut waiting_since = Instant::now();
        for rank in 1..self.launch.world {
            let key = format!("outcome/{n}/{rank}");
            while !self.check(&key)? {
                interrupt::check()?;
                if waiting_since.elapsed() > OUTCOME_WAIT {
                    bail!(
                        "rank {rank} of {} did not report trial {} within {} s of rank 0's end: its process or its \
                         node is gone",
                        self.launch.world,
                        job.trial,
                        OUTCOME_WAIT.as_secs()
                    );
                }
                std::thread::sleep(POLL);
            }
            outcomes.push(self.get_large(&key)?);
            waiting_since = Instant::now();
        }
        Ok(outcomes)
    }

    /// This rank's process of the `n`-th trial: started, waited for, and stopped when any rank's
    /// process of the trial failed (which it says to the others).
    fn run_own(&self, exe: &Path, job: &RankJob, n: usize) -> Result<RankOutcome> {
        let failed_key = format!("failed/{n}");
        let started = RankProcess::start(exe, job, self.launch.rank, self.launch.local_rank, &[]);
        let mut own = match started {
            Ok(p) => vec![p],
            Err(e) => {
                let _ = self.set(&failed_key, self.launch.rank.to_string().as_bytes());
                return Err(e);
            }
        };
        let mut said = false;
        // Stopped when a rank's process failed, or rank 0's run ended (an error there, or a
        // signal): the others' processes could only wait for it at the rendezvous.
        let waited = ranks::wait_all(&mut own, |failed| {
            if failed && !said {
                self.set(&failed_key, self.launch.rank.to_string().as_bytes())?;
                said = true;
            }
            Ok(failed || self.check(&failed_key)? || self.check("stop")?)
        });
        if let Err(e) = waited {
            // Interrupted: the others' processes could only wait for this one.
            let _ = self.set(&failed_key, self.launch.rank.to_string().as_bytes());
            return Err(e);
        }
        own.pop().expect("one process").outcome()
    }

    /// Rank 0's last word: how its run ended, for the other ranks to end the same way; then, on
    /// a store it serves, a moment for them to read it.
    pub fn finish(&self, result: &Result<()>) {
        if self.stopped.swap(true, Ordering::SeqCst) || !self.leads() {
            return;
        }
        let stop = match result {
            Ok(()) => Stop { ok: true, message: "done".into() },
            Err(e) => Stop { ok: false, message: format!("{e:#}") },
        };
        if self.set("stop", &serde_json::to_vec(&stop).unwrap_or_default()).is_err() {
            return;
        }
        if self.launch.rank0_serves {
            let since = Instant::now();
            for rank in 1..self.launch.world {
                while !self.check(&format!("bye/{rank}")).unwrap_or(true) && since.elapsed() < BYE_WAIT {
                    std::thread::sleep(POLL);
                }
            }
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Rank 0 ended without saying how (a panic): the others must not wait for trials.
        self.finish(&Err(anyhow!("rank 0 ended without finishing its run")));
    }
}

/// A rank other than 0: trains its share of every trial rank 0 posts, posts what it measured
/// back, and ends as rank 0's run ends.
pub fn follow(agent: &Agent, quiet: bool) -> Result<()> {
    let launch = agent.launch();
    interrupt::install()?;
    interrupt::arm();
    if !quiet {
        eprintln!(
            "oomlab: {}: rank 0 runs the spec and writes the results; this rank trains its share of each trial",
            launch.describe()
        );
    }
    let exe = std::env::current_exe().context("finding this oomlab binary to start the rank's trials")?;
    for n in 0.. {
        let job_key = format!("job/{n}");
        loop {
            interrupt::check()?;
            if agent.check(&job_key)? {
                break;
            }
            if agent.check("stop")? {
                let stop: Stop = agent.get("stop")?;
                agent.set(&format!("bye/{}", launch.rank), b"1")?;
                if stop.ok {
                    return Ok(());
                }
                bail!("rank 0's run failed, and so this rank's: {}", stop.message);
            }
            std::thread::sleep(POLL);
        }
        let job: RankJob = agent.get(&job_key)?;
        let outcome = agent.run_own(&exe, &job, n)?;
        if !quiet {
            let how = match &outcome.row {
                Some(row) => format!("{} at a peak of {} B", row.status, row.max_memory_allocated),
                None => "no report".to_string(),
            };
            eprintln!("oomlab: rank {}: trial {}: {how}", launch.rank, job.trial);
        }
        agent.set_large(&format!("outcome/{n}/{}", launch.rank), &serde_json::to_vec(&outcome)?)?;
    }
    unreachable!("the loop over trials ends by returning")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn torchruns_variables_name_the_rank_and_its_agents_store() {
        let env = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "45811"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ];
        let l = Launch::from_vars(vars(&env)).unwrap().unwrap();
        assert_eq!(
            l,
            Launch {
                by: Launcher::Torchrun,
                rank: 1,
                world: 2,
                local_rank: 1,
                host: "localhost".into(),
                port: 45811,
                rank0_serves: false
            }
        );
        let e = Launch::from_vars(vars(&env[..2])).unwrap_err().to_string();
        assert!(e.contains("without MASTER_ADDR"), "{e}");
        assert_eq!(Launch::from_vars(vars(&[("RANK", "0"), ("WORLD_SIZE", "1")])).unwrap(), None);
        assert_eq!(Launch::from_vars(vars(&[])).unwrap(), None);
        let e = Launch::from_vars(vars(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(e.contains("RANK=\"x\" is not a whole number"), "{e}");
    }

    /// A long trial's phases are more than a TCPStore value holds (8 MiB): they go in chunks,
    /// and come back whole.
    #[test]
    fn a_value_over_the_stores_8_mib_goes_in_chunks() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let launch = Launch {
            by: Launcher::Srun,
            rank: 0,
            world: 1,
            local_rank: 0,
            host: "127.0.0.1".into(),
            port,
            rank0_serves: true,
        };
        let agent = Agent::open(launch).unwrap();
        let big: Vec<u64> = (0..1_500_000).collect();
        let bytes = serde_json::to_vec(&big).unwrap();
        assert!(bytes.len() > 8 << 20, "{} bytes", bytes.len());
        agent.set_large("big", &bytes).unwrap();
        assert_eq!(agent.get::<usize>("big").unwrap(), bytes.len().div_ceil(STORE_CHUNK));
        assert_eq!(agent.get_large::<Vec<u64>>("big").unwrap(), big);
    }

    #[test]
    fn sruns_tasks_are_ranks_and_a_batch_scripts_step_is_not() {
        let env = [("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "2"), ("SLURM_JOB_ID", "12345")];
        let l = Launch::from_vars(vars(&env)).unwrap().unwrap();
        assert_eq!(
            (l.by, l.rank, l.world, l.host.as_str(), l.port, l.rank0_serves),
            (Launcher::Srun, 0, 2, "127.0.0.1", 32345, true)
        );
        // `sbatch -n 4` runs its script once, with SLURM_NTASKS=4 and no step of tasks.
        assert_eq!(Launch::from_vars(vars(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])).unwrap(), None);
        let two_nodes = [("SLURM_PROCID", "3"), ("SLURM_STEP_NUM_TASKS", "4"), ("SLURM_STEP_NUM_NODES", "2")];
        let e = Launch::from_vars(vars(&two_nodes)).unwrap_err().to_string();
        assert!(e.contains("export MASTER_ADDR="), "{e}");
    }
}
