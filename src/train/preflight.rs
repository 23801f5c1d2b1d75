//! What a run checks before it writes anything: each TorchScript module a spec names loads, has
//! parameters to train, and turns two rows of the spec's data into an output its loss reads
//! (class logits `[2, ..., classes]` for cross_entropy, the target's shape for mse).
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
        let rows = |t: &tch::Tensor| t.f_narrow(0, 0, data.samples().min(2) as i64);
        let extra = data.extra.iter().map(rows).collect::<Result<Vec<_>, _>>().with_context(at)?;
        let (x, y) = (rows(&data.x).with_context(at)?, rows(&data.y).with_context(at)?);
        // libtorch's own words, without its C++ backtrace.
        let said = |e: tch::TchError| {
            let text = e.to_string();
            let clean = crate::oom::clean(&text);
            anyhow::anyhow!("{}", clean.strip_prefix("Internal torch error: ").unwrap_or(clean).trim_end())
        };
        let out = module.forward_inputs(&x, &extra).map_err(said).with_context(|| {
            let inputs = 1 + extra.len();
            format!(
                "{}: its forward on two rows of the data ({} data, {inputs} input{}) failed",
                at(),
                config.data.kind(),
                if inputs == 1 { "" } else { "s" }
            )
        })?;
        let _loss = module.loss(&out, &y).map_err(said).with_context(at)?;
        checked.push((&script.path, &config.data));
    }
    Ok(())
}
