//! The optimizer step as the lesson's readers run it: `torch.optim`'s SGD, Adam and AdamW of
//! PyTorch 2.11, in the implementation PyTorch would pick (foreach on CUDA, the for-loop on the
//! CPU) or the one a spec names (`training.optimizer_impl`).
//!
//! The ops run in C++ (`crates/torch/src/ffi/optim.cpp`), the same ops in the same order as
//! `torch/optim/{sgd,adam}.py`, because what a step costs in memory is which temporaries it makes
//! and how long they live: the foreach Adam holds a square root of every parameter at once, the
//! for-loop one a parameter's, the fused one none. libtorch's own C++ optimizers (which oomlab
//! used before) are gone: their Adam updates `exp_avg` with mul_ and add_ where Python's uses
//! lerp_ (different bits) and makes each parameter's state just before its update (a different
//! peak), so their answer was for an optimizer no Python user runs.
use tch::{Device, TchError, Tensor};

use crate::ffi;
use crate::nn::Model;
use crate::spec::{OptimizerImpl, OptimizerSpec};

pub struct Optimizer {
    raw: ffi::Optim,
    implementation: OptimizerImpl,
}

impl Optimizer {
    /// The optimizer of `spec` over the model's parameters, in the implementation `choice` names
    /// or PyTorch's default for the model's device. State comes at the first step.
    pub fn new(
        spec: &OptimizerSpec,
        choice: Option<OptimizerImpl>,
        model: &Model<Tensor>,
    ) -> Result<Self, TchError> {
        let implementation = OptimizerImpl::resolve(choice, matches!(model.device(), Device::Cuda(_)));
        Self::over(spec, implementation, &model.parameters())
    }

    /// The optimizer over `params`, in this order, every one of which must have a gradient at
    /// each step.
    pub fn over(
        spec: &OptimizerSpec,
        implementation: OptimizerImpl,
        params: &[&Tensor],
    ) -> Result<Self, TchError> {
        let (kind, lr, momentum, weight_decay) = match *spec {
            OptimizerSpec::Sgd { lr, momentum, weight_decay } => (0, lr, momentum, weight_decay),
            OptimizerSpec::Adam { lr, weight_decay } => (1, lr, 0.0, weight_decay),
            OptimizerSpec::AdamW { lr, weight_decay } => (2, lr, 0.0, weight_decay),
        };
        let code = match implementation {
            OptimizerImpl::ForLoop => 0,
            OptimizerImpl::Foreach => 1,
            OptimizerImpl::Fused => 2,
        };
        let raw = ffi::Optim::new(kind, code, params, lr, momentum, weight_decay).map_err(TchError::Torch)?;
        Ok(Optimizer { raw, implementation })
    }

    pub fn implementation(&self) -> OptimizerImpl {
        self.implementation
    }

    /// Whether the step takes the grad scaler's scale and found_inf itself (PyTorch's
    /// `_step_supports_amp_scaling`): the fused implementations do.
    pub fn takes_grad_scale(&self) -> bool {
        self.implementation == OptimizerImpl::Fused
    }

    pub fn step(&self) -> Result<(), TchError> {
        self.raw.step(None).map_err(TchError::Torch)
    }

    /// A fused step that unscales the gradients by `grad_scale` itself and leaves every
    /// parameter as it was where `found_inf` is set.
    pub fn step_scaled(&self, grad_scale: &Tensor, found_inf: &Tensor) -> Result<(), TchError> {
        self.raw.step(Some((grad_scale, found_inf))).map_err(TchError::Torch)
    }

    /// `zero_grad()`: every gradient set to none (PyTorch's default), which frees them.
    pub fn zero_grad(&self) -> Result<(), TchError> {
        self.raw.zero_grad();
        Ok(())
    }
}
