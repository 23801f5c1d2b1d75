//! What a run checks before it writes anything: each TorchScript module a spec names loads, has
//! parameters to train, and turns two rows of the spec's data into an output its loss reads
//! (class logits `[2, ..., classes]` for cross_entropy, the target's shape for mse), floating
//! point and made from parameters that train; and, cut
//! into its children (`model.units = "children"`), that its forward is those children run in
//! turn and that the checkpointed segments fit in them.
//! A module that fails any of these would fail every trial; it is refused at once instead, with
//! the file and what is wrong.
//!
//! An estimate whose step is recorded on the meta device checks on meta too
//! ([`for_estimate`]): the checks read shapes, dtypes and whether the output needs a
//! gradient, none of which needs the arithmetic that makes a large model's forward take tens of
//! seconds on a CPU.
use anyhow::{Context, Result};
use tch::{Device, Kind};

use crate::nn::script::Script;
use crate::nn::{Place, CPU_F32};
use crate::spec::{Checkpoint, ModelSpec, Spec};

/// Checks every TorchScript module of `spec`'s configurations, on the CPU in float32.
pub fn preflight(spec: &Spec) -> Result<()> {
    check(spec, CPU_F32)
}

/// The checks before an estimate's recordings: on the meta device where those are made there
/// (`train::record::meta_for`), else [`preflight`]. For CUDA, with the module loaded as a CUDA
/// recording loads it (`nn::script::as_cuda_recording`), so that the first recording takes the
/// module these checks kept rather than reading its file again.
pub fn for_estimate(spec: &Spec, for_cuda: bool) -> Result<()> {
    match (super::record::meta_for(for_cuda), for_cuda) {
        (false, _) => preflight(spec),
        (true, true) => crate::nn::script::as_cuda_recording(|| preflight_shapes(spec)),
        (true, false) => preflight_shapes(spec),
    }
}

/// [`preflight`], on the meta device where it can run there. Anything meta cannot check (an op
/// without a meta kernel; children to compare by value) is checked on the CPU, whose answer,
/// pass or error, is the one given.
fn preflight_shapes(spec: &Spec) -> Result<()> {
    let on_meta = crate::ffi::meta_install().is_ok()
        && check(spec, Place { kind: Kind::Float, device: crate::ffi::META }).is_ok();
    // The modules it loaded are kept for the recordings, without the bytes their tensors count.
    crate::nn::script::release_kept();
    if on_meta {
        return Ok(());
    }
    preflight(spec)
}

