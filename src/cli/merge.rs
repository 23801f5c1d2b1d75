//! `oomlab merge DIR`: a sharded run put together (`cluster::merge`), its charts drawn and its
//! answer printed as `run` prints one; and what a shard says when it is done.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::report;
use crate::cluster::merge;
use crate::run::shard::Shard;
use crate::run::RunReport;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The experiment folder the shards ran into, holding shards/I-of-N/, e.g.
    /// results/cpu-amd-epyc/batch_size_sweep.
    pub dir: PathBuf,
    /// Replace a merge (or a whole run's results) already in DIR; the shards stay.
    #[arg(long)]
    pub force: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: MergeArgs) -> Result<()> {
    let (spec, mut report) =
        merge::merge(&args.dir, args.force).with_context(|| format!("merging {}", args.dir.display()))?;
    let drawing = Instant::now();
    let cuda = report.manifest.device.is_cuda();
    let charts = report::charts(&report, spec.run.budget_on(cuda))?;
    // Not `charts_drawn`: the total is the shards' summed time, not this process's.
    if let Some(t) = &mut report.manifest.timings {
        t.charts = Some(drawing.elapsed().as_secs_f64());
    }
    report.manifest.write(&report.dir)?;
    if !args.quiet {
        let n = report.manifest.shards.len();
        say!("merged {n} shards into {}:", report.dir.display());
        for s in &report.manifest.shards {
            let job = s.slurm_job.as_ref().map(|j| format!(", Slurm job {j}")).unwrap_or_default();
            let took = s.seconds.map(|t| format!(", {t:.1} s")).unwrap_or_default();
            say!(
                "  shard {:<6} {} trials on {} ({}, {}){job}{took}",
                s.shard,
                s.trials,
                s.host,
                s.device,
                s.resolved
            );
        }
        report::print(&spec, &report, &charts);
    }
    report::check_some_trial_ran(&report)
}

/// After a shard's run: whether it had anything to run, and the merge to run when all are done.
pub fn shard_done(shard: Shard, report: &RunReport) {
    if let Some(info) = report.manifest.shard.as_ref().filter(|i| i.units.is_empty()) {
        say!(
            "  shard {shard} had nothing to run: the spec has {} independent units (a list value per variant, \
             or a variant's whole sweep) for {} shards",
            info.of_units,
            shard.count
        );
    }
    // .../<experiment>/shards/I-of-N
    let experiment = report.dir.parent().and_then(Path::parent).unwrap_or(&report.dir);
    say!("  when all {} shards are done: oomlab merge {}", shard.count, experiment.display());
}
