//! One training step, composed from the techniques a spec asks for, each in its own module:
//! gradient accumulation (here: the loop over micro-batches), mixed precision (`amp`: autocast
//! and the grad scaler), activation checkpointing (`checkpoint`), forward-only modes and what
//! the loop keeps of each loss (the guide's leak).
//!
//! Phases, in order: to_device, forward, backward (once per micro-batch), then optimizer_step
//! and zero_grad once per step. zero_grad sets gradients to none, which frees them.
use tch::{Device, TchError, Tensor};

use super::amp::{Autocast, GradScaler};
use super::data::{self, Dataset};
use super::optim::Optimizer;
use super::recorder::{Recorder, Stop};
use super::Learned;
use crate::libtorch::{autograd, scalar};
use crate::nn::{checkpoint, Input, Model, Place};
use crate::schema::Phase;
use crate::spec::{csv_data, Amp, Config, DataLocation, DataSpec, History, Mode, Techniques};

/// What the loop keeps of past losses, alive until the trial ends.
#[derive(Default)]
struct Kept {
    tensors: Vec<Tensor>,
    values: Vec<f64>,
}

pub(super) fn train(
    config: &Config,
    device: Device,
    rec: &mut Recorder,
    learned: &mut Learned,
) -> Result<Model<Tensor>, Stop> {
    let kind = config.training.dtype.kind();
    let t = &config.training.techniques;
    // With the data on the host (a DataLoader's way) only each batch reaches the device.
    let home = match config.location {
        DataLocation::Host => Device::Cpu,
        DataLocation::Device => device,
    };
    let data = rec.phase(0, Phase::Data, || {
        let data = data::make(&config.data, kind, home)?;
        if let DataSpec::Csv { path, .. } = &config.data {
            csv_data::enough_rows(path, data.samples(), config.training.batch_size)
                .map_err(|e| tch::TchError::FileFormat(format!("{e:#}")))?;
        }
        Ok(data)
    })?;
    (learned.samples, learned.features, learned.classes) = (data.samples(), data.features, data.classes);
    let (model, opt, mut scaler) = rec.phase(0, Phase::Model, || {
        tch::manual_seed(config.training.seed as i64);
        let input = Input::of(&config.data, data.features, data.classes);
        let model = Model::new(&config.model, input, Place { kind, device })?;
        let opt = Optimizer::new(&config.training.optimizer, t.optimizer_impl, &model)?;
        let scaler = match &t.amp {
            Amp::Fp16 { scaler } => Some(GradScaler::new(scaler, device)?),
            _ => None,
        };
        Ok((model, opt, scaler))
    })?;
    learned.param_count = model.param_count();
    learned.param_bytes = model.param_bytes();

    // The set-up ends here: under a benchmark, the first step's start.
    rec.end_step()?;
    let mut kept = Kept::default();
    let mut skipped = 0;
    for step in 1..=config.training.steps {
        let loss = match t.mode {
            Mode::Train => {
                let last = step == config.training.steps;
                let (loss, mean, skip) =
                    train_step(config, &data, &model, &opt, scaler.as_mut(), step, last, rec, &mut kept)?;
                skipped += usize::from(skip);
                (loss, mean)
            }
            Mode::Forward | Mode::ForwardNoGrad => {
                (forward_step(config, &data, &model, step, rec, &mut kept)?, None)
            }
        };
        rec.end_step()?;
        if step == config.training.steps {
            learned.final_loss = loss.1.or_else(|| loss.0.f_double_value(&[]).ok());
        }
    }
    if let Some(s) = &scaler {
        learned.skipped_steps = Some(skipped);
        learned.final_scale = s.scale_value().ok();
    }
    // Measured while the trial's tensors are all alive, as the last phase left them.
    rec.finish()?;
    drop(kept);
    Ok(model)
}

