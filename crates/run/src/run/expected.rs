//! How long a run is expected to take, said before it starts: from what this machine measured
//! before, never from a guess. `run` prints it and asks nothing, but warns past
//! [`LONG_RUN_SECONDS`].
//!
//! Two sources, the first that applies:
//! - **the last run of the same spec here**: its folder's `manifest.json` holds the spec's text
//!   and `summary.csv` each trial's `trial_seconds`; the same text on the same device runs the
//!   same trials, so their sum is what it took;
//! - **a calibration of this machine** (`advice/calibration.json` in the experiment's folder,
//!   written by `oomlab advise` there): each trial the estimate predicts (the sweep as the
//!   estimate walks it) times its steps at the calibration's predicted step time. Only the
//!   steps: setting up the data and the model is not in a calibration, nor the first touches of
//!   fresh memory that make a CPU's first steps slow (`advise --verify` found whole runs 1.5 to 4
//!   times the calibration's steps on a 2-core AMD EPYC), so it is a lower bound and says so.
//!
//! Without either it says how to get one.
use std::path::Path;

use super::plan::Plan;
use crate::estimate::timing::Calibration;
use crate::estimate::{self, Options, Target};
use crate::fsio;
use crate::results::ExperimentDir;

/// Past this, `run` warns (issue #31: a bf16 trial that ran over 6 minutes unannounced).
pub const LONG_RUN_SECONDS: f64 = 600.0;

/// A run's expected duration and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub seconds: f64,
    pub trials: usize,
    pub source: String,
}

impl Expected {
    /// "about 4.5 min for 12 trials (...)".
    pub fn describe(&self) -> String {
        format!(
            "about {} for {} ({})",
            duration(self.seconds),
            crate::units::count(self.trials, "trial"),
            self.source
        )
    }

    pub fn is_long(&self) -> bool {
        self.seconds > LONG_RUN_SECONDS
    }
}

/// The expected duration of `plan` on the device named `device` (a probe's name), whose results
/// go to `dir`; `None` when nothing measured here says.
pub fn expect(plan: &Plan, device: &str, dir: &Path, options: &Options) -> Option<Expected> {
    last_run(plan, device, dir)
        .or_else(|| calibrated(plan, device, dir, options, &plan.not_run(crate::device::CpuCaps::here())))
}

/// The last complete run of the same spec text on this device, in `dir`.
fn last_run(plan: &Plan, device: &str, dir: &Path) -> Option<Expected> {
    let exp = ExperimentDir::read(dir).ok()?;
    let m = &exp.manifest;
    let same =
        m.spec_source == plan.spec.source && m.device.name == device && m.device.budget_bytes == plan.budget;
    if !same || exp.rows.is_empty() {
        return None;
    }
    let seconds: f64 = exp.rows.iter().filter_map(|r| r.trial_seconds).sum();
    (seconds > 0.0).then(|| Expected {
        seconds,
        trials: exp.rows.len(),
        source: format!("what the last run of this spec took here, {}", exp.manifest.started_at),
    })
}

/// The estimate's trials at a calibration's step times, but for the variants this machine leaves
/// out (`left_out`, which `run` will not train).
fn calibrated(
    plan: &Plan,
    device: &str,
    dir: &Path,
    options: &Options,
    left_out: &[crate::results::manifest::NotRun],
) -> Option<Expected> {
    let path = dir.join("advice").join("calibration.json");
    let text = fsio::read_text(&path, fsio::SMALL_LIMIT).ok()?;
    let cal: Calibration = serde_json::from_str(&text).ok()?;
    if cal.device != device || !cal.untrusted.is_empty() {
        return None;
    }
    let cuda = options.target == Target::Cuda;
    let sweeps = estimate::predict_spec(&plan.spec, plan.budget, options).ok()?;
    let mut seconds = 0.0;
    let mut trials = 0;
    let runs =
        |s: &&estimate::SweepPrediction| !left_out.iter().any(|n| s.variant.as_deref() == Some(&n.variant));
    for point in sweeps.iter().filter(runs).flat_map(|s| &s.points) {
        let p = &point.prediction;
        let step = cal.step_seconds(&point.config, p.shape.features, p.shape.classes, cuda)?;
        // A trial predicted to run out stops in the step that does.
        let steps = match plan.budget.and_then(|b| p.first_over(b.saturating_sub(p.baseline_allocated))) {
            Some(at) => at.step.max(1),
            None => point.config.training.steps,
        };
        seconds += step * steps as f64;
        trials += 1;
    }
    let rounds = plan.spec.run.rounds.max(1);
    Some(Expected {
        seconds: seconds * rounds as f64,
        trials: trials * rounds,
        source: format!(
            "the estimate's trials at the step times of {}: steps alone, without setting up data and \
             model or first touches of fresh memory, which can make a CPU run several times longer",
            path.display()
        ),
    })
}

