//! The lesson's `Classifier_MLP`, generalised to any widths: hidden layers (Linear then ReLU),
//! then a Linear to the classes. Its units are the hidden layers.
use super::layers::Linear;
use super::ops::{Ops, Place, Result};

pub struct Mlp<T> {
    /// The hidden layers, then the head.
    pub layers: Vec<Linear<T>>,
}

impl<T: Ops> Mlp<T> {
    /// `nn.Sequential(Linear(inputs, w0), ReLU(), ..., Linear(w_last, classes))`.
    pub fn new(inputs: usize, widths: &[usize], classes: usize, place: Place) -> Result<Self> {
        let mut sizes = vec![inputs];
        sizes.extend_from_slice(widths);
        sizes.push(classes);
        let layers = sizes.windows(2).map(|w| Linear::new(w[0], w[1], place)).collect::<Result<_>>()?;
        Ok(Mlp { layers })
    }

    pub fn parameters(&self) -> impl Iterator<Item = &T> {
        self.layers.iter().flat_map(|l| l.parameters())
    }

    /// The hidden layers' count (the head is `layers[depth]`).
    pub fn depth(&self) -> usize {
        self.layers.len() - 1
    }

    /// Hidden layer `i` as `nn.Sequential(..., Linear, ReLU, ...)` runs it: each module's
    /// output replaces its input, which goes then (unless autograd saved it): the layer's input
    /// once the Linear's output exists, the Linear's output once the ReLU's does.
    pub fn unit(&self, i: usize, h: T) -> Result<T> {
        let z = self.layers[i].forward(&h)?;
        drop(h);
        z.f_relu()
    }

    /// The head: the last Linear, to the logits.
    pub fn head(&self, h: &T) -> Result<T> {
        self.layers[self.depth()].forward(h)
    }

    pub fn handles(&self) -> Self {
        Mlp { layers: self.layers.iter().map(Linear::handles).collect() }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;

    const CPU: Place = Place { kind: Kind::Float, device: Device::Cpu };

    #[test]
    fn shapes_and_counts_follow_the_widths() {
        let _alone = crate::probe::cpu_alone();
        let m = Mlp::<Tensor>::new(20, &[50, 50, 50], 10, CPU).unwrap();
        assert_eq!(m.layers.len(), 4);
        let expected = (20 * 50 + 50) + 2 * (50 * 50 + 50) + (50 * 10 + 10);
        assert_eq!(m.parameters().map(|p| p.numel()).sum::<usize>(), expected);
        let w = Mlp::<Tensor>::new(5, &[7, 3], 2, CPU).unwrap();
        let shapes: Vec<Vec<i64>> = w.parameters().map(|p| p.size()).collect();
        assert_eq!(shapes, vec![vec![7, 5], vec![7], vec![3, 7], vec![3], vec![2, 3], vec![2]]);
        assert!(m.parameters().all(|p| p.requires_grad()));
    }

    #[test]
    fn no_hidden_layer_is_a_linear_classifier() {
        let _alone = crate::probe::cpu_alone();
        let m = Mlp::<Tensor>::new(5, &[], 3, CPU).unwrap();
        assert_eq!(m.layers.len(), 1);
        assert_eq!(m.parameters().map(|p| p.numel()).sum::<usize>(), 5 * 3 + 3);
    }

    #[test]
    fn init_is_bounded_by_fan_in() {
        let _alone = crate::probe::cpu_alone();
        let m = Mlp::<Tensor>::new(100, &[10], 2, CPU).unwrap();
        let max = m.layers[0].weight.abs().max().double_value(&[]);
        assert!(max <= 0.1 + 1e-6 && max > 0.05, "max |w| = {max}");
    }
}
