//! Each option held against the budget by the estimate: its peak as the budget counts it
//! (allocated on the CPU, reserved on CUDA, the workspaces included), the headroom left, the
//! phase where it goes over, and a verdict.
use anyhow::Result;
use serde::Serialize;

use super::candidates::{Candidate, Effect};
use crate::estimate::{self, DataShape, GpuArch, Options, Prediction, Target};
use crate::spec::{Amp, Config, Field};

/// Whether an option is predicted to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Fits,
    /// Within what the estimate leaves out of the budget (the scratch buffer of a CPU matrix
    /// product in oneDNN: bf16's, and on some CPUs fp16's): it may go either way.
    Borderline,
    Oom,
    /// The estimate does not cover it (the message says why).
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fits => "fits",
            Verdict::Borderline => "borderline",
            Verdict::Oom => "OOM",
            Verdict::Unknown => "unknown",
        }
    }
}

/// One option, evaluated.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluated {
    /// 1 for the first ranked; 0 for the spec as written.
    pub rank: usize,
    pub describe: String,
    pub effect: Effect,
    pub candidate: Candidate,
    pub verdict: Verdict,
    /// The peak the budget caps: allocated on the CPU, reserved on CUDA; workspaces included.
    pub peak: u64,
    pub peak_allocated: u64,
    /// Budget less peak (negative: over by that much).
    pub headroom: i64,
    /// Where it first goes over the budget: "forward, step 1".
    pub over_in: Option<String>,
    /// Predicted seconds of a training step.
    pub step_seconds: Option<f64>,
    /// Predicted time per sample (an epoch's) relative to the spec as written.
    pub relative_time: Option<f64>,
    /// Why the estimate could not say.
    pub error: Option<String>,
    /// A fitting option the tables list: false for one that only adds a change to a fitting
    /// option for no gain in time (`rank::adds_nothing`), and for every option that does not fit.
    pub listed: bool,
}

impl Evaluated {
    /// Samples an optimizer step trains: the micro-batch times the micro-batches.
    pub fn effective_batch(&self) -> usize {
        let t = &self.candidate.config.training;
        t.batch_size * t.techniques.accumulation
    }

    /// Predicted seconds per sample trained: what an epoch's time is proportional to, and so
    /// what compares an option with a smaller batch to the others.
    pub fn seconds_per_sample(&self) -> Option<f64> {
        self.step_seconds.map(|s| s / self.effective_batch().max(1) as f64)
    }
}

/// The estimate, set up once for the device and budget.
#[derive(Debug, Clone, Copy)]
pub struct Evaluator {
    pub target: Target,
    pub arch: GpuArch,
    pub budget: u64,
    pub shape: DataShape,
    pub threads: usize,
}

/// Low precision in oneDNN on the CPU ([`estimate::onednn`]): its matmul scratch buffer, left
/// out of the estimate (measured up to ~3 MB), plus a hundredth of the peak for shapes larger
/// than those measured.
const ONEDNN_CPU_SLACK: u64 = 4 << 20;

impl Evaluator {
    /// What the estimate assumes for a run of `config` alone (on CUDA, its own workspaces).
    pub fn options(&self, config: &Config) -> Options {
        let options = match self.target {
            Target::Cpu => Options::default(),
            Target::Cuda => Options::cuda(self.arch, [config]).under(Some(self.budget)),
        };
        // Dozens of options, each a recording: none may hold the advice for minutes.
        Options {
            threads: self.threads,
            ladder_budget: Some(crate::estimate::ADVISE_LADDER_BUDGET),
            shared_checks: true,
            ..options
        }
    }

    pub fn predict(&self, config: &Config) -> Result<Prediction> {
        estimate::predict_with(config, self.shape, &self.options(config))
    }

    pub fn evaluate(&self, candidate: Candidate) -> Evaluated {
        let describe = candidate.describe();
        let effect = candidate.effect();
        let mut e = Evaluated {
            rank: 0,
            describe,
            effect,
            verdict: Verdict::Unknown,
            peak: 0,
            peak_allocated: 0,
            headroom: 0,
            over_in: None,
            step_seconds: None,
            relative_time: None,
            error: None,
            listed: false,
            candidate,
        };
        if let Some(why) = self.not_recorded_here(&e.candidate.config) {
            e.error = Some(why);
            return e;
        }
        match self.predict(&e.candidate.config) {
            Ok(p) => {
                e.peak = self.capped_peak(&p);
                e.peak_allocated = p.peak_allocated();
                e.headroom = i64::try_from(self.budget as i128 - e.peak as i128).unwrap_or(i64::MIN);
                e.verdict = self.verdict(&e.candidate.config, &p);
                e.over_in = p.first_over(self.budget).map(|ph| match ph.step {
                    0 => ph.phase.to_string(),
                    s => format!("{}, step {s}", ph.phase),
                });
            }
            Err(err) => e.error = Some(format!("{err:#}")),
        }
        e
    }

    /// Why an option is left outside the estimate before it is tried: a TorchScript module's
    /// estimate records its step on this CPU, and under fp16 or bf16 autocast on a CPU without
    /// that precision's matrix instructions a recording takes minutes (libtorch converts around
    /// every kernel: 24 s for fp16 and 48 s for bf16 on experiments/own_model's small ViT on a
    /// 2-core AMD EPYC, per option, and its recordings there did not agree across batches).
    fn not_recorded_here(&self, config: &Config) -> Option<String> {
        use crate::device::HalfPrecision;
        if self.target != Target::Cpu || !matches!(config.model, crate::spec::ModelSpec::Torchscript(_)) {
            return None;
        }
        let p = match config.training.techniques.amp {
            crate::spec::Amp::Off => return None,
            crate::spec::Amp::Fp16 { .. } => HalfPrecision::Fp16,
            crate::spec::Amp::Bf16 => HalfPrecision::Bf16,
        };
        (!crate::device::CpuCaps::here().has(p)).then(|| {
            format!(
                "not estimated: a TorchScript module's estimate records its step on this CPU, which has no {} \
                 matrix instructions ({}), so each recording under {} autocast takes tens of seconds to minutes; \
                 `oomlab run` measures it",
                p.key(),
                p.instructions(),
                p.key()
            )
        })
    }

