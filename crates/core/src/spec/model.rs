//! The model a trial trains, as a spec describes it (`[model]`): the lesson's MLP, a CNN
//! (torchvision's ResNets, or a plain stack of convolutions, standard or depthwise separable) or
//! a Transformer encoder over token embeddings, or a module of the user's own saved as
//! TorchScript.
//!
//! Every kind is a sequence of **units** then a **head**: the units are what activation
//! checkpointing cuts into segments (an MLP's hidden layers; a CNN's stem and its blocks; a
//! Transformer's embedding and its encoder layers), the head turns the last unit's output into
//! class logits and is never checkpointed.
use serde::Serialize;

/// `model.kind`: which of [`ModelSpec`]'s kinds (summary.csv's `model_kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    Mlp,
    Cnn,
    Transformer,
    Torchscript,
}

/// Which model, and its sizes. The data set gives the input shape and the classes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSpec {
    Mlp(MlpSpec),
    Cnn(CnnSpec),
    Transformer(TransformerSpec),
    /// A module of the user's own, saved by `torch.jit.script` or `torch.jit.trace`.
    Torchscript(ScriptSpec),
}

/// A TorchScript module (`model.kind = "torchscript"`): trained as it is, its parameters those
/// it was saved with, its inputs the data set's batch and its output what `loss` reads. It is
/// one unit: checkpointing recomputes it whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScriptSpec {
    /// The file, resolved against the spec's folder.
    pub path: std::path::PathBuf,
    pub loss: Loss,
    pub units: ScriptUnits,
}

/// What activation checkpointing cuts a module into (`model.units`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScriptUnits {
    /// One unit: checkpointing recomputes the whole forward.
    #[default]
    Whole,
    /// Its top-level children (`named_children()`), run in turn as its forward does: the run
    /// checks on two rows of the data that the forward is that chain, and refuses it if not.
    Children,
}

/// The loss over a module's output (`model.loss`). The built-in kinds are classifiers and
/// always use cross_entropy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// `F.cross_entropy` over the output's last dimension (the classes), against class indices
    /// shaped as the output without it; the mean.
    #[default]
    CrossEntropy,
    /// `F.mse_loss` against a float target shaped as the output; the mean.
    Mse,
}

impl ScriptSpec {
    /// The file's name, for tables and titles.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }
}

/// The lesson's `Classifier_MLP`, generalised: hidden layers (Linear then ReLU each), then a
/// Linear to the classes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum MlpSpec {
    /// `depth` hidden layers of `hidden` units (`hidden >= 1`).
    Uniform { hidden: usize, depth: usize },
    /// One hidden layer per width, first to last (each >= 1; may be empty).
    Widths { widths: Vec<usize> },
}

/// A convolutional network over images. In JSON, `{"arch": "resnet50"}` or
/// `{"arch": "plain", "channels": ..., "depth": ..., "conv": ..., "kernel": ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CnnSpec {
    /// `torchvision.models.resnet18()` .. `resnet152()`, with `num_classes` from the data.
    Resnet(ResNet),
    /// A stem convolution (`data.channels -> channels`) and ReLU, then `depth` blocks of
    /// `channels -> channels` convolutions and ReLU, then global average pooling and a Linear.
    /// Invariants: `channels >= 1`, `kernel` odd (padding `kernel / 2` keeps the size).
    Plain { channels: usize, depth: usize, conv: ConvKind, kernel: usize },
}

/// The five ResNets torchvision builds (He et al. 2015): basic blocks for 18 and 34,
/// bottleneck blocks (1x1, 3x3, 1x1, four times wider out) for 50, 101 and 152.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResNet {
    R18,
    R34,
    R50,
    R101,
    R152,
}

impl ResNet {
    pub const ALL: [ResNet; 5] = [ResNet::R18, ResNet::R34, ResNet::R50, ResNet::R101, ResNet::R152];

    /// Blocks per stage (`layers` in torchvision's `_resnet`).
    pub fn stages(self) -> [usize; 4] {
        match self {
            ResNet::R18 => [2, 2, 2, 2],
            ResNet::R34 | ResNet::R50 => [3, 4, 6, 3],
            ResNet::R101 => [3, 4, 23, 3],
            ResNet::R152 => [3, 8, 36, 3],
        }
    }

    /// Bottleneck blocks (expansion 4) rather than basic ones.
    pub fn bottleneck(self) -> bool {
        !matches!(self, ResNet::R18 | ResNet::R34)
    }

