//! The layers the models are built from, as `torch.nn` makes and runs them: parameters made
//! with the module's own initialisation (the same draws from the same generator, in the same
//! order, so a seed gives PyTorch's parameters bit for bit), and forwards that call the same ATen
//! op `torch.nn.functional` calls, so that libtorch allocates what PyTorch allocates.
use tch::Kind;

use super::ops::{Init, Ops, Place, Result};

/// `init.kaiming_uniform_(w, a=sqrt(5))`'s bound, as torch/nn/init.py computes it:
/// `gain = sqrt(2 / (1 + a**2))`, `std = gain / sqrt(fan_in)`, `bound = sqrt(3) * std`.
pub fn kaiming_uniform_bound(fan_in: usize) -> f64 {
    let a = 5f64.sqrt();
    let gain = (2.0 / (1.0 + a.powi(2))).sqrt();
    3f64.sqrt() * (gain / (fan_in as f64).sqrt())
}

/// `init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")`'s standard deviation, what
/// torchvision's ResNet gives every convolution: `sqrt(2) / sqrt(fan_out)`.
pub fn kaiming_normal_std(fan_out: usize) -> f64 {
    2f64.sqrt() / (fan_out as f64).sqrt()
}

/// `init.xavier_uniform_(w)`'s bound: `sqrt(3) * sqrt(2 / (fan_in + fan_out))`.
pub fn xavier_uniform_bound(fan_in: usize, fan_out: usize) -> f64 {
    3f64.sqrt() * (2.0 / (fan_in + fan_out) as f64).sqrt()
}

/// `nn.Linear(inputs, outputs)`: weight `[out, in]` and bias `[out]`.
pub struct Linear<T> {
    pub weight: T,
    pub bias: T,
}

impl<T: Ops> Linear<T> {
    /// `nn.Linear.reset_parameters`: the weight `kaiming_uniform_(a=sqrt(5))`, the bias uniform
    /// in ±1/sqrt(in_features). The two bounds differ in the last bit of a double for most
    /// widths, which a float64 model sees.
    pub fn new(inputs: usize, outputs: usize, place: Place) -> Result<Self> {
        let (w, b) = (kaiming_uniform_bound(inputs), 1.0 / (inputs as f64).sqrt());
        Ok(Linear {
            weight: T::param(&[outputs as i64, inputs as i64], place, Init::Uniform(w))?,
            bias: T::param(&[outputs as i64], place, Init::Uniform(b))?,
        })
    }

    /// `F.linear(x, weight, bias)`.
    pub fn forward(&self, x: &T) -> Result<T> {
        x.f_linear(&self.weight, Some(&self.bias))
    }

    pub fn parameters(&self) -> [&T; 2] {
        [&self.weight, &self.bias]
    }

    pub fn deep_copy(&self) -> Result<Self> {
        Ok(Linear { weight: self.weight.deep_copy()?, bias: self.bias.deep_copy()? })
    }

    pub fn handles(&self) -> Self {
        Linear { weight: self.weight.shallow_clone(), bias: self.bias.shallow_clone() }
    }
}

/// `nn.Conv2d(inputs, outputs, kernel, stride, padding, groups=groups, bias=bias)`.
pub struct Conv2d<T> {
    pub weight: T,
    pub bias: Option<T>,
    stride: i64,
    padding: i64,
    groups: i64,
}

/// A convolution's shape and wiring.
#[derive(Debug, Clone, Copy)]
pub struct ConvShape {
    pub inputs: usize,
    pub outputs: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
    pub bias: bool,
}