/// The checks, with the module and two rows of data on `place` (the CPU, or meta).
fn check(spec: &Spec, place: Place) -> Result<()> {
    let mut checked = Vec::new();
    for (variant, config) in spec.configs() {
        let ModelSpec::Torchscript(script) = &config.model else { continue };
        let key = (&script.path, &config.data, script.units, config.training.techniques.checkpoint);
        if checked.contains(&key) {
            continue;
        }
        let at = || match variant {
            Some(v) => format!("{}, variant {v}: model.path {}", spec.path.display(), script.path.display()),
            None => format!("{}: model.path {}", spec.path.display(), script.path.display()),
        };
        let _no_grad = tch::no_grad_guard();
        // libtorch's own words, without its C++ backtrace.
        let said = |e: tch::TchError| anyhow::anyhow!("{}", crate::nn::script::words(&e));
        // Two rows are all the check reads: a data set oomlab makes is made with no more.
        let data = super::data::make(&config.data.with_samples_at_most(2), place.kind, place.device)
            .map_err(said)
            .with_context(|| {
                format!("{}: making two rows of its data ({} data)", at(), config.data.kind())
            })?;
        let mut module: Script<tch::Tensor> =
            Script::new(script, data.classes, place).map_err(said).with_context(at)?;
        let rows = |t: &tch::Tensor| t.f_narrow(0, 0, data.samples().min(2) as i64);
        let extra = data.extra.iter().map(rows).collect::<Result<Vec<_>, _>>().with_context(at)?;
        let (x, y) = (rows(&data.x).with_context(at)?, rows(&data.y).with_context(at)?);
        let out = module.forward_inputs(&x, &extra).map_err(said).with_context(|| {
            let inputs = 1 + extra.len();
            format!(
                "{}: its forward on two rows of the data ({} data, {inputs} input{}) failed",
                at(),
                config.data.kind(),
                if inputs == 1 { "" } else { "s" }
            )
        })?;
        if !out.is_floating_point() {
            anyhow::bail!(
                "{}: its forward returns {:?} values; the loss reads floating-point logits (return them before an \
                 argmax or a cast to an integer type)",
                at(),
                out.kind()
            );
        }
        let _loss = module.loss(&out, &y).map_err(said).with_context(at)?;
        // With gradients on, as training runs it: an output cut from the parameters (detached,
        // made under no_grad) gives backward nothing to train.
        // (Inference runs no backward: there it may be.)
        let tracked = tch::with_grad(|| module.forward_inputs(&x, &extra)).map_err(said).with_context(at)?;
        if config.training.techniques.mode == crate::spec::Mode::Train && !tracked.requires_grad() {
            anyhow::bail!(
                "{}: its output does not depend on any parameter that trains (it is detached, or made under \
                 torch.no_grad()): backward would have nothing to compute; return the logits as computed",
                at()
            );
        }
        if !module.children().is_empty() {
            if place.device != Device::Cpu {
                anyhow::bail!("{}: its children are compared with its forward by value, on the CPU", at());
            }
            chain(&mut module, &x).map_err(|e| anyhow::anyhow!("{} {e}", at()))?;
            segments_fit(module.units(), config.training.techniques.checkpoint)
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
        }
        checked.push(key);
    }
    Ok(())
}

/// Whether the module's forward is its children run in turn: their chain and its forward, in
/// eval mode on `x`, give the same output.
fn chain(module: &mut Script<tch::Tensor>, x: &tch::Tensor) -> Result<(), String> {
    let not = "its forward is not its children run in turn (model.units = \"children\")";
    let fix = "remove model.units, and the module is one unit that checkpointing recomputes whole";
    module.set_eval().map_err(|e| e.to_string())?;
    // A traced module keeps dropout on whatever its mode (train mode is a constant of the trace:
    // scripts/export-model --blocks): the forward and the chain draw from one generator state,
    // which is given back after, so that the check takes nothing from the run's random numbers.
    let state = crate::ffi::rng_state(Device::Cpu)?;
    let restore = || crate::ffi::set_rng_state(Device::Cpu, &state);
    let whole = module.forward_inputs(x, &[]).map_err(|e| e.to_string())?;
    restore()?;
    let mut h = x.shallow_clone();
    for (i, name) in module.children().to_vec().iter().enumerate() {
        let shape = h.size();
        h = module.unit(i, h).map_err(|e| {
            let text = e.to_string();
            let why = crate::oom::clean(&text).lines().next().unwrap_or_default().to_string();
            format!("{not}: child {i} ({name}) fails on {shape:?}, what the children before it give: {why}; {fix}")
        })?;
    }
    restore()?;
    let same = h.size() == whole.size() && h.allclose(&whole, 1e-5, 1e-6, false);
    if !same {
        return Err(format!(
            "{not}: on two rows of the data they give {:?} where the forward gives {:?}{} (torchvision's ResNets, \
             for one, flatten between their avgpool and fc children); {fix}",
            h.size(),
            whole.size(),
            if h.size() == whole.size() { ", other values" } else { "" }
        ));
    }
    Ok(())
}

/// A checkpointed segment of at most the module's `units` children.
fn segments_fit(units: usize, checkpoint: Checkpoint) -> Result<(), String> {
    match checkpoint {
        Checkpoint::Every(k) if k > units => Err(format!(
            "training.checkpoint = {k} must be at most its {units} children (a segment every k of them); give a \
             smaller one, or checkpoint = \"sqrt\""
        )),
        Checkpoint::Sequential(s) if s > units => Err(format!(
            "training.checkpoint = {{ sequential = {s} }} must be 1 to its {units} children; give fewer segments"
        )),
        _ => Ok(()),
    }
}
