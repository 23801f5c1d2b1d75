//! The worker protocol, the same for both sides: the bench writes one [`Request`] as JSON to a
//! worker's stdin; the worker trains `warmup + steps` steps of the configuration in one trial
//! and prints one JSON line, a [`Report`], as the last line of its stdout (anything else it
//! prints goes to stderr). The worker's exit status says whether it succeeded.
//!
//! oomlab's worker is `oomlab bench-worker --level LEVEL`; PyTorch's is
//! `python3 scripts/reference/bench_loop.py --mode default|sync`.
use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// What a worker is asked to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The configuration's spec (TOML): oomlab's worker parses it.
    pub spec: String,
    /// The same configuration validated, as oomlab serialises a `spec::Config` (what
    /// manifest.json holds): the Python worker reads it with `scripts/reference/train.py`.
    pub config: serde_json::Value,
    /// "cpu" or "cuda:N".
    pub device: String,
    pub warmup: usize,
    pub steps: usize,
    /// Intra-op threads, the same on both sides.
    pub threads: i32,
}

/// What a worker measured, as its last line of stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The timed steps' seconds, in order: the host's clock between step ends, the device waited
    /// for at each (the warm-up steps left out).
    pub step_seconds: Vec<f64>,
    /// Per phase name ("forward", ...), each timed step's seconds in it, summed over
    /// micro-batches; empty for contenders that do not time phases.
    #[serde(default)]
    pub phase_seconds: BTreeMap<String, Vec<f64>>,
    /// Parameters of the model trained: both sides must agree.
    pub param_count: u64,
    /// The loss of the last step.
    pub final_loss: Option<f64>,
    /// Intra-op threads the worker ran with.
    pub threads: i32,
    /// The torch the worker ran: libtorch's version for oomlab, `torch.__version__` for Python.
    pub torch: String,
    /// Python's version; empty for oomlab.
    #[serde(default)]
    pub python: String,
    /// The device as the worker named it ("CPU (AMD EPYC)", "NVIDIA H100 80GB HBM3").
    #[serde(default)]
    pub device_name: String,
}

impl Report {
    /// The report in a worker's stdout: its last non-empty line, which must be one JSON object
    /// with as many step times as were asked for.
    pub fn from_stdout(stdout: &str, expected_steps: usize) -> Result<Report> {
        let Some(line) = stdout.lines().rev().find(|l| !l.trim().is_empty()) else {
            bail!("the worker printed nothing on stdout (expected one JSON line)");
        };
        let report: Report = serde_json::from_str(line.trim())
            .with_context(|| format!("the worker's last line is not its JSON report: {}", clip(line)))?;
        report.check(expected_steps)?;
        Ok(report)
    }

    fn check(&self, expected_steps: usize) -> Result<()> {
        if self.step_seconds.len() != expected_steps {
            bail!("the worker timed {} steps, {} were asked for", self.step_seconds.len(), expected_steps);
        }
        if let Some(bad) = self.step_seconds.iter().find(|s| !s.is_finite() || **s <= 0.0) {
            bail!("the worker reported a step of {bad} s");
        }
        for (phase, secs) in &self.phase_seconds {
            if secs.len() != expected_steps || secs.iter().any(|s| !s.is_finite() || *s < 0.0) {
                bail!("the worker's {phase} times are not one non-negative number per timed step");
            }
        }
        Ok(())
    }
}

/// At most 200 characters of a line, for an error message.
fn clip(line: &str) -> String {
    let mut s: String = line.chars().take(200).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(steps: &[f64]) -> String {
        let r = Report {
            step_seconds: steps.to_vec(),
            phase_seconds: BTreeMap::from([("forward".to_string(), vec![0.5; steps.len()])]),
            param_count: 10,
            final_loss: Some(0.69),
            threads: 2,
            torch: "2.11.0".into(),
            python: String::new(),
            device_name: "CPU".into(),
        };
        serde_json::to_string(&r).unwrap()
    }

    #[test]
    fn the_report_is_the_last_line() {
        let out = format!("a warning\n{}\n\n", line(&[1.0, 2.0]));
        let r = Report::from_stdout(&out, 2).unwrap();
        assert_eq!(r.step_seconds, [1.0, 2.0]);
        assert_eq!(r.phase_seconds["forward"], [0.5, 0.5]);
    }

    #[test]
    fn a_wrong_report_is_refused() {
        let err = |out: &str, n| Report::from_stdout(out, n).unwrap_err().to_string();
        assert!(err("", 1).contains("printed nothing"));
        assert!(err("Traceback: boom", 1).contains("not its JSON report: Traceback: boom"));
        assert!(err(&line(&[1.0]), 2).contains("timed 1 steps, 2 were asked for"));
        assert!(err(&line(&[1.0, 0.0]), 2).contains("a step of 0 s"));
        let mut r: Report = serde_json::from_str(&line(&[1.0, 1.0])).unwrap();
        r.phase_seconds.insert("backward".into(), vec![1.0]);
        assert!(err(&serde_json::to_string(&r).unwrap(), 2).contains("backward times"));
    }
}
