//! The plain training step, as the lesson's loop writes it: batch to the device, forward and
//! loss, backward, optimizer step, zero_grad (which sets gradients to none, freeing them).
use tch::{COptimizer, Device, TchError, Tensor};

use super::data::{self, Dataset};
use super::model::Mlp;
use super::recorder::{Recorder, Stop};
use super::Progress;
use crate::record::Phase;
use crate::spec::{Config, OptimizerSpec};

pub(super) fn train(
    config: &Config,
    device: Device,
    rec: &mut Recorder,
    progress: &mut Progress,
) -> Result<(), Stop> {
    let kind = config.training.dtype.kind();
    let data = rec.phase(0, Phase::Data, || data::make(&config.data, kind, device))?;
    (progress.samples, progress.features, progress.classes) = (data.samples(), data.features, data.classes);
    let (model, opt) = rec.phase(0, Phase::Model, || {
        tch::manual_seed(config.training.seed as i64);
        let m = &config.model;
        let model = Mlp::new(data.features, m.hidden, m.depth, data.classes, kind, device)?;
        let opt = optimizer(&config.training.optimizer, &model)?;
        Ok((model, opt))
    })?;
    progress.param_count = model.param_count();
    progress.param_bytes = model.param_bytes();

    let batch = config.training.batch_size;
    for step in 1..=config.training.steps {
        let (x, y) = rec.phase(step, Phase::ToDevice, || gather(&data, step, batch))?;
        let loss = rec.phase(step, Phase::Forward, || Mlp::loss(&model.forward(&x)?, &y))?;
        rec.phase(step, Phase::Backward, || loss.f_backward())?;
        rec.phase(step, Phase::OptimizerStep, || opt.step())?;
        rec.phase(step, Phase::ZeroGrad, || opt.zero_grad())?;
        if step == config.training.steps {
            progress.final_loss = loss.f_double_value(&[]).ok();
        }
    }
    Ok(())
}

/// The step's batch as tensors of its own (a DataLoader's batch is too): rows
/// `(step-1)*batch ..` of the data set, wrapping around its end.
fn gather(data: &Dataset, step: usize, batch: usize) -> Result<(Tensor, Tensor), TchError> {
    let n = data.samples() as i64;
    let start = ((step - 1) * batch) as i64 % n;
    let idx = Tensor::f_arange_start(start, start + batch as i64, (tch::Kind::Int64, data.x.device()))?
        .f_remainder(n)?;
    Ok((data.x.f_index_select(0, &idx)?, data.y.f_index_select(0, &idx)?))
}

/// libtorch's own optimizers, through the fallible `COptimizer` (`nn::Optimizer` panics on OOM).
/// State is allocated at the first step, for parameters that have a gradient.
fn optimizer(spec: &OptimizerSpec, model: &Mlp) -> Result<COptimizer, TchError> {
    let mut opt = match *spec {
        OptimizerSpec::Sgd { lr, momentum, weight_decay } => {
            COptimizer::sgd(lr, momentum, 0.0, weight_decay, false)?
        }
        OptimizerSpec::Adam { lr, weight_decay } => {
            COptimizer::adam(lr, 0.9, 0.999, weight_decay, 1e-8, false)?
        }
        OptimizerSpec::AdamW { lr, weight_decay } => {
            COptimizer::adamw(lr, 0.9, 0.999, weight_decay, 1e-8, false)?
        }
    };
    for p in model.parameters() {
        opt.add_parameters(p, 0)?;
    }
    Ok(opt)
}
