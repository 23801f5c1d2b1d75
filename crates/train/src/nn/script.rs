//! A model of the user's own: a TorchScript module (`torch.jit.script` or `torch.jit.trace`,
//! then `torch.jit.save`), loaded by libtorch and trained as it is. Its parameters are the ones
//! it was saved with; its forward takes the batch (one tensor, or a tensors kind's inputs in
//! order) and gives what the spec's loss reads: class logits in the last dimension
//! (cross_entropy) or values shaped as the target (mse).
//!
//! The module runs op by op as eager PyTorch does: libtorch's graph executor is told not to
//! optimise (no profiling runs, no fusion), so each op allocates what the same op does eagerly.
//! It is one unit, which checkpointing recomputes whole; or, with `model.units = "children"`, its
//! top-level children are the units, run in turn (the run checks first that its forward is that
//! chain: `train::preflight`). The estimate's symbolic tensors cannot look inside it, and say so.
use std::path::Path;
use std::sync::Arc;

use tch::{CModule, Kind, Reduction, TchError, Tensor};

use super::ops::{Ops, Place, Result};
use crate::spec::{Loss, ScriptSpec, ScriptUnits};

/// A loaded module and a handle on each of its parameters.
pub struct Script<T> {
    module: Arc<CModule>,
    params: Vec<T>,
    /// `module.buffers()`: what DDP broadcasts from rank 0 (a BatchNorm's statistics).
    buffers: Vec<T>,
    loss: Loss,
    /// The data's classes (cross_entropy), which the output's last dimension must be.
    classes: usize,
    /// The children that are its units (`model.units = "children"`); empty: it is one unit.
    children: Vec<String>,
}

impl<T: Ops> Script<T> {
    /// Loads `spec`'s module onto `place` (its floating tensors in `place.kind`), in training mode.
    pub fn new(spec: &ScriptSpec, classes: usize, place: Place) -> Result<Self> {
        let (module, params) = T::load_script(&spec.path, place)?;
        let children = match spec.units {
            ScriptUnits::Whole => Vec::new(),
            ScriptUnits::Children => T::script_children(&module)?,
        };
        if spec.units == ScriptUnits::Children && children.is_empty() {
            return Err(TchError::FileFormat(format!(
                "{} has no children to be its units (model.units = \"children\"): remove model.units",
                spec.path.display()
            )));
        }
        let buffers = T::script_buffers(&module)?;
        Ok(Script { module, params, buffers, loss: spec.loss, classes, children })
    }

    /// `module.parameters()`, in the module's order.
    pub fn parameters(&self) -> Vec<&T> {
        self.params.iter().collect()
    }

    /// `module.buffers()`, in the module's order.
    pub fn buffers(&self) -> Vec<&T> {
        self.buffers.iter().collect()
    }

    /// Its units: its children, or itself.
    pub fn units(&self) -> usize {
        self.children.len().max(1)
    }

    /// The names of the children that are its units (empty when it is one unit).
    pub fn children(&self) -> &[String] {
        &self.children
    }

    /// Unit `i` on `x`: child `i`'s forward, or the module's on the batch, its one input.
    pub fn unit(&self, i: usize, x: T) -> Result<T> {
        let out = if self.children.is_empty() {
            T::script_forward(&self.module, &[&x])?
        } else {
            T::script_child_forward(&self.module, i, &x)?
        };
        drop(x);
        Ok(out)
    }

    /// The module's forward on a batch of several inputs, in its arguments' order.
    pub fn forward_inputs(&self, x: &T, extra: &[T]) -> Result<T> {
        let inputs: Vec<&T> = std::iter::once(x).chain(extra).collect();
        T::script_forward(&self.module, &inputs)
    }

    /// The spec's loss over the module's output; an output the loss cannot read is an error
    /// that says what it should be.
    pub fn loss(&self, out: &T, y: &T) -> Result<T> {
        T::script_loss(out, y, self.loss, self.classes)
    }

    /// The module's output is the logits already.
    pub fn head(&self, h: T) -> Result<T> {
        Ok(h)
    }

