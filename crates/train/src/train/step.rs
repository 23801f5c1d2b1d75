//! The real trainer: the actions of the trial's one description ([`crate::step::plan`], which
//! the estimate's replay executes too) carried out on libtorch, each phase measured by the
//! recorder. The techniques a spec asks for each live in their own module: gradient
//! accumulation (the plan's loop over micro-batches), mixed precision (`amp`: autocast and the
//! grad scaler), activation checkpointing (`nn::checkpoint`), forward-only modes and what the
//! loop keeps of each loss (the guide's leak).
//!
//! Phases, in order: to_device, forward, backward (once per micro-batch), then optimizer_step
//! and zero_grad once per step. zero_grad sets gradients to none, which frees them.
use std::sync::Arc;

use tch::{Device, TchError, Tensor};

use super::amp::{Autocast, GradScaler};
use super::data::{self, Dataset};
use super::optim::Optimizer;
use super::recorder::{Recorder, Stop};
use super::Learned;
use crate::ffi::dist::{Ddp, DdpOptions, Group};
use crate::libtorch::{autograd, scalar};
use crate::nn::{checkpoint, Input, Model, Place};
use crate::schema::Phase;
use crate::spec::{csv_data, Config, DataLocation, DataSpec, History};
use crate::step::{self, Action, Event, Executor};

/// What the loop keeps of past losses, alive until the trial ends.
#[derive(Default)]
struct Kept {
    tensors: Vec<Tensor>,
    values: Vec<f64>,
}

/// Trains `config` as [`step::plan`] describes it, each phase measured by `rec`; returns the
/// trained model. `world`: this rank's process group, for a `[parallel]` trial.
pub(super) fn train(
    config: &Config,
    device: Device,
    rec: &mut Recorder,
    learned: &mut Learned,
    world: Option<&Arc<Group>>,
) -> Result<Model<Tensor>, Stop> {
    let mut trainer = Trainer::new(config, device, rec, learned);
    trainer.world = world.cloned();
    step::drive(config, &mut trainer)?;
    if let Some(s) = &trainer.scaler {
        trainer.learned.skipped_steps = Some(trainer.skipped);
        trainer.learned.final_scale = s.scale_value().ok();
    }
    // Measured while the trial's tensors are all alive, as the last phase left them.
    trainer.rec.finish()?;
    drop(std::mem::take(&mut trainer.kept));
    Ok(trainer.model.take().expect("the plan makes the model first"))
}

/// The real trainer: a trial's tensors between its actions, each action run on libtorch.
struct Trainer<'c, 'r, 'p> {
    config: &'c Config,
    device: Device,
    rec: &'r mut Recorder<'p>,
    learned: &'r mut Learned,
    data: Option<Dataset>,
    model: Option<Model<Tensor>>,
    opt: Option<Optimizer>,
    scaler: Option<GradScaler>,
    /// The micro-batch under way, from its gather to the end of its iteration.
    batch: Option<Batch>,
    /// Its forward, until backward consumes it (a forward-only step's, until the iteration ends).
    forward: Option<Forward>,
    /// Its loss, until the iteration ends.
    loss: Option<Tensor>,
    /// The step's last loss: it lives on through optimizer_step and zero_grad, to the step's end.
    last: Option<Tensor>,
    /// The last step's micro-batch losses, summed, and how many (None once one cannot be read).
    sum: Option<(f64, usize)>,
    kept: Kept,
    /// Steps the grad scaler skipped.
    skipped: usize,
    /// This rank's process group, in a world of ranks.
    world: Option<Arc<Group>>,
    /// The model's DDP wrapper, from the wrap on.
    ddp: Option<Ddp>,
}

impl<'c, 'r, 'p> Trainer<'c, 'r, 'p> {
    fn new(config: &'c Config, device: Device, rec: &'r mut Recorder<'p>, learned: &'r mut Learned) -> Self {
        Trainer {
            config,
            device,
            rec,
            learned,
            data: None,
            model: None,
            opt: None,
            scaler: None,
            batch: None,
            forward: None,
            loss: None,
            last: None,
            sum: Some((0.0, 0)),
            kept: Kept::default(),
            skipped: 0,
            world: None,
            ddp: None,
        }
    }
}

