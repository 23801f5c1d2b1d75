//! `oomlab advise`: after an out-of-memory, which change makes the training fit, and what it
//! costs in time.
//!
//! The pipeline: [`candidates`] lists every combination of the guides' fixes as configurations
//! (what keeps the training, what lowers its precision, what changes it); [`evaluate`] asks the
//! estimate of each whether it fits the budget, with what peak and headroom; [`timing`] predicts
//! each one's step time from calibration runs on the device ([`calibrate`], cached) or a
//! calibration file; [`rank`] orders them (fitting options by predicted time, the smallest change
//! that fits named first); [`verify`] trains the top options for real and holds the prediction
//! against the measurement; [`report`] writes the table, `advice.md` and `advice.json`.
pub mod calibrate;
pub mod candidates;
pub mod chart;
mod evaluate;
pub mod gpus;
mod point;
mod rank;
pub mod report;
pub mod sanity;
pub mod verify;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub use crate::estimate::timing::{Calibration, TimingSource};
pub use candidates::{Candidate, Change, Effect};
pub use evaluate::{Evaluated, Verdict};
pub use point::Point;
pub use verify::Verified;

use crate::estimate::{DataShape, GpuArch, NamedGpu, Target};
use crate::run::plan::Plan;
use crate::spec::Config;

/// Where the step times come from (`--calibration`, `--no-calibrate`, `--recalibrate`).
#[derive(Debug, Clone, PartialEq)]
pub enum TimingChoice {
    /// Calibration runs on the device, from the cache where they were run before (`fresh`: not).
    Calibrate { fresh: bool },
    /// A calibration written by an earlier `advise` (its `calibration.json`).
    File(PathBuf),
    /// No times: options ranked by how much they change.
    Off,
}

/// What `advise` is asked, validated.
#[derive(Debug, Clone)]
pub struct Request {
    pub plan: Plan,
    /// Which `[[variant]]` (`None`: the first, or the base without variants).
    pub variant: Option<String>,
    /// The swept field's value to advise at (`None`: the first predicted not to fit).
    pub at: Option<f64>,
    pub arch: GpuArch,
    /// The GPU `--gpu` named, whose workspaces a CUDA estimate uses: named in the device row.
    pub gpu: Option<NamedGpu>,
    pub timing: TimingChoice,
    /// Train the top N options that fit, and the N nearest misses.
    pub verify: usize,
    pub quiet: bool,
}

/// The advice: every option, ranked, with where the numbers come from.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub experiment: String,
    pub spec_path: String,
    pub variant: Option<String>,
    pub point: Option<Point>,
    /// The device the advice is for, as the probe names it (or the target, when not here).
    pub device: String,
    pub target: Target,
    pub budget: u64,
    pub data: DataShape,
    /// The spec as written, evaluated like the options.
    pub written: Evaluated,
    /// Every other option, ranked: those that fit by predicted time, then the borderline, then
    /// the rest from the nearest miss.
    pub options: Vec<Evaluated>,
    /// Rank (from 1) of the option with the fewest changes that fits, the training kept first.
    pub smallest: Option<usize>,
    pub timing: TimingSource,
    pub calibration: Option<Calibration>,
    pub verified: Vec<Verified>,
    /// The same training on 2, 4 and 8 GPUs with DDP or ZeRO stage 1, or why none is offered.
    pub gpus: gpus::Gpus,
    pub notes: Vec<String>,
    pub provenance: Provenance,
}

/// Which machine, versions and revision made an advice.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    pub hostname: String,
    pub cpu: String,
    pub oomlab: String,
    pub libtorch: String,
    pub git_revision: Option<String>,
    pub git_dirty: Option<bool>,
    pub date: String,
    pub command: String,
}

impl Provenance {
    pub fn here() -> Provenance {
        let here = crate::results::provenance::Provenance::here();
        Provenance {
            hostname: here.hostname,
            cpu: here.cpu,
            oomlab: here.oomlab.into(),
            libtorch: here.libtorch,
            git_revision: here.git.revision,
            git_dirty: here.git.dirty,
            date: crate::results::manifest::now(),
            command: here.command.join(" "),
        }
    }
}

