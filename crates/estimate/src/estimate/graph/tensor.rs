//! Symbolic tensors: a shape, strides and a dtype over a storage the ledger counts, and the
//! autograd metadata libtorch would keep for them. Nothing is ever computed.
//!
//! A [`Sym`] is what an `at::Tensor` is: a counted handle on a tensor (shallow clones share it,
//! grad_fn and `.grad` included). Its [`Storage`] is shared by every view of it and freed (in the
//! ledger) when the last handle, view or node that saved it lets go, exactly when libtorch's
//! storage would be.
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use tch::Kind;

use super::node::Node;
use crate::estimate::ledger::{Category, Held, Shared};

/// Bytes the allocator is asked for, once: libtorch's storage.
pub(crate) struct Storage {
    ledger: Shared,
    /// Whether OOMLAB_REPLAY_LOG prints its allocation and free (not a scratch replay's).
    logged: bool,
    held: Cell<Option<Held>>,
    /// What its bytes are for, as the ledger files them now.
    category: Cell<Category>,
}

impl Storage {
    /// Asks `ledger` for `counted` bytes (as the allocator counts them) filed under `category`.
    pub(crate) fn new(ledger: &Shared, logged: bool, counted: u64, category: Category) -> Rc<Storage> {
        if counted > 0 && logged && replay_log() {
            eprintln!("replay-alloc +{counted}");
        }
        let held = (counted > 0).then(|| ledger.hold(category, counted));
        Rc::new(Storage {
            ledger: ledger.clone(),
            logged,
            held: Cell::new(held),
            category: Cell::new(category),
        })
    }

    /// Files the bytes under `to` from now on (an activation a node saved, a gradient stolen as
    /// `.grad`).
    pub(crate) fn file_as(&self, to: Category) {
        let from = self.category.replace(to);
        if from != to {
            if let Some(held) = self.held.get() {
                self.held.set(Some(self.ledger.refile(held, to)));
            }
        }
    }

    pub(crate) fn category(&self) -> Category {
        self.category.get()
    }
}

/// OOMLAB_REPLAY_LOG=1 prints each allocation and free the replay makes (`replay-alloc +bytes`,
/// `-bytes`), to set beside OOMLAB_ALLOC_LOG's log of a real run.
pub(crate) fn replay_log() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("OOMLAB_REPLAY_LOG").is_some())
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            if self.logged && replay_log() {
                eprintln!("replay-alloc -{}", self.ledger.bytes_of(held));
            }
            self.ledger.release(held);
        }
    }
}

/// An element type, with its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dt(pub Kind);

impl Dt {
    pub(crate) fn size(self) -> u64 {
        self.0.elt_size_in_bytes() as u64
    }
}

/// The autograd metadata of a tensor.
#[derive(Default)]
pub(crate) struct Autograd {
    /// The node that made it, and which of the node's outputs it is.
    pub(crate) grad_fn: Option<(Rc<Node>, usize)>,
    pub(crate) requires_grad: bool,
    /// A leaf's `.grad`.
    pub(crate) grad: Option<Sym>,
}

pub(crate) struct Inner {
    pub(crate) shape: RefCell<Vec<i64>>,
    pub(crate) strides: RefCell<Vec<i64>>,
    pub(crate) dt: Dt,
    pub(crate) storage: RefCell<Option<Rc<Storage>>>,
    pub(crate) autograd: RefCell<Autograd>,
    /// Made on the host (a wrapped scalar, a generator's state): nothing on CUDA.
    pub(crate) host: bool,
    /// False for the undefined tensor (a `.grad` that was never made).
    pub(crate) defined: bool,
}

/// A symbolic tensor handle.
pub struct Sym(pub(crate) Rc<Inner>);

