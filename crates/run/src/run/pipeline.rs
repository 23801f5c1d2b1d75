//! From a spec to a finished results folder, as `oomlab run` and `oomlab merge` make one: the
//! device's probe opened before anything makes its allocator, the preflights, interrupts armed
//! and worded, the trials, the charts drawn from the folder, and the manifest finished (or marked
//! interrupted or failed, so that `--resume` knows what is left). The command line only parses
//! the arguments and prints the [`Finished`] run.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::plan::Plan;
use super::{check_out, mark_on_abandon, plan_probe, refuse_out, run_on, RunOptions, RunReport};
use crate::figures;
use crate::interrupt;
use crate::results::{manifest::RunStatus, ExperimentDir};
use crate::schema::Status;
use crate::spec::Spec;

/// A run whose trials and charts are on disk.
pub struct Finished {
    pub report: RunReport,
    /// The chart files drawn (none for a shard: the merge draws them).
    pub charts: Vec<PathBuf>,
}

impl Finished {
    /// An error when no trial completed for a reason other than memory (every one errored: a
    /// CSV that does not parse, a technique the dtype cannot run): the run measured nothing, and
    /// its exit status says so. Out of memory is a result, not a failure.
    pub fn check_some_trial_ran(&self) -> Result<()> {
        let (rows, dir) = (&self.report.rows, &self.report.dir);
        let first = rows.first();
        if first.is_some() && rows.iter().all(|r| r.status == Status::Error) {
            anyhow::bail!(
                "no trial completed: every trial ({}) stopped with an error, the first: {} (summary.csv in {})",
                rows.len(),
                first.map_or("", |r| r.message.as_str()),
                dir.display()
            );
        }
        Ok(())
    }
}

/// Runs the spec read from `spec_path` as `plan` resolves it, into `opts.out`; `resume` is the
/// command that continues it, printed when a signal stops it.
pub fn run_spec(spec_path: &Path, plan: &Plan, opts: &RunOptions, resume: String) -> Result<Finished> {
    interrupt::set_resume_command(resume);
    if opts.resume && !opts.out.exists() {
        anyhow::bail!(
            "--resume: nothing to resume under --out {} (no such folder); run without --resume",
            opts.out.display()
        );
    }
    refuse_out(&opts.out)?;
    // The probe first: a budget on CUDA is the caching allocator's memory fraction, which holds
    // only if it is set before anything makes the allocator, and loading a TorchScript module in
    // the preflight did (an H200 accepted 22.4 GiB under a 22.4 GiB budget).
    let probe = plan_probe(plan)?;
    crate::spec::csv_data::preflight(&plan.spec)?;
    crate::train::preflight::preflight(&plan.spec)?;
    if !opts.quiet {
        for (variant, p) in plan.slow_here(crate::device::CpuCaps::here()) {
            let which = variant.map_or("the spec".to_string(), |v| format!("variant {v}"));
            note!(
                "note: {which} runs in {} on a CPU without {} matrix instructions ({}): libtorch converts around \
                 every kernel, tens of times fp32's time a step (`oomlab estimate` gives its memory in seconds; \
                 skip_on_cpu_without = \"{}\" on a variant leaves it out on such CPUs)",
                p.key(),
                p.key(),
                p.instructions(),
                p.key()
            );
        }
    }
    interrupt::install()?;
    interrupt::arm();
    // Made now, and removed again if the run is refused before it writes anything there.
    let _out = check_out(&opts.out)?;
    let mut report =
        run_on(plan, opts, &*probe).with_context(|| format!("running {}", spec_path.display()))?;
    // While the charts are drawn a signal stops them between two (every trial is kept), and a
    // second marks the folder interrupted before the process exits, as during the trials.
    interrupt::set_wording(
        "stopping after the chart under way (every trial is kept); Ctrl-C again to stop at once".into(),
        format!(
            "after the chart under way: every trial is in {}, and `--resume` draws the charts",
            report.dir.display()
        ),
    );
    mark_on_abandon(&report.dir);
    let drawing = Instant::now();
    // A shard's charts would show a slice: the merge draws them.
    let charts = if opts.shard.is_some() { Ok(Vec::new()) } else { charts(&report, plan.spec_budget) };
    let charts = match charts {
        Ok(charts) => charts,
        Err(e) if e.is::<interrupt::Interrupted>() => {
            // Stopped between two charts: every trial is on disk; `--resume` draws the charts.
            report.manifest.status = RunStatus::Interrupted;
            report.manifest.write(&report.dir)?;
            return Err(e);
        }
        Err(e) => {
            // The measurements are whole, the folder is not: `--resume` draws the charts again.
            report.manifest.status = RunStatus::Failed(format!("drawing the charts: {e:#}"));
            report.manifest.write(&report.dir)?;
            return Err(e.context(format!(
                "the trials are in {}, but not its charts; once that is mended, `oomlab run {} --resume` draws \
                 them",
                report.dir.display(),
                spec_path.display()
            )));
        }
    };
    interrupt::clear_abandon();
    report.charts_drawn(drawing.elapsed().as_secs_f64())?;
    Ok(Finished { report, charts })
}

/// Puts a sharded run in `dir` together (`cluster::merge`) and draws its charts; returns the
/// spec it ran, and the run.
pub fn merge(dir: &Path, force: bool) -> Result<(Spec, Finished)> {
    let (spec, mut report) =
        crate::cluster::merge::merge(dir, force).with_context(|| format!("merging {}", dir.display()))?;
    let drawing = Instant::now();
    let cuda = report.manifest.device.is_cuda();
    let charts = charts(&report, spec.run.budget_on(cuda))?;
    // Not `charts_drawn`: the total is the shards' summed time, not this process's.
    if let Some(t) = &mut report.manifest.timings {
        t.charts = Some(drawing.elapsed().as_secs_f64());
    }
    report.manifest.write(&report.dir)?;
    Ok((spec, Finished { report, charts }))
}

/// Draws the run's charts into its results folder, as `oomlab plot` would; returns the files
/// written. `spec_budget`: the spec's own budget for the device (the plan's), named on the
/// charts beside a `--budget` that replaced it.
fn charts(report: &RunReport, spec_budget: Option<u64>) -> Result<Vec<PathBuf>> {
    figures::draw_charts(&ExperimentDir::read(&report.dir)?, &[], spec_budget)
}
