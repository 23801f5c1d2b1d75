//! `loss.backward()` as libtorch's CPU engine runs it (`torch/csrc/autograd/engine.cpp`), for
//! what it allocates and frees and when:
//!
//! - The seed `ones_like(root)` is made first and held by the caller until backward returns.
//! - Nodes run from a ready queue, the highest sequence number first (the latest op of the
//!   forward), a gradient accumulator (`AccumulateGrad`, sequence number u64::MAX) as soon as
//!   it is ready. A node is ready when every edge into it has delivered.
//! - For each node (`evaluate_function`): its rule runs (its gradients, its temporaries); then
//!   its incoming gradients are let go (freed unless held elsewhere); then its saved tensors
//!   (`release_variables`); then its outputs go to the next nodes' input buffers.
//! - A second gradient for the same input is added in place into the first when the buffer
//!   holds the only handle on it and its storage (`InputBuffer::accumulate`), else summed into a
//!   new tensor.
//! - A leaf's accumulator steals a gradient nobody else holds as `.grad`, copies one that is
//!   held elsewhere, and adds into an existing `.grad` in place.
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

use super::backward::apply;
use super::node::{Edge, Node};
use super::tensor::{Inner, Sym};
use super::Ctx;
use crate::estimate::ledger::Category;

/// A node, or a leaf's accumulator, by address (stable while the graph is alive).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Node(usize),
    Leaf(usize),
}

fn node_key(n: &Rc<Node>) -> Key {
    Key::Node(Rc::as_ptr(n) as usize)
}

fn leaf_key(l: &Rc<Inner>) -> Key {
    Key::Leaf(Rc::as_ptr(l) as usize)
}

/// What waits in the ready queue: highest sequence number first.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ready(u64, Key);

enum Task {
    Node(Rc<Node>),
    Leaf(Rc<Inner>),
}

/// Runs backward from the scalar `root`.
pub(crate) fn backward(ctx: &Rc<Ctx>, root: &Sym) {
    let _no_grad = ctx.grad_mode(false);
    let seed = Sym::alloc(ctx, &root.shape(), root.dt(), Category::Transient);
    let Some(start) = Edge::of(root) else { return };
    let mut deps: HashMap<Key, usize> = HashMap::new();
    let mut tasks: HashMap<Key, Task> = HashMap::new();
    count_dependencies(&start, &mut deps, &mut tasks);
    let buffers: RefCell<HashMap<Key, Vec<Option<Sym>>>> = RefCell::new(HashMap::new());
    let mut ready = BinaryHeap::new();
    deliver(ctx, &start, Some(seed.handle()), &buffers, &mut deps, &mut ready);
    while let Some(Ready(_, key)) = ready.pop() {
        let inputs = buffers.borrow_mut().remove(&key).unwrap_or_default();
        match &tasks[&key] {
            Task::Leaf(leaf) => accumulate_grad(ctx, leaf, inputs),
            Task::Node(node) => {
                let mut outputs = apply(ctx, node, &inputs);
                // `validate_outputs`: a gradient in another dtype than its input's is cast to it
                // (mixed precision), while the incoming gradients are still held.
                for (grad, dt) in outputs.iter_mut().zip(&node.dts) {
                    if let Some(g) = grad.as_ref().filter(|g| g.dt() != *dt) {
                        let cast = super::alloc::new_like_dt(ctx, g, *dt);
                        *grad = Some(cast);
                    }
                }
                // The incoming gradients, then the saved tensors, go before the outputs move on.
                drop(inputs);
                node.saved.borrow_mut().clear();
                for (edge, grad) in node.next.iter().zip(outputs) {
                    if let Some(edge) = edge {
                        deliver(ctx, edge, grad, &buffers, &mut deps, &mut ready);
                    }
                }
            }
        }
    }
    drop(seed);
}

