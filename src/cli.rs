//! The command line: raw arguments (clap) turned once into validated options, then dispatched.
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::device::DeviceChoice;
use crate::run::plan::Overrides;
use crate::spec;

mod advise;
mod bench;
mod compare;
mod devices;
mod estimate;
mod merge;
mod plot;
mod report;
mod run;
mod slurm;

const EXAMPLES: &str = "\
Examples:
  oomlab run experiments/depth_sweep.toml
      The lesson's challenge: how deep can a 5000-wide MLP get at batch 32 in 15.90 GiB?
  oomlab run experiments/depth_sweep.toml --budget 2GiB
      The same question for a 2 GiB budget: about 20 seconds on a laptop.
  oomlab run experiments/depth_sweep.toml --resume
      Continue a run stopped by Ctrl-C (which ends it at the next phase) or a crash, from its
      completed trials.
  oomlab run experiments/ddp.toml
      DistributedDataParallel over 1, 2 and 4 ranks, each a process on this machine measuring its
      own memory: what each rank holds (`oomlab estimate` answers for any world size).
  oomlab devices
      What libtorch sees here: devices, names, memory, versions.
  oomlab claims results/cpu-amd-epyc
      Every claim of the lesson, the experiment that tests it, the number and a verdict.
  oomlab advise experiments/whole_dataset_batch.toml --verify 2
      What to change so that the whole-dataset batch fits 15.90 GiB, ranked by predicted step
      time, and the top options trained to check.
  oomlab plot results/cpu-amd-epyc/depth_sweep --trial 3
      Redraw an experiment's charts (and trace.json) from its CSVs, with trial 3's timeline.
  oomlab compare results/nvidia-h200/depth_sweep results/cpu-amd-epyc/depth_sweep --out cmp
      The same experiment from two devices side by side: COMPARE.md and overlaid charts.
  oomlab slurm experiments/batch_size_sweep.toml --shards 4 --partition gpu --per-gpu-kind a100,h100
      Slurm job arrays, one per GPU kind, of 4 shards each (`run --shard I/4`), and their merges
      (`oomlab merge`); --submit submits them.
  scripts/bench
      How fast oomlab trains at each --trace level against PyTorch's loop: BENCH.md and a chart.

Results go to <out>/<device>/<experiment>/ (out: runs unless --out): manifest.json, trace.csv
(memory per trial, step and phase), summary.csv (one row per trial) and charts. On CPU, oomlab's own
allocator counts every byte and enforces the budget; on CUDA the numbers are the caching allocator's
own.";

const PLOT_EXAMPLES: &str = "\
Examples:
  oomlab plot results/cpu-amd-epyc/depth_sweep
      Redraw the experiment's charts and trace.json from its CSVs.
  oomlab plot results/cpu-amd-epyc/depth_sweep --trial 3
      The same, with trial 3's memory timeline too.
  oomlab plot results/cpu-amd-epyc
      Every experiment in a device's folder.";

const COMPARE_EXAMPLES: &str = "\
Examples:
  oomlab compare results/nvidia-h200/depth_sweep results/cpu-amd-epyc/depth_sweep
      The same experiment from two devices: COMPARE.md and overlaid charts, written to
      runs/compare/depth_sweep.
  oomlab compare runs/cpu-amd-epyc/amp runs/cpu-intel-r-xeon-r-processor/amp --out /tmp/cmp
      Two CPUs' mixed-precision runs, into /tmp/cmp.
  oomlab compare results/cpu-amd-epyc results/cpu-intel-r-xeon-r-processor
      Two devices' folders, experiment by experiment: one COMPARE.md (each folder's device, host
      and revision; a summary row per experiment; each experiment's tables; the experiments in
      one folder only) and each experiment's charts in a folder of its own, written to
      runs/compare/cpu-amd-epyc_vs_cpu-intel-r-xeon-r-processor. An earlier comparison there
      is replaced only with --force. An experiment folder that cannot be read is left out with
      a warning (on stderr and in COMPARE.md) and the others are compared; it fails only when
      none can be.";

