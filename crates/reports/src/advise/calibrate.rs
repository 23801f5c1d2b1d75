//! Calibration runs: short trainings of a small model shaped like the spec's, one per precision,
//! checkpointing and data placement the options use (each at two micro-batch sizes) and one per
//! optimizer and implementation, timed phase by phase with the device synchronised, and cached
//! per machine so that asking again costs nothing.
//!
//! Timings lie on a busy machine, so every run is measured in two rounds, interleaved (all runs,
//! then all again), and each keeps its faster round; the load average is recorded before and
//! after. The result must then pass [`super::sanity`]'s rules (a larger batch is not faster per
//! step, recomputation is not faster than none, low precision without the CPU's instructions
//! for it is not faster than fp32); a calibration that fails them is measured once more, and if
//! it still fails, the options are not ranked by time ("timings not trustworthy on this machine
//! now") and nothing is cached.
//!
//! The cache (`calibration.json` under `$OOMLAB_CACHE`, else `$XDG_CACHE_HOME/oomlab`, else
//! `~/.cache/oomlab`) maps a run's whole configuration, the machine (host and device), oomlab's
//! version and git revision, libtorch's version and thread count to its measured seconds; only a
//! calibration that passed the rules fills it; `--recalibrate` measures again.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::candidates::Candidate;
use crate::bench::stats::median;
use crate::estimate::timing::{
    calibration_config, Calibration, ModelShape, PassCell, PassKey, UpdateCell, UpdateKey,
};
use crate::estimate::DataShape;
use crate::probe::MemoryProbe;
use crate::run::progress::Progress;
use crate::schema::{Phase, PhaseRecord, TraceLevel};
use crate::spec::{Amp, Checkpoint, Config, Named};
use crate::train::PhaseTimes;

/// A calibration run's micro-batch time is aimed at this many seconds: long enough to time, and
/// large enough that its tensors are past glibc's mmap threshold (up to 32 MiB) as a large
/// batch's are, so that the CPU's page faults on fresh memory are in the measurement; short
/// enough that a dozen runs take seconds.
const TARGET_SECONDS: f64 = 0.5;
/// The first micro-batch size tried: 1, where a pass costs what it costs whatever its size.
const FIRST_BATCH: usize = 1;
/// The most a second size grows from the first.
const MAX_GROWTH: f64 = 65536.0;
/// Rounds every run is measured in (the faster kept), and rounds more when the rules fail.
const ROUNDS: usize = 2;

/// What one calibration run measured: medians over its steps after the first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Gather + forward + backward of the step's one micro-batch.
    pub pass: f64,
    /// Optimizer step + zero_grad (`None` in a forward-only mode).
    pub update: Option<f64>,
}

