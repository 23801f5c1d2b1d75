//! The rules a configuration keeps once it is built: reading and setting the field a sweep
//! varies, and checking every invariant (limits included) with the key at fault kept apart from
//! the words, as [`Invalid`].
use super::{
    limits, Amp, Checkpoint, CnnSpec, Config, DataSpec, Dtype, Field, MlpSpec, Mode, ModelSpec, Named,
};

impl Config {
    /// The 16-bit precision its products run in, if any: autocast's, else the parameters' dtype.
    pub fn half_precision(&self) -> Option<crate::device::HalfPrecision> {
        use crate::device::HalfPrecision;
        match (self.training.techniques.amp, self.training.dtype) {
            (Amp::Bf16, _) | (Amp::Off, Dtype::Bfloat16) => Some(HalfPrecision::Bf16),
            (Amp::Fp16 { .. }, _) | (Amp::Off, Dtype::Float16) => Some(HalfPrecision::Fp16),
            (Amp::Off, _) => None,
        }
    }

    /// The value of a swept field; `None` where the model or data has no such field (a CNN's
    /// `model.hidden`, a CSV's `data.samples`).
    pub fn get(&self, field: Field) -> Option<f64> {
        let n = |v: usize| Some(v as f64);
        match (field, &self.model, &self.data) {
            (Field::Depth, ModelSpec::Mlp(MlpSpec::Uniform { depth, .. }), _) => n(*depth),
            (Field::Depth, ModelSpec::Cnn(CnnSpec::Plain { depth, .. }), _) => n(*depth),
            (Field::Hidden, ModelSpec::Mlp(MlpSpec::Uniform { hidden, .. }), _) => n(*hidden),
            (Field::Channels, ModelSpec::Cnn(CnnSpec::Plain { channels, .. }), _) => n(*channels),
            (Field::DModel, ModelSpec::Transformer(t), _) => n(t.d_model),
            (Field::NumLayers, ModelSpec::Transformer(t), _) => n(t.num_layers),
            // A global batch reads as written: the per-rank share follows from it.
            (Field::BatchSize, ..) => n(self.parallel.global_batch.unwrap_or(self.training.batch_size)),
            (Field::WorldSize, ..) if self.parallel.is_distributed() => n(self.parallel.world_size),
            (Field::Steps, ..) => n(self.training.steps),
            (Field::Samples, _, d) => n(d.samples()?),
            (Field::Features, _, DataSpec::Synthetic { features, .. }) => n(*features),
            (Field::ImageSize, _, DataSpec::Images { size, .. }) => n(*size),
            (Field::SeqLen, _, DataSpec::Tokens { seq_len, .. }) => n(*seq_len),
            (Field::Lr, ..) => Some(self.training.optimizer.lr()),
            (Field::Accumulation, ..) => n(self.training.techniques.accumulation),
            _ => None,
        }
    }

    /// A copy with `field` set to `value`, checked against the invariants. The error says what is
    /// wrong with the value, without naming the file (the caller knows where it came from).
    pub fn with(&self, field: Field, value: f64) -> Result<Config, Invalid> {
        let mut c = self.clone();
        if field == Field::Lr {
            c.training.optimizer.set_lr(value);
            c.check()?;
            return Ok(c);
        }
        if value.fract() != 0.0 || value < 0.0 || value > u32::MAX as f64 {
            return Err(Invalid::new(field.key(), format!("takes whole numbers, not {value}")));
        }
        let v = value as usize;
        // The batch and the world size meet in a global batch: each rank's share is set anew.
        match field {
            Field::WorldSize if !c.parallel.is_distributed() => {
                return Err(Invalid::new(
                    field.key(),
                    format!("does not apply here: it is {}", field.applies_to()),
                ))
            }
            Field::WorldSize => c.parallel.world_size = v,
            Field::BatchSize if c.parallel.global_batch.is_some() => c.parallel.global_batch = Some(v),
            _ => {}
        }
        if matches!(field, Field::WorldSize | Field::BatchSize) {
            if let Some(global) = c.parallel.global_batch {
                c.training.batch_size = global / c.parallel.world_size.max(1);
                c.check_global_batch(global)?;
                c.check()?;
                return Ok(c);
            }
            if field == Field::WorldSize {
                c.check()?;
                return Ok(c);
            }
        }
        let slot: &mut usize = match (field, &mut c.model, &mut c.data) {
            (Field::Depth, ModelSpec::Mlp(MlpSpec::Uniform { depth, .. }), _) => depth,
            (Field::Depth, ModelSpec::Cnn(CnnSpec::Plain { depth, .. }), _) => depth,
            (Field::Hidden, ModelSpec::Mlp(MlpSpec::Uniform { hidden, .. }), _) => hidden,
            (Field::Channels, ModelSpec::Cnn(CnnSpec::Plain { channels, .. }), _) => channels,
            (Field::DModel, ModelSpec::Transformer(t), _) => &mut t.d_model,
            (Field::NumLayers, ModelSpec::Transformer(t), _) => &mut t.num_layers,
            (Field::BatchSize, ..) => &mut c.training.batch_size,
            (Field::Steps, ..) => &mut c.training.steps,
            (Field::Accumulation, ..) => &mut c.training.techniques.accumulation,
            (
                Field::Samples,
                _,
                DataSpec::Synthetic { samples, .. }
                | DataSpec::Images { samples, .. }
                | DataSpec::Tokens { samples, .. }
                | DataSpec::Tensors { samples, .. },
            ) => samples,
            (Field::Features, _, DataSpec::Synthetic { features, .. }) => features,
            (Field::ImageSize, _, DataSpec::Images { size, .. }) => size,
            (Field::SeqLen, _, DataSpec::Tokens { seq_len, .. }) => seq_len,
            _ => {
                return Err(Invalid::new(
                    field.key(),
                    format!("does not apply here: it is {}", field.applies_to()),
                ))
            }
        };
        *slot = v;
        c.check()?;
        Ok(c)
    }

