//! The rules a configuration keeps once it is built: reading and setting the field a sweep
//! varies, and checking every invariant (limits included) with the key at fault kept apart from
//! the words, as [`Invalid`].
use super::{limits, Checkpoint, Config, DataSpec, Field, Mode};

impl Config {
    /// The value of a swept field; `None` for a data field of CSV data.
    pub fn get(&self, field: Field) -> Option<f64> {
        let synthetic = match &self.data {
            DataSpec::Synthetic { samples, features, .. } => Some((*samples, *features)),
            DataSpec::Csv { .. } => None,
        };
        Some(match field {
            Field::Depth => self.model.depth as f64,
            Field::Hidden => self.model.hidden as f64,
            Field::BatchSize => self.training.batch_size as f64,
            Field::Steps => self.training.steps as f64,
            Field::Samples => synthetic?.0 as f64,
            Field::Features => synthetic?.1 as f64,
            Field::Lr => self.training.optimizer.lr(),
            Field::Accumulation => self.training.techniques.accumulation as f64,
        })
    }

    /// A copy with `field` set to `value`, checked against the invariants. The error says what is
    /// wrong with the value, without naming the file (the caller knows where it came from).
    pub fn with(&self, field: Field, value: f64) -> Result<Config, Invalid> {
        let mut c = self.clone();
        let whole = || -> Result<usize, Invalid> {
            if value.fract() != 0.0 || value < 0.0 || value > u32::MAX as f64 {
                return Err(Invalid::new(field.key(), format!("takes whole numbers >= 0, not {value}")));
            }
            Ok(value as usize)
        };
        match field {
            Field::Depth => c.model.depth = whole()?,
            Field::Hidden => c.model.hidden = whole()?,
            Field::BatchSize => c.training.batch_size = whole()?,
            Field::Steps => c.training.steps = whole()?,
            Field::Samples | Field::Features => {
                let n = whole()?;
                match &mut c.data {
                    DataSpec::Synthetic { samples, features, .. } => {
                        *if field == Field::Samples { samples } else { features } = n
                    }
                    DataSpec::Csv { .. } => {
                        return Err(Invalid::new(field.key(), "can only be swept for synthetic data"))
                    }
                }
            }
            Field::Lr => c.training.optimizer.set_lr(value),
            Field::Accumulation => c.training.techniques.accumulation = whole()?,
        }
        c.check()?;
        Ok(c)
    }

    /// The invariants that tie fields together.
    pub fn check(&self) -> Result<(), Invalid> {
        if self.model.hidden == 0 {
            return Err(Invalid::new("model.hidden", "must be at least 1"));
        }
        if self.training.batch_size == 0 {
            return Err(Invalid::new("training.batch_size", "must be at least 1"));
        }
        if self.training.steps == 0 {
            return Err(Invalid::new("training.steps", "must be at least 1"));
        }
        let t = &self.training.techniques;
        if t.accumulation == 0 {
            return Err(Invalid::new("training.accumulation", "must be at least 1"));
        }
        self.within_limits()?;
        if t.mode != Mode::Train && (t.accumulation > 1 || t.checkpoint != Checkpoint::None) {
            let mode = if t.mode == Mode::Forward { "forward" } else { "forward_no_grad" };
            return Err(Invalid::new(
                "training.mode",
                format!(
                    "\"{mode}\" has no backward pass: accumulation and checkpoint apply to mode = \"train\" only"
                ),
            ));
        }
        let lr = self.training.optimizer.lr();
        if !(lr.is_finite() && lr > 0.0) {
            return Err(Invalid::new("training.lr", format!("must be a positive number, not {lr}")));
        }
        if let DataSpec::Synthetic { samples, features, classes, .. } = self.data {
            if features == 0 {
                return Err(Invalid::new("data.features", "must be at least 1"));
            }
            if classes < 2 {
                return Err(Invalid::new("data.classes", "must be at least 2"));
            }
            if self.training.batch_size > samples {
                let message = format!(
                    "{} is larger than data.samples {samples}: a batch is drawn from the data set without repeats",
                    self.training.batch_size
                );
                return Err(Invalid {
                    fix: Some("raise data.samples"),
                    ..Invalid::new("training.batch_size", message)
                });
            }
        }
        Ok(())
    }
}

impl Config {
    /// Every size at most its bound in [`limits`], and no tensor over 2^63 bytes.
    pub fn within_limits(&self) -> Result<(), Invalid> {
        let mut sizes = vec![
            ("model.depth", self.model.depth, limits::MAX_DEPTH),
            ("model.hidden", self.model.hidden, limits::MAX_HIDDEN),
            ("training.batch_size", self.training.batch_size, limits::MAX_BATCH_SIZE),
            ("training.steps", self.training.steps, limits::MAX_STEPS),
            ("training.accumulation", self.training.techniques.accumulation, limits::MAX_ACCUMULATION),
        ];
        if let DataSpec::Synthetic { samples, features, classes, .. } = self.data {
            sizes.push(("data.samples", samples, limits::MAX_SAMPLES));
            sizes.push(("data.features", features, limits::MAX_FEATURES));
            sizes.push(("data.classes", classes, limits::MAX_CLASSES));
        }
        if let Checkpoint::Every(k) = self.training.techniques.checkpoint {
            sizes.push(("training.checkpoint", k, limits::MAX_DEPTH));
        }
        for (key, value, max) in sizes {
            if value > max {
                return Err(Invalid {
                    fix: Some(limits::FIX),
                    ..Invalid::new(key, format!("must be at most {max}, got {value}"))
                });
            }
        }
        // The run keeps a trial's trace rows until the trial ends (so trace.csv holds whole
        // trials): their number is what bounds that memory, not either factor alone.
        let (steps, accumulation) = (self.training.steps, self.training.techniques.accumulation);
        let phases = steps.saturating_mul(accumulation.saturating_mul(3).saturating_add(2));
        if phases > limits::MAX_PHASES {
            return Err(Invalid {
                fix: Some(limits::FIX),
                ..Invalid::new(
                    "training.steps",
                    format!(
                        "x training.accumulation makes {phases} phases a trial ({steps} steps of {accumulation} \
                         micro-batches); at most {}",
                        limits::MAX_PHASES
                    ),
                )
            });
        }
        match limits::largest_tensor_bytes(self) {
            Some(bytes) if bytes <= limits::MAX_TENSOR_BYTES => Ok(()),
            _ => Err(Invalid {
                fix: Some("lower model.hidden, training.batch_size, data.samples or data.features"),
                ..Invalid::new("model.hidden", "with these sizes makes a tensor of more than 2^63 bytes")
            }),
        }
    }
}

/// A config that breaks an invariant. The key is kept apart from the words so that the validator
/// can place the error at the key's value in the spec without reading it out of the sentence.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} {message}{}", .fix.map(|fix| format!("; {fix}")).unwrap_or_default())]
pub struct Invalid {
    /// The dotted key at fault, e.g. `training.batch_size`.
    pub key: &'static str,
    /// What is wrong, to follow the key: "must be at least 1".
    pub message: String,
    /// How to fix it, where the invariant knows better than "change the value".
    pub fix: Option<&'static str>,
}

impl Invalid {
    fn new(key: &'static str, message: impl Into<String>) -> Invalid {
        Invalid { key, message: message.into(), fix: None }
    }
}
