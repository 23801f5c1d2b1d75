//! `oomlab plot`: an experiment folder's charts and `trace.json`, redrawn from its results.
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::figures;

#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// An experiment's results folder, e.g. results/cpu-amd-epyc/depth_sweep, or a device's
    /// (results/cpu-amd-epyc) for each experiment in it.
    pub dir: PathBuf,
    /// Also draw this trial's memory timeline (the trial number in summary.csv); repeatable.
    #[arg(long = "trial", value_name = "N")]
    pub trials: Vec<usize>,
}

pub fn run(args: PlotArgs) -> Result<()> {
    // A device's folder (results/<device>): each experiment in it.
    let experiments = experiments_in(&args.dir);
    if !args.dir.join(crate::results::MANIFEST).exists() && !experiments.is_empty() {
        if !args.trials.is_empty() {
            anyhow::bail!(
                "--trial picks a trial of one experiment; {} holds {}: give one of them",
                args.dir.display(),
                crate::units::count(experiments.len(), "experiment")
            );
        }
        // One damaged experiment does not keep the others from being drawn; the command fails
        // at the end, naming each it could not draw.
        let mut failed = Vec::new();
        for dir in experiments {
            if let Err(e) = plot_one(&dir, &[]) {
                note!("warning: {e:#}");
                failed.push(dir.display().to_string());
            }
        }
        for dir in unplottable(&args.dir) {
            note!("warning: {} has results but no manifest.json: not drawn", dir.display());
        }
        if !failed.is_empty() {
            anyhow::bail!(
                "{} not drawn: {}",
                crate::units::count(failed.len(), "experiment"),
                failed.join(", ")
            );
        }
        return Ok(());
    }
    plot_one(&args.dir, &args.trials)
}

/// Folders directly in `dir` with a run's CSVs and no manifest, which cannot be drawn.
fn unplottable(dir: &std::path::Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(crate::results::SUMMARY).is_file() && !p.join(crate::results::MANIFEST).exists())
        .collect();
    found.sort();
    found
}

fn plot_one(dir: &std::path::Path, trials: &[usize]) -> Result<()> {
    let done = figures::plot(dir, trials).with_context(|| format!("plotting {}", dir.display()))?;
    if done.cut_row {
        note!(
            "note: the CSVs end in part of a trial (the run was killed while writing it); drawn without it"
        );
    }
    for line in super::report::chart_lines(dir, &done.charts) {
        say!("{line}");
    }
    say!("trace: {}  (open in https://ui.perfetto.dev)", done.trace_json.display());
    Ok(())
}

/// The experiment folders directly in `dir` (those with a manifest), sorted.
fn experiments_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.join(crate::results::MANIFEST).is_file()).collect();
    found.sort();
    found
}
