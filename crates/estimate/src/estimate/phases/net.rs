//! A trial of any model kind, replayed through the model's own code (`nn`) over symbolic
//! tensors ([`crate::estimate::graph`]): the data set, the model, each batch, the forward (plain
//! or checkpointed, through `nn::checkpoint` itself: its cut of the units, the plain units of
//! `{ sequential = S }` included) and its backward, as `train::step` makes them, both executing
//! the trial's one description ([`crate::step::plan`]); the
//! optimizer's step ([`super::optim`]) over the model's parameters. A kept loss (the history)
//! is filed, with what its graph saved, as the history's once its iteration ends.
//!
//! Mixed precision: the forward runs under the replay's autocast (`graph::Ctx::autocast_mode`),
//! whose ops cast as libtorch's autocast does (`graph::ops`: the lower-precision list's casts,
//! the parameters' cached until the phase ends, the fp32 list's casts up, mixed-dtype sums in
//! fp32); a checkpointed backward recomputes under it too; with fp16 the loss is multiplied by
//! the grad scaler's scale, made at its first use.
use std::rc::Rc;

use tch::{Device, Kind};

use super::{Replay, Sim};
use crate::estimate::graph::{Ctx, Installed, Sym};
use crate::estimate::ledger::Category::{
    Activations, Batch, Data, Grads, History as Kept, OptimizerState, Transient,
};
use crate::estimate::{ddp, Target};
use crate::ffi::dist::DdpOptions;
use crate::nn::checkpoint::{self, Checkpointed};
use crate::nn::{Input, Model, Ops, Place};
use crate::spec::{DataLocation, DataSpec, History, Segments};
use crate::step::{self, Action, Event, Executor};
use std::convert::Infallible;

/// What the replay holds of a trial of a model of any kind.
pub(super) struct Net {
    ctx: Rc<Ctx>,
    /// The replay installed on the thread for as long as the trial is replayed.
    _installed: Installed,
    data: Option<(Sym, Sym)>,
    model: Option<Model<Sym>>,
    /// The fp16 grad scaler's scale and growth tracker, made at its first `scale()`.
    scaler: Option<(Sym, Sym)>,
    /// The micro-batch under way (input, target), from its gather to its iteration's end.
    batch: Option<(Sym, Sym)>,
    /// Its forward, until backward consumes it (a forward-only step's, until the iteration ends).
    graph: Option<Graph>,
    /// Its loss, and whether the loop keeps it (`history = "loss_tensor"`), until the iteration
    /// ends.
    loss: Option<(Sym, bool)>,
    /// The step's last loss, alive through optimizer_step and zero_grad to the step's end.
    last: Option<(Sym, bool)>,
    /// The losses the loop keeps, with what their graphs saved, to the trial's end.
    kept: Vec<Sym>,
    /// DDP's options (from the wrap on) and its buckets (one flat buffer each), to the trial's
    /// end.
    ddp: Option<DdpOptions>,
    buckets: Vec<Sym>,
    /// The reducer's map of used parameters, with unused ones to find or a static graph.
    used: Vec<Sym>,
    /// A backward has run since the wrap, and whether the buckets were rebuilt after it.
    backward_seen: bool,
    rebuilt: bool,
}

/// What a forward left for its backward.
enum Graph {
    Plain(Sym),
    Checkpointed(Checkpointed<Sym>),
}

impl Graph {
    fn loss(&self) -> Sym {
        match self {
            Graph::Plain(l) => l.handle(),
            Graph::Checkpointed(c) => c.loss.handle(),
        }
    }
}

impl Net {
    pub(super) fn new(sim: &Sim) -> Net {
        let ctx = Ctx::new(sim.ledger.clone(), sim.t.target, sim.threads, sim.gpu);
        let installed = ctx.install();
        Net {
            ctx,
            _installed: installed,
            data: None,
            model: None,
            scaler: None,
            batch: None,
            graph: None,
            loss: None,
            last: None,
            kept: Vec::new(),
            ddp: None,
            buckets: Vec::new(),
            used: Vec::new(),
            backward_seen: false,
            rebuilt: false,
        }
    }
}