impl Executor for Trainer<'_, '_, '_> {
    type Error = Stop;

    fn execute(&mut self, Event { step, micro, action }: Event) -> Result<(), Stop> {
        let config = self.config;
        let kind = config.training.dtype.kind();
        self.rec.micro = micro;
        // The phase that measures the action: the plan's table (`Action::phase`), as the replay's.
        let measured = || action.phase().expect("an action a phase measures");
        match action {
            Action::Data => {
                // With the data on the host (a DataLoader's way) only each batch reaches the device.
                let home = match config.location {
                    DataLocation::Host => Device::Cpu,
                    DataLocation::Device => self.device,
                };
                let data = self.rec.phase(0, measured(), || {
                    let data = data::make(&config.data, kind, home)?;
                    if let DataSpec::Csv { path, .. } = &config.data {
                        csv_data::enough_rows(path, data.samples(), config.training.batch_size)
                            .map_err(|e| tch::TchError::FileFormat(format!("{e:#}")))?;
                    }
                    Ok(data)
                })?;
                let l = &mut *self.learned;
                (l.samples, l.features, l.classes) = (data.samples(), data.features, data.classes);
                self.data = Some(data);
            }
            Action::Model => {
                let data = self.data.as_ref().expect("the data before the model");
                let (device, t) = (self.device, &config.training.techniques);
                let zero = match (config.parallel.shards_optimizer(), &self.world) {
                    (true, Some(group)) => Some(group.clone()),
                    (true, None) => return Err(no_group()),
                    (false, _) => None,
                };
                let (model, opt, scaler) = self.rec.phase(0, measured(), || {
                    tch::manual_seed(config.training.seed as i64);
                    let input = Input::of(&config.data, data.features, data.classes);
                    let model = Model::new(&config.model, input, Place { kind, device })?;
                    let (spec, choice) = (&config.training.optimizer, t.optimizer_impl);
                    let opt = match &zero {
                        Some(group) => Optimizer::zero(spec, choice, &model, group)?,
                        None => Optimizer::new(spec, choice, &model)?,
                    };
                    let scaler = match &t.amp {
                        crate::spec::Amp::Fp16 { scaler } => Some(GradScaler::new(scaler, device)?),
                        _ => None,
                    };
                    Ok((model, opt, scaler))
                })?;
                self.learned.param_count = model.param_count();
                self.learned.param_bytes = model.param_bytes();
                (self.model, self.opt, self.scaler) = (Some(model), Some(opt), scaler);
            }
            Action::Wrap(spec) => {
                let model = self.model.as_ref().expect("the model before its wrap");
                let group = self.world.as_ref().ok_or_else(no_group)?;
                let opts = DdpOptions::from(spec);
                let ddp = self.rec.phase(0, measured(), || {
                    Ddp::new(group, &model.parameters(), &model.buffers(), opts).map_err(TchError::Torch)
                })?;
                self.ddp = Some(ddp);
            }
            Action::Gather { index } => {
                let data = self.data.as_ref().expect("the data before a batch");
                let device = self.model.as_ref().expect("the model before a batch").device();
                let batch = config.training.batch_size;
                let shard = self.world.as_ref().map_or((0, 1), |g| (g.rank(), g.size()));
                self.batch =
                    Some(self.rec.phase(step, measured(), || gather(data, index, batch, shard, device))?);
            }
            Action::Forward { grad, autocast, checkpoint: cut, reducer } => {
                let model = self.model.as_ref().expect("the model before a forward");
                let (x, extra, y) = self.batch.as_ref().expect("a batch before its forward");
                let device = model.device();
                let ddp = self.ddp.as_ref().filter(|_| reducer);
                let fwd = self.rec.phase(step, measured(), || {
                    if let Some(d) = ddp {
                        d.pre_forward().map_err(TchError::Torch)?;
                    }
                    let _no_grad = (!grad).then(tch::no_grad_guard);
                    let _autocast = Autocast::enter(device, &autocast)?;
                    // None: the plain path (no checkpointing, or `{ sequential = 1 }`, which
                    // checkpoints nothing).
                    let fwd = match cut.segments(model.units()) {
                        None => Forward::Plain(model.loss(&model.forward_inputs(x, extra)?, y)?),
                        Some(cut) => Forward::Checkpointed(checkpoint::forward(model, x, y, &cut)?),
                    };
                    if let Some(d) = ddp {
                        d.post_forward(&[fwd.loss()]).map_err(TchError::Torch)?;
                    }
                    Ok(fwd)
                })?;
                self.loss = Some(fwd.loss().shallow_clone());
                self.forward = Some(fwd);
            }
            Action::Keep(history) => {
                let loss = self.loss.as_ref().expect("a loss to keep");
                keep(history, loss, &mut self.kept).map_err(|e| stop(e, step, Phase::Forward))?;
            }
            Action::Backward { divide_by, scaled, autocast } => {
                let fwd = self.forward.take().expect("a forward before its backward");
                let loss = self.loss.as_ref().expect("a loss to backpropagate");
                let scaler = self.scaler.as_ref().filter(|_| scaled);
                let device = self.device_of_model();
                self.rec.phase(step, measured(), || {
                    // The recompute inside a checkpointed backward is a forward: it runs under
                    // autocast as the first forward did. This keeps autocast on for the whole
                    // backward, where torch.utils.checkpoint turns it on for the recompute alone
                    // (found in review, not yet changed: the backward's own ops may cast under amp
                    // here and not in PyTorch).
                    let checkpointed = matches!(fwd, Forward::Checkpointed(_));
                    let _autocast = if checkpointed { Autocast::enter(device, &autocast)? } else { None };
                    let mut l = loss.shallow_clone();
                    if divide_by > 1 {
                        // Each micro-batch's mean loss counts 1/n, so the sum is the effective
                        // batch's mean.
                        l = scalar::div(&l, divide_by as f64)?;
                    }
                    if let Some(s) = scaler {
                        l = s.scale(&l)?;
                    }
                    fwd.backward(&l)
                })?;
            }
            Action::EndMicro { last } => {
                // The micro-batch and its loss go when this iteration ends; only the last loss
                // lives on through optimizer_step and zero_grad (the step's end reads it).
                self.forward = None;
                self.batch = None;
                let loss = self.loss.take().expect("a loss at the iteration's end");
                // The last step's losses are read between phases: reading a value allocates
                // nothing the trace would see.
                if step == config.training.steps {
                    self.sum = self.sum.zip(loss.f_double_value(&[]).ok()).map(|((s, n), v)| (s + v, n + 1));
                }
                if last {
                    self.last = Some(loss);
                }
            }
            // ZeRO's shards are broadcast inside the optimizer's step (`Optimizer::zero`).
            Action::OptimizerStep { scaled, shards: _ } => {
                let (model, opt) =
                    (self.model.as_ref().expect("model"), self.opt.as_ref().expect("optimizer"));
                let scaler = self.scaler.as_mut().filter(|_| scaled);
                let skipped = self.rec.phase(step, measured(), || match scaler {
                    Some(s) => s.step(opt, model.parameters()),
                    None => opt.step().map(|()| false),
                })?;
                self.skipped += usize::from(skipped);
            }
            Action::ZeroGrad => {
                let opt = self.opt.as_ref().expect("optimizer");
                self.rec.phase(step, measured(), || opt.zero_grad())?;
            }
            Action::EndStep { last } => {
                self.rec.end_step()?;
                let loss = self.last.take();
                if last && step > 0 {
                    // The mean of the micro-batches' losses: the effective batch's loss,
                    // comparable with an unaccumulated run's.
                    let mean = self.sum.filter(|&(_, n)| n > 0).map(|(s, n)| s / n as f64);
                    self.learned.final_loss = mean.or_else(|| loss.and_then(|l| l.f_double_value(&[]).ok()));
                }
            }
        }
        Ok(())
    }
}

