//! Step time, predicted from measurements: a [`Calibration`] holds short runs' timings on one
//! device, and [`Calibration::step_seconds`] scales them to any option.
//!
//! The model of a training step with `k` micro-batches of `m` samples is
//!
//! `step = k * (alpha + beta * m) + update`
//!
//! - `alpha + beta * m` is one micro-batch's gather, forward and backward (with its
//!   recompute under checkpointing), measured at a micro-batch of 1 and at one sized to take a
//!   quarter of a second, on a model of the spec's data shape, precision and techniques with at
//!   most two hidden layers of at most 2048 units. `alpha` is what a pass costs whatever its
//!   size (reading every weight, launching every kernel): it scales with the parameters;
//!   `beta` is the arithmetic per sample: it scales with the multiply-adds per sample.
//!   Checkpointing recomputes every hidden layer once whatever the segment length
//!   (`train::checkpoint`), so one measurement stands for every length.
//! - `update` is the optimizer step and zero_grad, measured once per optimizer, implementation
//!   and grad scaler, and scaled with the parameter count (the update reads and writes every
//!   parameter, its gradient and its state).
//!
//! These are linear extrapolations from small runs: exact for neither, checked by
//! `advise --verify`, which says how far off they were.
use serde::{Deserialize, Serialize};

use crate::estimate::DataShape;
use crate::spec::{
    Amp, AmpKind, Checkpoint, Config, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec, Named,
    OptimizerImpl, OptimizerKind, OptimizerSpec,
};

/// What a micro-batch's time depends on besides its size: the key of a pass measurement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PassKey {
    pub mode: Mode,
    pub dtype: Dtype,
    pub amp: AmpKind,
    pub checkpointed: bool,
    pub location: DataLocation,
}

impl PassKey {
    pub fn of(c: &Config) -> PassKey {
        let t = &c.training;
        PassKey {
            mode: t.techniques.mode,
            dtype: t.dtype,
            amp: t.techniques.amp.kind(),
            // `{ sequential = 1 }` recomputes nothing: PyTorch runs it plain.
            checkpointed: t.techniques.checkpoint.segments(c.model.units()).is_some(),
            location: c.location,
        }
    }
}

/// What an update's time depends on: the key of an update measurement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UpdateKey {
    pub optimizer: OptimizerKind,
    pub implementation: OptimizerImpl,
    /// The fp16 grad scaler unscales and checks the gradients in the update.
    pub scaled: bool,
}

impl UpdateKey {
    /// `None` for a forward-only mode, which has no update.
    pub fn of(c: &Config, cuda: bool) -> Option<UpdateKey> {
        let t = &c.training;
        (t.techniques.mode == Mode::Train).then(|| UpdateKey {
            optimizer: t.optimizer.kind(),
            implementation: OptimizerImpl::resolve(t.techniques.optimizer_impl, cuda),
            scaled: matches!(t.techniques.amp, Amp::Fp16 { .. }),
        })
    }
}

/// The shape that scales a measurement to another model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelShape {
    /// Linear layers (hidden layers and the head).
    pub layers: usize,
    /// Multiply-adds of a forward per sample.
    pub macs_per_sample: f64,
    pub params: u64,
}

impl ModelShape {
    /// `features`, `classes`: the data's; the MLP's own widths from `c` (advise times MLPs only:
    /// it needs the estimate, which models them).
    pub fn of(c: &Config, features: usize, classes: usize) -> ModelShape {
        let mut sizes = vec![features as f64];
        sizes.extend(c.model.mlp_widths().unwrap_or_default().into_iter().map(|w| w as f64));
        sizes.push(classes as f64);
        let macs: f64 = sizes.windows(2).map(|w| w[0] * w[1]).sum();
        let params = sizes.windows(2).map(|w| w[0] * w[1] + w[1]).sum::<f64>() as u64;
        ModelShape { layers: sizes.len() - 1, macs_per_sample: macs, params }
    }
}

