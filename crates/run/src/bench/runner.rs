//! Launching the contenders: a fresh process for each, round after round, the order rotated
//! each round, every configuration in every round, so that a slow minute of the machine (another
//! process, thermal throttling) falls on all contenders rather than on one.
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use wait_timeout::ChildExt as _;

use super::configs::{BenchConfig, Plan};
use super::protocol::{Report, Request};
use super::Contender;

/// How to start each side's worker.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The oomlab binary (this one).
    pub oomlab: PathBuf,
    /// The Python with torch (its PYTHONPATH is inherited).
    pub python: PathBuf,
    /// `scripts/reference/bench_loop.py`.
    pub loop_script: PathBuf,
    /// "cpu" or "cuda:N".
    pub device: String,
    pub threads: i32,
    /// The longest a worker may take before it is killed and the bench stops (a hung worker
    /// would otherwise hang the bench).
    pub timeout: std::time::Duration,
}

/// A worker's limit: the lesson's 8 x 5000 on a 2-core CPU takes about 15 s a process.
pub const WORKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// One process's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub config: String,
    pub contender: Contender,
    /// From 1.
    pub round: usize,
    pub report: Report,
}

impl Launcher {
    pub fn request(&self, c: &BenchConfig) -> Result<Request> {
        Ok(Request {
            spec: c.spec.clone(),
            config: serde_json::to_value(&c.config)?,
            device: self.device.clone(),
            warmup: c.warmup,
            steps: c.steps,
            threads: self.threads,
        })
    }

    fn command(&self, contender: Contender) -> Command {
        match (contender.level(), contender.python_mode()) {
            (Some(level), _) => {
                let mut cmd = Command::new(&self.oomlab);
                cmd.args(["bench-worker", "--level", level.as_str()]);
                cmd
            }
            (None, mode) => {
                let mut cmd = Command::new(&self.python);
                cmd.arg(&self.loop_script).args(["--mode", mode.unwrap_or("default")]);
                cmd
            }
        }
    }

    /// Runs one contender on one configuration in a process of its own.
    pub fn run(&self, contender: Contender, c: &BenchConfig) -> Result<Report> {
        let request = self.request(c)?;
        let what = format!("{contender} on {}", c.name);
        let stdout = self.spawn(self.command(contender), &serde_json::to_vec(&request)?, &what)?;
        Report::from_stdout(&stdout, c.steps).with_context(|| what.clone())
    }

    /// The device's name, as an oomlab worker opens it ("CPU (AMD EPYC)").
    pub fn device_name(&self) -> Result<String> {
        let mut cmd = Command::new(&self.oomlab);
        cmd.args(["bench-worker", "--describe", "--device", &self.device]);
        let out = self.spawn(cmd, b"", "naming the device")?;
        Ok(out.trim().to_string())
    }

    fn spawn(&self, mut cmd: Command, stdin: &[u8], what: &str) -> Result<String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {:?} for {what}", cmd.get_program()))?;
        // A worker that dies before reading its request closes the pipe: its stderr says why.
        let _ = child.stdin.take().map(|mut s| s.write_all(stdin));
        // Read both pipes while waiting, so that a chatty worker never blocks on a full pipe.
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let status = match child.wait_timeout(self.timeout).with_context(|| format!("waiting for {what}"))? {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{what} took more than {} s and was stopped; a worker that hangs would hang the bench \
                     (is the device busy, or the configuration too large for it?)",
                    self.timeout.as_secs()
                );
            }
        };
        let out = std::process::Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        };
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("{what} failed ({}):\n{}", out.status, tail.join("\n"));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The contenders in the order round `round` (from 0) runs them: rotated by a stride that gives
/// each contender a different place in each of the first `rounds` rounds.
pub fn order(contenders: &[Contender], round: usize, rounds: usize) -> Vec<Contender> {
    let n = contenders.len();
    if n == 0 {
        return Vec::new();
    }
    let stride = (n / rounds.max(1)).max(1);
    let shift = (round * stride) % n;
    contenders[shift..].iter().chain(&contenders[..shift]).copied().collect()
}

/// Runs every round, telling `progress` what starts ("round 2/3  8x5000  pytorch") and what it
/// measured, and handing `save` every sample so far after each one: a bench stopped half way
/// keeps what it measured.
pub fn run_rounds(
    plan: &Plan,
    launcher: &Launcher,
    progress: &mut dyn FnMut(&str),
    save: &mut dyn FnMut(&[Sample]) -> Result<()>,
) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for round in 0..plan.rounds {
        for c in &plan.configs {
            for contender in order(&plan.contenders, round, plan.rounds) {
                crate::interrupt::check()?;
                let label =
                    format!("round {}/{}  {:<14} {:<14}", round + 1, plan.rounds, c.name, contender.as_str());
                let started = std::time::Instant::now();
                // Ctrl-C in a terminal reaches the worker too: its death is the signal's.
                let report = launcher.run(contender, c).map_err(|e| match crate::interrupt::requested() {
                    Some(stop) => anyhow::Error::new(stop),
                    None => e,
                })?;
                let median = super::stats::median(&report.step_seconds);
                progress(&format!(
                    "{label} median {} a step ({:.1} s in all)",
                    super::format_seconds(median),
                    started.elapsed().as_secs_f64()
                ));
                samples.push(Sample { config: c.name.clone(), contender, round: round + 1, report });
                save(&samples)?;
            }
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_puts_each_contender_elsewhere() {
        let all = Contender::ALL.to_vec();
        let rounds: Vec<Vec<Contender>> = (0..3).map(|r| order(&all, r, 3)).collect();
        assert_eq!(rounds[0], all);
        for c in &all {
            let places: Vec<usize> = rounds.iter().map(|o| o.iter().position(|x| x == c).unwrap()).collect();
            assert!(
                places[0] != places[1] && places[1] != places[2] && places[0] != places[2],
                "{c}: {places:?}"
            );
        }
        for o in &rounds {
            let mut sorted = o.clone();
            sorted.sort();
            let mut want = all.clone();
            want.sort();
            assert_eq!(sorted, want, "every contender once a round");
        }
        assert_eq!(order(&all[..2], 1, 2), [all[1], all[0]]);
        assert!(order(&[], 3, 3).is_empty());
    }

    #[test]
    fn a_failing_worker_says_why() {
        let l = Launcher {
            oomlab: "/bin/sh".into(),
            python: "/bin/sh".into(),
            loop_script: "-c".into(),
            device: "cpu".into(),
            threads: 1,
            timeout: std::time::Duration::from_secs(2),
        };
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo 'no torch here' >&2; exit 3"]);
        let err = l.spawn(cmd, b"{}", "pytorch on 3x256").unwrap_err().to_string();
        assert!(err.contains("pytorch on 3x256 failed") && err.contains("no torch here"), "{err}");
        // One that hangs is stopped at the limit, and says so.
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "sleep 30"]);
        let started = std::time::Instant::now();
        let err = l.spawn(cmd, b"{}", "oomlab-off on 3x256").unwrap_err().to_string();
        assert!(err.contains("took more than 2 s and was stopped"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "not stopped at its limit");
    }
}
