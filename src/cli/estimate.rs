//! `oomlab estimate SPEC`: the spec's trials predicted by the memory model, without training:
//! each sweep point's peak per phase and per category, and the largest value predicted to fit.
use std::path::PathBuf;

use anyhow::Result;

use crate::estimate::{self, GpuArch, NamedGpu, Target};
use crate::run::plan::Plan;
use crate::spec;

#[derive(Debug, clap::Args)]
pub struct EstimateArgs {
    /// The experiment spec (TOML), e.g. experiments/depth_sweep.toml.
    pub spec: PathBuf,
    #[command(flatten)]
    pub target: super::DeviceBudget,
    /// With cuda: the GPU, for libtorch's workspace sizes: h100 or h200 (32 MiB cuBLAS
    /// workspaces), or a100, v100, t4, l4, l40s, rtx4090, b200, other (8.125 MiB). Default: the
    /// GPU libtorch sees, else h100.
    #[arg(long, value_parser = parse_gpu)]
    pub gpu: Option<NamedGpu>,
    /// One line per trial, without the phase tables.
    #[arg(long)]
    pub brief: bool,
    /// Everything as JSON instead: every trial's phases in bytes, per category.
    #[arg(long, conflicts_with = "brief")]
    pub json: bool,
    /// Also write every allocation and free the estimate replays, in order, to this CSV (one
    /// row per event: variant, trial, phase, bytes asked, the allocator's block, category, pool,
    /// and the replay's source line): what scripts/reference/compare.py holds against PyTorch's
    /// allocation history to find the first allocation where they part. What the loop frees
    /// between phases comes under the next phase as `outside_free` (as PyTorch's history is
    /// written), so the rows add up to the estimate's memory. A `[parallel]` trial's rows say
    /// which ranks make them (`ranks`: DDP's all alike; under ZeRO the rank replayed, the one
    /// with the largest shard). Not overwritten.
    #[arg(long, value_name = "FILE")]
    pub blocks: Option<PathBuf>,
    /// For a TorchScript module: where its step is recorded. meta: on libtorch's meta device,
    /// every op's outputs as shapes, no arithmetic and no memory, in seconds whatever the
    /// model's size (on this CPU instead where an op has no meta kernel or the step uses mixed
    /// precision; the notes say which); without its CPU libraries' own scratch, which a CPU run
    /// also takes. cpu: through this CPU's kernels, as long as training the step takes: every
    /// byte a CPU run takes, and the check of a meta recording. [default: meta with cuda, cpu
    /// with cpu]
    #[arg(long, value_enum, value_name = "WHERE")]
    pub record_on: Option<RecordOn>,
}

/// Where a TorchScript module's step is recorded (`--record-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordOn {
    Meta,
    Cpu,
}

