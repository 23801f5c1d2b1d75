//! `oomlab merge DIR`: a sharded run put together and its charts drawn (`run::pipeline::merge`),
//! its answer printed as `run` prints one; and what a shard says when it is done.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::report;
use crate::run::pipeline;
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
    let (spec, done) = pipeline::merge(&args.dir, args.force)?;
    let report = &done.report;
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
        report::print(&spec, report, &done.charts);
    }
    done.check_some_trial_ran()
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