    /// The peak the budget caps.
    pub fn capped_peak(&self, p: &Prediction) -> u64 {
        match self.target {
            Target::Cpu => p.peak_allocated(),
            Target::Cuda => p.peak_reserved(),
        }
    }

    pub fn verdict(&self, config: &Config, p: &Prediction) -> Verdict {
        let fits = p.fits(self.budget);
        let slack = self.slack(config, p);
        match fits {
            true if self.capped_peak(p).saturating_add(slack) > self.budget => Verdict::Borderline,
            true => Verdict::Fits,
            false => Verdict::Oom,
        }
    }

    /// How far the measurement may be above the prediction: on CUDA, up to the bound of the
    /// rules no GPU has confirmed ([`estimate::evidence`]).
    fn slack(&self, config: &Config, p: &Prediction) -> u64 {
        match (self.target, config.training.techniques.amp) {
            (Target::Cpu, amp) if estimate::onednn::lowp_matmul(&amp) => ONEDNN_CPU_SLACK + p.peak / 100,
            (Target::Cuda, _) => p.bound.reserved.saturating_sub(p.peak_reserved()),
            _ => 0,
        }
    }

    /// The largest value of `field` in `lo..=hi` predicted to fit, at the prediction's bound
    /// (advice promises a fit; on CUDA past what a GPU confirmed the bound is above the
    /// prediction).
    pub fn largest_fit(&self, base: &Config, field: Field, lo: u64, hi: u64) -> Result<Option<u64>> {
        estimate::largest_sure_fit(base, field, self.budget, lo, hi, &self.options(base))
    }

    /// The largest batch below the spec's predicted to fit, everything else as written, when the
    /// spec's own does not.
    pub fn smaller_batch(&self, base: &Config) -> Option<usize> {
        let b = base.training.batch_size as u64;
        // One that fits as written needs no smaller batch (it would be b - 1).
        if b < 2 || self.largest_fit(base, Field::BatchSize, b, b).ok().flatten().is_some() {
            return None;
        }
        self.largest_fit(base, Field::BatchSize, 1, b - 1).ok().flatten().map(|v| v as usize)
    }

    /// What the estimate says it leaves out for the configuration advised on.
    pub fn notes(&self, base: &Config) -> Vec<String> {
        let mut notes = self.predict(base).map(|p| p.notes).unwrap_or_default();
        if self.target == Target::Cpu {
            let amps = if estimate::onednn::lowp_matmul(&Amp::Fp16 { scaler: Default::default() }) {
                "bf16 and fp16"
            } else {
                "bf16"
            };
            notes.push(format!(
                "{amps} options within {} (plus 1% of the peak) of the budget are 'borderline': oneDNN's matmul \
                 scratch buffer on this CPU is not in the estimate",
                crate::spec::format_size(ONEDNN_CPU_SLACK)
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Amp, ModelSpec, OptimizerSpec, ScalerSpec, ScriptSpec};

    fn evaluator(target: Target) -> Evaluator {
        let shape = DataShape { samples: 64, features: 16, classes: 2 };
        Evaluator { target, arch: GpuArch::Hopper, budget: 1 << 30, shape, threads: 1 }
    }

    /// A TorchScript option under autocast is left out, before anything is recorded, exactly
    /// where this CPU lacks the precision's instructions; fp32, the built-in kinds and CUDA are
    /// never cut here.
    #[test]
    fn autocast_recordings_this_cpu_cannot_run_fast_are_left_out() {
        let adam = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 };
        let mlp = crate::spec::examples::mlp(2, 8, 4, adam);
        let mut script = mlp.clone();
        script.model = ModelSpec::Torchscript(ScriptSpec {
            path: "missing.pt".into(),
            loss: Default::default(),
            units: Default::default(),
        });
        let caps = crate::device::CpuCaps::here();
        let cpu = evaluator(Target::Cpu);
        for (amp, p) in [
            (Amp::Fp16 { scaler: ScalerSpec::default() }, crate::device::HalfPrecision::Fp16),
            (Amp::Bf16, crate::device::HalfPrecision::Bf16),
        ] {
            script.training.techniques.amp = amp;
            let why = cpu.not_recorded_here(&script);
            assert_eq!(why.is_some(), !caps.has(p), "{why:?}");
            if let Some(why) = why {
                assert!(why.contains(p.key()) && why.contains("oomlab run"), "{why}");
                // Left out before the (missing) file is read.
                let e = cpu.evaluate(crate::advise::candidates::Candidate {
                    config: script.clone(),
                    changes: vec![],
                });
                assert_eq!((e.verdict, e.error.as_deref()), (Verdict::Unknown, Some(why.as_str())));
            }
            let mut built_in = mlp.clone();
            built_in.training.techniques.amp = amp;
            assert_eq!(cpu.not_recorded_here(&built_in), None);
            assert_eq!(evaluator(Target::Cuda).not_recorded_here(&script), None);
        }
        script.training.techniques.amp = Amp::Off;
        assert_eq!(cpu.not_recorded_here(&script), None);
    }
}