    /// The module in eval mode (dropout off, batch norm on its running statistics), while no
    /// other handle shares it: what a check of its outputs compares in.
    pub fn set_eval(&mut self) -> Result<()> {
        Arc::get_mut(&mut self.module)
            .ok_or_else(|| TchError::Torch("the module is shared: it cannot be set to eval".into()))?
            .f_set_eval()
    }

    /// The same module and parameters, through second handles.
    pub fn handles(&self) -> Self {
        Script {
            module: self.module.clone(),
            params: self.params.iter().map(T::shallow_clone).collect(),
            buffers: self.buffers.iter().map(T::shallow_clone).collect(),
            loss: self.loss,
            classes: self.classes,
            children: self.children.clone(),
        }
    }
}

/// `loss` of a module's output against the target `y`, as `F.cross_entropy` (over the last
/// dimension: an output `[batch, ..., classes]` and its target `[batch, ...]` are flattened to
/// `[n, classes]` and `[n]`, views of contiguous tensors) or `F.mse_loss` reads them; the mean.
pub fn loss(out: &Tensor, y: &Tensor, loss: Loss, classes: usize) -> Result<Tensor> {
    let (got, want) = (out.size(), y.size());
    match loss {
        Loss::CrossEntropy => {
            let mut expected = want.clone();
            expected.push(classes as i64);
            if got != expected {
                return Err(TchError::Shape(format!(
                    "the module's output is {got:?}; cross_entropy against the target {want:?} needs {expected:?} \
                     (the target's shape, then the data's {classes} classes): make the forward return class logits \
                     in its last dimension"
                )));
            }
            if got.len() == 2 {
                return out.f_cross_entropy_loss::<Tensor>(y, None, Reduction::Mean, -100, 0.0);
            }
            let flat = out.f_reshape([-1, classes as i64])?;
            flat.f_cross_entropy_loss::<Tensor>(&y.f_reshape([-1])?, None, Reduction::Mean, -100, 0.0)
        }
        Loss::Mse => {
            if got != want {
                return Err(TchError::Shape(format!(
                    "the module's output is {got:?}; mse needs the target's shape {want:?} (data.target after the \
                     batch): set data.target = {:?}, or make the forward return that shape",
                    got.get(1..).unwrap_or_default()
                )));
            }
            out.f_mse_loss(y, Reduction::Mean)
        }
    }
}

thread_local! {
    /// Whether the modules this thread loads are for a recording that stands for a CUDA step
    /// (see [`as_cuda_recording`]).
    static FOR_CUDA: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the modules it loads made for a CPU recording of a CUDA step: every
/// `scaled_dot_product_attention` without dropout (`ffi::script_attention_without_dropout`).
/// CUDA's fused attention keeps no dropout mask and no scores; the CPU's, with dropout, is the
/// math path, which keeps both; without, the CPU's flash kernel, which keeps what CUDA's keeps.
/// On the meta device, an attention whose mask needs a gradient (T5's position bias) runs as
/// CUDA's memory-efficient kernel, which the CPU has not (`ffi::meta_sdpa_as_cuda`).
pub fn as_cuda_recording<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FOR_CUDA.with(|c| c.set(self.0));
            crate::ffi::meta_sdpa_as_cuda(self.0);
        }
    }
    let _restore = Restore(FOR_CUDA.with(|c| c.replace(true)));
    crate::ffi::meta_sdpa_as_cuda(true);
    f()
}

/// Whether this thread is inside [`as_cuda_recording`]: a step it records stands for a CUDA step.
pub fn recording_for_cuda() -> bool {
    FOR_CUDA.with(|c| c.get())
}

/// What tells one meta module from another in [`META_MODULES`]: the file (its path, length and
/// time of change), the floating-point type, and whether made for a CUDA recording.
type MetaKey = (std::path::PathBuf, u64, Option<std::time::SystemTime>, Kind, bool);

/// Modules loaded for the meta device, kept for the next load of the same file: a meta module
/// holds no data, and reading a large file again for each recording (an estimate makes six or
/// more) would take most of the estimate's time (a 500 MB GPT-2 small: seconds a load). A kept
/// module is handed out only while nobody else holds it, with fresh tensors in every slot.
static META_MODULES: std::sync::Mutex<Vec<(MetaKey, Arc<CModule>)>> = std::sync::Mutex::new(Vec::new());

