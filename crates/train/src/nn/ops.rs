//! The tensor operations the models are written in, as one trait with two implementations:
//! libtorch's tensors, which train (here), and the estimate's symbolic tensors, which count
//! what libtorch would allocate and free (`estimate::graph`). The models, their units and
//! activation checkpointing are written once over [`Ops`], so the estimate replays the very code
//! that trains: the same ops, in the same order, with every handle dropped at the same point.
//!
//! Each method is the ATen op `torch.nn` calls for the same step (named as tch names its
//! fallible methods), and reports libtorch's errors, out-of-memory included, as errors: tch's
//! own scalar-taking methods panic on a libtorch error (see `libtorch::scalar`), so those go
//! through `libtorch::scalar` here.
use tch::{Device, Kind, TchError, Tensor};

use crate::libtorch::{autograd, scalar};

pub type Result<T> = std::result::Result<T, TchError>;

/// Where and in what dtype a model's tensors are made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Place {
    pub kind: Kind,
    pub device: Device,
}

/// How a new parameter is filled, in place, after `empty` (`torch.nn.init`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Uniform(f64),
    Normal(f64),
    Fill(f64),
}

/// A tensor, as the models use one. `Guard` restores grad mode when dropped.
pub trait Ops: Sized {
    type Guard;

    /// Gradient tracking off until the guard drops (`torch.no_grad()`).
    fn no_grad() -> Self::Guard;
    /// Gradient tracking on until the guard drops (`torch.enable_grad()`).
    fn enable_grad() -> Self::Guard;

    /// A second handle on the same tensor.
    fn shallow_clone(&self) -> Self;
    fn size(&self) -> Vec<i64>;
    fn kind(&self) -> Kind;
    fn device(&self) -> Device;
    fn defined(&self) -> bool;

    // Making tensors.
    /// `nn.Parameter(torch.empty(shape))` filled by `init`: a leaf that requires grad.
    fn param(shape: &[i64], place: Place, init: Init) -> Result<Self>;
    /// `torch.zeros(shape)` or `torch.ones(shape)` (`value` 0 or 1) in `kind`, no grad: a buffer.
    fn filled(shape: &[i64], kind: Kind, device: Device, value: f64) -> Result<Self>;
    /// `copy.deepcopy` of a parameter: a clone, a leaf that requires grad.
    fn deep_copy(&self) -> Result<Self>;
    /// `t.to(device, dtype)` of a module's tensor (integer tensors keep their dtype); a new leaf
    /// that requires grad when `param`. Returns the tensor itself when nothing changes.
    fn moved(&self, place: Place, param: bool) -> Result<Self>;
    /// An initialiser run again in place, under no_grad (torchvision's re-initialisation,
    /// MultiheadAttention's `_reset_parameters`).
    fn init_(&mut self, init: Init) -> Result<()>;

    /// A TorchScript module loaded for training on `place`, and its parameters in the module's
    /// order (`nn::script`). The estimate's symbolic tensors cannot look inside one, and refuse.
    fn load_script(path: &std::path::Path, place: Place)
        -> Result<(std::sync::Arc<tch::CModule>, Vec<Self>)>;
    /// The module's forward on `inputs`, its arguments in order.
    fn script_forward(module: &tch::CModule, inputs: &[&Self]) -> Result<Self>;
    /// The names of a module's top-level children, in order.
    fn script_children(module: &tch::CModule) -> Result<Vec<String>>;
    /// A module's buffers, as `module.buffers()` lists them.
    fn script_buffers(module: &tch::CModule) -> Result<Vec<Self>>;
    /// Child `i`'s forward on `x`.
    fn script_child_forward(module: &tch::CModule, i: usize, x: &Self) -> Result<Self>;
    /// A module's loss (`nn::script::Script::loss`): `F.cross_entropy` over the output's last
    /// dimension or `F.mse_loss`, the mean, with the output's shape checked against the target's.
    fn script_loss(out: &Self, y: &Self, loss: crate::spec::Loss, classes: usize) -> Result<Self>;