    /// 18, 34, 50, 101 or 152: the weighted layers.
    pub fn number(self) -> usize {
        match self {
            ResNet::R18 => 18,
            ResNet::R34 => 34,
            ResNet::R50 => 50,
            ResNet::R101 => 101,
            ResNet::R152 => 152,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ResNet::R18 => "resnet18",
            ResNet::R34 => "resnet34",
            ResNet::R50 => "resnet50",
            ResNet::R101 => "resnet101",
            ResNet::R152 => "resnet152",
        }
    }
}

/// The convolution of a plain CNN's blocks (guide 002's "use depthwise separable convolutions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvKind {
    /// `Conv2d(C, C, k, padding=k/2)`.
    Standard,
    /// `Conv2d(C, C, k, padding=k/2, groups=C)` then `Conv2d(C, C, 1)`.
    DepthwiseSeparable,
}

/// `nn.TransformerEncoder` of `num_layers` `nn.TransformerEncoderLayer(d_model, nhead,
/// dim_feedforward, dropout, batch_first=True, norm_first)` (ReLU, no mask) over
/// `nn.Embedding(vocab, d_model)`, then the mean over the sequence and a Linear to the classes.
/// Invariants: `d_model % nhead == 0`, all sizes >= 1, `0 <= dropout < 1`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TransformerSpec {
    pub d_model: usize,
    pub nhead: usize,
    pub num_layers: usize,
    pub dim_feedforward: usize,
    pub dropout: f64,
    pub norm_first: bool,
}

impl Serialize for CnnSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self {
            CnnSpec::Resnet(r) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("arch", r.as_str())?;
                m.end()
            }
            CnnSpec::Plain { channels, depth, conv, kernel } => {
                let mut m = s.serialize_map(Some(5))?;
                m.serialize_entry("arch", "plain")?;
                m.serialize_entry("channels", &channels)?;
                m.serialize_entry("depth", &depth)?;
                m.serialize_entry("conv", &conv)?;
                m.serialize_entry("kernel", &kernel)?;
                m.end()
            }
        }
    }
}

impl ModelSpec {
    /// The lesson's MLP: `depth` hidden layers of `hidden` units.
    pub fn mlp(hidden: usize, depth: usize) -> ModelSpec {
        ModelSpec::Mlp(MlpSpec::Uniform { hidden, depth })
    }

    /// Its kind, as `model.kind` says it.
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelSpec::Mlp(_) => ModelKind::Mlp,
            ModelSpec::Cnn(_) => ModelKind::Cnn,
            ModelSpec::Transformer(_) => ModelKind::Transformer,
            ModelSpec::Torchscript(_) => ModelKind::Torchscript,
        }
    }

    /// The MLP's hidden widths, first to last; `None` for other kinds.
    pub fn mlp_widths(&self) -> Option<Vec<usize>> {
        match self {
            ModelSpec::Mlp(m) => Some(m.widths()),
            _ => None,
        }
    }

    /// The units activation checkpointing cuts into segments (see the module's doc).
    pub fn units(&self) -> usize {
        match self {
            ModelSpec::Mlp(m) => m.depth(),
            ModelSpec::Cnn(CnnSpec::Plain { depth, .. }) => 1 + depth,
            ModelSpec::Cnn(CnnSpec::Resnet(r)) => 1 + r.stages().iter().sum::<usize>(),
            ModelSpec::Transformer(t) => 1 + t.num_layers,
            ModelSpec::Torchscript(_) => 1,
        }
    }

    /// The model's depth in its own terms, for summary.csv's `depth` column: hidden layers,
    /// conv blocks, the ResNet's number, encoder layers.
    pub fn depth(&self) -> usize {
        match self {
            ModelSpec::Mlp(m) => m.depth(),
            ModelSpec::Cnn(CnnSpec::Plain { depth, .. }) => *depth,
            ModelSpec::Cnn(CnnSpec::Resnet(r)) => r.number(),
            ModelSpec::Transformer(t) => t.num_layers,
            ModelSpec::Torchscript(_) => 0,
        }
    }

    /// Its width, for summary.csv's `hidden` column: the MLP's widest hidden layer, the plain
    /// CNN's channels, the ResNet's first stage (64), the Transformer's `d_model`.
    pub fn width(&self) -> usize {
        match self {
            ModelSpec::Mlp(MlpSpec::Uniform { hidden, .. }) => *hidden,
            ModelSpec::Mlp(MlpSpec::Widths { widths }) => widths.iter().copied().max().unwrap_or(0),
            ModelSpec::Cnn(CnnSpec::Plain { channels, .. }) => *channels,
            ModelSpec::Cnn(CnnSpec::Resnet(_)) => 64,
            ModelSpec::Transformer(t) => t.d_model,
            ModelSpec::Torchscript(_) => 0,
        }
    }

    /// A short name for tables and summary.csv's `model` column: `mlp 4x5000`,
    /// `mlp 2000-1000`, `resnet50`, `cnn 4x256 k3 depthwise_separable`,
    /// `transformer d512 h8 L6 ff2048`.
    pub fn describe(&self) -> String {
        match self {
            ModelSpec::Mlp(MlpSpec::Uniform { hidden, depth }) => format!("mlp {depth}x{hidden}"),
            ModelSpec::Mlp(MlpSpec::Widths { widths }) if widths.is_empty() => "mlp 0 hidden".into(),
            ModelSpec::Mlp(MlpSpec::Widths { widths }) => {
                let w: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
                format!("mlp {}", w.join("-"))
            }
            ModelSpec::Cnn(CnnSpec::Resnet(r)) => r.as_str().into(),
            ModelSpec::Cnn(CnnSpec::Plain { channels, depth, conv, kernel }) => {
                let conv = match conv {
                    ConvKind::Standard => "standard",
                    ConvKind::DepthwiseSeparable => "depthwise_separable",
                };
                format!("cnn {depth}x{channels} k{kernel} {conv}")
            }
            ModelSpec::Transformer(t) => format!(
                "transformer d{} h{} L{} ff{}{}",
                t.d_model,
                t.nhead,
                t.num_layers,
                t.dim_feedforward,
                if t.norm_first { " pre-norm" } else { "" }
            ),
            ModelSpec::Torchscript(s) => format!("torchscript {}", s.name()),
        }
    }
}