/// Works out the advice: the configuration to advise on, every option evaluated and timed,
/// ranked, and the top ones trained when `verify` asks.
pub fn advise(req: &Request) -> Result<Advice> {
    let plan = &req.plan;
    let Some(budget) = plan.budget else {
        bail!(
            "advise needs a budget to fit: the spec has no run.budget for {}; pass --budget, e.g. --budget 16GiB",
            if plan.target == Target::Cuda { "cuda" } else { "the cpu" }
        );
    };
    let (variant, base) = point::variant(&plan.spec, req.variant.as_deref())?;
    let shape = crate::estimate::data_shape(&base.data)?;
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1);
    let eval = evaluate::Evaluator { target: plan.target, arch: req.arch, budget, shape, threads };
    let (mut base, point) = point::choose(&plan.spec, &base, req.at, &eval)?;
    let mut notes = Vec::new();
    if let Some(g) = req.gpu.filter(|g| plan.target == Target::Cuda && g.cannot_give(budget)) {
        notes.push(format!(
            "the budget ({}) is more than any {} has ({} GB): an option said to fit it will not fit on one",
            crate::spec::format_size(budget),
            g.name.to_uppercase(),
            g.most_memory_gb.unwrap_or_default()
        ));
    }
    let steady = steady_steps(&base);
    if steady != base.training.steps {
        let why = crate::estimate::steps_needed(&base).why;
        let over = if steady == 1 { "1 step".to_string() } else { format!("{steady} steps") };
        let because = if steady > base.training.steps {
            format!("a training runs more than one, and {why}")
        } else {
            // A real training's thousands of steps are past what the estimate replays, and say no
            // more: the peak is reached by step `steady`.
            format!("{why}, so their peak is the spec's")
        };
        notes.push(format!(
            "every option is evaluated over {over}, not the spec's {}: {because}",
            base.training.steps
        ));
        base.training.steps = steady;
    }
    let cuda = plan.target == Target::Cuda;
    let smaller = eval.smaller_batch(&base);
    let candidates = candidates::enumerate(&base, cuda, smaller);
    notes.extend(candidates::no_accumulation(&base));
    // Each option is a prediction: instant for the built-in kinds, a recording of the step at a
    // few batches for a TorchScript module (seconds each, minutes under autocast on a CPU
    // without fast fp16 or bf16 kernels), hence the bar.
    let n = candidates.len();
    let progress = crate::run::progress::Progress::new(Some(n), req.quiet);
    let mut evaluated = Vec::with_capacity(n);
    for (i, c) in candidates.into_iter().enumerate() {
        let what = if c.changes.is_empty() { "the spec as written".to_string() } else { c.describe() };
        progress.start(&format!("option {} of {n}: {what}", i + 1));
        evaluated.push(eval.evaluate(c));
        progress.advance();
    }
    progress.finish();
    let device_here = device_here(plan)?;
    let (timing, calibration) = timing_for(req, &device_here, &evaluated, shape)?;
    let (mut untimed, mut missing, weighed) = (0, std::collections::BTreeSet::new(), evaluated.len());
    if let Some(cal) = calibration.as_ref().filter(|c| c.untrusted.is_empty()) {
        for e in &mut evaluated {
            e.step_seconds = cal.step_seconds(&e.candidate.config, shape.features, shape.classes, cuda);
            if e.step_seconds.is_none() && e.error.is_none() {
                untimed += 1;
                missing.extend(cal.missing(&e.candidate.config, cuda));
            }
        }
    }
    let written = evaluated.remove(0);
    notes.extend(eval.notes(&base));
    let (options, smallest) = rank::rank(evaluated, &written);
    // A spec that fits needs no change; the options are still ranked (some may be faster).
    let smallest = smallest.filter(|_| written.verdict != Verdict::Fits);
    if let Some(cal) = &calibration {
        notes.extend(cal.failed.iter().map(|f| format!("calibration run did not train: {f}")));
    }
    if untimed > 0 {
        // A calibration made for another spec (--calibration FILE) lacks the runs of what this
        // one's options change: those are ranked after the timed ones, which must be said.
        let missing: Vec<String> = missing.into_iter().collect();
        notes.push(format!(
            "the calibration has no run for {}: {untimed} of the {weighed} configurations weighed (the spec \
             as written is one) have no step time and rank after those with one; calibrate on this spec \
             to time them all",
            missing.join(", "),
        ));
    }
    let mut advice = Advice {
        experiment: plan.spec.name.clone(),
        spec_path: plan.spec.path.display().to_string(),
        variant,
        point,
        device: device_words(device_here.as_deref(), plan.target, req.gpu),
        target: plan.target,
        budget,
        data: shape,
        written,
        options,
        smallest,
        timing,
        calibration,
        verified: Vec::new(),
        gpus: gpus::Gpus::of(&base, &eval),
        notes,
        provenance: Provenance::here(),
    };
    if req.verify > 0 {
        if device_here.is_none() {
            bail!(
                "--verify trains on the device advised for, and there is no {} here",
                target_name(plan.target)
            );
        }
        advice.verified = verify::verify(plan, &advice, req.verify, &eval, req.quiet)?;
    }
    Ok(advice)
}