/// The parameters' element counts of `config`'s model, in the optimizer's order, from the
/// model's own constructor replayed on a scratch ledger.
pub(crate) fn parameter_numels(config: &crate::spec::Config, input: Input, target: Target) -> Vec<u64> {
    let ctx = Ctx::scratch(target);
    let _installed = ctx.install();
    let place = place(config, target);
    match Model::<Sym>::new(&config.model, input, place) {
        Ok(m) => m.parameters().iter().map(|p| crate::nn::numel(&p.size())).collect(),
        Err(_) => Vec::new(),
    }
}

/// Tensors (bytes, dtype) as DDP's bucket assignment takes them: a key per dtype.
fn reducer_view(tensors: &[(u64, Kind)]) -> Vec<ddp::Param> {
    tensors.iter().map(|&(bytes, kind)| ddp::Param { bytes, key: kind as u32 }).collect()
}

/// A bucket of `tensors` as one flat buffer of their dtype.
fn flat(bucket: &ddp::Bucket, tensors: &[(u64, Kind)], category: crate::estimate::ledger::Category) -> Sym {
    let kind = tensors[bucket.params[0]].1;
    Sym::made(&[(bucket.bytes / kind.elt_size_in_bytes() as u64) as i64], kind, category, false)
}

fn place(config: &crate::spec::Config, target: Target) -> Place {
    let device = if target == Target::Cuda { Device::Cuda(0) } else { Device::Cpu };
    Place { kind: config.training.dtype.kind(), device }
}

