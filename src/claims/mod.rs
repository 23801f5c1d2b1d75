//! The claims report: every claim of the lesson and its guides (`../shared/seeds/README.md`),
//! the experiment that tests it, the number measured, and a verdict, written to `CLAIMS.md` in a
//! device's results folder. It reads results only: run the experiments first.
pub mod band;
pub mod fit;
mod suite;
mod verdicts;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::results::ExperimentDir;

/// How a measurement stands against a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Confirmed,
    Partly,
    Refuted,
    /// The device cannot show it (e.g. no cache on CPU).
    NotTestable,
    /// The experiment has no results in this folder.
    NotRun,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Confirmed => "confirmed",
            Verdict::Partly => "partly",
            Verdict::Refuted => "refuted",
            Verdict::NotTestable => "not testable here",
            Verdict::NotRun => "not run",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Claim {
    pub claim: &'static str,
    pub experiment: &'static str,
    /// The number(s) measured, short.
    pub measured: String,
    pub verdict: Verdict,
    /// One sentence: why the verdict.
    pub why: String,
}

/// Every experiment the claims read, by folder name.
pub const EXPERIMENTS: [&str; 20] = [
    "whole_dataset_batch",
    "depth_sweep",
    "batch_size_sweep",
    "width_sweep",
    "optimizers",
    "amp",
    "amp_models",
    "checkpointing",
    "accumulation",
    "inference_vs_training",
    "leak",
    "find_batch",
    "find_batch_halving",
    "memory_breakdown",
    "smaller_models",
    "smaller_models_batch",
    "depthwise_separable",
    "answer004",
    "checkpoint_example",
    "resnet_checkpointing",
];

/// Reads a device's results folder and judges every claim.
pub fn judge(dir: &Path) -> Result<Vec<Claim>> {
    Ok(judge_found(&read_all(dir)?))
}

/// The experiments of [`EXPERIMENTS`] that have results in `dir`, in that order.
fn read_all(dir: &Path) -> Result<Vec<(&'static str, ExperimentDir)>> {
    if !dir.is_dir() {
        bail!("{} is not a results folder; give results/<device>", dir.display());
    }
    let mut found = Vec::new();
    for name in EXPERIMENTS {
        if let Some(e) =
            ExperimentDir::read_if_run(&dir.join(name)).with_context(|| format!("reading {name}"))?
        {
            found.push((name, e));
        }
    }
    if found.is_empty() {
        bail!("{} holds none of the experiments ({}); run them first", dir.display(), EXPERIMENTS.join(", "));
    }
    Ok(found)
}

fn judge_found(found: &[(&'static str, ExperimentDir)]) -> Vec<Claim> {
    let get = |name: &str| found.iter().find(|(n, _)| *n == name).map(|(_, e)| e);
    let mut claims = verdicts::all(&get);
    // A sweep killed or interrupted half-way can look like an answer: say so on every claim
    // judged from one.
    for c in &mut claims {
        if let Some(e) = get(c.experiment).filter(|e| !e.manifest.status.is_complete()) {
            c.why += &format!(
                " **From an incomplete run** ({}, {} trials written): the verdict may change when it \
                 completes (`oomlab run --resume`).",
                e.manifest.status.to_string().lines().next().unwrap_or_default(),
                e.rows.len()
            );
        }
    }
    claims
}

/// The Markdown report.
pub fn markdown(dir: &Path, claims: &[Claim]) -> String {
    let mut s = String::new();
    let device = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let _ = writeln!(s, "# Claims measured on `{device}`\n");
    let _ = writeln!(
        s,
        "Made by `oomlab claims {}` from the results in this folder (each experiment's \
         `manifest.json` names the machine, versions and git revision that ran it). Every number \
         below comes from those CSVs.\n",
        dir.display()
    );
    let _ = writeln!(s, "| claim | experiment | measured | verdict |\n| --- | --- | --- | --- |");
    for c in claims {
        let _ =
            writeln!(s, "| {} | `{}` | {} | **{}** |", c.claim, c.experiment, c.measured, c.verdict.word());
    }
    let _ = writeln!(s, "\n## Why\n");
    for c in claims {
        let _ = writeln!(s, "- **{}** ({}): {}", c.claim, c.verdict.word(), c.why);
    }
    s
}

/// Writes `CLAIMS.md` into `dir` and returns its path.
pub fn write(dir: &Path) -> Result<std::path::PathBuf> {
    let found = read_all(dir)?;
    let claims = judge_found(&found);
    let refs: Vec<(&str, &ExperimentDir)> = found.iter().map(|(n, e)| (*n, e)).collect();
    let text = markdown(dir, &claims) + &suite::section(&refs);
    let path = dir.join("CLAIMS.md");
    crate::results::fsio::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}