/// The steps after which a training's peak is every longer one's (`estimate::steps_needed`;
/// with the fp16 grad scaler, 2, as the estimate assumes it skips no step), or the spec's when
/// every step can raise it (a kept history).
fn steady_steps(c: &Config) -> usize {
    let needed = crate::estimate::steps_needed(c).steps;
    match (needed, c.training.techniques.history) {
        (Some(k), _) => k,
        (None, crate::spec::History::LossTensor) => c.training.steps,
        (None, _) => 2,
    }
}

fn target_name(t: Target) -> &'static str {
    match t {
        Target::Cpu => "cpu",
        Target::Cuda => "CUDA device",
    }
}

/// The device row: the device here, or that there is none, and on CUDA which GPU's workspaces
/// the estimate used ("NVIDIA H200, estimated as a T4 (--gpu t4)"), so that advice made for
/// one GPU is never read as another's.
fn device_words(here: Option<&str>, target: Target, gpu: Option<NamedGpu>) -> String {
    let named = |g: NamedGpu| format!("estimated as {} (--gpu {})", g.name.to_uppercase(), g.name);
    match (here, gpu) {
        (Some(d), Some(g)) if target == Target::Cuda => format!("{d}, {}", named(g)),
        (Some(d), _) => d.to_string(),
        (None, Some(g)) => format!("{} (not on this machine), {}", target_name(target), named(g)),
        (None, None) if target == Target::Cuda => {
            format!(
                "{} (not on this machine), estimated as an H100 (the default; --gpu names another)",
                target_name(target)
            )
        }
        (None, None) => format!("{} (not on this machine)", target_name(target)),
    }
}

/// The name of the plan's device when it is on this machine.
fn device_here(plan: &Plan) -> Result<Option<String>> {
    match plan.device.resolve(crate::libtorch::cuda::devices()) {
        Ok(tch::Device::Cpu) => Ok(Some(crate::device::cpu_name())),
        Ok(d @ tch::Device::Cuda(_)) => {
            // With the budget: the first CUDA probe of a process sets the allocator's memory
            // fraction, and `CudaProbe::new` refuses a later, different one.
            let probe = crate::run::open_probe(d, plan.budget)?;
            Ok(Some(probe.name()))
        }
        _ => Ok(None),
    }
}