/// Counts the edges into every node and accumulator reachable from `edge`.
fn count_dependencies(edge: &Edge, deps: &mut HashMap<Key, usize>, tasks: &mut HashMap<Key, Task>) {
    let mut stack = vec![edge_target(edge)];
    while let Some((key, task)) = stack.pop() {
        let seen = deps.contains_key(&key);
        *deps.entry(key).or_insert(0) += 1;
        if seen {
            continue;
        }
        if let Task::Node(node) = &task {
            for e in node.next.iter().flatten() {
                stack.push(edge_target(e));
            }
        }
        tasks.insert(key, task);
    }
}

fn edge_target(edge: &Edge) -> (Key, Task) {
    match edge {
        Edge::Node(n, _) => (node_key(n), Task::Node(n.clone())),
        Edge::Leaf(l) => (leaf_key(l), Task::Leaf(l.clone())),
    }
}

/// Puts `grad` into the input buffer `edge` names (summing it with what is there), and queues
/// the target once everything it waits for has come.
fn deliver(
    ctx: &Rc<Ctx>,
    edge: &Edge,
    grad: Option<Sym>,
    buffers: &RefCell<HashMap<Key, Vec<Option<Sym>>>>,
    deps: &mut HashMap<Key, usize>,
    ready: &mut BinaryHeap<Ready>,
) {
    let (key, slot, seq) = match edge {
        Edge::Node(n, i) => (node_key(n), *i, n.seq),
        Edge::Leaf(l) => (leaf_key(l), 0, u64::MAX),
    };
    if let Some(grad) = grad {
        let mut buffers = buffers.borrow_mut();
        let buffer = buffers.entry(key).or_default();
        if buffer.len() <= slot {
            buffer.resize_with(slot + 1, || None);
        }
        buffer[slot] = Some(match buffer[slot].take() {
            None => grad,
            Some(old) => accumulate(ctx, old, grad),
        });
    }
    let left = deps.get_mut(&key).expect("every target was counted");
    *left -= 1;
    if *left == 0 {
        ready.push(Ready(seq, key));
    }
}

/// `InputBuffer::accumulate` with grad mode off: in place into the first gradient when nothing
/// else holds it or its storage and it is a dense tensor (not an expanded view), else a new sum.
fn accumulate(ctx: &Rc<Ctx>, old: Sym, new: Sym) -> Sym {
    if old.handles() == 1 && old.storage_holders() == 1 && old.is_dense() {
        drop(new);
        old
    } else {
        let sum = Sym::alloc(ctx, &old.shape(), old.dt(), Category::Transient);
        drop((old, new));
        sum
    }
}

/// `AccumulateGrad`: the gradient becomes the leaf's `.grad`. Under DDP with
/// `gradient_as_bucket_view`, the reducer's hook after it copies the gradient into the leaf's
/// view of its bucket and makes the view the `.grad` (`Reducer::mark_variable_ready_dense`):
/// the gradient autograd made goes.
fn accumulate_grad(ctx: &Rc<Ctx>, leaf: &Rc<Inner>, inputs: Vec<Option<Sym>>) {
    let Some(Some(grad)) = inputs.into_iter().next() else { return };
    let view = ctx.grad_views.borrow().iter().find(|(k, _)| Rc::ptr_eq(k, leaf)).map(|(_, v)| v.handle());
    if let Some(view) = view {
        leaf.autograd.borrow_mut().grad.get_or_insert(view);
        drop(grad);
        return;
    }
    let leaf = Sym(leaf.clone());
    let is_param = leaf.storage().is_some_and(|s| s.category() == Category::Params);
    let filed = if is_param { Category::Grads } else { Category::Transient };
    let mut autograd = leaf.0.autograd.borrow_mut();
    match &autograd.grad {
        // `variable_grad += new_grad`, in place; the new one goes with the buffer.
        Some(_) => drop(grad),
        None => {
            let stealable = grad.handles() == 1
                && grad.storage_holders() == 1
                && grad.shape() == leaf.shape()
                && grad.is_contiguous();
            if stealable {
                grad.file_as(filed);
                autograd.grad = Some(grad);
            } else {
                // `clone_obey_contract`: a copy in the leaf's layout.
                autograd.grad = Some(Sym::alloc(ctx, &leaf.shape(), grad.dt(), filed));
                drop(grad);
            }
        }
    }
}
