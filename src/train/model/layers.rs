//! The layers the models are built from, as `torch.nn` makes and runs them: parameters made
//! with the module's own initialisation (the same draws from the same generator, in the same
//! order, so a seed gives PyTorch's parameters bit for bit), and forwards that call the same ATen
//! op `torch.nn.functional` calls, so that libtorch allocates what PyTorch allocates.
//!
//! Every call is a fallible `f_` one: `tch::nn` panics on any libtorch error, out-of-memory
//! included.
use tch::{Device, Kind, TchError, Tensor};

/// Where and in what dtype a model's tensors are made.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    pub kind: Kind,
    pub device: Device,
}

/// A parameter: `empty` then an in-place initialiser, then `requires_grad`, as
/// `nn.Parameter(torch.empty(...))` and `reset_parameters` do.
fn param(
    shape: &[i64],
    place: Place,
    init: impl FnOnce(&mut Tensor) -> Result<Tensor, TchError>,
) -> Result<Tensor, TchError> {
    let mut t = Tensor::f_empty(shape, (place.kind, place.device))?;
    // In place; the returned handle is the same tensor.
    let _ = init(&mut t)?;
    t.f_set_requires_grad(true)
}

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
pub struct Linear {
    pub weight: Tensor,
    pub bias: Tensor,
}

impl Linear {
    /// `nn.Linear.reset_parameters`: the weight `kaiming_uniform_(a=sqrt(5))`, the bias uniform
    /// in ±1/sqrt(in_features). The two bounds differ in the last bit of a double for most
    /// widths, which a float64 model sees.
    pub fn new(inputs: usize, outputs: usize, place: Place) -> Result<Self, TchError> {
        let (w, b) = (kaiming_uniform_bound(inputs), 1.0 / (inputs as f64).sqrt());
        Ok(Linear {
            weight: param(&[outputs as i64, inputs as i64], place, |t| t.f_uniform_(-w, w))?,
            bias: param(&[outputs as i64], place, |t| t.f_uniform_(-b, b))?,
        })
    }

    /// `F.linear(x, weight, bias)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        x.f_linear(&self.weight, Some(&self.bias))
    }

    pub fn parameters(&self) -> [&Tensor; 2] {
        [&self.weight, &self.bias]
    }

    pub fn handles(&self) -> Linear {
        Linear { weight: self.weight.shallow_clone(), bias: self.bias.shallow_clone() }
    }
}

/// `nn.Conv2d(inputs, outputs, kernel, stride, padding, groups=groups, bias=bias)`.
pub struct Conv2d {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
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

impl Conv2d {
    /// `_ConvNd.reset_parameters`: the weight `kaiming_uniform_(a=sqrt(5))` over
    /// `fan_in = inputs / groups * kernel^2`, then the bias uniform in ±1/sqrt(fan_in).
    pub fn new(s: ConvShape, place: Place) -> Result<Self, TchError> {
        let fan_in = s.inputs / s.groups * s.kernel * s.kernel;
        let bound = kaiming_uniform_bound(fan_in);
        let shape = [s.outputs as i64, (s.inputs / s.groups) as i64, s.kernel as i64, s.kernel as i64];
        let weight = param(&shape, place, |t| t.f_uniform_(-bound, bound))?;
        let bias = if s.bias {
            let b = 1.0 / (fan_in as f64).sqrt();
            Some(param(&[s.outputs as i64], place, |t| t.f_uniform_(-b, b))?)
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
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        x.f_conv2d(&self.weight, self.bias.as_ref(), [self.stride; 2], [self.padding; 2], [1, 1], self.groups)
    }

    /// torchvision's re-initialisation: `kaiming_normal_(w, mode="fan_out", nonlinearity="relu")`.
    pub fn kaiming_normal_(&mut self) -> Result<(), TchError> {
        let size = self.weight.size();
        let fan_out = (size[0] * size[2] * size[3]) as usize;
        let _no_grad = tch::no_grad_guard();
        let _ = self.weight.f_normal_(0.0, kaiming_normal_std(fan_out))?;
        Ok(())
    }

    pub fn parameters(&self) -> impl Iterator<Item = &Tensor> {
        std::iter::once(&self.weight).chain(self.bias.as_ref())
    }

    /// Every tensor, and whether it is a parameter, in `Module._apply`'s order.
    pub fn tensors_mut(&mut self) -> Vec<(&mut Tensor, bool)> {
        std::iter::once(&mut self.weight).chain(self.bias.as_mut()).map(|t| (t, true)).collect()
    }

    pub fn handles(&self) -> Conv2d {
        Conv2d {
            weight: self.weight.shallow_clone(),
            bias: self.bias.as_ref().map(Tensor::shallow_clone),
            ..*self
        }
    }
}

/// `nn.BatchNorm2d(channels)` in training: normalises with the batch's statistics and updates
/// its running ones (momentum 0.1, eps 1e-5).
pub struct BatchNorm2d {
    pub weight: Tensor,
    pub bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    num_batches_tracked: Tensor,
}

impl BatchNorm2d {
    /// `_NormBase.__init__`: weight and bias (`empty`), the buffers running_mean (`zeros`),
    /// running_var (`ones`) and num_batches_tracked (`tensor(0, dtype=long)`), in that order;
    /// then `reset_parameters` fills weight with ones and bias with zeros in place.
    pub fn new(channels: usize, place: Place) -> Result<Self, TchError> {
        let c = [channels as i64];
        let weight = param(&c, place, |t| t.f_fill_(1.0))?;
        let bias = param(&c, place, |t| t.f_fill_(0.0))?;
        let running_mean = Tensor::f_zeros(c, (place.kind, place.device))?;
        let running_var = Tensor::f_ones(c, (place.kind, place.device))?;
        let num_batches_tracked = Tensor::f_zeros([], (Kind::Int64, place.device))?;
        Ok(BatchNorm2d { weight, bias, running_mean, running_var, num_batches_tracked })
    }