impl Sim<'_> {
    fn net(&self) -> &Net {
        self.net.as_ref().expect("a model of any kind is replayed through `net`")
    }

    fn net_mut(&mut self) -> &mut Net {
        self.net.as_mut().expect("a model of any kind is replayed through `net`")
    }

    /// Replays the whole trial, as `train::step` trains it: the actions of [`step::plan`].
    pub(in crate::estimate) fn run(mut self) -> Replay {
        let Ok(()) = step::drive(self.config, &mut self);
        // What the loop kept goes first, then the model and the data, after the last phase.
        drop(std::mem::take(&mut self.net_mut().kept));
        let net = self.net.take().expect("replayed through net");
        let (ledger, oom, phases) = (self.ledger.clone(), self.oom, std::mem::take(&mut self.out));
        let cudnn = net.ctx.cudnn_calls.borrow().counts();
        drop(net);
        Replay { phases, blocks: ledger.take_log(), baseline: ledger.baseline(), oom, cudnn }
    }

    /// `train::data::make`: the data set where `data.location` puts it.
    fn net_data(&mut self) {
        let host = self.config.location == DataLocation::Host && self.t.target == Target::Cuda;
        let kind = self.config.training.dtype.kind();
        let made = |shape: &[i64], kind: Kind, c| Sym::made(shape, kind, c, host);
        let data = match self.config.data {
            DataSpec::Synthetic { samples, features, classes, .. } => {
                let (s, f, k) = (samples as i64, features as i64, classes as i64);
                teacher_labelled(made(&[s, f], kind, Data), &[f, k], s, kind, host)
            }
            DataSpec::Images { samples, channels, size, classes, .. } => {
                let (s, c, h, k) = (samples as i64, channels as i64, size as i64, classes as i64);
                teacher_labelled(made(&[s, c, h, h], kind, Data), &[c * h * h, k], s, kind, host)
            }
            DataSpec::Tokens { samples, seq_len, classes, .. } => {
                // randint; x.remainder(k) (an int64 scalar wrapped first); zeros [S, K]; a
                // ones_like gone after scatter_add_; argmax; then the residues and counts go.
                let (s, l, k) = (samples as i64, seq_len as i64, classes as i64);
                let x = made(&[s, l], Kind::Int64, Data);
                let wrapped = Sym::made(&[], Kind::Int64, Transient, true);
                let residues = made(&[s, l], Kind::Int64, Transient);
                drop(wrapped);
                let counts = made(&[s, k], Kind::Int64, Transient);
                drop(made(&[s, l], Kind::Int64, Transient));
                let y = made(&[s], Kind::Int64, Data);
                drop((counts, residues));
                (x, y)
            }
            DataSpec::Csv { .. } => {
                // from_slice(f32 values) on the host, reshape (a view), to_kind, to_device; then
                // the labels, from_slice(i64) and to_device. On the CPU a float32 set is the
                // staging tensor itself; a copy (to_kind, to_device) leaves it behind.
                let (s, f) = (self.t.shape.samples as i64, self.t.shape.features as i64);
                let copied = kind != Kind::Float || self.t.target == Target::Cuda;
                let staging = copied.then(|| Sym::made(&[s, f], Kind::Float, Transient, true));
                let x = made(&[s, f], kind, Data);
                drop(staging);
                (x, made(&[s], Kind::Int64, Data))
            }
            // Only a TorchScript module reads them (`Config::check`), and its estimate is
            // recorded (`estimate::recorded`), not replayed.
            DataSpec::Tensors { .. } => {
                unreachable!("tensors data is a TorchScript module's, never replayed")
            }
        };
        self.net.as_mut().expect("net").data = Some(data);
    }

    /// The model, as `nn::Model::new` makes it.
    fn net_model(&mut self) {
        let input = crate::nn::Input::of(&self.config.data, self.t.shape.features, self.t.shape.classes);
        let model = Model::<Sym>::new(&self.config.model, input, place(self.config, self.t.target))
            .expect("the estimate's replay of a model cannot fail");
        self.net.as_mut().expect("net").model = Some(model);
    }

    /// The model's parameters, or its buffers, as DDP sees them: each one's bytes and dtype.
    fn ddp_tensors(&self, buffers: bool) -> Vec<(u64, Kind)> {
        let model = self.net().model.as_ref().expect("model first");
        let tensors = if buffers { model.buffers() } else { model.parameters() };
        tensors.iter().map(|t| (t.numel() * t.kind().elt_size_in_bytes() as u64, t.kind())).collect()
    }

    /// `c10d::broadcast_coalesced` of `tensors`: flat buffers of one dtype up to 250 MiB each,
    /// two in flight, each gone once copied back.
    fn broadcast_coalesced(tensors: &[(u64, Kind)]) {
        let order: Vec<usize> = (0..tensors.len()).collect();
        let chunks = ddp::assign(&reducer_view(tensors), &order, &[ddp::BROADCAST_BUCKET], false);
        let mut in_flight = std::collections::VecDeque::new();
        for chunk in &chunks {
            if in_flight.len() >= 2 {
                drop(in_flight.pop_front());
            }
            in_flight.push_back(flat(chunk, tensors, Transient));
        }
    }

    /// `DistributedDataParallel(model)` as `ffi::dist` makes it: the parameters' shapes checked
    /// across ranks (`c10d::verify_params_across_processes`: their count all-gathered from
    /// every rank, then every size and stride as int64, twice at once: measured on CPU ranks,
    /// 8 bytes a rank more at each world size); rank 0's parameters broadcast in coalesced
    /// flat buffers (`c10d::broadcast_coalesced`: buffers of up to 250 MiB, two in flight, each
    /// gone once copied back); then the reducer's first buckets, one flat buffer each.
    fn net_wrap(&mut self, opts: DdpOptions, world: usize) {
        let dims: i64 = {
            let model = self.net().model.as_ref().expect("model first");
            model.parameters().iter().map(|p| 2 * p.size().len() as i64).sum()
        };
        let count = Sym::made(&[1], Kind::Int64, Transient, false);
        let gathered: Vec<Sym> = (0..world).map(|_| Sym::made(&[1], Kind::Int64, Transient, false)).collect();
        let metadata = Sym::made(&[dims], Kind::Int64, Transient, false);
        let control = Sym::made(&[dims], Kind::Int64, Transient, false);
        drop((control, metadata, gathered, count));
        let params = self.ddp_tensors(false);
        // `_sync_module_states`: the parameters and then the buffers, in one broadcast.
        Self::broadcast_coalesced(&[params.clone(), self.ddp_tensors(true)].concat());
        let layout = ddp::at_wrap(&reducer_view(&params), &opts);
        let buckets = self.buckets(&layout, &params, &opts);
        let mut used = Vec::new();
        if opts.find_unused_parameters || opts.static_graph {
            // `initialize_local_used_map`: which parameters the step used, an int32 a
            // parameter, and its copy that is all-reduced (on the CPU a tensor of its own).
            let n = params.len() as i64;
            used.push(Sym::made(&[n], Kind::Int, Grads, false));
            used.push(Sym::made(&[n], Kind::Int, Grads, false));
        }
        let net = self.net_mut();
        (net.buckets, net.used, net.rebuilt) = (buckets, used, false);
        net.ddp = Some(opts);
    }

    /// The reducer's buckets of `layout`, one flat buffer each (`Reducer::initialize_buckets`);
    /// with `gradient_as_bucket_view`, each parameter's view into its bucket too, which its
    /// gradient becomes in the backward, and at once where it has one (a rebuild between two
    /// micro-batches): copied in, the old gradient (a view into the old buckets) goes
    /// (`Reducer::initialize_bucket_views`, bucket by bucket).
    fn buckets(&self, layout: &[ddp::Bucket], params: &[(u64, Kind)], opts: &DdpOptions) -> Vec<Sym> {
        let model = self.net().model.as_ref().expect("model first");
        let leaves = model.parameters();
        let mut buckets = Vec::new();
        for bucket in layout {
            let buffer = flat(bucket, params, Grads);
            if opts.gradient_as_bucket_view {
                let storage = buffer.storage().expect("a bucket has its storage");
                for &i in &bucket.params {
                    let leaf = &leaves[i];
                    let view = Sym::with_storage(&leaf.shape(), leaf.dt(), storage.clone(), false);
                    leaf.repoint_grad(&view);
                    self.net().ctx.grad_views.borrow_mut().push((leaf.0.clone(), view));
                }
            }
            buckets.push(buffer);
        }
        buckets
    }

    /// DDP's `_pre_forward`: at the first forward after a backward the reducer rebuilds its
    /// buckets in the order the gradients came (here: the parameters' reversed, as a
    /// sequential model's backward makes them); then rank 0's buffers are broadcast.
    fn net_pre_forward(&mut self) {
        let net = self.net();
        let Some(opts) = net.ddp else { return };
        if net.backward_seen && !net.rebuilt && ddp::rebuilds(&opts) {
            self.net_rebuild(opts);
        }
        // `broadcast_buffers=True`: rank 0's buffers, every forward.
        let buffers = self.ddp_tensors(true);
        if !buffers.is_empty() {
            Self::broadcast_coalesced(&buffers);
        }
    }

    /// `Reducer::rebuild_buckets`: the buckets laid out again in the order the first backward's
    /// gradients came, the old ones gone first.
    fn net_rebuild(&mut self, opts: DdpOptions) {
        let params = self.ddp_tensors(false);
        let ready: Vec<usize> = (0..params.len()).rev().collect();
        // The old buckets go first (the gradients, views into them or not, were set to none).
        self.net().ctx.grad_views.borrow_mut().clear();
        drop(std::mem::take(&mut self.net_mut().buckets));
        let layout = ddp::rebuilt(&reducer_view(&params), &ready, &opts);
        let buckets = self.buckets(&layout, &params, &opts);
        let net = self.net_mut();
        (net.buckets, net.rebuilt) = (buckets, true);
    }

    /// `train::step::gather`: rows `index * batch ..` (wrapping) selected where the data set
    /// lives, then moved to the device.
    fn net_gather(&mut self) -> (Sym, Sym) {
        let x = self.net().data.as_ref().map(|(x, _)| x.handle()).expect("data first");
        let host = x.0.host;
        let b = self.t.batch as i64;
        let index = Sym::made(&[b], Kind::Int64, Transient, host); // arange
        let wrapped = Sym::made(&[], Kind::Int64, Transient, true);
        let idx = Sym::made(&[b], Kind::Int64, Transient, host); // remainder
        drop(wrapped);
        drop(index);
        let mut xs = x.shape();
        xs[0] = b;
        let bx = Sym::made(&xs, x.dt().0, Batch, host);
        let by = Sym::made(&[b], Kind::Int64, Batch, host);
        drop(idx);
        if host && self.t.target == Target::Cuda {
            let (dx, dy) = (bx.to_device(Batch), by.to_device(Batch));
            return (dx, dy);
        }
        (bx, by)
    }

    /// The forward and the loss, with grad tracking (or as the caller's grad mode says), plain
    /// or checkpointed.
    fn net_forward(&mut self, x: &Sym, y: &Sym, autocast: Option<Kind>, segment: Option<&Segments>) -> Graph {
        // `train::step`: the forward under autocast, whose cache goes when the phase ends.
        let _autocast = self.net().ctx.autocast_mode(autocast);
        let model = self.net().model.as_ref().expect("model first");
        let graph = match segment {
            None => {
                let logits = model.forward(x).expect("replay");
                Graph::Plain(model.loss(&logits, y).expect("replay"))
            }
            Some(cut) => Graph::Checkpointed(checkpoint::forward(model, x, y, cut).expect("replay")),
        };
        // The loss is what lives on after backward; the boundaries a checkpointed forward
        // keeps are its activations (the first is the batch, which stays the batch).
        graph.loss().file_as(Activations);
        if let Graph::Checkpointed(c) = &graph {
            for boundary in c.boundaries().filter(|b| b.storage().is_some_and(|s| s.category() == Transient))
            {
                boundary.file_as(Activations);
            }
        }
        graph
    }

    /// The backward phase (`Action::Backward`): the loss divided by the micro-batches, scaled by
    /// the grad scaler, then backward.
    fn net_backward(
        &mut self,
        graph: Graph,
        loss: &Sym,
        divide_by: usize,
        scale: bool,
        autocast: Option<Kind>,
    ) {
        // A checkpointed backward recomputes under autocast, as the forward ran.
        let checkpointed = matches!(graph, Graph::Checkpointed(_));
        let kind = if checkpointed { autocast } else { None };
        let _autocast = self.net().ctx.autocast_mode(kind);
        let mut scaled = if divide_by > 1 { loss.div_scalar() } else { loss.handle() };
        if scale {
            // GradScaler.scale: its fp32 scale and int32 growth tracker at the first call, then
            // `loss * scale` (the divided loss gone once the product exists).
            let net = self.net.as_mut().expect("net");
            let (scale, _) = net.scaler.get_or_insert_with(|| {
                (
                    Sym::made(&[], Kind::Float, OptimizerState, false),
                    Sym::made(&[], Kind::Int, OptimizerState, false),
                )
            });
            scaled = scaled.f_mul(scale).expect("replay");
        }
        match graph {
            Graph::Plain(l) => {
                scaled.backward().expect("replay");
                drop(l);
            }
            Graph::Checkpointed(c) => c.backward(&scaled).expect("replay"),
        }
    }

    /// `zero_grad()`: every `.grad` set to none, parameter by parameter.
    fn net_zero_grad(&mut self) {
        let model = self.net().model.as_ref().expect("model first");
        for p in model.parameters() {
            p.drop_grad();
        }
    }
}