/// "45 s", "4.5 min", "1.2 h".
pub fn duration(seconds: f64) -> String {
    match seconds {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.1} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(duration(12.4), "12 s");
        assert_eq!(duration(270.0), "4.5 min");
        assert_eq!(duration(7200.0), "2.0 h");
    }

    /// A committed run read back: the same spec text on its device expects what it took.
    #[test]
    fn the_last_run_of_the_same_spec_is_what_it_took() {
        use crate::device::DeviceChoice;
        use crate::run::plan::Overrides;
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let dir = root.join("results/cpu-amd-epyc/depth_sweep");
        let exp = ExperimentDir::read(&dir).unwrap();
        // The manifest names the spec from the repository's root; a unit test runs in its crate's.
        let spec = crate::spec::load(&root.join(&exp.manifest.spec_path)).unwrap();
        if spec.source != exp.manifest.spec_source {
            return; // the spec changed since that run: then nothing is expected from it (below)
        }
        let plan = Plan::here(spec, Overrides { device: Some(DeviceChoice::Cpu), budget: None });
        let name = exp.manifest.device.name.clone();
        let got = expect(&plan, &name, &dir, &Options::default()).unwrap();
        let took: f64 = exp.rows.iter().filter_map(|r| r.trial_seconds).sum();
        assert_eq!((got.seconds, got.trials), (took, exp.rows.len()));
        assert!(got.source.contains("the last run of this spec"));
        // Another device, or another budget, runs other trials: nothing is expected from it.
        assert!(last_run(&plan, "another CPU", &dir).is_none());
        let other = Plan { budget: Some(1 << 30), ..plan.clone() };
        assert!(last_run(&other, &name, &dir).is_none());
    }

    /// Without a last run, the calibration `advise` left in the folder times the estimate's
    /// trials; from another device it says nothing.
    #[test]
    fn a_calibration_here_times_the_estimates_trials() {
        use crate::device::DeviceChoice;
        use crate::run::plan::Overrides;
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("advice")).unwrap();
        let committed = root.join("results/cpu-amd-epyc/depth_sweep/advice/calibration.json");
        std::fs::copy(&committed, tmp.path().join("advice/calibration.json")).unwrap();
        let cal: Calibration = serde_json::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
        let spec = crate::spec::load(&root.join("experiments/depth_sweep.toml")).unwrap();
        let plan = Plan::here(spec, Overrides { device: Some(DeviceChoice::Cpu), budget: None });
        let options = Options::default();
        let got = expect(&plan, &cal.device, tmp.path(), &options).unwrap();
        let points: usize = estimate::predict_spec(&plan.spec, plan.budget, &options)
            .unwrap()
            .iter()
            .map(|s| s.points.len())
            .sum();
        assert_eq!(got.trials, points);
        assert!(got.seconds > 0.0 && got.source.contains("calibration.json"), "{got:?}");
        assert_eq!(expect(&plan, "another CPU", tmp.path(), &options), None);

        // A variant this CPU leaves out is not in the time: `run` will not train it.
        let mut plan = plan;
        plan.spec.variants[0].skip_on_cpu_without = Some(crate::device::HalfPrecision::Bf16);
        let without = crate::device::CpuCaps { bf16: false, fp16: false };
        let left_out = plan.not_run(without);
        assert_eq!(left_out.len(), 1);
        let fewer = calibrated(&plan, &cal.device, tmp.path(), &options, &left_out).unwrap();
        let first: usize = estimate::predict_spec(&plan.spec, plan.budget, &options).unwrap()[0].points.len();
        assert_eq!(fewer.trials, points - first);
        assert!(fewer.seconds < got.seconds, "{fewer:?} against {got:?}");
    }

    #[test]
    fn long_means_over_ten_minutes() {
        let e = |seconds| Expected { seconds, trials: 3, source: "x".into() };
        assert!(!e(600.0).is_long() && e(601.0).is_long());
        assert_eq!(e(601.0).describe(), "about 10.0 min for 3 trials (x)");
    }
}
