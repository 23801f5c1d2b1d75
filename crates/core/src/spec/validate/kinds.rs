//! The `[model]` and `[data]` tables, whose kinds go together: an MLP reads features
//! (`kind = "synthetic"` or `"csv"`), a CNN images, a Transformer tokens. Each table holds every
//! kind's keys, so that a key of another kind is refused by name ("is only read for ...") rather
//! than as an unknown key.
use std::ops::Range;

use super::messages::Problem;
use super::{span, Cx, SpecError};
use crate::spec::model::{data_kinds, ModelKind};
use crate::spec::raw::{RawData, RawInput, RawModel, Tab, S};
use crate::spec::Named;
use crate::spec::{
    CnnSpec, ConvKind, DataLocation, DataSpec, Field, InputDtype, Loss, MlpSpec, ModelSpec, ResNet,
    ScriptUnits, TensorInput, TransformerSpec,
};

/// The kind a raw model table asks for (`mlp` when it does not say).
pub(super) fn model_kind(m: &Tab<RawModel>) -> String {
    m.as_ref().and_then(|t| t.get_ref().0.kind.as_ref()).map_or("mlp".into(), |k| k.get_ref().clone())
}

/// The kind a raw data table asks for: its own, or the default for the model's kind.
pub(super) fn data_kind(d: &Tab<RawData>, model_kind: &str) -> String {
    d.as_ref()
        .and_then(|t| t.get_ref().0.kind.as_ref())
        // An unknown model kind is refused where it is written; until then it reads as an MLP's.
        .map_or(data_kinds(ModelKind::from_name(model_kind).unwrap_or(ModelKind::Mlp))[0].into(), |k| {
            k.get_ref().clone()
        })
}