pub fn run(args: EstimateArgs) -> Result<()> {
    crate::estimate::announce_profiling();
    let plan = Plan::here(spec::load(&args.spec)?, args.target.overrides());
    // The estimate of a search without max and without a budget would grow without end.
    if let Some(why) = plan.unbounded_search(false) {
        anyhow::bail!("{why}");
    }
    use crate::train::record::{choose, RecordWhere};
    choose(match args.record_on {
        None => RecordWhere::Default,
        Some(RecordOn::Meta) => RecordWhere::Meta,
        Some(RecordOn::Cpu) => RecordWhere::Cpu,
    });
    // A module of the user's is checked before it is recorded, as before a run: a bad file, an
    // output its loss cannot read, children that are not its forward.
    // Where the step will be recorded (on meta: no arithmetic).
    crate::train::preflight::for_estimate(&plan.spec, plan.target == Target::Cuda)?;
    let arch = arch_for(plan.target, args.gpu, plan.budget)?;
    // The estimate answers for the budget; a run here would meet the machine's own limit first.
    if let (Target::Cpu, Some(b)) = (plan.target, plan.budget) {
        if b > spec::limits::MAX_CPU_BUDGET {
            anyhow::bail!(
                "{}: a CPU budget of {} is more memory than a process on a CPU can address ({}); give a budget a \
                 machine has (--budget, or `budget` in the spec), or estimate for a GPU with --device cuda",
                args.spec.display(),
                spec::format_size(b),
                spec::format_size(spec::limits::MAX_CPU_BUDGET)
            );
        }
    }
    if let (Target::Cpu, Some(b), Some(host)) = (plan.target, plan.budget, crate::device::host_memory()) {
        if b > host {
            note!(
                "note: the budget ({}) is more than this host's memory ({}): what is predicted to fit it may not fit \
                 here",
                spec::format_size(b),
                spec::format_size(host)
            );
        }
    }
    let options = plan.estimate_options(arch, usize::try_from(tch::get_num_threads()).unwrap_or(1));
    let each = estimate::predict_each(&plan.spec, plan.budget, &options);
    let (mut sweeps, mut refused) = (Vec::new(), Vec::new());
    for (variant, p) in each {
        match p {
            Ok(p) => sweeps.push(p),
            Err(e) => refused.push((variant, e)),
        }
    }
    // One variant's refusal does not sink the others: they are reported, then the refusals.
    let why = |(variant, e): &(Option<String>, anyhow::Error)| match variant {
        Some(v) => format!("variant {v}: {e:#}"),
        None => format!("{e:#}"),
    };
    if sweeps.is_empty() {
        if let Some(first) = refused.first() {
            anyhow::bail!("estimating {}: {}", args.spec.display(), why(first));
        }
    }
    if let Some(path) = &args.blocks {
        estimate::report::write_blocks(path, &sweeps)?;
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&sweeps)?);
    } else {
        let not_run = plan.not_run(crate::device::CpuCaps::here());
        say_raw!(
            "{}",
            estimate::report::render(&plan.spec, &sweeps, plan.budget, plan.target, args.brief, &not_run)
        );
    }
    if !refused.is_empty() {
        let lines: Vec<String> = refused.iter().map(why).collect();
        anyhow::bail!(
            "estimating {}: {} of {} variants not estimated (the others are above):\n  {}",
            args.spec.display(),
            refused.len(),
            refused.len() + sweeps.len(),
            lines.join("\n  ")
        );
    }
    Ok(())
}

/// The GPU a CUDA estimate is for (`--gpu`, else the one libtorch sees, else an H100); a
/// `--gpu` for the CPU's is refused rather than ignored, and a budget no card of its name has is
/// told (the prediction is the budget's; such a card would run out first).
pub(super) fn arch_for(target: Target, gpu: Option<NamedGpu>, budget: Option<u64>) -> Result<GpuArch> {
    match target {
        Target::Cuda => {
            if let (Some(g), Some(b)) = (gpu, budget) {
                if g.cannot_give(b) {
                    note!(
                        "note: the budget ({}) is more than any {} has ({} GB): what is predicted to fit it will not \
                         fit on one",
                        spec::format_size(b),
                        g.name.to_uppercase(),
                        g.most_memory_gb.unwrap_or_default()
                    );
                }
            }
            Ok(gpu.map(|g| g.arch).or_else(local_gpu).unwrap_or_default())
        }
        Target::Cpu if gpu.is_some() => anyhow::bail!(
            "--gpu names the GPU a CUDA estimate is for, and this one is for the CPU: add --device cuda, or \
             leave --gpu out"
        ),
        Target::Cpu => Ok(GpuArch::default()),
    }
}

pub(super) fn parse_gpu(s: &str) -> Result<NamedGpu, String> {
    NamedGpu::parse(s)
}

/// The generation of the first GPU libtorch sees, from NVML.
pub(super) fn local_gpu() -> Option<GpuArch> {
    if !crate::libtorch::cuda::available() {
        return None;
    }
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let cc = nvml.device_by_index(0).ok()?.cuda_compute_capability().ok()?;
    Some(GpuArch::from_capability(cc.major, cc.minor))
}