    /// A global batch splits evenly over the world's ranks (the per-rank share is whole, >= 1).
    fn check_global_batch(&self, global: usize) -> Result<(), Invalid> {
        let world = self.parallel.world_size;
        if world == 0 || !global.is_multiple_of(world) || global < world {
            return Err(Invalid {
                fix: Some("give a global batch that the world size divides, or batch = \"per_rank\""),
                ..Invalid::new(
                    "training.batch_size",
                    format!(
                        "= {global} with batch = \"global\" does not split evenly over world_size = {world} \
                         ranks: each rank takes an equal whole share"
                    ),
                )
            });
        }
        Ok(())
    }

    /// `[parallel]`'s rules: a world of one process without a strategy; DDP trains.
    fn check_parallel(&self) -> Result<(), Invalid> {
        let p = &self.parallel;
        if p.world_size == 0 {
            return Err(Invalid::new("parallel.world_size", "must be at least 1"));
        }
        if p.world_size > limits::MAX_WORLD_SIZE {
            return Err(Invalid::new(
                "parallel.world_size",
                format!("must be at most {}, not {}", limits::MAX_WORLD_SIZE, p.world_size),
            ));
        }
        if !p.is_distributed() && p.world_size > 1 {
            return Err(Invalid {
                fix: Some("set parallel.strategy = \"ddp\""),
                ..Invalid::new(
                    "parallel.world_size",
                    format!("= {} needs a strategy that shares the work between the ranks", p.world_size),
                )
            });
        }
        if let Some(global) = p.global_batch {
            self.check_global_batch(global)?;
            if self.training.batch_size * p.world_size != global {
                return Err(Invalid::new(
                    "training.batch_size",
                    format!(
                        "each rank's share {} times world_size = {} is not the global batch {global}",
                        self.training.batch_size, p.world_size
                    ),
                ));
            }
        }
        if p.ddp().is_some() && self.training.techniques.mode != Mode::Train {
            return Err(Invalid {
                fix: Some("set training.mode = \"train\", or remove [parallel]"),
                ..Invalid::new(
                    "parallel.strategy",
                    format!(
                        "\"{}\" all-reduces gradients in the backward pass, and this mode has none",
                        p.strategy.name()
                    ),
                )
            });
        }
        Ok(())
    }

