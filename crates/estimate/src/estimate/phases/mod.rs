//! The trial, replayed: every allocation and free a trial makes, in the order libtorch makes
//! them, phase by phase, for every model kind. The model is oomlab's own code (`nn`) run over
//! symbolic tensors ([`crate::estimate::graph`]), whose ops, autograd engine and autocast
//! allocate and free as libtorch's do; the loop is `train::step`'s ([`net`]); the optimizer's
//! step and the grad scaler's are replayed from `torch.optim`'s code ([`optim`]). The comments
//! name the function each event comes from.
//!
//! The [`Ledger`] turns the events into per-phase peaks (and on CUDA, the caching allocator's
//! segments).
mod net;
pub(crate) use net::parameter_numels;
mod optim;

use super::caching::OutOfMemory;
use super::ledger::{BlockEvent, Ledger, Shared};
use super::terms::{Target, Terms};
use super::{GpuArch, Options, PhasePrediction};
use crate::schema::Phase;
use crate::spec::{Config, OptimizerImpl};

use super::ledger::Category::Transient;

/// A trial replayed: its phases, and on CUDA what the allocator held before it and the first
/// phase in which the limit refused an allocation.
pub(super) struct Replay {
    pub phases: Vec<PhasePrediction>,
    /// Every allocation and free, when recorded ([`Sim::record`]).
    pub blocks: Vec<BlockEvent>,
    /// Allocated and reserved bytes before the trial (the workspaces).
    pub baseline: (u64, u64),
    /// The index in `phases` of the first refusal, and the refused request.
    pub oom: Option<(usize, OutOfMemory)>,
    /// CUDA: of the distinct cuDNN convolution calls, how many a GPU measured, and how many in
    /// all ([`crate::estimate::cudnn_conv`]).
    pub cudnn: (usize, usize),
}

pub(super) struct Sim<'a> {
    t: &'a Terms,
    oom: Option<(usize, OutOfMemory)>,
    config: &'a Config,
    /// libtorch's intra-op threads (see [`Options::threads`]).
    threads: usize,
    /// CUDA: the GPU (see [`Options::gpu`]).
    gpu: GpuArch,
    ledger: Shared,
    out: Vec<PhasePrediction>,
    /// The optimizer has allocated its state (it does at its first step).
    has_state: bool,
    /// The model, its data and the replay's context; taken (and so dropped) when the trial ends.
    net: Option<net::Net>,
}

impl<'a> Sim<'a> {
    pub fn new(config: &'a Config, t: &'a Terms, options: &Options) -> Self {
        let ledger = Shared::new(match options.target {
            Target::Cpu => Ledger::cpu(options.limit),
            Target::Cuda => Ledger::cuda(options.limit, options.workspaces.in_order()),
        });
        let mut sim = Sim {
            t,
            oom: None,
            config,
            threads: options.threads,
            gpu: options.gpu,
            ledger,
            out: Vec::new(),
            has_state: false,
            net: None,
        };
        sim.net = Some(net::Net::new(&sim));
        sim
    }

    /// Records every allocation and free of the replay into [`Replay::blocks`].
    pub fn record(self) -> Self {
        self.ledger.record();
        self
    }

    /// Runs one phase as the recorder does: the peak restarts at its start, and the end is read
    /// when it returns.
    fn phase<T>(&mut self, step: usize, micro: usize, phase: Phase, f: impl FnOnce(&mut Self) -> T) -> T {
        self.ledger.reset_peak();
        self.ledger.label(step, micro, phase);
        let out = f(self);
        self.ledger.unlabel();
        if let (None, Some(refused)) = (self.oom, self.ledger.refused()) {
            self.oom = Some((self.out.len(), refused));
        }
        let (reserved_end, reserved_peak) = self.ledger.reserved();
        self.out.push(PhasePrediction {
            step,
            micro,
            phase,
            allocated_end: self.ledger.live().total(),
            peak: self.ledger.peak(),
            reserved_end,
            reserved_peak,
            by_category: self.ledger.at_peak(),
            end_by_category: self.ledger.live(),
        });
        out
    }

    /// `GradScaler.step` (with fp16) and the optimizer's step ([`optim`]).
    fn optimizer_step(&mut self, scaled: bool) {
        let implementation = self.optimizer_impl();
        // ZeRO's wrapper does not take the grad scale into its step: the scaler unscales first.
        if scaled && implementation == OptimizerImpl::Fused && !self.config.parallel.shards_optimizer() {
            return self.scaled_fused_step();
        }
        let unscaled = if scaled { self.unscale() } else { 0 };
        self.torch_optimizer_step(implementation);
        self.ledger.free(Transient, unscaled);
    }
}
