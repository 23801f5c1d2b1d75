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
        for dir in experiments {
            plot_one(&dir, &[])?;
        }
        return Ok(());
    }
    plot_one(&args.dir, &args.trials)
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