impl Measured {
    /// The faster of two measurements of one run: noise only ever adds time.
    fn faster(self, other: Measured) -> Measured {
        Measured {
            pass: self.pass.min(other.pass),
            update: match (self.update, other.update) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// A pass measured at its sizes: the key, its calibration model, and its runs' cache keys.
struct PassPlan {
    key: PassKey,
    model: ModelShape,
    /// (micro-batch, run key).
    sizes: Vec<(usize, String)>,
    /// The update measured on the way, by the first run (for its optimizer).
    update: Option<(UpdateKey, String)>,
}

/// Runs (or finds in the cache) what the options need.
pub struct Calibrator<'a> {
    pub probe: &'a dyn MemoryProbe,
    pub shape: DataShape,
    pub cuda: bool,
    /// The most a calibration run may allocate (predicted).
    pub memory_cap: u64,
    pub cache: Cache,
    pub recalibrate: bool,
    pub quiet: bool,
    /// Runs made now, and found in the cache.
    pub runs: usize,
    pub cached: usize,
    pub failed: Vec<String>,
    /// What this calibration measured, by run key, in the order first measured (configs kept
    /// to measure them again).
    pub session: Vec<(String, Config, Measured)>,
}

impl Calibrator<'_> {
    /// Measures every pass and update the candidates need, in interleaved rounds, and checks
    /// the result against the rules.
    pub fn calibrate(&mut self, candidates: &[Candidate]) -> Result<Calibration> {
        let shape = self.shape;
        // Each key once, with the first option that has it and the largest micro-batch any has.
        let mut passes: Vec<(PassKey, Config, usize)> = Vec::new();
        let mut updates: Vec<(UpdateKey, Config)> = Vec::new();
        for c in candidates {
            let key = PassKey::of(&c.config);
            let m = c.config.training.batch_size;
            match passes.iter_mut().find(|p| p.0 == key) {
                Some(p) => p.2 = p.2.max(m),
                None => passes.push((key, c.config.clone(), m)),
            }
            if let Some(key) = UpdateKey::of(&c.config, self.cuda) {
                if !updates.iter().any(|u| u.0 == key) {
                    updates.push((key, c.config.clone()));
                }
            }
        }
        let load_before = load_average();
        let progress = Progress::new(Some(passes.len() * 2 + updates.len()), self.quiet);
        // Round 1: each pass's second size is chosen from its first's time.
        let mut plans = Vec::new();
        for (key, config, largest) in passes {
            progress.start(&format!("calibrating {}", describe_pass(&key)));
            plans.extend(self.pass(&key, &config, largest, &progress)?);
        }
        let mut update_runs: Vec<(UpdateKey, String, u64)> = Vec::new();
        for (key, config) in updates {
            if plans.iter().any(|p| p.update.as_ref().is_some_and(|u| u.0 == key)) {
                progress.done(&format!("update {}: measured with a pass", describe_update(&key)));
                continue;
            }
            progress.start(&format!("calibrating the update {}", describe_update(&key)));
            // The update alone matters: no autocast but the scaler's, no checkpointing.
            let mut c = config.clone();
            if !matches!(c.training.techniques.amp, Amp::Fp16 { .. }) {
                c.training.techniques.amp = Amp::Off;
            }
            c.training.techniques.checkpoint = Checkpoint::None;
            let m = c.training.batch_size.min(16);
            let run = calibration_config(&c, shape, m, None);
            if let Some((run_key, measured)) = self.measure(&run, &progress)? {
                if measured.update.is_some() {
                    let params = ModelShape::of(&run, shape.features, shape.classes).params;
                    update_runs.push((key, run_key, params));
                }
            }
        }
        progress.finish();
        // Round 2 (and a third when the rules fail): every run measured now, again, in order.
        self.again(ROUNDS - 1)?;
        let mut cal = self.assemble(&plans, &update_runs);
        let caps = (!self.cuda).then(crate::device::CpuCaps::here);
        let mut broken = super::sanity::check(&cal, caps);
        if !broken.is_empty() && !self.session.is_empty() {
            self.again(1)?;
            cal = self.assemble(&plans, &update_runs);
            broken = super::sanity::check(&cal, caps);
        }
        cal.load_average = load_before.zip(load_average()).map(|(a, b)| [a, b]);
        cal.untrusted = broken;
        cal.failed = self.failed.clone();
        if cal.untrusted.is_empty() {
            for (key, _, m) in &self.session {
                self.cache.entries.insert(key.clone(), *m);
            }
            self.cache.save()?;
        }
        Ok(cal)
    }

    /// Measures every run of this session `rounds` more times, in order, keeping each run's
    /// faster measurement.
    fn again(&mut self, rounds: usize) -> Result<()> {
        for _ in 0..rounds {
            let progress = Progress::new(Some(self.session.len()), self.quiet);
            for i in 0..self.session.len() {
                let config = self.session[i].1.clone();
                progress.start(&format!("again: {}", describe_run(&config)));
                if let Some(m) = self.train(&config, &progress)? {
                    self.session[i].2 = self.session[i].2.faster(m);
                }
            }
            progress.finish();
        }
        Ok(())
    }

    /// The calibration from what was measured (this session's runs, and the cache's).
    fn assemble(&self, plans: &[PassPlan], update_runs: &[(UpdateKey, String, u64)]) -> Calibration {
        let got = |key: &str| {
            self.session
                .iter()
                .find(|s| s.0 == key)
                .map(|s| s.2)
                .or_else(|| self.cache.entries.get(key).copied())
        };
        let mut cal = Calibration {
            device: self.probe.name(),
            oomlab: env!("CARGO_PKG_VERSION").into(),
            libtorch: crate::ffi::torch_version(),
            passes: Vec::new(),
            updates: Vec::new(),
            failed: Vec::new(),
            load_average: None,
            untrusted: Vec::new(),
        };
        for plan in plans {
            let points: Vec<(usize, f64)> =
                plan.sizes.iter().filter_map(|(m, key)| got(key).map(|x| (*m, x.pass))).collect();
            if points.is_empty() {
                continue;
            }
            if let Some((u, key)) = &plan.update {
                if let Some(seconds) = got(key).and_then(|x| x.update) {
                    if !cal.updates.iter().any(|c| c.key == *u) {
                        cal.updates.push(UpdateCell { key: u.clone(), params: plan.model.params, seconds });
                    }
                }
            }
            cal.passes.push(PassCell::fit(plan.key.clone(), plan.model, points));
        }
        for (key, run, params) in update_runs {
            if let Some(seconds) = got(run).and_then(|x| x.update) {
                cal.updates.push(UpdateCell { key: key.clone(), params: *params, seconds });
            }
        }
        cal
    }

    /// A pass measured at a micro-batch of 1 and at one sized to take about
    /// [`TARGET_SECONDS`], at most `largest` and what fits the memory cap.
    fn pass(
        &mut self,
        key: &PassKey,
        config: &Config,
        largest: usize,
        progress: &Progress,
    ) -> Result<Option<PassPlan>> {
        let shape = self.shape;
        let Some(lo) = self.fitting_batch(config, largest.min(FIRST_BATCH)) else {
            self.failed.push(format!(
                "{}: not even a micro-batch of 1 fits the calibration's memory",
                describe_pass(key)
            ));
            progress.done("skipped");
            progress.done("skipped");
            return Ok(None);
        };
        let first = calibration_config(config, shape, lo, None);
        let Some((lo_key, m_lo)) = self.measure(&first, progress)? else {
            progress.done("skipped");
            return Ok(None);
        };
        let update = m_lo.update.and(UpdateKey::of(&first, self.cuda)).map(|k| (k, lo_key.clone()));
        let mut sizes = vec![(lo, lo_key)];
        let grow = (TARGET_SECONDS / m_lo.pass.max(1e-6)).clamp(1.0, MAX_GROWTH);
        let wanted = ((lo as f64 * grow) as usize).min(largest);
        let hi = self.fitting_batch(config, wanted).unwrap_or(lo);
        if hi as f64 >= lo as f64 * 2.0 {
            if let Some((hi_key, _)) = self.measure(&calibration_config(config, shape, hi, None), progress)? {
                sizes.push((hi, hi_key));
            }
        } else {
            progress.done(&format!("{}: one size ({lo}) is enough", describe_pass(key)));
        }
        let model = ModelShape::of(&first, shape.features, shape.classes);
        Ok(Some(PassPlan { key: key.clone(), model, sizes, update }))
    }

    /// The largest micro-batch at most `wanted` whose calibration run is predicted to fit the
    /// memory cap, halving from `wanted`.
    fn fitting_batch(&self, config: &Config, wanted: usize) -> Option<usize> {
        let mut m = wanted.max(1);
        loop {
            let run = calibration_config(config, self.shape, m, None);
            let peak = crate::estimate::predict(&run).map(|p| p.peak).unwrap_or(0);
            if peak <= self.memory_cap {
                return Some(m);
            }
            if m == 1 {
                return None;
            }
            m /= 2;
        }
    }

    /// One calibration run, from the cache unless `recalibrate`, with its cache key. `None`: it
    /// did not train.
    fn measure(&mut self, config: &Config, progress: &Progress) -> Result<Option<(String, Measured)>> {
        let key = cache_key(&self.probe.name(), config)?;
        if let Some(s) = self.session.iter().find(|s| s.0 == key) {
            progress.done(&format!("{}: measured already", describe_run(config)));
            return Ok(Some((key, s.2)));
        }
        if !self.recalibrate {
            if let Some(m) = self.cache.entries.get(&key) {
                self.cached += 1;
                progress.done(&format!("{}: cached", describe_run(config)));
                return Ok(Some((key, *m)));
            }
        }
        let Some(measured) = self.train(config, progress)? else { return Ok(None) };
        self.session.push((key.clone(), config.clone(), measured));
        Ok(Some((key, measured)))
    }

    /// Trains one calibration run and times it. `None`: it did not train.
    fn train(&mut self, config: &Config, progress: &Progress) -> Result<Option<Measured>> {
        let started = Instant::now();
        // The first step (which makes the optimizer's state) is left out.
        let mut times = PhaseTimes::new(1, config.training.steps.saturating_sub(1));
        let mut sink = |r: &PhaseRecord| {
            times.add(r);
            Ok(())
        };
        let row = crate::train::run_trial(config, self.probe, self.runs + 1, TraceLevel::Sync, &mut sink)?;
        self.runs += 1;
        if !row.status.fitted() {
            self.failed.push(format!("{}: {} ({})", describe_run(config), row.status, row.message));
            progress.done(&format!("{}: {}", describe_run(config), row.status));
            return Ok(None);
        }
        let measured = from_times(&times);
        progress.done(&format!(
            "{}: {:.4} s a pass{} ({:.1} s)",
            describe_run(config),
            measured.pass,
            measured.update.map(|u| format!(", {u:.4} s an update")).unwrap_or_default(),
            started.elapsed().as_secs_f64()
        ));
        Ok(Some(measured))
    }
}

/// The 1-minute load average (`/proc/loadavg`): how busy the machine was.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// Medians over the timed steps: a pass is the gather, forward and backward; an update the
/// optimizer step and zero_grad (none in a forward-only mode).
pub fn from_times(times: &PhaseTimes) -> Measured {
    let pass = times.sum_per_step(&[Phase::ToDevice, Phase::Forward, Phase::Backward]);
    let update = times.sum_per_step(&[Phase::OptimizerStep, Phase::ZeroGrad]);
    Measured { pass: median(&pass), update: times.has(Phase::OptimizerStep).then(|| median(&update)) }
}

fn describe_pass(k: &PassKey) -> String {
    let ck = if k.checkpointed { ", checkpointed" } else { "" };
    format!("{} {} amp {}{ck}, data on {}", k.mode, k.dtype, k.amp, k.location)
}

fn describe_update(k: &UpdateKey) -> String {
    format!(
        "{} {}{}",
        k.optimizer.as_str(),
        k.implementation.as_str(),
        if k.scaled { " with the grad scaler" } else { "" }
    )
}

fn describe_run(c: &Config) -> String {
    let t = &c.training;
    let implementation = t.techniques.optimizer_impl.map_or("default", |i| i.as_str());
    format!(
        "{} batch {} amp {} checkpoint {} {} {implementation}",
        c.model.describe(),
        t.batch_size,
        t.techniques.amp.as_str(),
        t.techniques.checkpoint.name(),
        t.optimizer.name()
    )
}

/// What identifies a run's timing: the machine (host and device), oomlab's version and git
/// revision, libtorch's version, the threads and the configuration.
fn cache_key(device: &str, config: &Config) -> Result<String> {
    let revision = crate::revision::git_info().revision;
    Ok(serde_json::to_string(&(
        gethostname::gethostname().to_string_lossy(),
        device,
        env!("CARGO_PKG_VERSION"),
        revision,
        crate::ffi::torch_version(),
        tch::get_num_threads(),
        config,
    ))?)
}

/// Calibration runs measured before, on disk.
#[derive(Debug, Default)]
pub struct Cache {
    /// `None`: not kept (no cache folder could be found).
    pub path: Option<PathBuf>,
    pub entries: BTreeMap<String, Measured>,
}

impl Cache {
    /// The cache in the user's cache folder; an unreadable file starts afresh (it is a cache).
    pub fn open() -> Cache {
        let path = crate::cache::dir().map(|d| d.join("calibration.json"));
        let entries = path
            .as_ref()
            .and_then(|p| crate::fsio::read_text(p, crate::fsio::SMALL_LIMIT).ok())
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        Cache { path, entries }
    }