impl MlpSpec {
    pub fn widths(&self) -> Vec<usize> {
        match self {
            MlpSpec::Uniform { hidden, depth } => vec![*hidden; *depth],
            MlpSpec::Widths { widths } => widths.clone(),
        }
    }

    pub fn depth(&self) -> usize {
        match self {
            MlpSpec::Uniform { depth, .. } => *depth,
            MlpSpec::Widths { widths } => widths.len(),
        }
    }
}

/// The data kind a model reads when `data.kind` is left out, and the kinds it can read (the
/// validator's default and `Config::check`'s rule, written once).
pub(crate) fn data_kinds(model_kind: ModelKind) -> &'static [&'static str] {
    match model_kind {
        ModelKind::Cnn => &["images"],
        ModelKind::Transformer => &["tokens"],
        // A module of the user's reads whatever its forward takes.
        ModelKind::Torchscript => &["synthetic", "csv", "images", "tokens", "tensors"],
        ModelKind::Mlp => &["synthetic", "csv"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_the_kind_and_arch() {
        let plain = ModelSpec::Cnn(CnnSpec::Plain {
            channels: 8,
            depth: 2,
            conv: ConvKind::DepthwiseSeparable,
            kernel: 3,
        });
        let v = serde_json::to_value(&plain).unwrap();
        assert_eq!(v["kind"], "cnn");
        assert_eq!(v["arch"], "plain");
        assert_eq!(v["conv"], "depthwise_separable");
        let r = serde_json::to_value(ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R50))).unwrap();
        assert_eq!(r, serde_json::json!({"kind": "cnn", "arch": "resnet50"}));
        let m = serde_json::to_value(ModelSpec::Mlp(MlpSpec::Uniform { hidden: 5, depth: 2 })).unwrap();
        assert_eq!(m, serde_json::json!({"kind": "mlp", "hidden": 5, "depth": 2}));
        let w = serde_json::to_value(ModelSpec::Mlp(MlpSpec::Widths { widths: vec![3, 4] })).unwrap();
        assert_eq!(w, serde_json::json!({"kind": "mlp", "widths": [3, 4]}));
    }

    #[test]
    fn units_count_what_checkpointing_cuts() {
        assert_eq!(ModelSpec::Mlp(MlpSpec::Uniform { hidden: 5, depth: 7 }).units(), 7);
        assert_eq!(ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)).units(), 9);
        assert_eq!(ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R152)).units(), 51);
        let t = TransformerSpec {
            d_model: 8,
            nhead: 2,
            num_layers: 3,
            dim_feedforward: 16,
            dropout: 0.1,
            norm_first: false,
        };
        assert_eq!(ModelSpec::Transformer(t).units(), 4);
        // Bottleneck stages hold 3 weighted layers a block, basic ones 2; plus stem and fc.
        for r in ResNet::ALL {
            let per_block = if r.bottleneck() { 3 } else { 2 };
            assert_eq!(r.stages().iter().sum::<usize>() * per_block + 2, r.number(), "{r:?}");
        }
    }
}
