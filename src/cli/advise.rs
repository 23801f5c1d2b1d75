//! `oomlab advise SPEC`: which change makes a training fit its budget, and what it costs.
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::advise::{self, report, Request, TimingChoice};
use crate::device;
use crate::estimate::{GpuArch, Target};
use crate::run::plan::Plan;
use crate::spec;

pub const ADVISE_EXAMPLES: &str = "\
Examples:
  oomlab advise experiments/whole_dataset_batch.toml
      What lets the lesson's whole-dataset batch train in 15.90 GiB, fastest first.
  oomlab advise experiments/depth_sweep.toml --variant foreach
      Advice at the first depth predicted not to fit (--at 44 to pick another).
  oomlab advise experiments/whole_dataset_batch.toml --verify 3
      Also train the top 3 options that fit and the 3 nearest misses, predicted beside measured.
  oomlab advise experiments/depth_sweep.toml --device cuda --gpu h100 \\
      --calibration h100-calibration.json
      Advice for a GPU this machine does not have, timed from a calibration made on one (the
      calibration.json an advise on an H100 wrote beside its advice).

Options weighed: gradient accumulation at the same effective batch, mixed precision (fp16 with
the grad scaler, bf16), activation checkpointing segments, the optimizer's implementation (for
loop, foreach, fused), the data set on the host; and, marked as changing the training, the
largest smaller batch that fits and SGD (with and without momentum) instead of Adam. Memory
comes from oomlab's estimate (exact on the CPU); step times from short calibration runs on the
device, cached in ~/.cache/oomlab (or $OOMLAB_CACHE). Writes advice.md, advice.json,
calibration.json and advice.png/svg to <out>/<device>/<experiment>/advice/.";

#[derive(Debug, clap::Args)]
pub struct AdviseArgs {
    /// The experiment spec (TOML), e.g. experiments/whole_dataset_batch.toml.
    pub spec: PathBuf,
    #[command(flatten)]
    pub target: super::DeviceBudget,
    /// With cuda: the GPU, for libtorch's workspace sizes (h100, h200, a100, t4, ...). Default:
    /// the GPU libtorch sees, else h100.
    #[arg(long, value_parser = super::estimate::parse_gpu)]
    pub gpu: Option<crate::estimate::NamedGpu>,
    /// Which [[variant]] of the spec (default: the first).
    #[arg(long)]
    pub variant: Option<String>,
    /// For a sweep: the swept field's value to advise at (default: the first value predicted
    /// not to fit).
    #[arg(long, allow_hyphen_values = true)]
    pub at: Option<f64>,
    /// Train N options that fit (the smallest change the answer names first, then the top
    /// ranked) and the N nearest misses under the budget, and report predicted against measured
    /// peak and step time.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub verify: usize,
    /// Step times from this calibration.json (written by an earlier advise), not from runs here.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["no_calibrate", "recalibrate"])]
    pub calibration: Option<PathBuf>,
    /// No calibration runs and no step times: rank by how little each option changes.
    #[arg(long, conflicts_with = "recalibrate")]
    pub no_calibrate: bool,
    /// Run the calibration again instead of reading it from the cache.
    #[arg(long)]
    pub recalibrate: bool,
    /// Print the whole advice as JSON (every option) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Results root; the advice goes to OUT/<device>/<experiment>/advice/.
    #[arg(long, default_value = crate::results::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Print and write nothing to disk.
    #[arg(long, conflicts_with = "force")]
    pub no_write: bool,
    /// Replace an advice already in the folder.
    #[arg(long)]
    pub force: bool,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: AdviseArgs) -> Result<()> {
    if let Some(at) = args.at {
        if !at.is_finite() {
            bail!("--at {at}: give a number, the swept field's value");
        }
    }
    let plan = Plan::here(spec::load(&args.spec)?, args.target.overrides());
    spec::csv_data::preflight(&plan.spec)?;
    // Where the step will be recorded (on meta: no arithmetic).
    crate::train::preflight::for_estimate(&plan.spec, plan.target == Target::Cuda)?;
    if !args.no_write {
        let _out = crate::run::check_out(&args.out)?;
    }
    // No budget: advice.md's notes say a budget the GPU cannot give, once.
    let arch = super::estimate::arch_for(plan.target, args.gpu, None)?;
    // `--verify` trains on the GPU here: an estimate for another generation's workspaces would be
    // checked against the wrong card and called agreeing.
    if let (Some(g), Some(local), true) = (args.gpu, super::estimate::local_gpu(), args.verify > 0) {
        if g.arch != local {
            bail!(
                "--verify trains on this machine's GPU, which is not of --gpu {}'s generation: leave out --gpu \
                 to advise for the GPU here, or --verify to advise for the {} without training",
                g.name,
                g.name.to_uppercase()
            );
        }
    }
    let timing = match (&args.calibration, args.no_calibrate) {
        (Some(path), _) => TimingChoice::File(path.clone()),
        (None, true) => TimingChoice::Off,
        (None, false) => TimingChoice::Calibrate { fresh: args.recalibrate },
    };
    let request = Request {
        plan,
        variant: args.variant,
        at: args.at,
        arch,
        gpu: args.gpu,
        timing,
        verify: args.verify,
        quiet: args.quiet,
    };
    let advice = advise::advise(&request).with_context(|| format!("advising on {}", args.spec.display()))?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&advice)?);
    } else {
        say_raw!("{}", report::text(&advice));
    }
    if !args.no_write {
        let slug = match advice.device.strip_suffix(" (not on this machine)") {
            Some(_) => match arch {
                GpuArch::Hopper => "cuda-hopper-estimate".to_string(),
                GpuArch::Other => "cuda-estimate".to_string(),
            },
            None => device::slug(&advice.device),
        };
        let dir = args.out.join(slug).join(&advice.experiment).join("advice");
        let files = report::write(&dir, &advice, args.force)?;
        if !args.json {
            note!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
        }
    }
    if advice.verified.iter().any(|v| v.agrees == Some(false)) {
        bail!("--verify: an option did not do as predicted (see the table)");
    }
    Ok(())
}