impl<T: Ops> Conv2d<T> {
    /// `_ConvNd.reset_parameters`: the weight `kaiming_uniform_(a=sqrt(5))` over
    /// `fan_in = inputs / groups * kernel^2`, then the bias uniform in ±1/sqrt(fan_in).
    pub fn new(s: ConvShape, place: Place) -> Result<Self> {
        let fan_in = s.inputs / s.groups * s.kernel * s.kernel;
        let shape = [s.outputs as i64, (s.inputs / s.groups) as i64, s.kernel as i64, s.kernel as i64];
        let weight = T::param(&shape, place, Init::Uniform(kaiming_uniform_bound(fan_in)))?;
        let bias = if s.bias {
            Some(T::param(&[s.outputs as i64], place, Init::Uniform(1.0 / (fan_in as f64).sqrt()))?)
        } else {
            None
        };
        Ok(Conv2d {
            weight,
            bias,
            stride: s.stride as i64,
            padding: s.padding as i64,
            groups: s.groups as i64,
        })
    }

    /// `F.conv2d(x, weight, bias, stride, padding, dilation=1, groups)`.
    pub fn forward(&self, x: &T) -> Result<T> {
        x.f_conv2d(&self.weight, self.bias.as_ref(), self.stride, self.padding, self.groups)
    }

    /// torchvision's re-initialisation: `kaiming_normal_(w, mode="fan_out", nonlinearity="relu")`.
    pub fn kaiming_normal_(&mut self) -> Result<()> {
        let size = self.weight.size();
        let fan_out = (size[0] * size[2] * size[3]) as usize;
        self.weight.init_(Init::Normal(kaiming_normal_std(fan_out)))
    }

    pub fn parameters(&self) -> impl Iterator<Item = &T> {
        std::iter::once(&self.weight).chain(self.bias.as_ref())
    }

    /// Every tensor, and whether it is a parameter, in `Module._apply`'s order.
    pub fn tensors_mut(&mut self) -> Vec<(&mut T, bool)> {
        std::iter::once(&mut self.weight).chain(self.bias.as_mut()).map(|t| (t, true)).collect()
    }

    pub fn handles(&self) -> Self {
        Conv2d {
            weight: self.weight.shallow_clone(),
            bias: self.bias.as_ref().map(T::shallow_clone),
            stride: self.stride,
            padding: self.padding,
            groups: self.groups,
        }
    }
}

/// `nn.BatchNorm2d(channels)` in training: normalises with the batch's statistics and updates
/// its running ones (momentum 0.1, eps 1e-5).
pub struct BatchNorm2d<T> {
    pub weight: T,
    pub bias: T,
    running_mean: T,
    running_var: T,
    num_batches_tracked: T,
}

impl<T: Ops> BatchNorm2d<T> {
    /// `_NormBase.__init__`: weight and bias (`empty`), the buffers running_mean (`zeros`),
    /// running_var (`ones`) and num_batches_tracked (`tensor(0, dtype=long)`), in that order;
    /// `reset_parameters` then fills weight with ones and bias with zeros in place (done here as
    /// each is made: the same allocations in the same order).
    pub fn new(channels: usize, place: Place) -> Result<Self> {
        let c = [channels as i64];
        Ok(BatchNorm2d {
            weight: T::param(&c, place, Init::Fill(1.0))?,
            bias: T::param(&c, place, Init::Fill(0.0))?,
            running_mean: T::filled(&c, place.kind, place.device, 0.0)?,
            running_var: T::filled(&c, place.kind, place.device, 1.0)?,
            num_batches_tracked: T::filled(&[], Kind::Int64, place.device, 0.0)?,
        })
    }

    pub fn forward(&self, x: &T) -> Result<T> {
        x.batch_norm_train(
            &self.weight,
            &self.bias,
            [&self.running_mean, &self.running_var, &self.num_batches_tracked],
        )
    }

    pub fn parameters(&self) -> [&T; 2] {
        [&self.weight, &self.bias]
    }

    /// The buffers, in `module.buffers()`'s order: what DDP broadcasts from rank 0.
    pub fn buffers(&self) -> [&T; 3] {
        [&self.running_mean, &self.running_var, &self.num_batches_tracked]
    }

    /// Every tensor, and whether it is a parameter, in `Module._apply`'s order: parameters,
    /// then buffers.
    pub fn tensors_mut(&mut self) -> Vec<(&mut T, bool)> {
        vec![
            (&mut self.weight, true),
            (&mut self.bias, true),
            (&mut self.running_mean, false),
            (&mut self.running_var, false),
            (&mut self.num_batches_tracked, false),
        ]
    }

