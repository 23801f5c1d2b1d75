//! What a run checks before it writes anything: each TorchScript module a spec names loads, has
//! parameters to train, and turns two rows of the spec's data into class logits `[2, classes]`.
//! A module that fails any of these would fail every trial; it is refused at once instead, with
//! the file and what is wrong.
use anyhow::{Context, Result};
use tch::{Device, Kind};

use crate::nn::script::Script;
use crate::nn::CPU_F32;
use crate::spec::{ModelSpec, Spec};

/// Checks every TorchScript module of `spec`'s configurations, on the CPU in float32.
pub fn preflight(spec: &Spec) -> Result<()> {
    let mut checked = Vec::new();
    for (variant, config) in spec.configs() {
        let ModelSpec::Torchscript(script) = &config.model else { continue };
        if checked.contains(&(&script.path, &config.data)) {
            continue;
        }
        let at = || match variant {
            Some(v) => format!("{}, variant {v}: model.path {}", spec.path.display(), script.path.display()),
            None => format!("{}: model.path {}", spec.path.display(), script.path.display()),
        };
        let _no_grad = tch::no_grad_guard();
        // Two rows are all the check reads: a data set oomlab makes is made with no more.
        let data = super::data::make(&config.data.with_samples_at_most(2), Kind::Float, Device::Cpu)
            .with_context(at)?;
        let module: Script<tch::Tensor> = Script::new(script, data.classes, CPU_F32).with_context(at)?;
        let rows = data.x.f_narrow(0, 0, data.samples().min(2) as i64).with_context(at)?;
        let _logits = module.unit(0, rows).map_err(|e| anyhow::anyhow!("{e}")).with_context(|| {
            format!("{}: its forward on two rows of the data ({} data) failed", at(), config.data.kind())
        })?;
        checked.push((&script.path, &config.data));
    }
    Ok(())
}