const CLAIMS_EXAMPLES: &str = "\
Examples:
  oomlab claims results/cpu-amd-epyc
      Every claim of the lesson and its guides judged from the committed AMD EPYC runs.
  oomlab claims runs/cpu-amd-epyc
      The same from your own runs (a claim run under other conditions, such as --budget 2GiB,
      is 'not judged here', with the reason).";

#[derive(Debug, Parser)]
#[command(name = "oomlab", version = crate::revision::VERSION, about = "Reproduce, measure and explain GPU memory in neural-network training", long_about = None, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train every trial of a spec, catching out-of-memory, and write per-phase memory to CSV.
    ///
    /// Each trial trains a real libtorch model: data, model, then steps of to_device, forward,
    /// backward, optimizer_step and zero_grad. The allocator is read at the end of every phase;
    /// an out-of-memory ends the trial, not the run, and is recorded with what its message says.
    #[command(after_help = run::RUN_EXAMPLES)]
    Run(run::RunArgs),
    /// Show what libtorch sees: CUDA devices with their memory, the CPU and the host's memory, and versions.
    Devices,
    /// Judge every claim of the lesson and its guides from a device's results; writes CLAIMS.md.
    ///
    /// Reads results/<device>/<experiment>/ for each experiment in experiments/ and prints, per
    /// claim, the measured number and a verdict (confirmed, partly, refuted).
    #[command(after_help = CLAIMS_EXAMPLES)]
    Claims {
        /// A device's results folder, e.g. results/cpu-amd-epyc or runs/<device>.
        dir: PathBuf,
    },
    /// Predict each trial's memory per phase and category from a model of libtorch, without
    /// training, and the largest swept value predicted to fit the budget.
    ///
    /// `--device` picks whose allocator is modelled: cpu (oomlab's counting allocator, exact) or
    /// cuda (libtorch's caching allocator replayed, with its workspaces). Default: the spec's
    /// run.device; auto is cuda when libtorch sees a GPU.
    Estimate(estimate::EstimateArgs),
    /// After an out-of-memory: which change makes the training fit the budget, and what each
    /// costs in step time, ranked; `--verify N` trains the top options to check.
    ///
    /// Weighs every combination of gradient accumulation (same effective batch), mixed
    /// precision, checkpointing and the optimizer's implementation with oomlab's estimate, times
    /// them from short calibration runs on the device, and names the smallest change that fits.
    #[command(after_help = advise::ADVISE_EXAMPLES)]
    Advise(advise::AdviseArgs),
    /// Redraw every chart of an experiment folder from its CSVs and manifest, without running.
    ///
    /// Draws the peak-vs-swept-value chart of each variant, the memory timelines of the trial
    /// with the highest peak that fit and of the first that ran out of memory, and rewrites
    /// trace.json (open it in ui.perfetto.dev) from trace.csv.
    #[command(after_help = PLOT_EXAMPLES)]
    Plot(plot::PlotArgs),
    /// Compare one experiment's results from several devices or budgets, or device folders
    /// experiment by experiment.
    ///
    /// Refuses folders of different experiments, warns when their spec files differ, and writes
    /// COMPARE.md (the answers per folder and their ratios) and overlaid sweep charts. Given
    /// device folders (results/<device>), compares each experiment two or more of them hold, into
    /// one COMPARE.md with a summary; a mix of device and experiment folders is refused.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(compare::CompareArgs),
    /// Merge the shards of a run (`run --shard I/N`) into their experiment folder: summary.csv,
    /// trace.csv, trace.json, one manifest naming every shard's host, device and times, and the
    /// charts, as one process running the spec would have written them.
    ///
    /// Refuses shards of different spec text, revision or build, names a shard that is missing
    /// or unfinished, and replaces an earlier merge only with --force (the shards stay).
    #[command(after_help = slurm::SLURM_EXAMPLES)]
    Merge(merge::MergeArgs),
    /// Write sbatch scripts that run specs on a Slurm cluster: a job array per spec, one task per
    /// shard (`oomlab run SPEC --shard I/N`), and a merge job after it (`oomlab merge`).
    ///
    /// The partition, GPU (--gres, --gpu-kind), time limit and account go into the scripts;
    /// --per-gpu-kind A,B writes one array per GPU kind, each into OUT/<kind>/, for `oomlab
    /// compare`. Prints where the scripts went and the sbatch commands; --submit runs them.
    #[command(after_help = slurm::SLURM_EXAMPLES)]
    Slurm(slurm::SlurmArgs),
    /// Time oomlab at each --trace level against the PyTorch (Python) loop it replaces; writes
    /// BENCH.md, bench.csv and bench.png.
    ///
    /// For 3 x 256 (each optimizer implementation), the lesson's 8 x 5000 and its mixed-precision
    /// and checkpointing variants, every contender trains in a process of its own, in rounds with
    /// the order rotated, warm-up steps first; medians and spreads over the pooled timed steps,
    /// every ratio against its target, and for a miss, by how much and where the time goes.
    #[command(after_help = bench::BENCH_EXAMPLES)]
    Bench(bench::BenchArgs),
    /// One contender of `oomlab bench` in a process of its own: a JSON request on stdin, one
    /// JSON line of step times on stdout.
    #[command(hide = true)]
    BenchWorker(bench::WorkerArgs),
    /// One rank of a `[parallel]` trial that `oomlab run` started: its place in `RANK` and
    /// `WORLD_SIZE`, the job (JSON) on stdin, its records and summary as JSON lines on stdout.
    #[command(hide = true)]
    RankWorker,
}