    pub fn handles(&self) -> Self {
        BatchNorm2d {
            weight: self.weight.shallow_clone(),
            bias: self.bias.shallow_clone(),
            running_mean: self.running_mean.shallow_clone(),
            running_var: self.running_var.shallow_clone(),
            num_batches_tracked: self.num_batches_tracked.shallow_clone(),
        }
    }
}

/// `nn.LayerNorm(d)` (eps 1e-5): weight ones, bias zeros.
pub struct LayerNorm<T> {
    pub weight: T,
    pub bias: T,
}

impl<T: Ops> LayerNorm<T> {
    pub fn new(d: usize, place: Place) -> Result<Self> {
        let s = [d as i64];
        Ok(LayerNorm {
            weight: T::param(&s, place, Init::Fill(1.0))?,
            bias: T::param(&s, place, Init::Fill(0.0))?,
        })
    }

    pub fn forward(&self, x: &T) -> Result<T> {
        x.f_layer_norm(&self.weight, &self.bias)
    }

    pub fn parameters(&self) -> [&T; 2] {
        [&self.weight, &self.bias]
    }

    pub fn deep_copy(&self) -> Result<Self> {
        Ok(LayerNorm { weight: self.weight.deep_copy()?, bias: self.bias.deep_copy()? })
    }

    pub fn handles(&self) -> Self {
        LayerNorm { weight: self.weight.shallow_clone(), bias: self.bias.shallow_clone() }
    }
}

/// `nn.Embedding(vocab, d)`: weight `normal_(0, 1)`.
pub struct Embedding<T> {
    pub weight: T,
}

impl<T: Ops> Embedding<T> {
    pub fn new(vocab: usize, d: usize, place: Place) -> Result<Self> {
        Ok(Embedding { weight: T::param(&[vocab as i64, d as i64], place, Init::Normal(1.0))? })
    }

    /// `F.embedding(tokens, weight)`: padding_idx none, no max_norm, dense gradient.
    pub fn forward(&self, tokens: &T) -> Result<T> {
        T::f_embedding(&self.weight, tokens)
    }

    pub fn handles(&self) -> Self {
        Embedding { weight: self.weight.shallow_clone() }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Tensor};

    use super::*;

    #[test]
    fn bounds_follow_torch_nn_init() {
        let _alone = crate::probe::cpu_alone();
        // kaiming_uniform_(a=sqrt(5)) reduces to 1/sqrt(fan_in), up to rounding.
        for fan in [1, 3, 27, 576, 4608] {
            let b = kaiming_uniform_bound(fan);
            assert!((b - 1.0 / (fan as f64).sqrt()).abs() < 1e-15, "{fan}: {b}");
        }
        assert!((kaiming_normal_std(64 * 49) - (2.0 / 3136.0f64).sqrt()).abs() < 1e-15);
        assert!((xavier_uniform_bound(16, 48) - (6.0f64 / 64.0).sqrt()).abs() < 1e-15);
    }

    #[test]
    fn conv_shapes_and_bias() {
        let _alone = crate::probe::cpu_alone();
        let place = Place { kind: Kind::Float, device: Device::Cpu };
        let s = ConvShape { inputs: 8, outputs: 8, kernel: 3, stride: 1, padding: 1, groups: 8, bias: true };
        let c = Conv2d::<Tensor>::new(s, place).unwrap();
        assert_eq!(c.weight.size(), vec![8, 1, 3, 3]);
        assert_eq!(c.parameters().count(), 2);
        let x = Tensor::f_randn([2, 8, 5, 5], (Kind::Float, Device::Cpu)).unwrap();
        assert_eq!(c.forward(&x).unwrap().size(), vec![2, 8, 5, 5]);
        let bound = kaiming_uniform_bound(9) as f32;
        let max = c.weight.abs().max().double_value(&[]) as f32;
        assert!(max <= bound && max > bound / 2.0, "{max} vs {bound}");
    }
}
