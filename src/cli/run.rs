//! `oomlab run`: its arguments, the command that resumes it, and the pipeline from a spec to
//! its folder of results and charts.
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{merge, report, DeviceBudget};
use crate::results::RunStatus;
use crate::run::plan::Plan;
use crate::run::shard::Shard;
use crate::run::{self as runner, RunOptions};
use crate::schema::TraceLevel;
use crate::spec;

pub(super) const RUN_EXAMPLES: &str = "\
Examples:
  oomlab run experiments/depth_sweep.toml
      The lesson's challenge: how deep can a 5000-wide MLP get at batch 32 in 15.90 GiB? (On a
      CPU the budget caps host memory: it needs about 16 GiB free.)
  oomlab run experiments/depth_sweep.toml --budget 2GiB
      The same question under 2 GiB: about 20 seconds and 2.5 GB of memory on a laptop.
  oomlab run experiments/depth_sweep.toml --device cpu --out /tmp/r --force
      On the CPU, into /tmp/r, replacing what an earlier run wrote there (and nothing else).
  oomlab run experiments/depth_sweep.toml --resume
      Continue a run stopped by Ctrl-C or a crash from its completed trials.
  oomlab run experiments/batch_size_sweep.toml --shard 2/4
      The second of 4 shards of the trials, for `oomlab merge` to put together.

Results go to <out>/<device>/<experiment>/ (out: runs unless --out): manifest.json, trace.csv
(memory per trial, step and phase), summary.csv (one row per trial) and charts. Ctrl-C stops
after the phase under way; a second Ctrl-C abandons the trial at once. Either way the
--resume command is printed.";

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The experiment spec (TOML), e.g. experiments/depth_sweep.toml.
    pub spec: PathBuf,
    #[command(flatten)]
    pub target: DeviceBudget,
    /// Results root; the run writes to OUT/<device>/<experiment>/.
    #[arg(long, default_value = crate::results::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Replace results already in the experiment's folder.
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Continue a killed or interrupted run in the experiment's folder from its completed
    /// trials (same spec text, device and budget; a search picks up where its bracket was).
    #[arg(long)]
    pub resume: bool,
    /// Print nothing but errors: no progress bar, trial lines or summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// How much each trial measures, from most to least. The memory numbers are the same at
    /// every level that records them; only durations and the cost of measuring differ
    /// (`scripts/bench` measures that cost). The manifest records the level.
    #[arg(long, value_enum, default_value_t = TraceLevel::Phases)]
    pub trace: TraceLevel,
    /// Run only the I-th of N shards of the spec's trials (e.g. 2/4) into
    /// OUT/<device>/<experiment>/shards/I-of-N/, for `oomlab merge` to put together (`oomlab
    /// slurm` runs them as a job array). Each value of a list sweep, per variant, is a trial of
    /// its own, dealt round-robin; a search, halving, a list with on_oom = "stop" (whose trials
    /// depend on each other) or a spec without a sweep goes whole to one shard per variant; a
    /// spec with run.rounds is refused (run it whole). A shard left with nothing writes a
    /// manifest saying so. --resume continues a shard.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
}

/// The command that continues this run where a signal stops it: the same spec, folder and
/// overrides, with `--resume`.
fn resume_command(args: &RunArgs) -> String {
    crate::results::manifest::ResumeCommand {
        program: &crate::shell::program(),
        spec: &args.spec,
        out: &args.out,
        device: args.target.device.map(|d| d.to_string()),
        budget: args.target.budget,
        trace: args.trace,
        shard: args.shard.map(|s| (s.index, s.count)),
    }
    .to_string()
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    s.parse()
}

/// Runs a spec: the plan resolved once, the trials, then the charts from the same plan.
pub(super) fn run(args: RunArgs) -> Result<()> {
    let plan = Plan::here(spec::load(&args.spec)?, args.target.overrides());
    crate::interrupt::set_resume_command(resume_command(&args));
    if args.resume && !args.out.exists() {
        anyhow::bail!(
            "--resume: nothing to resume under --out {} (no such folder); run without --resume",
            args.out.display()
        );
    }
    runner::refuse_out(&args.out)?;
    // The probe first: a budget on CUDA is the caching allocator's memory fraction, which holds
    // only if it is set before anything makes the allocator, and loading a TorchScript module in
    // the preflight did (an H200 accepted 22.4 GiB under a 22.4 GiB budget).
    let device = plan.device.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
    let probe = runner::open_probe(device, plan.budget)?;
    spec::csv_data::preflight(&plan.spec)?;
    crate::train::preflight::preflight(&plan.spec)?;
    let opts = RunOptions {
        out: args.out,
        force: args.force,
        resume: args.resume,
        quiet: args.quiet,
        trace: args.trace,
        shard: args.shard,
    };
    if !args.quiet {
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
    crate::interrupt::install()?;
    crate::interrupt::arm();
    // Made now, and removed again if the run is refused before it writes anything there.
    let _out = runner::check_out(&opts.out)?;
    let mut report =
        runner::run_on(&plan, &opts, &*probe).with_context(|| format!("running {}", args.spec.display()))?;
    // While the charts are drawn a signal stops them between two (every trial is kept), and a
    // second marks the folder interrupted before the process exits, as during the trials.
    crate::interrupt::set_wording(
        "stopping after the chart under way (every trial is kept); Ctrl-C again to stop at once".into(),
        format!(
            "after the chart under way: every trial is in {}, and `--resume` draws the charts",
            report.dir.display()
        ),
    );
    runner::mark_on_abandon(&report.dir);
    let drawing = std::time::Instant::now();
    // A shard's charts would show a slice: the merge draws them.
    let charts =
        if args.shard.is_some() { Ok(Vec::new()) } else { report::charts(&report, plan.spec_budget) };
    let charts = match charts {
        Ok(charts) => charts,
        Err(e) if e.is::<crate::interrupt::Interrupted>() => {
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
                args.spec.display()
            )));
        }
    };
    crate::interrupt::clear_abandon();
    report.charts_drawn(drawing.elapsed().as_secs_f64())?;
    if !args.quiet {
        report::print(&plan.spec, &report, &charts);
        if let Some(s) = args.shard {
            merge::shard_done(s, &report);
        }
    }
    report::check_some_trial_ran(&report)
}
