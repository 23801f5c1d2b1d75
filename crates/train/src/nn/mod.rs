//! The networks: the models a trial trains, one module per kind ([`mlp`], [`conv_stack`],
//! [`resnet`], [`transformer`]) over shared [`layers`], behind one [`Model`]: a sequence of
//! units, then a head (see `spec::ModelSpec`), which is all the step and activation
//! [`checkpoint`]ing need.
//!
//! Written once over [`Ops`]: with libtorch's tensors they train (every call a fallible one,
//! since `tch::nn`'s modules panic on any libtorch error, out-of-memory included); with the
//! estimate's symbolic tensors they are replayed, op for op, to count what training allocates.
pub mod archive;
pub mod checkpoint;
pub mod conv_stack;
pub mod layers;
pub mod mlp;
pub mod ops;
pub mod resnet;
pub mod script;
pub mod transformer;

use std::ops::Range;

use tch::{Device, Kind};

pub use ops::{Init, Ops, Place, Result};

use crate::spec::{CnnSpec, DataSpec, ModelSpec};

/// A model of any kind.
pub enum Model<T> {
    Mlp(mlp::Mlp<T>),
    Conv(conv_stack::ConvStack<T>),
    ResNet(resnet::ResNet<T>),
    Transformer(transformer::Encoder<T>),
    Script(script::Script<T>),
}

/// What a model reads: the data set's features (or pixels, or tokens) per sample, its classes,
/// and for images and tokens the channels and the vocabulary.
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub features: usize,
    pub classes: usize,
    pub channels: usize,
    pub vocab: usize,
}

impl Input {
    pub fn of(data: &DataSpec, features: usize, classes: usize) -> Input {
        let (channels, vocab) = match *data {
            DataSpec::Images { channels, .. } => (channels, 0),
            DataSpec::Tokens { vocab, .. } => (0, vocab),
            _ => (0, 0),
        };
        Input { features, classes, channels, vocab }
    }
}

impl<T: Ops> Model<T> {
    /// Makes the model `spec` describes, its parameters drawn from the current seed.
    pub fn new(spec: &ModelSpec, input: Input, place: Place) -> Result<Self> {
        let classes = input.classes;
        Ok(match spec {
            ModelSpec::Mlp(m) => Model::Mlp(mlp::Mlp::new(input.features, &m.widths(), classes, place)?),
            ModelSpec::Cnn(CnnSpec::Plain { channels, depth, conv, kernel }) => {
                Model::Conv(conv_stack::ConvStack::new(
                    input.channels,
                    *channels,
                    *depth,
                    *conv,
                    *kernel,
                    classes,
                    place,
                )?)
            }
            ModelSpec::Cnn(CnnSpec::Resnet(arch)) => {
                Model::ResNet(resnet::ResNet::new(*arch, classes, place)?)
            }
            ModelSpec::Transformer(t) => {
                Model::Transformer(transformer::Encoder::new(t, input.vocab, classes, place)?)
            }
            ModelSpec::Torchscript(s) => Model::Script(script::Script::new(s, classes, place)?),
        })
    }

    /// Every parameter, in `model.parameters()` order: what the optimizer holds.
    pub fn parameters(&self) -> Vec<&T> {
        match self {
            Model::Mlp(m) => m.parameters().collect(),
            Model::Conv(m) => m.parameters(),
            Model::ResNet(m) => m.parameters(),
            Model::Transformer(m) => m.parameters(),
            Model::Script(m) => m.parameters(),
        }
    }

    /// The buffers DDP broadcasts from rank 0 (a ResNet's BatchNorm statistics), in
    /// `module.buffers()`'s order; a TorchScript module's are not listed (DDP over one is
    /// refused).
    pub fn buffers(&self) -> Vec<&T> {
        match self {
            Model::ResNet(m) => m.buffers(),
            Model::Script(m) => m.buffers(),
            Model::Mlp(_) | Model::Conv(_) | Model::Transformer(_) => Vec::new(),
        }
    }

    pub fn param_count(&self) -> u64 {
        self.parameters().iter().map(|p| numel(&p.size())).sum()
    }