    // The forward's ops.
    fn f_linear(&self, weight: &Self, bias: Option<&Self>) -> Result<Self>;
    fn f_relu(&self) -> Result<Self>;
    fn relu_(&mut self) -> Result<()>;
    fn f_conv2d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        stride: i64,
        padding: i64,
        groups: i64,
    ) -> Result<Self>;
    /// `nn.BatchNorm2d.forward` in training: `num_batches_tracked.add_(1)`, then
    /// `F.batch_norm(x, running_mean, running_var, weight, bias, True, 0.1, 1e-5)`.
    fn batch_norm_train(&self, weight: &Self, bias: &Self, stats: [&Self; 3]) -> Result<Self>;
    fn f_max_pool2d(&self, kernel: i64, stride: i64, padding: i64) -> Result<Self>;
    /// `F.adaptive_avg_pool2d(x, 1)`.
    fn f_global_avg_pool(&self) -> Result<Self>;
    /// `torch.flatten(x, 1)`, a view.
    fn f_flatten1(&self) -> Result<Self>;
    fn f_add(&self, other: &Self) -> Result<Self>;
    fn add_(&mut self, other: &Self) -> Result<()>;
    /// `F.embedding(tokens, weight)` on `weight`.
    fn f_embedding(weight: &Self, tokens: &Self) -> Result<Self>;
    /// `F.layer_norm(x, (d,), weight, bias, 1e-5)` over the last dimension.
    fn f_layer_norm(&self, weight: &Self, bias: &Self) -> Result<Self>;
    /// `F.dropout(x, p, training=True)`.
    fn f_dropout(&self, p: f64) -> Result<Self>;
    /// `x.mean(dim=1)`.
    fn f_mean1(&self) -> Result<Self>;
    fn f_transpose(&self, a: i64, b: i64) -> Result<Self>;
    fn f_unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Self>;
    fn f_unsqueeze(&self, dim: i64) -> Result<Self>;
    fn f_squeeze_dim(&self, dim: i64) -> Result<Self>;
    fn f_contiguous(&self) -> Result<Self>;
    fn f_select(&self, dim: i64, index: i64) -> Result<Self>;
    fn f_view(&self, sizes: &[i64]) -> Result<Self>;
    fn f_permute(&self, dims: &[i64]) -> Result<Self>;
    /// `F.scaled_dot_product_attention(q, k, v, None, dropout_p, False)`.
    fn f_sdpa(q: &Self, k: &Self, v: &Self, dropout: f64) -> Result<Self>;
    /// `F.cross_entropy(logits, y)`: the mean over the batch.
    fn f_cross_entropy(&self, y: &Self) -> Result<Self>;

    // Autograd, as activation checkpointing drives it.
    fn f_detach(&self) -> Result<Self>;
    fn f_set_requires_grad(&self, requires: bool) -> Result<Self>;
    fn f_mul(&self, other: &Self) -> Result<Self>;
    fn f_sum(&self) -> Result<Self>;
    /// `t.backward()` for a scalar `t`.
    fn backward(&self) -> Result<()>;
    fn f_grad(&self) -> Result<Self>;
    /// `t.set_()`: the tensor emptied in place, its storage let go.
    fn set_empty(&mut self) -> Result<()>;
    /// The device's default random generator's state (`torch.get_rng_state()`).
    fn rng_state(device: Device) -> Result<Self>;
    fn set_rng_state(device: Device, state: &Self) -> Result<()>;
}

impl Ops for Tensor {
    type Guard = GradGuard;

    fn no_grad() -> GradGuard {
        GradGuard::Off(tch::no_grad_guard())
    }

    fn enable_grad() -> GradGuard {
        GradGuard::On(autograd::GradEnabled::new())
    }

    fn shallow_clone(&self) -> Self {
        Tensor::shallow_clone(self)
    }

    fn size(&self) -> Vec<i64> {
        Tensor::size(self)
    }

