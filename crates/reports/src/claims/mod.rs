//! The claims report: every claim of the lesson and its guides (`../shared/seeds/README.md`),
//! the experiment that tests it, the number measured, and a verdict, written to `CLAIMS.md` in a
//! device's results folder. It reads results only: run the experiments first.
pub mod band;
pub mod conditions;
pub mod fit;
mod suite;
mod verdicts;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::results::ExperimentDir;
use conditions::Conditions;

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
    /// The run was made under other conditions than the claim states (another budget, another
    /// size): what it found is said, not judged.
    NotJudged,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Confirmed => "confirmed",
            Verdict::Partly => "partly",
            Verdict::Refuted => "refuted",
            Verdict::NotTestable => "not testable here",
            Verdict::NotRun => "not run",
            Verdict::NotJudged => "not judged here",
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
    /// The budget and sizes the claim is about ([`Conditions::ANY`] for most).
    pub conditions: Conditions,
    /// The runs the verdict read, each cited: folder, revision, device, budget.
    pub runs: Vec<String>,
}

impl Claim {
    /// The claim, stating `conditions`.
    pub fn under(self, conditions: Conditions) -> Claim {
        Claim { conditions, ..self }
    }
}

/// Every experiment the claims read, by folder name.
pub const EXPERIMENTS: [&str; 22] = [
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
    "own_model",
    "ddp",
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
    if dir.join(crate::results::MANIFEST).is_file() {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".."));
        bail!(
            "{} is one experiment's folder; claims judges a device's: give the folder above it ({})",
            dir.display(),
            parent.display()
        );
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
    // The claims compare experiments with one another (the optimizers' bytes against the depth
    // sweep's): all must be one device's.
    let device = |e: &ExperimentDir| e.manifest.device.name.clone();
    let (first, one) = (&found[0], device(&found[0].1));
    if let Some((name, e)) = found.iter().find(|(_, e)| device(e) != one) {
        bail!(
            "{} mixes devices: {} ran on {one}, {name} on {}; claims judges one device's results: give each \
             device's folder on its own (`oomlab compare` sets devices side by side)",
            dir.display(),
            first.0,
            device(e)
        );
    }
    Ok(found)
}

fn judge_found(found: &[(&'static str, ExperimentDir)]) -> Vec<Claim> {
    let get = |name: &str| found.iter().find(|(n, _)| *n == name).map(|(_, e)| e);
    let mut claims = Vec::new();
    // Per claim, the runs it read that did not finish.
    let mut incomplete: Vec<Vec<String>> = Vec::new();
    for judge in verdicts::ALL {
        // What the verdict reads is what it cites.
        let read = std::cell::RefCell::new(Vec::<&ExperimentDir>::new());
        let recording = |name: &str| {
            let e = get(name);
            if let Some(e) = e.filter(|e| !read.borrow().iter().any(|r| std::ptr::eq(*r, *e))) {
                read.borrow_mut().push(e);
            }
            e
        };
        let mut c = judge(&recording);
        let read = read.into_inner();
        c.runs = read.iter().map(|e| cite(e)).collect();
        // Every run it read, not only its own experiment's, may be one that did not finish.
        incomplete.push(read.iter().filter_map(|e| unfinished(e)).collect());
        claims.push(c);
    }
    for c in &mut claims {
        let judged = !matches!(c.verdict, Verdict::NotRun | Verdict::NotTestable);
        if let (true, Some(why)) = (judged, get(c.experiment).and_then(|e| c.conditions.unmet(e))) {
            c.verdict = Verdict::NotJudged;
            c.why = format!(
                "not judged here: {why}. The measured column says what this run found; run the experiment \
                 as written (`oomlab run experiments/{}.toml`) to judge the claim.",
                c.experiment
            );
        }
    }
    // A sweep killed or interrupted half-way can look like an answer: say so on every claim
    // judged from one.
    for (c, runs) in claims.iter_mut().zip(&mut incomplete) {
        // Its own experiment too, where the verdict did not read it.
        if let Some(own) = get(c.experiment).and_then(unfinished).filter(|own| !runs.contains(own)) {
            runs.insert(0, own);
        }
        if !runs.is_empty() {
            c.why += &format!(
                " **From an incomplete run**: {}; the verdict may change when it completes (`oomlab run --resume`).",
                runs.join(", ")
            );
        }
    }
    claims
}

/// "`depth_sweep` (interrupted, 3 trials written)" for a run that did not finish.
fn unfinished(e: &ExperimentDir) -> Option<String> {
    let m = &e.manifest;
    let status = m.status.to_string();
    (!m.status.is_complete()).then(|| {
        format!(
            "`{}` ({}, {} trials written)",
            m.experiment,
            status.lines().next().unwrap_or_default(),
            e.rows.len()
        )
    })
}

/// A run, cited: "`depth_sweep` (git 05f21b8c5a, AMD EPYC as cpu, budget 15.90 GiB)".
fn cite(e: &ExperimentDir) -> String {
    let m = &e.manifest;
    let revision = m.git.revision.as_deref().map_or("no git revision".to_string(), |r| {
        format!(
            "git {}{}",
            &r[..r.len().min(10)],
            if m.git.dirty == Some(true) { ", changed tree" } else { "" }
        )
    });
    let budget = m
        .device
        .budget_bytes
        .map_or("no budget".to_string(), |b| format!("budget {}", crate::spec::format_size(b)));
    format!("`{}` ({revision}, {} as {}, {budget})", m.experiment, m.device.name, m.device.resolved)
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
        // As a path's components: `results/nvidia-h200/` and `results/nvidia-h200` write the
        // same file (`scripts/gpu-session` passes the first, the replot test the second).
        dir.components().collect::<std::path::PathBuf>().display()
    );
    let rows = claims.iter().map(|c| {
        [
            crate::markdown::cell(c.claim),
            format!("`{}`", c.experiment),
            crate::markdown::cell(&c.measured),
            format!("**{}**", c.verdict.word()),
        ]
    });
    let _ = writeln!(s, "{}", crate::markdown::table(["claim", "experiment", "measured", "verdict"], rows));
    let _ = writeln!(s, "\n## Why\n");
    for c in claims {
        let about = c.conditions.describe().map(|d| format!(" The claim is about {d}.")).unwrap_or_default();
        let from = if c.runs.is_empty() { String::new() } else { format!(" From {}.", c.runs.join(" and ")) };
        let _ = writeln!(s, "- **{}** ({}): {}{about}{from}", c.claim, c.verdict.word(), c.why);
    }
    s
}

/// Writes `CLAIMS.md` into `dir` and returns its path.
pub fn write(dir: &Path) -> Result<std::path::PathBuf> {
    let found = read_all(dir)?;
    let claims = judge_found(&found);
    let refs: Vec<(&str, &ExperimentDir)> = found.iter().map(|(n, e)| (*n, e)).collect();
    let text = markdown(dir, &claims) + &suite::section(&refs, EXPERIMENTS.len());
    let path = dir.join("CLAIMS.md");
    crate::fsio::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder named with or without its trailing slash writes the same report.
    #[test]
    fn the_report_names_its_folder_the_same_with_a_trailing_slash() {
        let with = markdown(Path::new("results/nvidia-h200/"), &[]);
        assert!(with.contains("Made by `oomlab claims results/nvidia-h200` from"), "{with}");
        assert_eq!(with, markdown(Path::new("results/nvidia-h200"), &[]));
    }
}
