//! The replay of any model: the networks of `nn` run over symbolic tensors ([`Sym`]), which
//! allocate and free in a ledger what libtorch would (and compute nothing), build the autograd
//! graph libtorch would build, and run its backward as libtorch's engine does ([`engine`]).
//!
//! Because the models are the very code that trains (written once over `nn::Ops`), the replay
//! makes the same ops in the same order and drops every handle where training drops it; what
//! is modelled here is what each op allocates ([`ops`], [`backward`]) and, where no formula
//! says, what a CPU kernel allocated when measured ([`kernels`]).
//!
//! A replay is installed on the thread ([`Ctx::install`]) while the model code runs; its
//! tensors then count into its ledger, and free themselves when their last holder goes.
//!
//! The files depend one way, from the data up: [`tensor`] (a symbolic tensor and the storage
//! it holds in a ledger) and [`node`] (the autograd graph: a node saves tensors, a tensor names
//! the node that made it, and each node's [`node::Rule`]) at the bottom; [`kernels`] (what a
//! CPU kernel was measured to allocate) and [`flash`] (the CPU flash kernel's sizes) beside
//! them; [`alloc`] (a new tensor in the installed replay); [`backward`] (each rule's
//! allocations), then [`engine`] (the order backward runs them), then [`ops`] (every op, and
//! `backward()` through the engine) on top.
pub(crate) mod alloc;
pub(crate) mod backward;
pub(crate) mod cudnn_attention;
pub(crate) mod efficient;
pub(crate) mod engine;
pub(crate) mod flash;
pub mod kernels;
pub(crate) mod node;
pub(crate) mod ops;
pub(crate) mod tensor;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

pub use flash::flash_backward_racy;
pub use tensor::Sym;

use super::ledger::Shared;
use super::Target;

/// A replay: the ledger its tensors count into and the state libtorch keeps per thread.
pub struct Ctx {
    pub(crate) ledger: Shared,
    pub(crate) target: Target,
    /// libtorch's intra-op threads (CPU kernels take per-thread buffers).
    pub(crate) threads: usize,
    /// CUDA: the GPU, whose SM count sizes a reduction's staging buffer.
    pub(crate) gpu: crate::estimate::GpuArch,
    grad: Cell<bool>,
    seq: Cell<u64>,
    /// Autocast's lower-precision dtype while it is on (`torch.autocast`).
    autocast: Cell<Option<tch::Kind>>,
    /// Autocast's cast cache: the low-precision copies of fp32 leaves that require grad (the
    /// parameters), by the leaf, until autocast exits.
    pub(crate) cast_cache: RefCell<Vec<(Rc<tensor::Inner>, Sym)>>,
    /// DDP with `gradient_as_bucket_view`: each parameter's view into its bucket, by the
    /// parameter, which its gradient becomes once the reducer has copied it in.
    pub(crate) grad_views: RefCell<Vec<(Rc<tensor::Inner>, Sym)>>,
    /// Whether OOMLAB_REPLAY_LOG prints its events (not a scratch replay's).
    pub(crate) logged: bool,
    /// CUDA: each distinct cuDNN convolution call replayed, and whether a GPU measured its
    /// workspace ([`crate::estimate::cudnn_conv`]).
    pub(crate) cudnn_calls: RefCell<crate::estimate::cudnn_conv::Coverage>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Ctx>>> = const { RefCell::new(None) };
}

/// The replay installed on this thread.
pub(crate) fn ctx() -> Rc<Ctx> {
    CURRENT.with(|c| c.borrow().clone()).expect("a replay is installed while symbolic tensors are used")
}

impl Ctx {
    pub fn new(ledger: Shared, target: Target, threads: usize, gpu: crate::estimate::GpuArch) -> Rc<Ctx> {
        Rc::new(Ctx {
            ledger,
            target,
            threads: threads.max(1),
            gpu,
            grad: Cell::new(true),
            seq: Cell::new(0),
            autocast: Cell::new(None),
            cast_cache: RefCell::new(Vec::new()),
            grad_views: RefCell::new(Vec::new()),
            logged: true,
            cudnn_calls: RefCell::default(),
        })
    }

    /// A replay whose only use is to learn shapes: its events are not logged.
    pub fn scratch(target: Target) -> Rc<Ctx> {
        let ledger = Shared::new(Default::default());
        Rc::new(Ctx {
            ledger,
            target,
            threads: 1,
            gpu: Default::default(),
            grad: Cell::new(false),
            seq: Cell::new(0),
            autocast: Cell::new(None),
            cast_cache: RefCell::new(Vec::new()),
            grad_views: RefCell::new(Vec::new()),
            logged: false,
            cudnn_calls: RefCell::default(),
        })
    }

    /// Makes this replay the thread's until the returned guard drops.
    pub fn install(self: &Rc<Self>) -> Installed {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        Installed { previous }
    }

    pub(crate) fn grad_enabled(&self) -> bool {
        self.grad.get()
    }

    /// Grad mode `on` until the guard drops.
    pub(crate) fn grad_mode(self: &Rc<Self>, on: bool) -> GradMode {
        GradMode { ctx: self.clone(), was: self.grad.replace(on) }
    }

    /// Autocast's dtype, `None` when it is off.
    pub(crate) fn autocast(&self) -> Option<tch::Kind> {
        self.autocast.get()
    }

    /// Autocast on in `kind` (off for `None`) until the guard drops; the cache goes when it
    /// drops back to off, as `torch.autocast.__exit__` clears it.
    pub fn autocast_mode(self: &Rc<Self>, kind: Option<tch::Kind>) -> AutocastMode {
        AutocastMode { ctx: self.clone(), was: self.autocast.replace(kind) }
    }

    /// The next node's sequence number.
    pub(crate) fn next_seq(&self) -> u64 {
        let s = self.seq.get();
        self.seq.set(s + 1);
        s
    }
}

/// A replay installed on the thread; the one before comes back when it drops.
pub struct Installed {
    previous: Option<Rc<Ctx>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Grad mode switched until dropped.
pub struct GradMode {
    ctx: Rc<Ctx>,
    was: bool,
}

impl Drop for GradMode {
    fn drop(&mut self) {
        self.ctx.grad.set(self.was);
    }
}

/// Autocast switched until dropped.
pub struct AutocastMode {
    ctx: Rc<Ctx>,
    was: Option<tch::Kind>,
}

impl Drop for AutocastMode {
    fn drop(&mut self) {
        self.ctx.autocast.set(self.was);
        if self.was.is_none() {
            // Taken out first: the casts free themselves into the ledger as they drop.
            let cache = std::mem::take(&mut *self.ctx.cast_cache.borrow_mut());
            drop(cache);
        }
    }
}