/// One micro-batch's time at a model shape: `alpha + beta * m` seconds, from `points`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassCell {
    pub key: PassKey,
    pub shape: ModelShape,
    /// (micro-batch, median seconds of its gather + forward + backward).
    pub points: Vec<(usize, f64)>,
    pub alpha: f64,
    pub beta: f64,
}

impl PassCell {
    /// Fits `alpha + beta * m` through the measured points (least squares over two or more;
    /// through the origin for one, or when noise would make either term negative).
    pub fn fit(key: PassKey, shape: ModelShape, points: Vec<(usize, f64)>) -> PassCell {
        let n = points.len() as f64;
        let (mut alpha, mut beta) = (0.0, 0.0);
        if points.len() >= 2 {
            let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
            let my = points.iter().map(|p| p.1).sum::<f64>() / n;
            let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
            let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
            if sxx > 0.0 {
                beta = sxy / sxx;
                alpha = my - beta * mx;
            }
        }
        let (m_hi, t_hi) = points.iter().copied().max_by_key(|p| p.0).unwrap_or((1, 0.0));
        if points.len() < 2 || beta <= 0.0 {
            // One size, or a larger batch that measured no slower: a floor, whatever the size.
            (alpha, beta) = (points.iter().map(|p| p.1).sum::<f64>() / n.max(1.0), 0.0);
        } else if alpha < 0.0 {
            (alpha, beta) = (0.0, t_hi / m_hi.max(1) as f64);
        }
        PassCell { key, shape, points, alpha, beta }
    }

    /// Seconds for a micro-batch of `m` through a model of `shape`.
    pub fn seconds(&self, m: usize, shape: ModelShape) -> f64 {
        let weights = shape.params as f64 / self.shape.params.max(1) as f64;
        let work = shape.macs_per_sample / self.shape.macs_per_sample.max(1.0);
        self.alpha * weights + self.beta * m as f64 * work
    }
}

/// One update's time at a parameter count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateCell {
    pub key: UpdateKey,
    pub params: u64,
    /// Median seconds of optimizer_step + zero_grad.
    pub seconds: f64,
}

/// Timings measured on one device, enough to predict the step time of every option.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The device's name, as the probe gives it.
    pub device: String,
    pub oomlab: String,
    pub libtorch: String,
    pub passes: Vec<PassCell>,
    pub updates: Vec<UpdateCell>,
    /// Calibration runs that did not train (an OOM, an error), in words.
    pub failed: Vec<String>,
    /// The 1-minute load average before and after calibrating (absent in files from before).
    #[serde(default)]
    pub load_average: Option<[f64; 2]>,
    /// The rules the measurements broke ([`super::sanity`]), in words: when any, the timings are
    /// not trusted and the options are not ranked by them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untrusted: Vec<String>,
}

impl Calibration {
    /// Whether a file's calibration can time options for a CUDA device (`cuda`) or the CPU: made
    /// on that kind of device (a CPU's times rank a GPU's options wrongly), every time and fit
    /// finite and not negative, every shape's sizes above zero (the times are scaled by them).
    /// The key at fault, where not.
    pub fn check(&self, cuda: bool) -> std::result::Result<(), String> {
        let on_cpu = self.device.starts_with("CPU");
        if on_cpu == cuda {
            let (here, there) = if cuda { ("a CUDA device", "the CPU") } else { ("the CPU", "a GPU") };
            return Err(format!(
                "made on {} (`device`), which is {there}: its times do not rank options for {here}; give a \
                 calibration made on one (the calibration.json an advise there wrote beside its advice)",
                self.device
            ));
        }
        let bad = |key: String, v: f64| {
            Err(format!("{key} is {v}: a time is finite and not negative; the file is damaged"))
        };
        for (i, p) in self.passes.iter().enumerate() {
            for (name, v) in [("alpha", p.alpha), ("beta", p.beta)] {
                if !v.is_finite() || v < 0.0 {
                    return bad(format!("passes[{i}].{name}"), v);
                }
            }
            if let Some((j, &(_, t))) =
                p.points.iter().enumerate().find(|(_, (_, t))| !t.is_finite() || *t < 0.0)
            {
                return bad(format!("passes[{i}].points[{j}]"), t);
            }
            let shape = &p.shape;
            if shape.layers == 0
                || shape.params == 0
                || !(shape.macs_per_sample.is_finite() && shape.macs_per_sample > 0.0)
            {
                return Err(format!(
                    "passes[{i}].shape is {shape:?}: a model measured has layers, parameters and multiply-adds; the \
                     file is damaged"
                ));
            }
        }
        for (i, u) in self.updates.iter().enumerate() {
            if !u.seconds.is_finite() || u.seconds < 0.0 {
                return bad(format!("updates[{i}].seconds"), u.seconds);
            }
            if u.params == 0 {
                return Err(format!(
                    "updates[{i}].params is 0: a step updates parameters; the file is damaged"
                ));
            }
        }
        Ok(())
    }

