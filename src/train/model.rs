//! The lesson's `Classifier_MLP`, generalised to any depth: `depth` hidden layers of `hidden`
//! units (Linear then ReLU), then a Linear to the classes.
//!
//! Written on raw tensors rather than `tch::nn`, because `nn::Linear` and `Module::forward`
//! panic on any libtorch error, out-of-memory included; every call here is a fallible `f_` one.
use tch::{Device, Kind, TchError, Tensor};

/// One Linear layer: weight `[out, in]` and bias `[out]`, both leaves that require grad.
pub struct Linear {
    pub weight: Tensor,
    pub bias: Tensor,
}

pub struct Mlp {
    pub layers: Vec<Linear>,
}

impl Linear {
    /// PyTorch's default `nn.Linear` initialisation: weight and bias uniform in
    /// ±1/sqrt(in_features) (kaiming_uniform with a = sqrt(5) reduces to that bound).
    fn new(inputs: usize, outputs: usize, kind: Kind, device: Device) -> Result<Self, TchError> {
        let bound = 1.0 / (inputs as f64).sqrt();
        let param = |shape: &[i64]| -> Result<Tensor, TchError> {
            let mut t = Tensor::f_empty(shape, (kind, device))?;
            // In place; the returned handle is the same tensor.
            let _ = t.f_uniform_(-bound, bound)?;
            t.f_set_requires_grad(true)
        };
        Ok(Linear { weight: param(&[outputs as i64, inputs as i64])?, bias: param(&[outputs as i64])? })
    }
}

impl Mlp {
    pub fn new(
        inputs: usize,
        hidden: usize,
        depth: usize,
        classes: usize,
        kind: Kind,
        device: Device,
    ) -> Result<Self, TchError> {
        let mut widths = vec![inputs];
        widths.extend(std::iter::repeat_n(hidden, depth));
        widths.push(classes);
        let layers =
            widths.windows(2).map(|w| Linear::new(w[0], w[1], kind, device)).collect::<Result<_, _>>()?;
        Ok(Mlp { layers })
    }

    pub fn parameters(&self) -> impl Iterator<Item = &Tensor> {
        self.layers.iter().flat_map(|l| [&l.weight, &l.bias])
    }

    pub fn param_count(&self) -> u64 {
        self.parameters().map(|p| p.numel() as u64).sum()
    }

    pub fn param_bytes(&self) -> u64 {
        self.parameters().map(|p| (p.numel() * p.kind().elt_size_in_bytes()) as u64).sum()
    }

    /// Logits for a batch: ReLU after every layer but the last.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        self.forward_layers(x, 0..self.layers.len())
    }

    /// Applies layers `range` (indices into `layers`) to `h`: Linear, then ReLU unless it is the
    /// last layer of the model. Layers `0..depth` are the hidden ones, `depth` the head.
    pub fn forward_layers(&self, h: &Tensor, range: std::ops::Range<usize>) -> Result<Tensor, TchError> {
        let last = self.layers.len() - 1;
        let mut h = h.shallow_clone();
        for i in range {
            let l = &self.layers[i];
            h = h.f_linear(&l.weight, Some(&l.bias))?;
            if i < last {
                h = h.f_relu()?;
            }
        }
        Ok(h)
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.layers[0].weight.device()
    }

    /// The hidden layers' count (the head is `layers[depth]`).
    pub fn depth(&self) -> usize {
        self.layers.len() - 1
    }

    /// The lesson's loss: cross-entropy over the logits, mean over the batch.
    pub fn loss(logits: &Tensor, y: &Tensor) -> Result<Tensor, TchError> {
        logits.f_cross_entropy_loss::<Tensor>(y, None, tch::Reduction::Mean, -100, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_counts_follow_the_widths() {
        let m = Mlp::new(20, 50, 3, 10, Kind::Float, Device::Cpu).unwrap();
        assert_eq!(m.layers.len(), 4);
        let expected = (20 * 50 + 50) + 2 * (50 * 50 + 50) + (50 * 10 + 10);
        assert_eq!(m.param_count(), expected);
        assert_eq!(m.param_bytes(), 4 * expected);
        let x = Tensor::f_randn([7, 20], (Kind::Float, Device::Cpu)).unwrap();
        assert_eq!(m.forward(&x).unwrap().size(), vec![7, 10]);
        assert!(m.parameters().all(|p| p.requires_grad()));
    }

    #[test]
    fn depth_zero_is_a_linear_classifier() {
        let m = Mlp::new(5, 99, 0, 3, Kind::Float, Device::Cpu).unwrap();
        assert_eq!(m.layers.len(), 1);
        assert_eq!(m.param_count(), 5 * 3 + 3);
    }

    #[test]
    fn init_is_bounded_by_fan_in() {
        let m = Mlp::new(100, 10, 1, 2, Kind::Float, Device::Cpu).unwrap();
        let w = &m.layers[0].weight;
        let max = w.abs().max().double_value(&[]);
        assert!(max <= 0.1 + 1e-6 && max > 0.05, "max |w| = {max}");
    }
}