    pub fn param_bytes(&self) -> u64 {
        self.parameters().iter().map(|p| numel(&p.size()) * p.kind().elt_size_in_bytes() as u64).sum()
    }

    /// The units activation checkpointing cuts into segments.
    pub fn units(&self) -> usize {
        match self {
            Model::Mlp(m) => m.depth(),
            Model::Conv(m) => m.units(),
            Model::ResNet(m) => m.units(),
            Model::Transformer(m) => m.units(),
            Model::Script(m) => m.units(),
        }
    }

    /// Runs units `range` on `h`, as Python's `for unit in units: h = unit(h)` does: a unit's
    /// input is freed (unless autograd saved it, or the caller holds another handle) when the
    /// unit returns; an MLP's, as its flat `nn.Sequential` frees it, once its Linear has run.
    pub fn forward_units(&self, mut h: T, range: Range<usize>) -> Result<T> {
        for i in range {
            h = match self {
                Model::Mlp(m) => m.unit(i, h)?,
                Model::Conv(m) => m.unit(i, h)?,
                Model::ResNet(m) => m.unit(i, h)?,
                Model::Transformer(m) => m.unit(i, h)?,
                Model::Script(m) => m.unit(i, h)?,
            };
        }
        Ok(h)
    }

    /// The head: the last unit's output to the logits; `h` lives until it returns.
    pub fn head(&self, h: T) -> Result<T> {
        match self {
            Model::Mlp(m) => m.head(&h),
            Model::Conv(m) => m.head(h),
            Model::ResNet(m) => m.head(h),
            Model::Transformer(m) => m.head(h),
            Model::Script(m) => m.head(h),
        }
    }

    /// Logits for a batch.
    pub fn forward(&self, x: &T) -> Result<T> {
        let h = self.forward_units(x.shallow_clone(), 0..self.units())?;
        self.head(h)
    }

    /// The output for a batch of `x` and, for a TorchScript module of several inputs (a tensors
    /// kind's), the others in its forward's order; `extra` is empty for every other model.
    pub fn forward_inputs(&self, x: &T, extra: &[T]) -> Result<T> {
        match self {
            Model::Script(m) if !extra.is_empty() => m.forward_inputs(x, extra),
            // Its own forward, not its children's: a chain of them is the same (preflight).
            Model::Script(m) => m.forward_inputs(x, &[]),
            _ => self.forward(x),
        }
    }

    /// The loss: the lesson's cross-entropy over the logits, mean over the batch; a
    /// TorchScript module's, as its spec says (`model.loss`).
    pub fn loss(&self, out: &T, y: &T) -> Result<T> {
        match self {
            Model::Script(m) => m.loss(out, y),
            _ => out.f_cross_entropy(y),
        }
    }

    /// Whether the forward may draw random numbers (dropout), which a recompute must draw
    /// again: a Transformer with dropout; a TorchScript module always, whose ops oomlab does
    /// not read (as `torch.utils.checkpoint` stashes the state for every module by default).
    pub fn draws_random(&self) -> bool {
        matches!(self, Model::Transformer(t) if t.has_dropout()) || matches!(self, Model::Script(_))
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.parameters().first().map_or(Device::Cpu, |p| p.device())
    }

    /// A second handle on each of the model's tensors: the same tensors, so that a recompute's
    /// grads accumulate where the model's optimizer reads them, at no memory cost.
    pub fn handles(&self) -> Self {
        match self {
            Model::Mlp(m) => Model::Mlp(m.handles()),
            Model::Conv(m) => Model::Conv(m.handles()),
            Model::ResNet(m) => Model::ResNet(m.handles()),
            Model::Transformer(m) => Model::Transformer(m.handles()),
            Model::Script(m) => Model::Script(m.handles()),
        }
    }
}

/// A place for tests: float32 on the CPU.
pub const CPU_F32: Place = Place { kind: Kind::Float, device: Device::Cpu };

/// Elements of a tensor of `size`.
pub fn numel(size: &[i64]) -> u64 {
    size.iter().map(|&d| d.max(0) as u64).product()
}