    /// What `c` needs that this calibration did not measure, in words ("adamw for_loop
    /// update"): why [`Calibration::step_seconds`] has no time for it.
    pub fn missing(&self, c: &Config, cuda: bool) -> Vec<String> {
        let mut out = Vec::new();
        let key = PassKey::of(c);
        if !self.passes.iter().any(|p| p.key == key) {
            let checkpointed = if key.checkpointed { ", checkpointed" } else { "" };
            out.push(format!(
                "a {} pass ({}, amp {}{checkpointed}, data on the {})",
                key.mode.as_str(),
                key.dtype.as_str(),
                key.amp.as_str(),
                key.location.as_str()
            ));
        }
        if let Some(key) = UpdateKey::of(c, cuda).filter(|k| !self.updates.iter().any(|u| &u.key == k)) {
            let scaled = if key.scaled { " with the grad scaler" } else { "" };
            out.push(format!(
                "the {} update ({}{scaled})",
                key.optimizer.as_str(),
                key.implementation.as_str()
            ));
        }
        out
    }

    /// The predicted seconds of one training step of `c` (data of `features` and `classes`),
    /// or `None` when a measurement it needs is missing.
    pub fn step_seconds(&self, c: &Config, features: usize, classes: usize, cuda: bool) -> Option<f64> {
        let shape = ModelShape::of(c, features, classes);
        let key = PassKey::of(c);
        let pass = self.passes.iter().find(|p| p.key == key)?;
        let t = &c.training;
        let mut per_pass = pass.seconds(t.batch_size, shape);
        // Recomputation is never free: a checkpointed pass takes at least its plain twin's time.
        // Two lines fitted at a calibration's small batches can cross far beyond them (the
        // whole-dataset batch of 1,173,000 is 1,000 times the largest measured), and a crossing
        // there is the fit's, not the machine's.
        if key.checkpointed {
            let plain = PassKey { checkpointed: false, ..key.clone() };
            if let Some(twin) = self.passes.iter().find(|p| p.key == plain) {
                per_pass = per_pass.max(twin.seconds(t.batch_size, shape));
            }
        }
        let mut seconds = t.techniques.accumulation as f64 * per_pass;
        if let Some(key) = UpdateKey::of(c, cuda) {
            let update = self.updates.iter().find(|u| u.key == key)?;
            seconds += update.seconds * shape.params as f64 / update.params.max(1) as f64;
        }
        Some(seconds)
    }
}

/// Where an advice's times come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum TimingSource {
    /// Measured by calibration runs on this device now (`runs` of them; the rest from the cache).
    Calibrated { device: String, runs: usize, cached: usize, seconds: f64 },
    /// Read from a calibration file (`--calibration`).
    File { path: String, device: String },
    /// No times: why.
    None { why: String },
}