    fn kind(&self) -> Kind {
        Tensor::kind(self)
    }

    fn device(&self) -> Device {
        Tensor::device(self)
    }

    fn defined(&self) -> bool {
        Tensor::defined(self)
    }

    fn load_script(
        path: &std::path::Path,
        place: Place,
    ) -> Result<(std::sync::Arc<tch::CModule>, Vec<Self>)> {
        super::script::load(path, place)
    }

    fn script_forward(module: &tch::CModule, inputs: &[&Self]) -> Result<Self> {
        crate::ffi::script_forward(module, inputs).map_err(TchError::Torch)
    }

    fn script_loss(out: &Self, y: &Self, loss: crate::spec::Loss, classes: usize) -> Result<Self> {
        super::script::loss(out, y, loss, classes)
    }

    fn script_children(module: &tch::CModule) -> Result<Vec<String>> {
        crate::ffi::script_children(module).map_err(TchError::Torch)
    }

    fn script_buffers(module: &tch::CModule) -> Result<Vec<Self>> {
        crate::ffi::script_buffers(module).map_err(TchError::Torch)
    }

    fn script_child_forward(module: &tch::CModule, i: usize, x: &Self) -> Result<Self> {
        crate::ffi::script_child_forward(module, i, x).map_err(TchError::Torch)
    }

    fn param(shape: &[i64], place: Place, init: Init) -> Result<Self> {
        let mut t = Tensor::f_empty(shape, (place.kind, place.device))?;
        t.init_(init)?;
        t.f_set_requires_grad(true)
    }

    fn filled(shape: &[i64], kind: Kind, device: Device, value: f64) -> Result<Self> {
        if value == 0.0 {
            Tensor::f_zeros(shape, (kind, device))
        } else {
            Tensor::f_ones(shape, (kind, device))
        }
    }

    fn deep_copy(&self) -> Result<Self> {
        let mut out = self.f_empty_like()?;
        {
            let _no_grad = tch::no_grad_guard();
            out.f_copy_(self)?;
        }
        out.f_detach()?.f_set_requires_grad(true)
    }

    fn moved(&self, place: Place, param: bool) -> Result<Self> {
        let _no_grad = tch::no_grad_guard();
        let kind = if self.kind() == Kind::Int64 { Kind::Int64 } else { place.kind };
        let moved = self.f_to_device_(place.device, kind, false, false)?;
        if param {
            moved.f_detach()?.f_set_requires_grad(true)
        } else {
            Ok(moved)
        }
    }

