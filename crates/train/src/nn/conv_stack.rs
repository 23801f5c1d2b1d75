//! A plain CNN, to compare guide 002's two convolutions: a stem `Conv2d(in, C, k)` and ReLU,
//! then blocks of `Conv2d(C, C, k)` and ReLU ("standard") or `Conv2d(C, C, k, groups=C)`,
//! `Conv2d(C, C, 1)` and ReLU ("depthwise separable"), all padded by `k / 2` so that the images
//! keep their size; then global average pooling and a Linear. Its units are the stem and the
//! blocks.
use super::layers::{Conv2d, ConvShape, Linear};
use super::ops::{Ops, Place, Result};
use crate::spec::ConvKind;

pub struct ConvStack<T> {
    stem: Conv2d<T>,
    blocks: Vec<Block<T>>,
    fc: Linear<T>,
}

enum Block<T> {
    Standard(Conv2d<T>),
    Separable { depthwise: Conv2d<T>, pointwise: Conv2d<T> },
}

impl<T: Ops> ConvStack<T> {
    /// Built in `nn.Module` order: stem, blocks, then the Linear.
    pub fn new(
        inputs: usize,
        channels: usize,
        depth: usize,
        conv: ConvKind,
        kernel: usize,
        classes: usize,
        place: Place,
    ) -> Result<Self> {
        let same = |inputs, k, groups| ConvShape {
            inputs,
            outputs: channels,
            kernel: k,
            stride: 1,
            padding: k / 2,
            groups,
            bias: true,
        };
        let stem = Conv2d::new(same(inputs, kernel, 1), place)?;
        let blocks = (0..depth)
            .map(|_| {
                Ok(match conv {
                    ConvKind::Standard => Block::Standard(Conv2d::new(same(channels, kernel, 1), place)?),
                    ConvKind::DepthwiseSeparable => Block::Separable {
                        depthwise: Conv2d::new(same(channels, kernel, channels), place)?,
                        pointwise: Conv2d::new(same(channels, 1, 1), place)?,
                    },
                })
            })
            .collect::<Result<_>>()?;
        let fc = Linear::new(channels, classes, place)?;
        Ok(ConvStack { stem, blocks, fc })
    }

    pub fn parameters(&self) -> Vec<&T> {
        let mut out: Vec<&T> = self.stem.parameters().collect();
        for b in &self.blocks {
            match b {
                Block::Standard(c) => out.extend(c.parameters()),
                Block::Separable { depthwise, pointwise } => {
                    out.extend(depthwise.parameters().chain(pointwise.parameters()))
                }
            }
        }
        out.extend(self.fc.parameters());
        out
    }

    pub fn units(&self) -> usize {
        1 + self.blocks.len()
    }

    /// Unit `i` as its `nn.Sequential` runs it: each module's output replaces the one before,
    /// which goes then (unless autograd saved it); the unit's input lives until it returns.
    pub fn unit(&self, i: usize, h: T) -> Result<T> {
        let z = match i {
            0 => self.stem.forward(&h)?,
            _ => match &self.blocks[i - 1] {
                Block::Standard(c) => c.forward(&h)?,
                Block::Separable { depthwise, pointwise } => {
                    let d = depthwise.forward(&h)?;
                    pointwise.forward(&d)?
                }
            },
        };
        z.f_relu()
    }

    /// `fc(flatten(adaptive_avg_pool2d(h, 1), 1))`.
    pub fn head(&self, h: T) -> Result<T> {
        self.fc.forward(&h.f_global_avg_pool()?.f_flatten1()?)
    }

    pub fn handles(&self) -> Self {
        let blocks = self
            .blocks
            .iter()
            .map(|b| match b {
                Block::Standard(c) => Block::Standard(c.handles()),
                Block::Separable { depthwise, pointwise } => {
                    Block::Separable { depthwise: depthwise.handles(), pointwise: pointwise.handles() }
                }
            })
            .collect();
        ConvStack { stem: self.stem.handles(), blocks, fc: self.fc.handles() }
    }
}
