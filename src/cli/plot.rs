//! `oomlab plot`: an experiment folder's charts and `trace.json`, redrawn from its results.
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::figures;

#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// An experiment's results folder, e.g. results/cpu-amd-epyc/depth_sweep.
    pub dir: PathBuf,
    /// Also draw this trial's memory timeline (the trial number in summary.csv); repeatable.
    #[arg(long = "trial", value_name = "N")]
    pub trials: Vec<usize>,
}

pub fn run(args: PlotArgs) -> Result<()> {
    let done =
        figures::plot(&args.dir, &args.trials).with_context(|| format!("plotting {}", args.dir.display()))?;
    if done.cut_row {
        note!(
            "note: the CSVs end in part of a trial (the run was killed while writing it); drawn without it"
        );
    }
    for c in &done.charts {
        say!("chart: {}", c.display());
    }
    say!("trace: {}  (open in https://ui.perfetto.dev)", done.trace_json.display());
    Ok(())
}
