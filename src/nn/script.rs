//! A model of the user's own: a TorchScript module (`torch.jit.script` or `torch.jit.trace`,
//! then `torch.jit.save`), loaded by libtorch and trained as it is. Its parameters are the ones
//! it was saved with; its forward takes the batch and gives the class logits.
//!
//! The module runs op by op as eager PyTorch does: libtorch's graph executor is told not to
//! optimise (no profiling runs, no fusion), so each op allocates what the same op does eagerly.
//! It is one unit: checkpointing recomputes it whole. The estimate's symbolic tensors cannot
//! look inside it, and say so.
use std::path::Path;
use std::sync::Arc;

use tch::{CModule, Kind, TchError};

use super::ops::{Ops, Place, Result};
use crate::spec::ScriptSpec;

/// A loaded module and a handle on each of its parameters.
pub struct Script<T> {
    module: Arc<CModule>,
    params: Vec<T>,
    classes: usize,
}

impl<T: Ops> Script<T> {
    /// Loads `spec`'s module onto `place` (its floating tensors in `place.kind`), in training mode.
    pub fn new(spec: &ScriptSpec, classes: usize, place: Place) -> Result<Self> {
        let (module, params) = T::load_script(&spec.path, place)?;
        Ok(Script { module, params, classes })
    }

    /// `module.parameters()`, in the module's order.
    pub fn parameters(&self) -> Vec<&T> {
        self.params.iter().collect()
    }

    /// The module's forward on the batch: the logits, `[batch, classes]`.
    pub fn unit(&self, _i: usize, x: T) -> Result<T> {
        let out = T::script_forward(&self.module, &x)?;
        drop(x);
        let (size, batch) = (out.size(), x_rows(&out));
        if size.len() != 2 || size[1] != self.classes as i64 {
            return Err(TchError::Shape(format!(
                "the module's output is {size:?}; cross_entropy needs [batch, classes] = [{batch}, {}] (the data's \
                 classes): make the module's forward return class logits",
                self.classes
            )));
        }
        Ok(out)
    }

    /// The module's output is the logits already.
    pub fn head(&self, h: T) -> Result<T> {
        Ok(h)
    }

    /// The same module and parameters, through second handles.
    pub fn handles(&self) -> Self {
        Script {
            module: self.module.clone(),
            params: self.params.iter().map(T::shallow_clone).collect(),
            classes: self.classes,
        }
    }
}

fn x_rows<T: Ops>(t: &T) -> i64 {
    t.size().first().copied().unwrap_or(0)
}

/// Loads a TorchScript module for training with libtorch's tensors: on `place.device`, its
/// floating tensors in `place.kind`, in training mode, the graph executor run unoptimised.
pub fn load(path: &Path, place: Place) -> Result<(Arc<CModule>, Vec<tch::Tensor>)> {
    eager_executor()?;
    if !path.is_file() {
        return Err(TchError::FileFormat(format!(
            "{}: no such file (model.path is relative to the spec's folder)",
            path.display()
        )));
    }
    let mut module = CModule::load_on_device(path, place.device).map_err(|e| {
        let why = e.to_string();
        let why = crate::oom::clean(&why);
        TchError::FileFormat(format!(
            "{} is not a TorchScript module this libtorch can load (save one with \
             torch.jit.save(torch.jit.script(model), path), or with scripts/export-model): {}",
            path.display(),
            why.strip_prefix("Internal torch error: ").unwrap_or(why)
        ))
    })?;
    if place.kind != Kind::Float {
        // `CModule::to` panics on a libtorch error (an out-of-memory among them).
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| module.to(place.device, place.kind, false)))
            .map_err(|_| {
                TchError::Torch(format!("converting {} to {:?} failed", path.display(), place.kind))
            })?;
    }
    module.f_set_train()?;
    let mut params = Vec::new();
    for (_, p) in module.named_parameters()? {
        // A module saved from eval or under no_grad may carry parameters that require none.
        params.push(if p.requires_grad() { p } else { p.f_set_requires_grad(true)? });
    }
    if params.is_empty() {
        return Err(TchError::FileFormat(format!(
            "{} has no parameters: there is nothing to train (a module saved with torch.jit.freeze has its weights \
             folded into constants; save the unfrozen module)",
            path.display()
        )));
    }
    Ok((Arc::new(module), params))
}

/// libtorch's TorchScript executor as eager PyTorch runs: no profiling executor, no optimised
/// graph, no fusers, so each op is the op eager PyTorch would run.
fn eager_executor() -> Result<()> {
    tch::jit::f_set_profiling_mode(false)?;
    tch::jit::f_set_graph_executor_optimize(false)?;
    tch::jit::f_set_tensor_expr_fuser_enabled(false)?;
    Ok(())
}