    fn init_(&mut self, init: Init) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        // Each returns a second handle on the same tensor, dropped here.
        match init {
            Init::Uniform(b) => drop(self.f_uniform_(-b, b)?),
            Init::Normal(std) => drop(self.f_normal_(0.0, std)?),
            Init::Fill(v) => scalar::fill_(self, v)?,
        }
        Ok(())
    }

    fn f_linear(&self, weight: &Self, bias: Option<&Self>) -> Result<Self> {
        Tensor::f_linear(self, weight, bias)
    }

    fn f_relu(&self) -> Result<Self> {
        Tensor::f_relu(self)
    }

    fn relu_(&mut self) -> Result<()> {
        Tensor::f_relu_(self).map(drop)
    }

    fn f_conv2d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        stride: i64,
        padding: i64,
        groups: i64,
    ) -> Result<Self> {
        Tensor::f_conv2d(self, weight, bias, [stride; 2], [padding; 2], [1, 1], groups)
    }

    fn batch_norm_train(&self, weight: &Self, bias: &Self, [mean, var, tracked]: [&Self; 3]) -> Result<Self> {
        scalar::add_int_(tracked, 1)?;
        Tensor::f_batch_norm(self, Some(weight), Some(bias), Some(mean), Some(var), true, 0.1, 1e-5, true)
    }

    fn f_max_pool2d(&self, kernel: i64, stride: i64, padding: i64) -> Result<Self> {
        Tensor::f_max_pool2d(self, [kernel; 2], [stride; 2], [padding; 2], [1, 1], false)
    }

    fn f_global_avg_pool(&self) -> Result<Self> {
        Tensor::f_adaptive_avg_pool2d(self, [1, 1])
    }

    fn f_flatten1(&self) -> Result<Self> {
        Tensor::f_flatten(self, 1, -1)
    }

    fn f_add(&self, other: &Self) -> Result<Self> {
        Tensor::f_add(self, other)
    }

    fn add_(&mut self, other: &Self) -> Result<()> {
        Tensor::f_add_(self, other).map(drop)
    }

    fn f_embedding(weight: &Self, tokens: &Self) -> Result<Self> {
        Tensor::f_embedding(weight, tokens, -1, false, false)
    }

    fn f_layer_norm(&self, weight: &Self, bias: &Self) -> Result<Self> {
        let d = *weight.size().last().unwrap_or(&1);
        Tensor::f_layer_norm(self, [d], Some(weight), Some(bias), 1e-5, true)
    }

    fn f_dropout(&self, p: f64) -> Result<Self> {
        Tensor::f_dropout(self, p, true)
    }

    fn f_mean1(&self) -> Result<Self> {
        Tensor::f_mean_dim(self, Some(&[1i64][..]), false, None)
    }

    fn f_transpose(&self, a: i64, b: i64) -> Result<Self> {
        Tensor::f_transpose(self, a, b)
    }

    fn f_unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Self> {
        Tensor::f_unflatten(self, dim, sizes)
    }

    fn f_unsqueeze(&self, dim: i64) -> Result<Self> {
        Tensor::f_unsqueeze(self, dim)
    }

    fn f_squeeze_dim(&self, dim: i64) -> Result<Self> {
        Tensor::f_squeeze_dim(self, dim)
    }

    fn f_contiguous(&self) -> Result<Self> {
        Tensor::f_contiguous(self)
    }

    fn f_select(&self, dim: i64, index: i64) -> Result<Self> {
        Tensor::f_select(self, dim, index)
    }

    fn f_view(&self, sizes: &[i64]) -> Result<Self> {
        Tensor::f_view_(self, sizes)
    }

    fn f_permute(&self, dims: &[i64]) -> Result<Self> {
        Tensor::f_permute(self, dims)
    }

    fn f_sdpa(q: &Self, k: &Self, v: &Self, dropout: f64) -> Result<Self> {
        Tensor::f_scaled_dot_product_attention(q, k, v, None::<Tensor>, dropout, false, None, false)
    }

    fn f_cross_entropy(&self, y: &Self) -> Result<Self> {
        self.f_cross_entropy_loss::<Tensor>(y, None, tch::Reduction::Mean, -100, 0.0)
    }

    fn f_detach(&self) -> Result<Self> {
        Tensor::f_detach(self)
    }

    fn f_set_requires_grad(&self, requires: bool) -> Result<Self> {
        Tensor::f_set_requires_grad(self, requires)
    }

    fn f_mul(&self, other: &Self) -> Result<Self> {
        Tensor::f_mul(self, other)
    }

    fn f_sum(&self) -> Result<Self> {
        Tensor::f_sum(self, None)
    }

    fn backward(&self) -> Result<()> {
        autograd::backward(self)
    }

    fn f_grad(&self) -> Result<Self> {
        Tensor::f_grad(self)
    }

    fn set_empty(&mut self) -> Result<()> {
        Tensor::f_set_(self).map(drop)
    }

    fn rng_state(device: Device) -> Result<Self> {
        crate::ffi::rng_state(device).map_err(TchError::Torch)
    }

    fn set_rng_state(device: Device, state: &Self) -> Result<()> {
        crate::ffi::set_rng_state(device, state).map_err(TchError::Torch)
    }
}

/// libtorch's grad mode, switched until dropped.
pub enum GradGuard {
    Off(tch::NoGradGuard),
    On(autograd::GradEnabled),
}