/// Lets go of the tensors of every kept meta module that nobody holds (the last recording's
/// parameters, their gradients): each slot gets an uncounted placeholder of its shape. Called
/// once a recording or a preflight is done with its module (`train::record`,
/// `train::preflight`): counted, its tensors would stay in the process's allocated bytes (a later
/// run's budget), and be freed inside the next recording's log as memory the step never made.
pub fn release_kept() {
    let modules = META_MODULES.lock().unwrap_or_else(|e| e.into_inner());
    for (key, module) in modules.iter().filter(|(_, m)| Arc::strong_count(m) == 1) {
        crate::ffi::meta_pause(true);
        // On failure the module keeps its tensors; the next load replaces them all the same.
        let _ = crate::ffi::script_to(module, crate::ffi::META, key.3);
        crate::ffi::meta_pause(false);
    }
}

/// Loads a TorchScript module for training with libtorch's tensors: on `place.device`, its
/// floating tensors in `place.kind`, in training mode, the graph executor run unoptimised.
pub fn load(path: &Path, place: Place) -> Result<(Arc<CModule>, Vec<tch::Tensor>)> {
    eager_executor()?;
    // The file's records are read through the counting allocator, which knows their sizes: what
    // tells a record cut short (see `script_check_storage`).
    crate::ffi::cpu_install().map_err(TchError::Torch)?;
    if !path.is_file() {
        let why = match path.exists() {
            true => "is not a regular file (a folder, a device or a pipe); give the path of a saved module",
            false => "no such file (model.path is relative to the spec's folder)",
        };
        return Err(TchError::FileFormat(format!("{}: {why}", path.display())));
    }
    if place.device != crate::ffi::META {
        let module = Arc::new(read(path, place)?);
        let params = trained(path, &module)?;
        return Ok((module, params));
    }
    let for_cuda = FOR_CUDA.with(|c| c.get());
    let meta = std::fs::metadata(path).ok();
    let key: MetaKey = (
        path.to_path_buf(),
        meta.as_ref().map_or(0, |m| m.len()),
        meta.and_then(|m| m.modified().ok()),
        place.kind,
        for_cuda,
    );
    let kept = {
        let modules = META_MODULES.lock().unwrap_or_else(|e| e.into_inner());
        modules.iter().find(|(k, m)| *k == key && Arc::strong_count(m) == 1).map(|(_, m)| Arc::clone(m))
    };
    let module = match kept {
        Some(module) => {
            // Fresh tensors in its slots, made as the first load made them: the last recording's
            // gradients and optimizer state went with the old ones.
            crate::ffi::script_to(&module, place.device, place.kind).map_err(TchError::Torch)?;
            crate::ffi::script_on_device(&module);
            module
        }
        None => {
            let module = Arc::new(read(path, place)?);
            let mut modules = META_MODULES.lock().unwrap_or_else(|e| e.into_inner());
            modules.retain(|(k, _)| k.0 != key.0);
            modules.push((key, Arc::clone(&module)));
            module
        }
    };
    let params = trained(path, &module)?;
    Ok((module, params))
}

