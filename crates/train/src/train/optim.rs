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
//!
//! ZeRO (`[parallel] strategy = "zero"`) is `torch.distributed.optim.ZeroRedundancyOptimizer`:
//! the local optimizer is over this rank's shard of the parameters (`oomlab_core::zero`'s
//! partition, in its order), its step is followed by every shard's broadcast from its owner, and
//! `zero_grad` sets every parameter's gradient to none, as `Optimizer.zero_grad` over the
//! wrapper's own parameter groups (all of them) does.
use std::sync::Arc;

use tch::{Device, TchError, Tensor};

use crate::ffi;
use crate::ffi::dist::Group;
use crate::nn::Model;
use crate::spec::{OptimizerImpl, OptimizerSpec};

pub struct Optimizer {
    raw: ffi::Optim,
    implementation: OptimizerImpl,
    zero: Option<Zero>,
}

/// What ZeroRedundancyOptimizer holds beside its local optimizer.
struct Zero {
    group: Arc<Group>,
    /// Every rank's shard, in its optimizer's order: what each broadcasts after a step.
    shards: Vec<Vec<Tensor>>,
    /// Every parameter, in the model's order, for `zero_grad`.
    all: Vec<Tensor>,
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

    /// `ZeroRedundancyOptimizer(model.parameters(), optimizer_class=…)` on this rank of
    /// `group`: the local optimizer over the rank's shard (PyTorch's partition), in the
    /// implementation `choice` names or PyTorch's default.
    pub fn zero(
        spec: &OptimizerSpec,
        choice: Option<OptimizerImpl>,
        model: &Model<Tensor>,
        group: &Arc<Group>,
    ) -> Result<Self, TchError> {
        let implementation = OptimizerImpl::resolve(choice, matches!(model.device(), Device::Cuda(_)));
        let params = model.parameters();
        let numels: Vec<u64> = params.iter().map(|p| p.numel() as u64).collect();
        let shards: Vec<Vec<Tensor>> = oomlab_core::zero::partition(&numels, group.size())
            .into_iter()
            .map(|part| part.into_iter().map(|i| params[i].shallow_clone()).collect())
            .collect();
        let mine: Vec<&Tensor> = shards[group.rank()].iter().collect();
        let mut optimizer = Self::over(spec, implementation, &mine)?;
        let all = params.iter().map(|p| p.shallow_clone()).collect();
        optimizer.zero = Some(Zero { group: group.clone(), shards, all });
        Ok(optimizer)
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
        Ok(Optimizer { raw, implementation, zero: None })
    }

    pub fn implementation(&self) -> OptimizerImpl {
        self.implementation
    }

    /// Whether the step takes the grad scaler's scale and found_inf itself (PyTorch's
    /// `_step_supports_amp_scaling`): the fused implementations do.
    /// ZeroRedundancyOptimizer does not say it does (its class has no
    /// `_step_supports_amp_scaling`), so the grad scaler unscales and skips for it whatever its
    /// local optimizer is.
    pub fn takes_grad_scale(&self) -> bool {
        self.implementation == OptimizerImpl::Fused && self.zero.is_none()
    }

    pub fn step(&self) -> Result<(), TchError> {
        self.raw.step(None).map_err(TchError::Torch)?;
        self.sync_shards()
    }

    /// A fused step that unscales the gradients by `grad_scale` itself and leaves every
    /// parameter as it was where `found_inf` is set.
    pub fn step_scaled(&self, grad_scale: &Tensor, found_inf: &Tensor) -> Result<(), TchError> {
        self.raw.step(Some((grad_scale, found_inf))).map_err(TchError::Torch)?;
        self.sync_shards()
    }

    /// ZeRO's `_sync_params`: each rank's shard broadcast from it, rank by rank, parameter by
    /// parameter, in place (PyTorch issues them all asynchronously and then waits: the same
    /// tensors, none made).
    fn sync_shards(&self) -> Result<(), TchError> {
        let Some(z) = &self.zero else { return Ok(()) };
        for (owner, shard) in z.shards.iter().enumerate() {
            for p in shard {
                z.group.broadcast(p, owner).map_err(TchError::Torch)?;
            }
        }
        Ok(())
    }

    /// `zero_grad()`: every gradient set to none (PyTorch's default), which frees them; ZeRO's
    /// every parameter's, not only its shard's.
    pub fn zero_grad(&self) -> Result<(), TchError> {
        match &self.zero {
            Some(z) => ffi::reset_grads(&z.all.iter().collect::<Vec<_>>()),
            None => self.raw.zero_grad(),
        }
        Ok(())
    }
}