impl TimingSource {
    pub fn describe(&self) -> String {
        match self {
            TimingSource::Calibrated { device, runs, cached, seconds } => format!(
                "measured on {device} by {} calibration runs ({runs} now in {seconds:.1} s, {cached} from the cache), \
                 scaled to each option",
                runs + cached
            ),
            TimingSource::File { path, device } => {
                format!("from the calibration in {path} (measured on {device}), scaled to each option")
            }
            TimingSource::None { why } => format!("not predicted: {why}"),
        }
    }
}

/// Hidden layers of a calibration model: one `hidden x hidden` product, enough to time one.
pub const CALIBRATION_DEPTH: usize = 2;
/// Units of a calibration model's hidden layers: wide enough that its products are as efficient
/// as a wide model's, narrow enough that fp16 on a CPU (tens of times slower than fp32) times in
/// seconds.
pub const CALIBRATION_WIDTH: usize = 2048;

/// The calibration model for `c`: the same data shape, precision and techniques, at most
/// [`CALIBRATION_DEPTH`] hidden layers of at most [`CALIBRATION_WIDTH`] units, trained for three
/// steps of one micro-batch of `batch`, the spec's optimizer unless `optimizer` names another.
pub fn calibration_config(
    c: &Config,
    shape: DataShape,
    batch: usize,
    optimizer: Option<(OptimizerSpec, OptimizerImpl)>,
) -> Config {
    let mut out = c.clone();
    out.model =
        ModelSpec::mlp(c.model.width().clamp(1, CALIBRATION_WIDTH), c.model.units().min(CALIBRATION_DEPTH));
    // Synthetic rows of the data's shape: a CSV's values do not change the time.
    out.data =
        DataSpec::Synthetic { samples: batch, features: shape.features, classes: shape.classes, seed: 0 };
    let t = &mut out.training;
    t.batch_size = batch;
    t.steps = 3;
    t.techniques.accumulation = 1;
    t.techniques.history = History::None;
    t.techniques.checkpoint = match c.training.techniques.checkpoint.segments(c.model.units()) {
        Some(_) => Checkpoint::Sqrt,
        None => Checkpoint::None,
    };
    if let Some((spec, implementation)) = optimizer {
        t.optimizer = spec;
        t.techniques.optimizer_impl = Some(implementation);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::examples::mlp as config;

    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };

    #[test]
    fn a_two_point_fit_recovers_a_line_and_falls_back_to_the_origin_on_noise() {
        let shape = ModelShape { layers: 2, macs_per_sample: 100.0, params: 10 };
        let key = PassKey::of(&config(1, 8, 4, ADAM));
        let c = PassCell::fit(key.clone(), shape, vec![(10, 0.003), (50, 0.011)]);
        assert!((c.alpha - 0.001).abs() < 1e-12 && (c.beta - 0.0002).abs() < 1e-12, "{c:?}");
        assert!((c.seconds(100, shape) - 0.021).abs() < 1e-12);
        // Four times the weights and the work per sample.
        let big = ModelShape { layers: 4, macs_per_sample: 400.0, params: 40 };
        assert!((c.seconds(100, big) - (0.004 + 0.08)).abs() < 1e-12);
        // The larger batch measured faster: a floor whatever the size.
        let noisy = PassCell::fit(key.clone(), shape, vec![(10, 0.005), (50, 0.004)]);
        assert!((noisy.alpha - 0.0045).abs() < 1e-15 && noisy.beta == 0.0, "{noisy:?}");
        // A steep line through a small intercept: no negative floor, all per sample.
        let steep = PassCell::fit(key, shape, vec![(10, 0.001), (50, 0.011)]);
        assert_eq!((steep.alpha, steep.beta), (0.0, 0.011 / 50.0));
    }

    #[test]
    fn a_step_is_its_micro_batches_and_one_update() {
        let mut c = config(2, 8, 16, ADAM);
        c.training.techniques.accumulation = 4;
        let shape = ModelShape::of(&c, 32, 4);
        assert_eq!(shape.params, (32 * 8 + 8 + 8 * 8 + 8 + 8 * 4 + 4) as u64);
        assert_eq!(shape.macs_per_sample, (32 * 8 + 8 * 8 + 8 * 4) as f64);
        let pass = PassCell::fit(PassKey::of(&c), shape, vec![(16, 0.01)]);
        let update =
            UpdateCell { key: UpdateKey::of(&c, false).unwrap(), params: shape.params / 2, seconds: 0.5 };
        let cal = Calibration {
            device: "cpu".into(),
            oomlab: "0".into(),
            libtorch: "0".into(),
            passes: vec![pass],
            updates: vec![update],
            failed: vec![],
            load_average: None,
            untrusted: vec![],
        };
        let got = cal.step_seconds(&c, 32, 4, false).unwrap();
        assert!((got - (4.0 * 0.01 + 1.0)).abs() < 1e-9, "{got}");
        c.training.techniques.amp = Amp::Bf16;
        assert_eq!(cal.step_seconds(&c, 32, 4, false), None, "no bf16 pass was measured");
    }

    /// A checkpointed pass whose line, fitted at small batches, dips under its plain twin's far
    /// beyond them is predicted at the twin's time there: recomputation is never free.
    #[test]
    fn a_checkpointed_step_is_never_predicted_faster_than_its_plain_twin() {
        let mut c = config(2, 8, 16, ADAM);
        let shape = ModelShape::of(&c, 32, 4);
        let plain = PassCell::fit(PassKey::of(&c), shape, vec![(1, 0.010), (64, 0.50)]);
        c.training.techniques.checkpoint = Checkpoint::Every(1);
        let checkpointed = PassCell::fit(PassKey::of(&c), shape, vec![(1, 0.012), (256, 1.90)]);
        let cal = Calibration {
            device: "cpu".into(),
            oomlab: "0".into(),
            libtorch: "0".into(),
            passes: vec![plain.clone(), checkpointed.clone()],
            // An update of no time: the step is its pass.
            updates: vec![UpdateCell {
                key: UpdateKey::of(&c, false).unwrap(),
                params: shape.params,
                seconds: 0.0,
            }],
            failed: vec![],
            load_average: None,
            untrusted: vec![],
        };
        for batch in [16, 1_000_000] {
            c.training.batch_size = batch;
            let got = cal.step_seconds(&c, 32, 4, false).unwrap();
            let want = checkpointed.seconds(batch, shape).max(plain.seconds(batch, shape));
            assert!((got - want).abs() < 1e-12, "batch {batch}: {got} vs {want}");
        }
        assert!(checkpointed.seconds(1_000_000, shape) < plain.seconds(1_000_000, shape));
    }

    #[test]
    fn the_calibration_model_is_small_and_keeps_the_techniques() {
        let mut c = config(40, 4096, 32, ADAM);
        c.training.techniques.checkpoint = Checkpoint::Every(4);
        c.training.techniques.amp = Amp::Bf16;
        let cal = calibration_config(&c, DataShape { samples: 32, features: 32, classes: 4 }, 8, None);
        assert_eq!(
            (cal.model.clone(), cal.training.batch_size, cal.training.steps),
            (ModelSpec::mlp(2048, 2), 8, 3)
        );
        assert_eq!(cal.training.techniques.checkpoint, Checkpoint::Sqrt);
        // One segment of checkpoint_sequential's is the plain pass: timed as one.
        c.training.techniques.checkpoint = Checkpoint::Sequential(1);
        assert!(!PassKey::of(&c).checkpointed);
        let cal = calibration_config(&c, DataShape { samples: 32, features: 32, classes: 4 }, 8, None);
        assert_eq!(cal.training.techniques.checkpoint, Checkpoint::None);
        assert_eq!(PassKey::of(&cal), PassKey::of(&c));
        assert!(cal.check().is_ok());
    }
}