    /// The invariants that tie fields together.
    pub fn check(&self) -> Result<(), Invalid> {
        self.check_model()?;
        self.check_parallel()?;
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
        if !(lr.is_finite() && lr > 0.0 && lr <= limits::MAX_LR) {
            return Err(Invalid::new(
                "training.lr",
                format!("must be a number in 0 < lr <= {}, not {lr}", limits::MAX_LR),
            ));
        }
        if t.amp != Amp::Off && self.training.dtype != Dtype::Float32 {
            return Err(Invalid {
                fix: Some(
                    "set training.dtype = \"float32\" (autocast keeps float32 parameters), or amp = \"off\"",
                ),
                ..Invalid::new(
                    "training.amp",
                    format!(
                        "must be \"off\" over {} parameters, not \"{}\": autocast casts float32 parameters",
                        self.training.dtype.as_str(),
                        t.amp.as_str()
                    ),
                )
            });
        }
        // A module cut into its children has as many units as its file says: the run checks a
        // segment against them (`train::preflight`).
        let children =
            matches!(&self.model, ModelSpec::Torchscript(s) if s.units == crate::spec::ScriptUnits::Children);
        if let (Checkpoint::Every(k), false) = (t.checkpoint, children) {
            let units = self.model.units();
            if k > units {
                return Err(Invalid {
                    fix: Some("give a segment of at most the model's units, or checkpoint = \"sqrt\""),
                    ..Invalid::new(
                        "training.checkpoint",
                        format!(
                            "must be at most the {units} units of {} (a segment every k of them), not {k}",
                            self.model.describe()
                        ),
                    )
                });
            }
        }
        if let (Checkpoint::Sequential(s), false) = (t.checkpoint, children) {
            let units = self.model.units();
            if s == 0 || s > units {
                return Err(Invalid {
                    fix: Some(
                        "give at most the model's units as segments, e.g. checkpoint = { sequential = 2 }, or checkpoint = \"sqrt\"",
                    ),
                    ..Invalid::new(
                        "training.checkpoint",
                        format!(
                            "{{ sequential = {s} }} must be 1 to the {units} units of {}: checkpoint_sequential's segments are units / S units long, and PyTorch fails when that is 0",
                            self.model.describe()
                        ),
                    )
                });
            }
        }
        self.check_data()
    }

    /// Each model kind's sizes, and that it reads the data's kind.
    fn check_model(&self) -> Result<(), Invalid> {
        match &self.model {
            ModelSpec::Mlp(MlpSpec::Uniform { hidden, depth }) => {
                if *hidden == 0 {
                    return Err(Invalid::new("model.hidden", "must be at least 1"));
                }
                if *depth == 0 {
                    return Err(Invalid::new("model.depth", "must be at least 1 hidden layer"));
                }
            }
            ModelSpec::Mlp(MlpSpec::Widths { widths }) => {
                if widths.is_empty() {
                    return Err(Invalid::new("model.widths", "must list at least 1 hidden layer"));
                }
                if widths.contains(&0) {
                    return Err(Invalid::new("model.widths", "must each be at least 1"));
                }
            }
            ModelSpec::Cnn(CnnSpec::Plain { channels, kernel, depth, .. }) => {
                if *channels == 0 {
                    return Err(Invalid::new("model.channels", "must be at least 1"));
                }
                if *depth == 0 {
                    return Err(Invalid::new("model.depth", "must be at least 1 block"));
                }
                if kernel % 2 == 0 {
                    return Err(Invalid::new(
                        "model.kernel",
                        format!("must be odd (padding k/2 keeps the size), not {kernel}"),
                    ));
                }
            }
            ModelSpec::Cnn(CnnSpec::Resnet(r)) => {
                if let DataSpec::Images { channels, .. } = self.data {
                    if channels != 3 {
                        return Err(Invalid {
                            fix: Some("set data.channels = 3"),
                            ..Invalid::new(
                                "data.channels",
                                format!("must be 3 for {}: torchvision's first convolution reads RGB images, not {channels} channels", r.as_str()),
                            )
                        });
                    }
                }
            }
            // Whatever its forward takes: the first batch says whether it fits.
            ModelSpec::Torchscript(s) => {
                let float_target = matches!(self.data, DataSpec::Tensors { classes: None, .. });
                match (s.loss, float_target) {
                    (crate::spec::Loss::Mse, false) => {
                        return Err(Invalid {
                            fix: Some(
                                r#"set data.kind = "tensors" with data.target, one sample's output shape"#,
                            ),
                            ..Invalid::new(
                                "data.kind",
                                r#"must be "tensors" without data.classes for model.loss = "mse": its target is float values"#,
                            )
                        })
                    }
                    (crate::spec::Loss::CrossEntropy, true) => {
                        return Err(Invalid {
                            fix: Some("set data.classes, or model.loss = \"mse\""),
                            ..Invalid::new(
                                "data.classes",
                                "is needed for cross_entropy: its target is class indices",
                            )
                        })
                    }
                    _ => {}
                }
                let several = matches!(&self.data, DataSpec::Tensors { inputs, .. } if inputs.len() > 1);
                if several && s.units == crate::spec::ScriptUnits::Children {
                    return Err(Invalid {
                        fix: Some("remove model.units"),
                        ..Invalid::new(
                            "model.units",
                            "= \"children\" runs the batch through the first child, which takes one input; the data \
                             has several (data.inputs)",
                        )
                    });
                }
                if several && self.training.techniques.checkpoint.segments(1).is_some() {
                    return Err(Invalid {
                        fix: Some("remove training.checkpoint"),
                        ..Invalid::new(
                            "training.checkpoint",
                            "does not apply to a module of several inputs (data.inputs): the module is one unit, and a \
                             checkpointed unit takes one input",
                        )
                    });
                }
            }
            ModelSpec::Transformer(t) => {
                for (key, v) in [
                    ("model.d_model", t.d_model),
                    ("model.nhead", t.nhead),
                    ("model.num_layers", t.num_layers),
                    ("model.dim_feedforward", t.dim_feedforward),
                ] {
                    if v == 0 {
                        return Err(Invalid::new(key, "must be at least 1"));
                    }
                }
                if t.d_model % t.nhead != 0 {
                    return Err(Invalid {
                        fix: Some("make model.d_model a multiple of model.nhead"),
                        ..Invalid::new(
                            "model.d_model",
                            format!(
                                "{} does not split into model.nhead = {} heads of equal size",
                                t.d_model, t.nhead
                            ),
                        )
                    });
                }
                if !(0.0..1.0).contains(&t.dropout) {
                    return Err(Invalid::new(
                        "model.dropout",
                        format!("must be a probability 0 <= p < 1, not {}", t.dropout),
                    ));
                }
            }
        };
        let reads = super::model::data_kinds(self.model.kind());
        if !reads.contains(&self.data.kind()) {
            return Err(Invalid::new(
                "data.kind",
                format!(
                    "\"{}\" is not what a {} model reads (it reads \"{}\")",
                    self.data.kind(),
                    self.model.kind(),
                    reads[0]
                ),
            ));
        }
        Ok(())
    }