/// The module in `path` read, checked and made ready: its tensors on `place.device` in
/// `place.kind`, in training mode.
fn read(path: &Path, place: Place) -> Result<CModule> {
    // Its records' declared sizes before libtorch inflates any: a zip bomb is refused here.
    super::archive::check(path, crate::device::host_memory())
        .map_err(|why| TchError::FileFormat(format!("{} {why}", path.display())))?;
    // A step recorded on the meta device loads the module on the CPU (uncounted: see
    // `ffi::cpu_pause`) and moves its tensors to meta below.
    let load_on = if place.device == crate::ffi::META { tch::Device::Cpu } else { place.device };
    let mut module = CModule::load_on_device(path, load_on).map_err(|e| {
        let why = e.to_string();
        let why = libtorch_words(&why);
        TchError::FileFormat(format!(
            "{} is not a TorchScript module this libtorch can load (save one with \
             torch.jit.save(torch.jit.script(model), path), or with scripts/export-model): {}",
            path.display(),
            why
        ))
    })?;
    // Before anything reads its tensors: a damaged file's may reach past their memory.
    crate::ffi::script_check_storage(&module).map_err(|why| {
        TchError::FileFormat(format!(
            "{} is damaged: {} (export it again, e.g. with scripts/export-model)",
            path.display(),
            libtorch_words(&why)
        ))
    })?;
    crate::ffi::script_on_device(&module);
    if place.kind != Kind::Float || load_on != place.device {
        // Floating-point tensors only, as Python's `module.to(dtype)`: token ids stay int64.
        crate::ffi::script_to(&module, place.device, place.kind).map_err(|why| {
            TchError::Torch(format!("converting {} to {:?} failed: {why}", path.display(), place.kind))
        })?;
    }
    crate::ffi::script_on_device(&module);
    if FOR_CUDA.with(|c| c.get()) {
        crate::ffi::script_attention_without_dropout(&module);
    }
    module.f_set_train()?;
    Ok(module)
}

/// The parameters to train, each once; an error where there are none.
fn trained(path: &Path, module: &CModule) -> Result<Vec<Tensor>> {
    // Every parameter, as `torch.optim.Adam(model.parameters())` takes them: one saved with
    // `requires_grad = False` (a frozen backbone) gets no gradient, so the optimizer skips it
    // and makes it no state, as torch.optim does. A tensor listed under two names (GPT-2's
    // embedding, tied to its head) is one parameter, as `parameters()` gives it once in Python:
    // libtorch's list repeats it, which would give it two optimizer states and two updates.
    let params = unique(module.named_parameters()?.into_iter().map(|(_, p)| p));
    if !params.is_empty() && !params.iter().any(Tensor::requires_grad) {
        return Err(TchError::FileFormat(format!(
            "{}: every parameter is saved with requires_grad = False: there is nothing to train (unfreeze \
             some before saving)",
            path.display()
        )));
    }
    if params.is_empty() {
        return Err(TchError::FileFormat(format!(
            "{} has no parameters: there is nothing to train (a module saved with torch.jit.freeze has its weights \
             folded into constants; save the unfrozen module)",
            path.display()
        )));
    }
    Ok(params)
}

/// The tensors in order, each once: the first of the names a tied tensor has, as
/// `nn.Module.parameters()` keeps it.
fn unique(tensors: impl Iterator<Item = Tensor>) -> Vec<Tensor> {
    let mut seen = std::collections::HashSet::new();
    tensors.filter(|t| seen.insert(crate::ffi::tensor_identity(t))).collect()
}

/// An error in its own words: a file refused by [`load`] as its message says (without tch's
/// "invalid file format: ", which is not what is wrong with a missing file or a frozen module),
/// anything else as [`libtorch_words`] gives it.
pub fn words(e: &TchError) -> String {
    match e {
        TchError::FileFormat(why) => why.clone(),
        e => libtorch_words(&e.to_string()).to_string(),
    }
}

/// libtorch's own words in an error's text: without its C++ backtrace and tch's
/// "Internal torch error: " prefix.
pub fn libtorch_words(text: &str) -> &str {
    let clean = crate::oom::clean(text);
    clean.strip_prefix("Internal torch error: ").unwrap_or(clean).trim_end()
}

/// libtorch's TorchScript executor as eager PyTorch runs: no profiling executor, no optimised
/// graph, no fusers, so each op is the op eager PyTorch would run. Without the optimised graph
/// TorchScript's own autocast pass (which inserts casts into the graph) does not run either: the
/// dispatcher's autocast, or on meta `ffi::meta_autocast`'s, is the only one, as in eager PyTorch.
fn eager_executor() -> Result<()> {
    tch::jit::f_set_profiling_mode(false)?;
    tch::jit::f_set_graph_executor_optimize(false)?;
    tch::jit::f_set_tensor_expr_fuser_enabled(false)?;
    Ok(())
}
