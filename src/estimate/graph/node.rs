//! The autograd graph a forward records: one [`Node`] per differentiable op, what it saved, and
//! where its input gradients go.
use std::cell::RefCell;
use std::rc::Rc;

use super::backward::Rule;
use super::tensor::{Dt, Inner, Sym};

/// A backward function, as libtorch's `Node`: its sequence number (the engine runs the highest
/// ready one first), what it computes, the tensors it saved, and one edge per input.
pub(crate) struct Node {
    pub(crate) seq: u64,
    pub(crate) rule: Rule,
    /// Saved tensors (handles without history): their storages live as long as the node holds
    /// them, until `release_variables` after the node has run, or until the graph goes.
    pub(crate) saved: RefCell<Vec<Sym>>,
    /// Per input: where its gradient goes, `None` when it needs none.
    pub(crate) next: Vec<Option<Edge>>,
    /// Per input: its dtype (libtorch's `InputMetadata`), to which the engine casts a gradient
    /// that arrives in another (mixed precision: an fp32 + bf16 sum).
    pub(crate) dts: Vec<Dt>,
}

/// Where a gradient goes: another node's input (the output of it that the input was), or a
/// leaf's gradient accumulator (`AccumulateGrad`), which holds the leaf.
pub(crate) enum Edge {
    Node(Rc<Node>, usize),
    Leaf(Rc<Inner>),
}

impl Edge {
    /// The edge to `t`'s gradient, `None` when it requires none.
    pub(crate) fn of(t: &Sym) -> Option<Edge> {
        if !t.requires_grad() {
            return None;
        }
        Some(match t.grad_fn() {
            Some((node, output)) => Edge::Node(node, output),
            None => Edge::Leaf(t.0.clone()),
        })
    }
}