/// Forward and backward for each micro-batch, then one optimizer step and zero_grad.
/// Returns the last micro-batch's loss, with `read_loss` the mean of the micro-batches' losses
/// (the effective batch's loss, comparable with an unaccumulated run's), and whether the grad
/// scaler skipped the step.
#[allow(clippy::too_many_arguments)]
fn train_step(
    config: &Config,
    data: &Dataset,
    model: &Model<Tensor>,
    opt: &Optimizer,
    scaler: Option<&mut GradScaler>,
    step: usize,
    read_loss: bool,
    rec: &mut Recorder,
    kept: &mut Kept,
) -> Result<(Tensor, Option<f64>, bool), Stop> {
    let t = &config.training.techniques;
    let device = model.device();
    // None: the plain path (no checkpointing, or `{ sequential = 1 }`, which checkpoints nothing).
    let segment = t.checkpoint.segments(model.units());
    let mut last = None;
    // Read between phases: reading a value allocates nothing the trace would see.
    let mut sum = read_loss.then_some(0.0);
    for micro in 0..t.accumulation {
        rec.micro = micro;
        let index = (step - 1) * t.accumulation + micro;
        let (x, extra, y) =
            rec.phase(step, Phase::ToDevice, || gather(data, index, config.training.batch_size, device))?;
        let fwd = rec.phase(step, Phase::Forward, || {
            let _autocast = Autocast::enter(device, &t.amp)?;
            Ok(match &segment {
                None => Forward::Plain(model.loss(&model.forward_inputs(&x, &extra)?, &y)?),
                Some(cut) => Forward::Checkpointed(checkpoint::forward(model, &x, &y, cut)?),
            })
        })?;
        let loss = fwd.loss().shallow_clone();
        keep(t, &loss, kept).map_err(|e| stop(e, step, Phase::Forward))?;
        let scaler_ref = scaler.as_deref();
        rec.phase(step, Phase::Backward, || {
            // The recompute inside a checkpointed backward is a forward: it runs under autocast
            // as the first forward did. This keeps autocast on for the whole backward, where
            // torch.utils.checkpoint turns it on for the recompute alone (found in review, not yet
            // changed: the backward's own ops may cast under amp here and not in PyTorch).
            let _autocast = if segment.is_some() { Autocast::enter(device, &t.amp)? } else { None };
            let mut l = loss.shallow_clone();
            if t.accumulation > 1 {
                // Each micro-batch's mean loss counts 1/n, so the sum is the effective batch's mean.
                l = scalar::div(&l, t.accumulation as f64)?;
            }
            if let Some(s) = scaler_ref {
                l = s.scale(&l)?;
            }
            fwd.backward(&l)
        })?;
        // The micro-batch and its loss go when this iteration ends; only the last loss lives on
        // through optimizer_step and zero_grad (the caller reads it).
        if let Some(s) = sum.as_mut() {
            match loss.f_double_value(&[]) {
                Ok(v) => *s += v,
                Err(_) => sum = None,
            }
        }
        if micro + 1 == t.accumulation {
            last = Some(loss);
        }
    }
    rec.micro = 0;
    let skipped = rec.phase(step, Phase::OptimizerStep, || match scaler {
        Some(s) => s.step(opt, model.parameters()),
        None => opt.step().map(|()| false),
    })?;
    rec.phase(step, Phase::ZeroGrad, || opt.zero_grad())?;
    let mean = sum.map(|s| s / t.accumulation as f64);
    Ok((last.expect("accumulation >= 1"), mean, skipped))
}

