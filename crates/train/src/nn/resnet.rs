//! torchvision's ResNets (`torchvision.models.resnet18()` .. `resnet152()`, v1.5: the stride in
//! the bottleneck's 3x3), built and run as torchvision does: the same modules made in the same
//! order on the CPU in float32, re-initialised as `ResNet.__init__` does, then moved to the
//! device and dtype (`model.to(device, dtype)`); in-place ReLUs and `out += identity` in the
//! blocks. Its units are the stem (conv1, bn1, relu, maxpool) and each block.
use tch::{Device, Kind};

use super::layers::{BatchNorm2d, Conv2d, ConvShape, Linear};
use super::ops::{Ops, Place, Result};
use crate::spec::ResNet as Arch;

pub struct ResNet<T> {
    conv1: Conv2d<T>,
    bn1: BatchNorm2d<T>,
    blocks: Vec<Block<T>>,
    fc: Linear<T>,
}

/// A basic block (two 3x3 convolutions) or a bottleneck (1x1, 3x3, 1x1), each convolution
/// followed by batch norm, and the 1x1 convolution and batch norm that reshape the identity
/// where the block changes the size or the channels.
struct Block<T> {
    convs: Vec<(Conv2d<T>, BatchNorm2d<T>)>,
    downsample: Option<(Conv2d<T>, BatchNorm2d<T>)>,
}

const CPU_F32: Place = Place { kind: Kind::Float, device: Device::Cpu };

fn conv(inputs: usize, outputs: usize, kernel: usize, stride: usize) -> ConvShape {
    ConvShape { inputs, outputs, kernel, stride, padding: kernel / 2, groups: 1, bias: false }
}

impl<T: Ops> ResNet<T> {
    pub fn new(arch: Arch, classes: usize, place: Place) -> Result<Self> {
        let conv1 = Conv2d::new(ConvShape { padding: 3, ..conv(3, 64, 7, 2) }, CPU_F32)?;
        let bn1 = BatchNorm2d::new(64, CPU_F32)?;
        let expansion = if arch.bottleneck() { 4 } else { 1 };
        let mut inplanes = 64;
        let mut blocks = Vec::new();
        for (stage, &count) in arch.stages().iter().enumerate() {
            let planes = 64 << stage;
            for b in 0..count {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                // `_make_layer` makes the downsample before the block that takes it.
                let downsample = if b == 0 && (stride != 1 || inplanes != planes * expansion) {
                    Some((
                        Conv2d::new(conv(inplanes, planes * expansion, 1, stride), CPU_F32)?,
                        BatchNorm2d::new(planes * expansion, CPU_F32)?,
                    ))
                } else {
                    None
                };
                let shapes = if arch.bottleneck() {
                    vec![
                        conv(inplanes, planes, 1, 1),
                        conv(planes, planes, 3, stride),
                        conv(planes, planes * 4, 1, 1),
                    ]
                } else {
                    vec![conv(inplanes, planes, 3, stride), conv(planes, planes, 3, 1)]
                };
                let convs = shapes
                    .into_iter()
                    .map(|s| Ok((Conv2d::new(s, CPU_F32)?, BatchNorm2d::new(s.outputs, CPU_F32)?)))
                    .collect::<Result<_>>()?;
                blocks.push(Block { convs, downsample });
                inplanes = planes * expansion;
            }
        }
        let fc = Linear::new(512 * expansion, classes, CPU_F32)?;
        let mut net = ResNet { conv1, bn1, blocks, fc };
        // `for m in self.modules()`: every convolution again, kaiming_normal_(fan_out, relu), in
        // module order (a block's own convolutions, then its downsample's); the batch norms'
        // constant_(1) and constant_(0) change nothing.
        net.conv1.kaiming_normal_()?;
        for b in &mut net.blocks {
            for (c, _) in b.convs.iter_mut().chain(b.downsample.iter_mut()) {
                c.kaiming_normal_()?;
            }
        }
        net.to(place)?;
        Ok(net)
    }