    /// Written whole to a temporary file and renamed: never half a cache.
    pub fn save(&self) -> Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        crate::fsio::write_atomic(path, serde_json::to_string(&self.entries)?.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: usize, phase: Phase, seconds: f64) -> PhaseRecord {
        PhaseRecord {
            trial: 1,
            variant: String::new(),
            value: None,
            step,
            micro: 0,
            phase,
            memory_allocated: 0,
            memory_reserved: 0,
            max_memory_allocated: 0,
            max_memory_reserved: 0,
            device_used: None,
            phase_seconds: seconds,
            elapsed_seconds: 0.0,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        }
    }

    #[test]
    fn the_first_step_is_left_out_and_phases_add_up() {
        let mut records = vec![record(0, Phase::Data, 9.0), record(0, Phase::Model, 9.0)];
        for (step, scale) in [(1, 100.0), (2, 1.0), (3, 3.0), (4, 2.0)] {
            records.push(record(step, Phase::ToDevice, 0.1 * scale));
            records.push(record(step, Phase::Forward, 0.2 * scale));
            records.push(record(step, Phase::Backward, 0.3 * scale));
            records.push(record(step, Phase::OptimizerStep, 0.05 * scale));
            records.push(record(step, Phase::ZeroGrad, 0.01 * scale));
        }
        // Steps 2-4 timed, step 1 left out.
        let timed = |records: &[PhaseRecord]| {
            let mut t = PhaseTimes::new(1, 3);
            records.iter().for_each(|r| t.add(r));
            from_times(&t)
        };
        let m = timed(&records);
        assert!((m.pass - 1.2).abs() < 1e-9, "{m:?}");
        assert!((m.update.unwrap() - 0.12).abs() < 1e-9, "{m:?}");
        let forward: Vec<PhaseRecord> = records
            .into_iter()
            .filter(|r| r.phase != Phase::OptimizerStep && r.phase != Phase::ZeroGrad)
            .collect();
        assert_eq!(timed(&forward).update, None);
    }
}