/// Contiguous strides for `shape`.
pub(crate) fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// The strides of a view of a tensor of `shape` and `strides` as `new`, if one exists (ATen's
/// `computeStride`); `None` when only a copy can have that shape.
pub(crate) fn view_strides(shape: &[i64], strides: &[i64], new: &[i64]) -> Option<Vec<i64>> {
    if shape.is_empty() {
        return Some(vec![1; new.len()]);
    }
    if numel(shape) == 0 {
        return Some(contiguous_strides(new));
    }
    let mut out = vec![0; new.len()];
    let mut view_d = new.len() as i64 - 1;
    let mut chunk_base = *strides.last().unwrap_or(&1);
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for d in (0..shape.len()).rev() {
        tensor_numel *= shape[d];
        if d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base) {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

pub(crate) fn numel(shape: &[i64]) -> u64 {
    shape.iter().map(|&d| d.max(0) as u64).product()
}

impl Sym {
    /// A new contiguous tensor of `storage` (`alloc.rs` makes them, in a replay's ledger).
    pub(crate) fn with_storage(shape: &[i64], dt: Dt, storage: Rc<Storage>, host: bool) -> Sym {
        Sym(Rc::new(Inner {
            shape: RefCell::new(shape.to_vec()),
            strides: RefCell::new(contiguous_strides(shape)),
            dt,
            storage: RefCell::new(Some(storage)),
            autograd: RefCell::new(Autograd::default()),
            host,
            defined: true,
        }))
    }

    /// An undefined tensor (what `.grad` of a tensor without one returns).
    pub(crate) fn undefined(dt: Dt) -> Sym {
        Sym(Rc::new(Inner {
            shape: RefCell::new(vec![]),
            strides: RefCell::new(vec![]),
            dt,
            storage: RefCell::new(None),
            autograd: RefCell::new(Autograd::default()),
            host: false,
            defined: false,
        }))
    }

    /// A view of this tensor's storage with another shape and strides, no autograd history.
    pub(crate) fn view_as(&self, shape: Vec<i64>, strides: Vec<i64>) -> Sym {
        Sym(Rc::new(Inner {
            shape: RefCell::new(shape),
            strides: RefCell::new(strides),
            dt: self.0.dt,
            storage: RefCell::new(self.storage()),
            autograd: RefCell::new(Autograd::default()),
            host: self.0.host,
            defined: true,
        }))
    }

    /// A second handle on the same tensor.
    pub(crate) fn handle(&self) -> Sym {
        Sym(self.0.clone())
    }

    pub(crate) fn shape(&self) -> Vec<i64> {
        self.0.shape.borrow().clone()
    }

    pub(crate) fn strides(&self) -> Vec<i64> {
        self.0.strides.borrow().clone()
    }

    pub(crate) fn dt(&self) -> Dt {
        self.0.dt
    }

    pub(crate) fn numel(&self) -> u64 {
        numel(&self.0.shape.borrow())
    }

    pub(crate) fn storage(&self) -> Option<Rc<Storage>> {
        self.0.storage.borrow().clone()
    }

    pub(crate) fn is_contiguous(&self) -> bool {
        let shape = self.0.shape.borrow();
        let strides = self.0.strides.borrow();
        let mut expected = 1;
        for (&d, &s) in shape.iter().zip(strides.iter()).rev() {
            if d == 1 {
                continue;
            }
            if s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }

    /// Non-overlapping and dense: a permutation of a contiguous layout (an expanded view is not).
    pub(crate) fn is_dense(&self) -> bool {
        let (shape, strides) = (self.shape(), self.strides());
        let mut dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
        dims.sort_by_key(|&d| strides[d]);
        let mut expected = 1;
        for d in dims {
            if strides[d] != expected {
                return false;
            }
            expected *= shape[d];
        }
        true
    }

    pub(crate) fn requires_grad(&self) -> bool {
        self.0.autograd.borrow().requires_grad
    }

    pub(crate) fn grad_fn(&self) -> Option<(Rc<Node>, usize)> {
        self.0.autograd.borrow().grad_fn.clone()
    }

    /// Handles on this tensor (this one included): the engine steals a gradient only when it
    /// holds the one handle.
    pub(crate) fn handles(&self) -> usize {
        Rc::strong_count(&self.0)
    }

    /// Holders of its storage (views, saved copies, handles).
    pub(crate) fn storage_holders(&self) -> usize {
        self.0.storage.borrow().as_ref().map_or(0, Rc::strong_count)
    }

    /// Files the storage under `to`.
    pub(crate) fn file_as(&self, to: Category) {
        if let Some(s) = self.0.storage.borrow().as_ref() {
            s.file_as(to);
        }
    }

    /// Files the storage under `to`, and every tensor its graph has saved but the parameters
    /// (a loss kept in a history keeps its whole graph, the batch and the autocast casts it
    /// saved included).
    pub(crate) fn file_graph_as(&self, to: Category) {
        let file = |t: &Sym| {
            if let Some(s) =
                t.storage().filter(|s| !matches!(s.category(), Category::Params | Category::Grads))
            {
                s.file_as(to);
            }
        };
        file(self);
        let mut seen = std::collections::HashSet::new();
        let mut pending: Vec<Rc<Node>> = self.grad_fn().into_iter().map(|(n, _)| n).collect();
        while let Some(node) = pending.pop() {
            if !seen.insert(Rc::as_ptr(&node)) {
                continue;
            }
            node.saved.borrow().iter().for_each(file);
            for edge in node.next.iter().flatten() {
                if let super::node::Edge::Node(next, _) = edge {
                    pending.push(next.clone());
                }
            }
        }
    }

    pub(crate) fn set_grad_fn(&self, node: Rc<Node>, output: usize) {
        let mut a = self.0.autograd.borrow_mut();
        a.grad_fn = Some((node, output));
        a.requires_grad = true;
    }
}