impl Cx<'_> {
    pub(super) fn model(
        &mut self,
        table: Option<Range<usize>>,
        m: RawModel,
        swept: Option<Field>,
    ) -> Result<ModelSpec, SpecError> {
        let kind = match &m.kind {
            Some(k) => self.named(k, "model.kind")?,
            None => ModelKind::Mlp,
        };
        let mlp = [("model.hidden", span(&m.hidden)), ("model.widths", span(&m.widths))];
        let cnn = [
            ("model.arch", span(&m.arch)),
            ("model.channels", span(&m.channels)),
            ("model.conv", span(&m.conv)),
            ("model.kernel", span(&m.kernel)),
        ];
        let transformer = [
            ("model.d_model", span(&m.d_model)),
            ("model.nhead", span(&m.nhead)),
            ("model.num_layers", span(&m.num_layers)),
            ("model.dim_feedforward", span(&m.dim_feedforward)),
            ("model.dropout", span(&m.dropout)),
            ("model.norm_first", span(&m.norm_first)),
        ];
        let only = |k: &str| {
            format!(r#"is only read for kind = "{k}"; remove it, or set kind = "{k}" under [model]"#)
        };
        let script =
            [("model.path", span(&m.path)), ("model.loss", span(&m.loss)), ("model.units", span(&m.units))];
        if kind != ModelKind::Torchscript {
            self.reject(&script, &only("torchscript"))?;
        }
        match kind {
            ModelKind::Mlp => {
                self.reject(&cnn, &only("cnn"))?;
                self.reject(&transformer, &only("transformer"))?;
                self.mlp(table, m, swept).map(ModelSpec::Mlp)
            }
            ModelKind::Cnn => {
                self.reject(&mlp, &only("mlp"))?;
                self.reject(&transformer, &only("transformer"))?;
                self.cnn(table, m, swept).map(ModelSpec::Cnn)
            }
            ModelKind::Torchscript => {
                let theirs = r#"is the module's own (kind = "torchscript" trains the saved module as it is); remove it"#;
                self.reject(&mlp, theirs)?;
                self.reject(&cnn, theirs)?;
                self.reject(&transformer, theirs)?;
                self.reject(&[("model.depth", span(&m.depth))], theirs)?;
                let path = self.require(m.path, "model.path", &table)?;
                let path = self.nonempty(&path, "model.path")?;
                let loss = match &m.loss {
                    Some(l) => self.named(l, "model.loss")?,
                    None => Loss::CrossEntropy,
                };
                let units = match &m.units {
                    Some(u) => self.named(u, "model.units")?,
                    None => ScriptUnits::Whole,
                };
                Ok(ModelSpec::Torchscript(crate::spec::ScriptSpec { path: self.resolve(&path), loss, units }))
            }
            ModelKind::Transformer => {
                self.reject(&mlp, &only("mlp"))?;
                self.reject(&cnn, &only("cnn"))?;
                self.reject(&[("model.depth", span(&m.depth))], &only("mlp\" or \"cnn"))?;
                self.transformer(table, m, swept).map(ModelSpec::Transformer)
            }
        }
    }

    fn mlp(
        &mut self,
        table: Option<Range<usize>>,
        m: RawModel,
        swept: Option<Field>,
    ) -> Result<MlpSpec, SpecError> {
        let Some(widths) = m.widths else {
            return Ok(MlpSpec::Uniform {
                hidden: self.count_or_swept(m.hidden, Field::Hidden, 1, &table, swept, None)?,
                depth: self.count_or_swept(m.depth, Field::Depth, 0, &table, swept, None)?,
            });
        };
        let why = "is given by model.widths (one width per hidden layer); remove it, or remove widths";
        self.reject(&[("model.hidden", span(&m.hidden)), ("model.depth", span(&m.depth))], why)?;
        if widths.get_ref().len() > crate::spec::limits::MAX_DEPTH {
            return Err(self.bad(
                &widths.span(),
                "model.widths",
                &format!("at most {} widths", crate::spec::limits::MAX_DEPTH),
                format!("{} of them", widths.get_ref().len()),
            ));
        }
        let widths =
            widths.into_inner().iter().map(|w| self.count(w, "model.widths", 1)).collect::<Result<_, _>>()?;
        Ok(MlpSpec::Widths { widths })
    }

    fn cnn(
        &mut self,
        table: Option<Range<usize>>,
        m: RawModel,
        swept: Option<Field>,
    ) -> Result<CnnSpec, SpecError> {
        let arch = self.require(m.arch, "model.arch", &table)?;
        let mut options: Vec<(&str, Option<ResNet>)> =
            ResNet::ALL.iter().map(|r| (r.as_str(), Some(*r))).collect();
        options.push(("plain", None));
        if let Some(r) = self.word(&arch, "model.arch", &options)? {
            let plain_only = [
                ("model.channels", span(&m.channels)),
                ("model.depth", span(&m.depth)),
                ("model.conv", span(&m.conv)),
                ("model.kernel", span(&m.kernel)),
            ];
            let why = format!(
                r#"is only read for arch = "plain"; {} is torchvision's, whole (remove it, or set arch = "plain")"#,
                r.as_str()
            );
            self.reject(&plain_only, &why)?;
            return Ok(CnnSpec::Resnet(r));
        }
        let conv = match &m.conv {
            Some(c) => self.word(
                c,
                "model.conv",
                &[("standard", ConvKind::Standard), ("depthwise_separable", ConvKind::DepthwiseSeparable)],
            )?,
            None => ConvKind::Standard,
        };
        let kernel = match &m.kernel {
            Some(k) => {
                let n = self.count(k, "model.kernel", 1)?;
                if n % 2 == 0 || n > crate::spec::limits::MAX_KERNEL {
                    let rule = format!(
                        "an odd whole number from 1 to {} (padding k/2 keeps the size)",
                        crate::spec::limits::MAX_KERNEL
                    );
                    return Err(self.bad(&k.span(), "model.kernel", &rule, n));
                }
                n
            }
            None => 3,
        };
        Ok(CnnSpec::Plain {
            channels: self.count_or_swept(m.channels, Field::Channels, 1, &table, swept, None)?,
            depth: self.count_or_swept(m.depth, Field::Depth, 0, &table, swept, None)?,
            conv,
            kernel,
        })
    }

    fn transformer(
        &mut self,
        table: Option<Range<usize>>,
        m: RawModel,
        swept: Option<Field>,
    ) -> Result<TransformerSpec, SpecError> {
        let nhead = self.require(m.nhead, "model.nhead", &table)?;
        let nhead = self.count(&nhead, "model.nhead", 1)?;
        let dim_feedforward = match &m.dim_feedforward {
            Some(v) => self.count(v, "model.dim_feedforward", 1)?,
            None => 2048, // nn.TransformerEncoderLayer's default
        };
        let dropout = match &m.dropout {
            Some(v) => {
                self.float(v, "model.dropout", "a probability, 0 <= p < 1", |p| (0.0..1.0).contains(&p))?
            }
            None => 0.1, // nn.TransformerEncoderLayer's default
        };
        Ok(TransformerSpec {
            d_model: self.count_or_swept(m.d_model, Field::DModel, 1, &table, swept, None)?,
            nhead,
            num_layers: self.count_or_swept(m.num_layers, Field::NumLayers, 0, &table, swept, None)?,
            dim_feedforward,
            dropout,
            norm_first: m.norm_first.is_some_and(|v| *v.get_ref()),
        })
    }

    pub(super) fn data(
        &mut self,
        raw: Tab<RawData>,
        model: &ModelSpec,
        swept: Option<Field>,
    ) -> Result<(DataSpec, DataLocation), SpecError> {
        let (table, d) = super::builders::split(raw);
        let location = match &d.location {
            Some(l) => self.named(l, "data.location")?,
            None => DataLocation::Host,
        };
        let kinds = data_kinds(model.kind());
        let all = [
            ("synthetic", "synthetic"),
            ("images", "images"),
            ("tokens", "tokens"),
            ("csv", "csv"),
            ("tensors", "tensors"),
        ];
        let kind = match &d.kind {
            Some(k) => {
                let kind = self.word(k, "data.kind", &all)?;
                if !kinds.contains(&kind) {
                    let reads: Vec<String> = kinds.iter().map(|k| format!("{k:?}")).collect();
                    return Err(self.at(
                        &k.span(),
                        Problem::value(
                            "data.kind",
                            format!(
                                "a {} model reads kind = {} data, not {kind:?}; set kind = {:?} (or leave it out), or change model.kind",
                                model.kind(),
                                reads.join(" or "),
                                kinds[0]
                            ),
                        ),
                    ));
                }
                kind
            }
            None => kinds[0],
        };
        let keys = |names: &[&'static str]| -> Vec<(&'static str, Option<Range<usize>>)> {
            names.iter().map(|&k| (k, key_span(&d, k))).collect()
        };
        let tensors_only = [("data.inputs", span(&d.inputs)), ("data.target", span(&d.target))];
        if kind != "tensors" {
            self.reject(
                &tensors_only,
                r#"is only read for kind = "tensors"; remove it, or set kind = "tensors" under [data]"#,
            )?;
        }
        let loss = match model {
            ModelSpec::Torchscript(s) => s.loss,
            _ => Loss::CrossEntropy,
        };
        if loss == Loss::Mse && kind != "tensors" {
            let at = d.kind.as_ref().map(|k| k.span()).or(table.clone()).unwrap_or(0..0);
            return Err(self.at(
                &at,
                Problem::sentence(
                    "data.kind",
                    r#"must be "tensors" for model.loss = "mse": its target is a float tensor of data.target's shape, which the other kinds do not make; e.g. kind = "tensors", inputs = [{ shape = [20] }], target = [1]"#,
                ),
            ));
        }
        if kind == "tensors" {
            let others = keys(&[
                "data.features",
                "data.channels",
                "data.size",
                "data.seq_len",
                "data.vocab",
                "data.path",
                "data.label",
            ]);
            self.reject(
                &others,
                r#"is not read for kind = "tensors" data (data.inputs gives each input's shape); remove it"#,
            )?;
            let data = self.tensors(&table, d, loss, swept)?;
            return Ok((data, location));
        }
        if kind == "csv" {
            let made_only = keys(&[
                "data.samples",
                "data.features",
                "data.channels",
                "data.size",
                "data.seq_len",
                "data.vocab",
                "data.classes",
                "data.seed",
            ]);
            self.reject(
                &made_only,
                r#"is only read for kind = "synthetic" (or "images", "tokens": data oomlab makes); remove it (a CSV's rows and columns come from the file)"#,
            )?;
            let path = self.require(d.path, "data.path", &table)?;
            let label = self.require(d.label, "data.label", &table)?;
            let path = self.nonempty(&path, "data.path")?;
            let label = self.nonempty(&label, "data.label")?;
            return Ok((DataSpec::Csv { path: self.resolve(&path), label }, location));
        }
        for (owner, shape) in [
            ("synthetic", &["data.features"][..]),
            ("images", &["data.channels", "data.size"][..]),
            ("tokens", &["data.seq_len", "data.vocab"][..]),
        ] {
            if owner != kind {
                let why =
                    format!(r#"is not read for kind = "{kind}" data; remove it (kind = "{owner}" reads it)"#);
                self.reject(&keys(shape), &why)?;
            }
        }
        let csv_only = [("data.path", span(&d.path)), ("data.label", span(&d.label))];
        self.reject(
            &csv_only,
            r#"is only read for kind = "csv"; remove it, or add kind = "csv" under [data]"#,
        )?;
        let samples = self.count_or_swept(d.samples, Field::Samples, 1, &table, swept, None)?;
        let classes = {
            let classes = self.require(d.classes, "data.classes", &table)?;
            self.count(&classes, "data.classes", 2)?
        };
        let seed = self.seed(d.seed, "data.seed")?;
        let data = match kind {
            "images" => DataSpec::Images {
                samples,
                channels: {
                    let c = self.require(d.channels, "data.channels", &table)?;
                    self.count(&c, "data.channels", 1)?
                },
                size: self.count_or_swept(d.size, Field::ImageSize, 1, &table, swept, None)?,
                classes,
                seed,
            },
            "tokens" => DataSpec::Tokens {
                samples,
                seq_len: self.count_or_swept(d.seq_len, Field::SeqLen, 1, &table, swept, None)?,
                vocab: {
                    let v = self.require(d.vocab, "data.vocab", &table)?;
                    self.count(&v, "data.vocab", 1)?
                },
                classes,
                seed,
            },
            _ => DataSpec::Synthetic {
                samples,
                features: self.count_or_swept(d.features, Field::Features, 1, &table, swept, None)?,
                classes,
                seed,
            },
        };
        Ok((data, location))
    }
}

impl Cx<'_> {
    /// `data.kind = "tensors"`: its inputs, and its target as the loss reads it.
    fn tensors(
        &mut self,
        table: &Option<Range<usize>>,
        d: RawData,
        loss: Loss,
        swept: Option<Field>,
    ) -> Result<DataSpec, SpecError> {
        let samples = self.count_or_swept(d.samples, Field::Samples, 1, table, swept, None)?;
        let seed = self.seed(d.seed, "data.seed")?;
        let raw = self.require(d.inputs, "data.inputs", table)?;
        if raw.get_ref().is_empty() || raw.get_ref().len() > crate::spec::limits::MAX_INPUTS {
            let n = raw.get_ref().len();
            let rule = format!(
                "1 to {} inputs, one per argument of the module's forward",
                crate::spec::limits::MAX_INPUTS
            );
            return Err(self.bad(&raw.span(), "data.inputs", &rule, format!("{n} of them")));
        }
        let mut inputs = Vec::new();
        for (i, input) in raw.into_inner().into_iter().enumerate() {
            let span = input.span();
            inputs.push(self.tensor_input(i, span, input.into_inner().0)?);
        }
        let classes = match (loss, d.classes) {
            (Loss::Mse, Some(c)) => {
                return Err(self.at(
                    &c.span(),
                    Problem::sentence(
                        "data.classes",
                        r#"is not read with model.loss = "mse" (its target is float values of data.target's shape); remove it, or set model.loss = "cross_entropy""#,
                    ),
                ))
            }
            (Loss::Mse, None) => None,
            (Loss::CrossEntropy, c) => {
                let c = self.require(c, "data.classes", table)?;
                Some(self.count(&c, "data.classes", 2)?)
            }
        };
        let target = match d.target {
            Some(t) => self.shape(&t, "data.target")?,
            // One class per sample; mse has no such default: its target is the output's shape.
            None if loss == Loss::CrossEntropy => Vec::new(),
            None => return Err(self.missing("data.target", table)),
        };
        Ok(DataSpec::Tensors { samples, inputs, target, classes, seed })
    }

    fn tensor_input(
        &mut self,
        i: usize,
        span: Range<usize>,
        input: RawInput,
    ) -> Result<TensorInput, SpecError> {
        let name = match &input.name {
            Some(n) => self.nonempty(n, "data.inputs")?,
            None => format!("input{i}"),
        };
        let Some(shape) = &input.shape else {
            return Err(self.at(
                &span,
                Problem::sentence(
                    format!("data.inputs[{i}]"),
                    "has no shape: give one sample's shape, without the batch dimension; e.g. { shape = [3, 32, 32] }",
                ),
            ));
        };
        let shape = self.shape(shape, "data.inputs")?;
        let words = [("float", 0u8), ("int64", 1), ("bool", 2)];
        let dtype = match &input.dtype {
            Some(w) => self.word(w, "data.inputs.dtype", &words)?,
            None => 0,
        };
        let dtype = match (dtype, &input.high) {
            (1, Some(h)) => InputDtype::Int64 { high: self.count(h, "data.inputs.high", 1)? },
            (1, None) => {
                return Err(self.at(
                    &span,
                    Problem::sentence(
                        format!("data.inputs[{i}]"),
                        r#"is int64 without high: its ids are drawn from 0..high; e.g. { shape = [128], dtype = "int64", high = 30522 }"#,
                    ),
                ))
            }
            (_, Some(h)) => {
                return Err(self.at(
                    &h.span(),
                    Problem::sentence("data.inputs.high", r#"is only read for dtype = "int64"; remove it"#),
                ))
            }
            (0, None) => InputDtype::Float,
            _ => InputDtype::Bool,
        };
        Ok(TensorInput { name, shape, dtype })
    }

    /// One sample's shape: at most `MAX_RANK` dimensions, each >= 1, at most
    /// `MAX_SAMPLE_ELEMENTS` elements in all.
    fn shape(&mut self, v: &S<Vec<S<i64>>>, key: &'static str) -> Result<Vec<usize>, SpecError> {
        use crate::spec::limits::{MAX_RANK, MAX_SAMPLE_ELEMENTS};
        if v.get_ref().len() > MAX_RANK {
            return Err(self.bad(
                &v.span(),
                key,
                &format!("at most {MAX_RANK} dimensions"),
                v.get_ref().len(),
            ));
        }
        let shape: Vec<usize> =
            v.get_ref().iter().map(|d| self.count(d, key, 1)).collect::<Result<_, _>>()?;
        let elements = shape.iter().map(|&d| d as u128).product::<u128>();
        if elements > MAX_SAMPLE_ELEMENTS as u128 {
            let rule = format!(
                "a sample of at most {MAX_SAMPLE_ELEMENTS} elements (4 GB in float32; the preflight makes two rows \
                 on the CPU)"
            );
            return Err(self.bad(&v.span(), key, &rule, format!("{shape:?}, {elements} elements")));
        }
        Ok(shape)
    }
}

/// Where a shape key of `[data]` was written.
fn key_span(d: &RawData, key: &str) -> Option<Range<usize>> {
    match key {
        "data.features" => span(&d.features),
        "data.channels" => span(&d.channels),
        "data.size" => span(&d.size),
        "data.seq_len" => span(&d.seq_len),
        "data.vocab" => span(&d.vocab),
        "data.samples" => span(&d.samples),
        "data.classes" => span(&d.classes),
        "data.seed" => span(&d.seed),
        _ => None,
    }
}