    /// The data set's sizes, and a batch no larger than it.
    fn check_data(&self) -> Result<(), Invalid> {
        let (samples, classes, sizes): (usize, usize, Vec<(&'static str, usize)>) = match self.data {
            DataSpec::Synthetic { samples, features, classes, .. } => {
                (samples, classes, vec![("data.features", features)])
            }
            DataSpec::Images { samples, channels, size, classes, .. } => {
                (samples, classes, vec![("data.channels", channels), ("data.size", size)])
            }
            DataSpec::Tokens { samples, seq_len, vocab, classes, .. } => {
                (samples, classes, vec![("data.seq_len", seq_len), ("data.vocab", vocab)])
            }
            DataSpec::Csv { .. } => return Ok(()),
            DataSpec::Tensors { samples, ref inputs, ref target, classes, .. } => {
                let mut sizes = vec![("data.inputs", inputs.len())];
                for i in inputs {
                    sizes.extend(i.shape.iter().map(|&d| ("data.inputs", d)));
                    if let crate::spec::InputDtype::Int64 { high } = i.dtype {
                        sizes.push(("data.inputs.high", high));
                    }
                }
                sizes.extend(target.iter().map(|&d| ("data.target", d)));
                // mse's target has no classes: 2 stands in for the check below.
                (samples, classes.unwrap_or(2), sizes)
            }
        };
        if let Some((key, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(Invalid::new(key, "must be at least 1"));
        }
        if classes < 2 {
            return Err(Invalid::new("data.classes", "must be at least 2"));
        }
        if let DataSpec::Tokens { vocab, .. } = self.data {
            // The label is a function of the tokens: fewer kinds of token than classes leave
            // classes no sequence can have.
            if vocab < classes {
                return Err(Invalid {
                    fix: Some("raise data.vocab to at least data.classes"),
                    ..Invalid::new(
                        "data.vocab",
                        format!("must be at least data.classes ({classes}), not {vocab}: labels are drawn from the tokens"),
                    )
                });
            }
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
        Ok(())
    }
}

impl Config {
    /// Every size at most its bound in [`limits`], and no tensor over 2^63 bytes.
    pub fn within_limits(&self) -> Result<(), Invalid> {
        let mut sizes = vec![
            ("training.batch_size", self.training.batch_size, limits::MAX_BATCH_SIZE),
            ("training.steps", self.training.steps, limits::MAX_STEPS),
            ("training.accumulation", self.training.techniques.accumulation, limits::MAX_ACCUMULATION),
        ];
        match &self.model {
            ModelSpec::Mlp(MlpSpec::Uniform { hidden, depth }) => {
                sizes.push(("model.depth", *depth, limits::MAX_DEPTH));
                sizes.push(("model.hidden", *hidden, limits::MAX_HIDDEN));
            }
            ModelSpec::Mlp(MlpSpec::Widths { widths }) => {
                sizes.push(("model.widths", widths.len(), limits::MAX_DEPTH));
                sizes.push(("model.widths", widths.iter().copied().max().unwrap_or(0), limits::MAX_HIDDEN));
            }
            ModelSpec::Cnn(CnnSpec::Plain { channels, depth, kernel, .. }) => {
                sizes.push(("model.channels", *channels, limits::MAX_CHANNELS));
                sizes.push(("model.depth", *depth, limits::MAX_DEPTH));
                sizes.push(("model.kernel", *kernel, limits::MAX_KERNEL));
            }
            ModelSpec::Cnn(CnnSpec::Resnet(_)) => {}
            ModelSpec::Transformer(t) => {
                sizes.push(("model.d_model", t.d_model, limits::MAX_HIDDEN));
                sizes.push(("model.num_layers", t.num_layers, limits::MAX_DEPTH));
                sizes.push(("model.dim_feedforward", t.dim_feedforward, limits::MAX_HIDDEN));
                sizes.push(("model.nhead", t.nhead, limits::MAX_HIDDEN));
            }
            // Its sizes are in the file, not the spec.
            ModelSpec::Torchscript(_) => {}
        }
        match self.data {
            DataSpec::Synthetic { samples, features, classes, .. } => {
                sizes.push(("data.samples", samples, limits::MAX_SAMPLES));
                sizes.push(("data.features", features, limits::MAX_FEATURES));
                sizes.push(("data.classes", classes, limits::MAX_CLASSES));
            }
            DataSpec::Images { samples, channels, size, classes, .. } => {
                sizes.push(("data.samples", samples, limits::MAX_SAMPLES));
                sizes.push(("data.channels", channels, limits::MAX_CHANNELS));
                sizes.push(("data.size", size, limits::MAX_IMAGE_SIZE));
                sizes.push(("data.classes", classes, limits::MAX_CLASSES));
            }
            DataSpec::Tokens { samples, seq_len, vocab, classes, .. } => {
                sizes.push(("data.samples", samples, limits::MAX_SAMPLES));
                sizes.push(("data.seq_len", seq_len, limits::MAX_SEQ_LEN));
                sizes.push(("data.vocab", vocab, limits::MAX_VOCAB));
                sizes.push(("data.classes", classes, limits::MAX_CLASSES));
            }
            DataSpec::Csv { .. } => {}
            DataSpec::Tensors { samples, ref inputs, ref target, classes, .. } => {
                sizes.push(("data.samples", samples, limits::MAX_SAMPLES));
                sizes.push(("data.inputs", inputs.len(), limits::MAX_INPUTS));
                let dims = inputs.iter().flat_map(|i| i.shape.iter().copied());
                sizes.push(("data.inputs", dims.max().unwrap_or(0), limits::MAX_DIM));
                sizes.push(("data.target", target.iter().copied().max().unwrap_or(0), limits::MAX_DIM));
                sizes.push(("data.classes", classes.unwrap_or(0), limits::MAX_CLASSES));
            }
        }
        if let Checkpoint::Every(k) | Checkpoint::Sequential(k) = self.training.techniques.checkpoint {
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
        let (key, fix) = match self.model {
            ModelSpec::Mlp(_) => {
                ("model.hidden", "lower the widths, training.batch_size, data.samples or data.features")
            }
            ModelSpec::Cnn(_) => {
                ("data.size", "lower data.size, data.samples, training.batch_size or the channels")
            }
            ModelSpec::Transformer(_) => {
                ("data.seq_len", "lower data.seq_len, training.batch_size, data.samples or the model's sizes")
            }
            ModelSpec::Torchscript(_) => {
                ("training.batch_size", "lower training.batch_size or the data's sizes")
            }
        };
        match limits::largest_tensor_bytes(self) {
            Some(bytes) if bytes <= limits::MAX_TENSOR_BYTES => Ok(()),
            _ => Err(Invalid {
                fix: Some(fix),
                ..Invalid::new(key, "with these sizes makes a tensor of more than 2^63 bytes")
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