/// Times from calibration runs, a file, or none, as asked and as the device allows.
fn timing_for(
    req: &Request,
    device_here: &Option<String>,
    evaluated: &[Evaluated],
    shape: DataShape,
) -> Result<(TimingSource, Option<Calibration>)> {
    let model = evaluated.first().map(|e| &e.candidate.config.model);
    if let Some(model) = model.filter(|m| req.timing != TimingChoice::Off && m.mlp_widths().is_none()) {
        // The step-time model scales an MLP's passes by its parameters and multiply-adds; a
        // convolution's or attention's time does not scale so.
        let why = format!(
            "step times are calibrated for MLPs so far, not for a {} ({}): the options are ranked by how little they change",
            model.kind(),
            model.describe()
        );
        return Ok((TimingSource::None { why }, None));
    }
    match &req.timing {
        TimingChoice::Off => Ok((TimingSource::None { why: "--no-calibrate".into() }, None)),
        TimingChoice::File(path) => {
            let text = crate::fsio::read_text(path, crate::fsio::SMALL_LIMIT)
                .with_context(|| format!("--calibration {}: cannot read it", path.display()))?;
            let cal: Calibration = serde_json::from_str(&text).with_context(|| {
                format!(
                    "--calibration {}: not a calibration (give the calibration.json an earlier advise wrote)",
                    path.display()
                )
            })?;
            if let Err(why) = cal.check(req.plan.target == Target::Cuda) {
                bail!("--calibration {}: {why}", path.display());
            }
            if cal.passes.is_empty() || cal.updates.is_empty() {
                let why = format!(
                    "the calibration in {} holds no step times: ranked by how little each changes",
                    path.display()
                );
                return Ok((TimingSource::None { why }, Some(cal)));
            }
            if !cal.untrusted.is_empty() {
                let why = format!(
                    "the calibration in {} broke the timing rules when it was made ({}): ranked by how little each \
                     changes",
                    path.display(),
                    cal.untrusted.join("; ")
                );
                return Ok((TimingSource::None { why }, Some(cal)));
            }
            let source = TimingSource::File { path: path.display().to_string(), device: cal.device.clone() };
            Ok((source, Some(cal)))
        }
        TimingChoice::Calibrate { fresh } => {
            let Some(_) = device_here else {
                let why = format!(
                    "no {} here to calibrate on; pass --calibration FILE with a calibration.json from one",
                    target_name(req.plan.target)
                );
                return Ok((TimingSource::None { why }, None));
            };
            let device =
                req.plan.device.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
            // On CUDA under the budget, as every CUDA probe of this process must be (see
            // `device_here`); on the CPU without it, so that calibration measures freely.
            let budget = if device.is_cuda() { req.plan.budget } else { None };
            let probe = crate::run::open_probe(device, budget)?;
            let started = std::time::Instant::now();
            let capacity = probe.capacity();
            let mut calibrator = calibrate::Calibrator {
                probe: &*probe,
                shape,
                cuda: req.plan.target == Target::Cuda,
                memory_cap: (capacity / 8).clamp(64 << 20, 4 << 30),
                cache: calibrate::Cache::open(),
                recalibrate: *fresh,
                quiet: req.quiet,
                runs: 0,
                cached: 0,
                failed: Vec::new(),
                session: Vec::new(),
            };
            let all: Vec<Candidate> = evaluated.iter().map(|e| e.candidate.clone()).collect();
            let cal = calibrator.calibrate(&all)?;
            if !cal.untrusted.is_empty() {
                let load = cal
                    .load_average
                    .map(|[a, b]| format!("; load average {a:.2} then {b:.2}"))
                    .unwrap_or_default();
                // A GPU's passes of a millisecond are launch-bound, and jitter, not a busy machine,
                // can break a rule there: the words blame only what the device can.
                let (what, cause) = match req.plan.target {
                    Target::Cuda => (
                        "timings too short to rank by",
                        ", GPU passes of a few milliseconds are mostly kernel launches, whose jitter outweighs the work",
                    ),
                    Target::Cpu => ("timings not trustworthy on this machine now", ""),
                };
                let why = format!(
                    "{what} ({}{load}{cause}), even measured again: the options are ranked by how little each \
                     changes, and nothing was cached",
                    cal.untrusted.join("; ")
                );
                return Ok((TimingSource::None { why }, Some(cal)));
            }
            let source = TimingSource::Calibrated {
                device: cal.device.clone(),
                runs: calibrator.runs,
                cached: calibrator.cached,
                seconds: started.elapsed().as_secs_f64(),
            };
            Ok((source, Some(cal)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Advice for a GPU names the one whose workspaces it used, here or not; the CPU's is just
    /// the CPU.
    #[test]
    fn the_device_row_names_the_gpu_the_estimate_is_for() {
        let t4 = NamedGpu::parse("t4").unwrap();
        assert_eq!(
            device_words(Some("NVIDIA H200"), Target::Cuda, Some(t4)),
            "NVIDIA H200, estimated as T4 (--gpu t4)"
        );
        assert_eq!(device_words(Some("NVIDIA H200"), Target::Cuda, None), "NVIDIA H200");
        assert_eq!(
            device_words(None, Target::Cuda, Some(t4)),
            "CUDA device (not on this machine), estimated as T4 (--gpu t4)"
        );
        assert!(device_words(None, Target::Cuda, None).contains("estimated as an H100 (the default"));
        assert_eq!(device_words(Some("AMD EPYC"), Target::Cpu, None), "AMD EPYC");
    }
}