    /// `model.to(device, dtype)`: each floating tensor, parameters and buffers, module by
    /// module, replaced by a copy on the device in the dtype (the old one freed as the next is
    /// made); a no-op where it is already there.
    fn to(&mut self, place: Place) -> Result<()> {
        if place == CPU_F32 {
            return Ok(());
        }
        let mut tensors = vec![];
        tensors.extend(self.conv1.tensors_mut());
        tensors.extend(self.bn1.tensors_mut());
        for b in &mut self.blocks {
            for (c, n) in b.convs.iter_mut().chain(b.downsample.iter_mut()) {
                tensors.extend(c.tensors_mut());
                tensors.extend(n.tensors_mut());
            }
        }
        tensors.extend([(&mut self.fc.weight, true), (&mut self.fc.bias, true)]);
        for (t, param) in tensors {
            *t = t.moved(place, param)?;
        }
        Ok(())
    }

    pub fn parameters(&self) -> Vec<&T> {
        let mut out: Vec<&T> = self.conv1.parameters().collect();
        out.extend(self.bn1.parameters());
        for b in &self.blocks {
            for (c, n) in b.convs.iter().chain(b.downsample.iter()) {
                out.extend(c.parameters());
                out.extend(n.parameters());
            }
        }
        out.extend(self.fc.parameters());
        out
    }

    /// The BatchNorms' buffers, in `module.buffers()`'s order (the modules as `parameters`
    /// walks them).
    pub fn buffers(&self) -> Vec<&T> {
        let mut out: Vec<&T> = self.bn1.buffers().to_vec();
        for b in &self.blocks {
            for (_, n) in b.convs.iter().chain(b.downsample.iter()) {
                out.extend(n.buffers());
            }
        }
        out
    }

    pub fn units(&self) -> usize {
        1 + self.blocks.len()
    }

    /// The stem (conv1, bn1, relu in place, maxpool) or a block, as `nn.Sequential` and the
    /// block's `forward` run them: each output replaces the tensor before it, which goes then
    /// (unless autograd saved it); the unit's input lives until it returns.
    pub fn unit(&self, i: usize, x: T) -> Result<T> {
        if i > 0 {
            return self.blocks[i - 1].forward(x);
        }
        let c = self.conv1.forward(&x)?;
        let mut b = self.bn1.forward(&c)?;
        drop(c);
        b.relu_()?;
        b.f_max_pool2d(3, 2, 1)
    }

    /// `fc(flatten(avgpool(x), 1))`.
    pub fn head(&self, x: T) -> Result<T> {
        self.fc.forward(&x.f_global_avg_pool()?.f_flatten1()?)
    }

    pub fn handles(&self) -> Self {
        ResNet {
            conv1: self.conv1.handles(),
            bn1: self.bn1.handles(),
            blocks: self.blocks.iter().map(Block::handles).collect(),
            fc: self.fc.handles(),
        }
    }
}

impl<T: Ops> Block<T> {
    /// `BasicBlock.forward` / `Bottleneck.forward`: conv, bn, relu_ for each convolution but the
    /// last (conv, bn), then `out += identity` (the input, or its downsample) and relu_.
    fn forward(&self, x: T) -> Result<T> {
        let last = self.convs.len() - 1;
        let mut out = x.shallow_clone();
        for (i, (c, n)) in self.convs.iter().enumerate() {
            // `out = self.conv(out)`, `out = self.bn(out)`: each assignment frees the tensor
            // before (unless autograd saved it) once the new one exists.
            out = c.forward(&out)?;
            out = n.forward(&out)?;
            if i < last {
                out.relu_()?;
            }
        }
        let identity = match &self.downsample {
            Some((c, n)) => {
                let z = c.forward(&x)?;
                n.forward(&z)?
            }
            None => x.shallow_clone(),
        };
        out.add_(&identity)?;
        out.relu_()?;
        Ok(out)
    }

    fn handles(&self) -> Self {
        let pair = |(c, n): &(Conv2d<T>, BatchNorm2d<T>)| (c.handles(), n.handles());
        Block { convs: self.convs.iter().map(pair).collect(), downsample: self.downsample.as_ref().map(pair) }
    }
}