/// `--device` and `--budget`: what `run`, `estimate` and `advise` may override in a spec, declared
/// once.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct DeviceBudget {
    /// Device: auto (a GPU if libtorch sees one, else the CPU), cpu, cuda or cuda:N: where `run`
    /// trains, whose allocator `estimate` models, what `advise` advises for. Overrides the spec's
    /// run.device.
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceChoice>,
    /// Memory budget, e.g. 15.90GiB or 512MiB: the CUDA allocator's per-process cap, or the CPU
    /// allocator's. Overrides the spec's run.budget.
    #[arg(long, value_parser = parse_budget, allow_hyphen_values = true)]
    pub budget: Option<u64>,
}

impl DeviceBudget {
    /// As the plan takes them.
    pub fn overrides(self) -> Overrides {
        Overrides { device: self.device, budget: self.budget }
    }
}

fn parse_device(s: &str) -> Result<DeviceChoice, String> {
    s.parse()
}

fn parse_budget(s: &str) -> Result<u64, String> {
    spec::size::parse_budget_arg(s)
}

/// Runs a parsed command line.
impl Command {
    /// Whether the command answers Ctrl-C, SIGTERM and SIGHUP by stopping cleanly between its
    /// phases (see `interrupt`): `run` and `bench`, whose work is long and kept as it goes.
    pub fn stops_cleanly(&self) -> bool {
        matches!(self, Command::Run(_) | Command::Bench(_) | Command::RankWorker)
    }
}

pub fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Devices => devices::print(),
        Command::Claims { dir } => {
            let path = crate::claims::write(&dir)?;
            say_raw!("{}", crate::fsio::read_text(&path, crate::fsio::SMALL_LIMIT)?);
            note!("wrote {}", path.display());
            Ok(())
        }
        Command::Estimate(args) => estimate::run(args),
        Command::Advise(args) => advise::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Slurm(args) => slurm::run(args),
        Command::Bench(args) => bench::run(args),
        Command::BenchWorker(args) => bench::worker(args),
        Command::RankWorker => crate::run::ranks::worker(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples are wrapped by hand at clap's 100 columns: a longer line is re-wrapped by
    /// clap, which leaves a stub of a line before the hand-made break.
    #[test]
    fn hand_wrapped_help_fits_clap_width() {
        let texts = [
            EXAMPLES,
            PLOT_EXAMPLES,
            COMPARE_EXAMPLES,
            CLAIMS_EXAMPLES,
            run::RUN_EXAMPLES,
            advise::ADVISE_EXAMPLES,
            slurm::SLURM_EXAMPLES,
            bench::BENCH_EXAMPLES,
        ];
        for line in texts.iter().flat_map(|t| t.lines()) {
            assert!(line.chars().count() <= 100, "over 100 columns: {line}");
        }
    }
}