/// Forward and loss only: with gradient tracking (a validation loop that forgot no_grad) or
/// under no_grad.
fn forward_step(
    config: &Config,
    data: &Dataset,
    model: &Model<Tensor>,
    step: usize,
    rec: &mut Recorder,
    kept: &mut Kept,
) -> Result<Tensor, Stop> {
    let t = &config.training.techniques;
    let device = model.device();
    let (x, extra, y) =
        rec.phase(step, Phase::ToDevice, || gather(data, step - 1, config.training.batch_size, device))?;
    let loss = rec.phase(step, Phase::Forward, || {
        let _no_grad = (t.mode == Mode::ForwardNoGrad).then(tch::no_grad_guard);
        let _autocast = Autocast::enter(device, &t.amp)?;
        model.loss(&model.forward_inputs(&x, &extra)?, &y)
    })?;
    keep(t, &loss, kept).map_err(|e| stop(e, step, Phase::Forward))?;
    Ok(loss)
}

/// The forward pass's result, plain or checkpointed; each knows its own backward.
enum Forward {
    Plain(Tensor),
    Checkpointed(checkpoint::Checkpointed<Tensor>),
}

impl Forward {
    fn loss(&self) -> &Tensor {
        match self {
            Forward::Plain(l) => l,
            Forward::Checkpointed(c) => &c.loss,
        }
    }

    fn backward(self, to_backprop: &Tensor) -> Result<(), TchError> {
        match self {
            Forward::Plain(_) => autograd::backward(to_backprop),
            Forward::Checkpointed(c) => c.backward(to_backprop),
        }
    }
}

/// Keeps what the spec's history asks of this loss: the tensor (and with it its graph) or a
/// plain number (which waits for the device, like `loss.item()`).
fn keep(t: &Techniques, loss: &Tensor, kept: &mut Kept) -> Result<(), TchError> {
    match t.history {
        History::None => {}
        History::LossTensor => kept.tensors.push(loss.shallow_clone()),
        // A step recorded on the meta device has no values to read; the number costs no memory.
        History::LossValue if loss.device() == crate::ffi::META => kept.values.push(0.0),
        History::LossValue => kept.values.push(loss.f_double_value(&[])?),
    }
    Ok(())
}

fn stop(error: TchError, step: usize, phase: Phase) -> Stop {
    Stop::Torch(super::PhaseError { phase, step, error })
}

/// A micro-batch: its first input, a tensors kind's other inputs, and its target.
type Batch = (Tensor, Vec<Tensor>, Tensor);

/// The micro-batch `index` as tensors of its own on `device` (a DataLoader's batch is too):
/// rows `index * batch ..`, wrapping around the end of the data set, gathered where the data
/// set lives and then moved (a no-op when it lives on `device`): the inputs in order, then the
/// target, each gathered and moved before the next, as a DataLoader's collate and
/// `[t.to(device) for t in batch]` do.
fn gather(data: &Dataset, index: usize, batch: usize, device: Device) -> Result<Batch, TchError> {
    let n = data.samples() as i64;
    let start = (index * batch) as i64 % n;
    let range = match data.x.device() {
        // tch cannot name the meta device in a factory call; the indices' values are not read.
        crate::ffi::META => {
            crate::ffi::meta_empty(&[batch as i64], tch::Kind::Int64).map_err(TchError::Torch)?
        }
        here => Tensor::f_arange_start(start, start + batch as i64, (tch::Kind::Int64, here))?,
    };
    let idx = scalar::remainder(&range, n)?;
    drop(range);
    if data.extra.is_empty() {
        // As before the tensors kind: both gathered, then both moved.
        let (x, y) = (data.x.f_index_select(0, &idx)?, data.y.f_index_select(0, &idx)?);
        return Ok((on_device(data::to(&x, device)?), Vec::new(), on_device(data::to(&y, device)?)));
    }
    let take = |t: &Tensor| data::to(&t.f_index_select(0, &idx)?, device).map(on_device);
    let extra = data.extra.iter().map(take).collect::<Result<_, _>>()?;
    Ok((take(&data.x)?, extra, take(&data.y)?))
}

