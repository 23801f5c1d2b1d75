//! The allocations every op and backward formula makes: a new tensor of a shape, or laid out as
//! another, in a dtype and a category of the ledger.
use std::rc::Rc;

use super::tensor::{numel, Dt, Storage, Sym};
use super::Ctx;
use crate::estimate::ledger::Category::{self, Transient};

impl Sym {
    /// A new contiguous tensor with a storage of its own, filed under `category`.
    pub(crate) fn alloc(ctx: &Rc<Ctx>, shape: &[i64], dt: Dt, category: Category) -> Sym {
        Sym::alloc_on(ctx, shape, dt, category, false)
    }

    /// The same on the host (counted on the CPU only: on CUDA the host's tensors cost nothing).
    pub(crate) fn alloc_on(ctx: &Rc<Ctx>, shape: &[i64], dt: Dt, category: Category, host: bool) -> Sym {
        let bytes = numel(shape).saturating_mul(dt.size());
        let counted = if host { ctx.target.host(bytes) } else { bytes };
        Sym::with_storage(shape, dt, Storage::new(&ctx.ledger, ctx.logged, counted, category), host)
    }
}

pub(crate) fn new(ctx: &Rc<Ctx>, shape: &[i64], dt: Dt) -> Sym {
    Sym::alloc(ctx, shape, dt, Transient)
}

/// A new tensor laid out as `like` (TensorIterator keeps a dense input's memory order for its
/// output), or contiguous.
pub(crate) fn new_like(ctx: &Rc<Ctx>, like: &Sym) -> Sym {
    new_like_dt(ctx, like, like.dt())
}

/// A new tensor of `like`'s shape and layout in `dt` (`like.to(dt)`).
pub(crate) fn new_like_dt(ctx: &Rc<Ctx>, like: &Sym, dt: Dt) -> Sym {
    alloc_like(ctx, like, dt, Transient)
}

/// A new tensor of `like`'s shape and layout in `dt`, filed under `category`.
pub(crate) fn alloc_like(ctx: &Rc<Ctx>, like: &Sym, dt: Dt, category: Category) -> Sym {
    let t = Sym::alloc(ctx, &like.shape(), dt, category);
    if !like.is_contiguous() && like.is_dense() {
        *t.0.strides.borrow_mut() = like.strides();
    }
    t
}