    /// `BatchNorm2d.forward` in training: `num_batches_tracked.add_(1)`, then
    /// `F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.1,
    /// eps=1e-5)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let _ = self.num_batches_tracked.shallow_clone().f_add_scalar_(1)?;
        x.f_batch_norm(
            Some(&self.weight),
            Some(&self.bias),
            Some(&self.running_mean),
            Some(&self.running_var),
            true,
            0.1,
            1e-5,
            true,
        )
    }

    pub fn parameters(&self) -> [&Tensor; 2] {
        [&self.weight, &self.bias]
    }

    /// Every tensor, and whether it is a parameter, in `Module._apply`'s order: parameters,
    /// then buffers.
    pub fn tensors_mut(&mut self) -> Vec<(&mut Tensor, bool)> {
        vec![
            (&mut self.weight, true),
            (&mut self.bias, true),
            (&mut self.running_mean, false),
            (&mut self.running_var, false),
            (&mut self.num_batches_tracked, false),
        ]
    }

    pub fn handles(&self) -> BatchNorm2d {
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
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
}

impl LayerNorm {
    pub fn new(d: usize, place: Place) -> Result<Self, TchError> {
        let s = [d as i64];
        Ok(LayerNorm {
            weight: param(&s, place, |t| t.f_fill_(1.0))?,
            bias: param(&s, place, |t| t.f_fill_(0.0))?,
        })
    }

    /// `F.layer_norm(x, (d,), weight, bias, 1e-5)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let d = self.weight.size()[0];
        x.f_layer_norm([d], Some(&self.weight), Some(&self.bias), 1e-5, true)
    }

    pub fn parameters(&self) -> [&Tensor; 2] {
        [&self.weight, &self.bias]
    }

    pub fn handles(&self) -> LayerNorm {
        LayerNorm { weight: self.weight.shallow_clone(), bias: self.bias.shallow_clone() }
    }
}

/// `nn.Embedding(vocab, d)`: weight `normal_(0, 1)`.
pub struct Embedding {
    pub weight: Tensor,
}

impl Embedding {
    pub fn new(vocab: usize, d: usize, place: Place) -> Result<Self, TchError> {
        Ok(Embedding { weight: param(&[vocab as i64, d as i64], place, |t| t.f_normal_(0.0, 1.0))? })
    }

    /// `F.embedding(tokens, weight)`: padding_idx none (-1), no max_norm, dense gradient.
    pub fn forward(&self, tokens: &Tensor) -> Result<Tensor, TchError> {
        Tensor::f_embedding(&self.weight, tokens, -1, false, false)
    }

    pub fn handles(&self) -> Embedding {
        Embedding { weight: self.weight.shallow_clone() }
    }
}

/// A parameter's deep copy (`copy.deepcopy` of a module: `clone` of each parameter), a leaf that
/// requires grad.
pub fn deep_copy(t: &Tensor) -> Result<Tensor, TchError> {
    let mut out = t.f_empty_like()?;
    {
        let _no_grad = tch::no_grad_guard();
        out.f_copy_(t)?;
    }
    out.f_detach()?.f_set_requires_grad(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_torch_nn_init() {
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
        let place = Place { kind: Kind::Float, device: Device::Cpu };
        let s = ConvShape { inputs: 8, outputs: 8, kernel: 3, stride: 1, padding: 1, groups: 8, bias: true };
        let c = Conv2d::new(s, place).unwrap();
        assert_eq!(c.weight.size(), vec![8, 1, 3, 3]);
        assert_eq!(c.parameters().count(), 2);
        let x = Tensor::f_randn([2, 8, 5, 5], (Kind::Float, Device::Cpu)).unwrap();
        assert_eq!(c.forward(&x).unwrap().size(), vec![2, 8, 5, 5]);
        let bound = kaiming_uniform_bound(9) as f32;
        let max = c.weight.abs().max().double_value(&[]) as f32;
        assert!(max <= bound && max > bound / 2.0, "{max} vs {bound}");
    }
}