/// A batch moved to the device: a recording on the CPU (where the move is no copy) is told that
/// a CUDA run's copy is the device's.
fn on_device(t: Tensor) -> Tensor {
    crate::ffi::cpu_events_on_device(&t);
    t
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;
    use crate::nn::{mlp::Mlp, CPU_F32};
    use crate::probe::fake::FakeProbe;
    use crate::schema::PhaseRecord;
    use crate::spec::{DataLocation, DataSpec, Dtype, ModelSpec, OptimizerSpec, TrainingSpec};

    fn config(batch: usize, accumulation: usize) -> Config {
        Config {
            model: ModelSpec::mlp(16, 2),
            data: DataSpec::Synthetic { samples: 64, features: 8, classes: 3, seed: 1 },
            location: DataLocation::Host,
            training: TrainingSpec {
                optimizer: OptimizerSpec::Sgd { lr: 1.0, momentum: 0.0, weight_decay: 0.0 },
                batch_size: batch,
                steps: 1,
                dtype: Dtype::Float32,
                seed: 0,
                techniques: Techniques { accumulation, ..Techniques::default() },
            },
        }
    }

    /// One real train_step with SGD at lr 1, so each parameter moves by exactly its gradient,
    /// from the parameters `init` (the same for every call: the global generator is shared with
    /// the tests running beside this one, so a seed alone does not give the same model).
    fn gradient_step(c: &Config, data: &data::Dataset, init: &[Tensor]) -> Vec<Tensor> {
        let model = Model::<Tensor>::Mlp(Mlp::new(8, &[16, 16], 3, CPU_F32).unwrap());
        tch::no_grad(|| {
            for (p, i) in model.parameters().into_iter().zip(init) {
                p.shallow_clone().copy_(i);
            }
        });
        let before: Vec<Tensor> = model.parameters().iter().map(|p| p.copy()).collect();
        let opt = Optimizer::new(&c.training.optimizer, None, &model).unwrap();
        let probe = FakeProbe::default();
        let mut sink = |_: &PhaseRecord| Ok(());
        let mut rec = Recorder::new(&probe, 1, crate::schema::TraceLevel::Phases, &mut sink).unwrap();
        let _ = train_step(c, data, &model, &opt, None, 1, false, &mut rec, &mut Kept::default()).unwrap();
        model.parameters().into_iter().zip(before).map(|(p, b)| b - p).collect()
    }

    #[test]
    fn accumulated_gradient_equals_the_full_batch() {
        let _alone = crate::probe::cpu_alone();
        let init: Vec<Tensor> =
            Mlp::new(8, &[16, 16], 3, CPU_F32).unwrap().parameters().map(|p: &Tensor| p.copy()).collect();
        // One data set too: it is drawn from the same shared generator.
        let data = data::make(&config(64, 1).data, Kind::Float, Device::Cpu).unwrap();
        let full = gradient_step(&config(64, 1), &data, &init);
        for (batch, acc) in [(16, 4), (4, 16), (1, 64)] {
            let accumulated = gradient_step(&config(batch, acc), &data, &init);
            for (f, a) in full.iter().zip(&accumulated) {
                let err = (f - a).abs().max().double_value(&[]) / f.abs().max().double_value(&[]);
                assert!(err < 1e-5, "{batch}x{acc}: relative error {err}");
            }
        }
    }

    #[test]
    fn gather_takes_consecutive_rows_and_wraps() {
        let _alone = crate::probe::cpu_alone();
        let spec = DataSpec::Synthetic { samples: 10, features: 2, classes: 2, seed: 0 };
        let d = data::make(&spec, Kind::Float, Device::Cpu).unwrap();
        let (x, _, y) = gather(&d, 1, 4, Device::Cpu).unwrap();
        assert!(x.equal(&d.x.narrow(0, 4, 4)) && y.equal(&d.y.narrow(0, 4, 4)));
        let (x, _, _) = gather(&d, 2, 4, Device::Cpu).unwrap(); // rows 8, 9, 0, 1
        assert!(x.narrow(0, 2, 2).equal(&d.x.narrow(0, 0, 2)));
    }
}