/// The replay's meaning of each action: `train::step`'s, over symbolic tensors.
impl Executor for Sim<'_> {
    type Error = Infallible;

    fn execute(&mut self, Event { step, micro, action }: Event) -> Result<(), Infallible> {
        // The phase that measures the action: the plan's table (`Action::phase`), as the trainer's.
        let measured = || action.phase().expect("an action a phase measures");
        match action {
            Action::Data => self.phase(0, 0, measured(), Self::net_data),
            Action::Model => self.phase(0, 0, measured(), Self::net_model),
            Action::Gather { .. } => {
                let batch = self.phase(step, micro, measured(), |s| s.net_gather());
                self.net_mut().batch = Some(batch);
            }
            Action::Wrap(spec) => {
                let world = self.config.parallel.world_size;
                self.phase(0, 0, measured(), |s| s.net_wrap(DdpOptions::from(spec), world))
            }
            Action::Forward { grad, autocast, checkpoint, reducer } => {
                let (x, y) = self.net_mut().batch.take().expect("a batch before its forward");
                let segment = checkpoint.segments(self.config.model.units());
                let graph = self.phase(step, micro, measured(), |s| {
                    if reducer {
                        s.net_pre_forward();
                    }
                    let _grad = s.net().ctx.grad_mode(grad);
                    s.net_forward(&x, &y, autocast.autocast(), segment.as_ref())
                });
                let net = self.net_mut();
                (net.batch, net.loss) = (Some((x, y)), Some((graph.loss(), false)));
                net.graph = Some(graph);
            }
            Action::Keep(history) => {
                // A number kept costs nothing; a tensor keeps its graph, filed as the history's
                // once its iteration ends.
                if let Some((_, keep)) = self.net_mut().loss.as_mut() {
                    *keep = history == History::LossTensor;
                }
            }
            Action::Backward { divide_by, scaled, autocast } => {
                let net = self.net_mut();
                let graph = net.graph.take().expect("a forward before its backward");
                let loss = net.loss.as_ref().map(|(l, _)| l.handle()).expect("a loss to backpropagate");
                self.phase(step, micro, measured(), |s| {
                    s.net_backward(graph, &loss, divide_by, scaled, autocast.autocast())
                });
                self.net_mut().backward_seen = true;
            }
            Action::EndMicro { last } => {
                let net = self.net_mut();
                drop(net.graph.take());
                drop(net.batch.take().map(|(x, y)| (y, x)));
                let loss = net.loss.take().expect("a loss at the iteration's end");
                if last {
                    net.last = Some(loss);
                } else {
                    net.release(loss);
                }
            }
            // ZeRO's broadcasts of the shards are in place: they make nothing.
            Action::OptimizerStep { scaled, shards: _ } => {
                self.phase(step, micro, measured(), |s| s.optimizer_step(scaled))
            }
            Action::ZeroGrad => self.phase(step, micro, measured(), Self::net_zero_grad),
            Action::EndStep { .. } => {
                let net = self.net_mut();
                if let Some(loss) = net.last.take() {
                    net.release(loss);
                }
            }
        }
        Ok(())
    }
}

impl Net {
    /// A loss whose iteration has ended: kept as the history's, or gone.
    fn release(&mut self, (loss, keep): (Sym, bool)) {
        if keep {
            self.kept.push(into_history(loss));
        }
    }
}

/// A loss the loop keeps in its history (`history = "loss_tensor"`), once its iteration has
/// ended: it and whatever its graph still saved are filed as the history's.
fn into_history(loss: Sym) -> Sym {
    loss.file_graph_as(Kept);
    loss
}

/// `x`, then a random teacher, their product's argmax as the labels (the logits gone with the
/// statement, the teacher with the function).
fn teacher_labelled(x: Sym, teacher: &[i64], samples: i64, kind: Kind, host: bool) -> (Sym, Sym) {
    let teacher = Sym::made(teacher, kind, Transient, host);
    let logits = Sym::made(&[samples, teacher.shape()[1]], kind, Transient, host);
    let y = Sym::made(&[samples], Kind::Int64, Data, host);
    drop(logits);
    drop(teacher);
    (x, y)
}
