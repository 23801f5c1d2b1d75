//! `oomlab run`: its arguments, the command that resumes it, and what it prints of the run that
//! `run::pipeline` makes from a spec.
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use super::{merge, report, DeviceBudget};
use crate::run::launch::{self, Agent, Launch};
use crate::run::plan::Plan;
use crate::run::shard::Shard;
use crate::run::{pipeline, RunOptions};
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
  torchrun --standalone --nproc-per-node 2 --no-python oomlab run experiments/ddp_launched.toml
      DDP ranks that torchrun (or srun -n 2) starts: each process runs this command, rank 0
      writes the results. Without a launcher, oomlab starts a [parallel] trial's ranks itself.

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

/// Runs a spec: the plan resolved once, the trials and the charts (`run::pipeline`), then what
/// they answer. Started as a rank of a world torchrun or srun launched, rank 0 does that, and
/// the others train their shares of its trials and end as it ends.
pub(super) fn run(args: RunArgs) -> Result<()> {
    let Some(launch) = Launch::from_env()? else {
        return run_here(args, None);
    };
    // The store first, before anything can fail: the other ranks wait there for rank 0's word.
    let agent = Arc::new(Agent::open(launch)?);
    if !agent.leads() {
        return launch::follow(&agent, args.quiet);
    }
    let result = run_here(args, Some(Arc::clone(&agent)));
    agent.finish(&result);
    result
}

fn run_here(args: RunArgs, launched: Option<Arc<Agent>>) -> Result<()> {
    let plan = Plan::here(spec::load(&args.spec)?, args.target.overrides());
    let opts = RunOptions {
        out: args.out.clone(),
        force: args.force,
        resume: args.resume,
        quiet: args.quiet,
        trace: args.trace,
        shard: args.shard,
        launched,
    };
    let done = pipeline::run_spec(&args.spec, &plan, &opts, resume_command(&args))?;
    if !args.quiet {
        report::print(&plan.spec, &done.report, &done.charts);
        if let Some(s) = args.shard {
            merge::shard_done(s, &done.report);
        }
    }
    done.check_some_trial_ran()
}