impl Trainer<'_, '_, '_> {
    fn device_of_model(&self) -> Device {
        self.model.as_ref().map_or(self.device, |m| m.device())
    }
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
fn keep(history: History, loss: &Tensor, kept: &mut Kept) -> Result<(), TchError> {
    match history {
        History::None => {}
        History::LossTensor => kept.tensors.push(loss.shallow_clone()),
        // A step recorded on the meta device has no values to read; the number costs no memory.
        History::LossValue if loss.device() == crate::ffi::META => kept.values.push(0.0),
        History::LossValue => kept.values.push(loss.f_double_value(&[])?),
    }
    Ok(())
}

fn no_group() -> Stop {
    Stop::Infra(anyhow::anyhow!(
        "a [parallel] trial trains as ranks, each with its process group: this one has none"
    ))
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
///
/// `(rank, world)`: in a world of ranks, the rank's shard as `DistributedSampler` (unshuffled)
/// deals it: its `k`-th row is row `k * world + rank`; ranks take disjoint rows wherever the
/// world divides the data set.
fn gather(
    data: &Dataset,
    index: usize,
    batch: usize,
    (rank, world): (usize, usize),
    device: Device,
) -> Result<Batch, TchError> {
    let n = data.samples() as i64;
    let start = (index * batch) as i64 % n;
    let (w, r) = (world as i64, rank as i64);
    let range = match data.x.device() {
        // tch cannot name the meta device in a factory call; the indices' values are not read.
        crate::ffi::META => {
            crate::ffi::meta_empty(&[batch as i64], tch::Kind::Int64).map_err(TchError::Torch)?
        }
        // One tensor of indices, as one process's: the shard is in the range's step.
        here => Tensor::f_arange_start_step(
            start * w + r,
            (start + batch as i64) * w + r,
            w,
            (tch::Kind::Int64, here),
        )?,
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
    use crate::spec::{DataLocation, DataSpec, Dtype, ModelSpec, OptimizerSpec, Techniques, TrainingSpec};

    fn config(batch: usize, accumulation: usize) -> Config {
        Config {
            model: ModelSpec::mlp(16, 2),
            data: DataSpec::Synthetic { samples: 64, features: 8, classes: 3, seed: 1 },
            location: DataLocation::Host,
            parallel: Default::default(),
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

    /// One real training step (the plan's step 1) with SGD at lr 1, so each parameter moves by exactly its gradient,
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
        let mut learned = Learned::default();
        let mut trainer = Trainer::new(c, Device::Cpu, &mut rec, &mut learned);
        (trainer.data, trainer.model, trainer.opt) = (Some(shared(data)), Some(model), Some(opt));
        for event in step::plan(c).filter(|e| e.step == 1) {
            trainer.execute(event).unwrap();
        }
        let model = trainer.model.take().unwrap();
        model.parameters().into_iter().zip(before).map(|(p, b)| b - p).collect()
    }

    /// The same data set's tensors, for another trainer.
    fn shared(d: &data::Dataset) -> data::Dataset {
        let extra = d.extra.iter().map(Tensor::shallow_clone).collect();
        data::Dataset { x: d.x.shallow_clone(), extra, y: d.y.shallow_clone(), ..*d }
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
        let (x, _, y) = gather(&d, 1, 4, (0, 1), Device::Cpu).unwrap();
        assert!(x.equal(&d.x.narrow(0, 4, 4)) && y.equal(&d.y.narrow(0, 4, 4)));
        let (x, _, _) = gather(&d, 2, 4, (0, 1), Device::Cpu).unwrap(); // rows 8, 9, 0, 1
        assert!(x.narrow(0, 2, 2).equal(&d.x.narrow(0, 0, 2)));
        // Rank 1 of 2: rows 1, 3, 5, 7, then 9, 1 (wrapping), 3, 5.
        let rows = |i, rank| {
            let (x, _, _) = gather(&d, i, 4, (rank, 2), Device::Cpu).unwrap();
            (0..4).map(|k| (0..10).find(|&row| x.get(k).equal(&d.x.get(row))).unwrap()).collect::<Vec<i64>>()
        };
        assert_eq!(rows(0, 1), [1, 3, 5, 7]);
        assert_eq!(rows(1, 1), [9, 1, 3, 5]);
        assert_eq!(rows(0, 0), [0, 2, 4, 6]);
    }
}
