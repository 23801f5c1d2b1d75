//! Backward through libtorch's autograd engine, with what the engine leaves behind when a
//! backward fails cleaned up, and grad mode switched on by a guard.
//!
//! **Why a backward needs more than `f_backward`.** On the CPU the engine runs a backward on the
//! calling thread, from a ready queue that belongs to the thread (`local_ready_queue` in
//! `torch/csrc/autograd/engine.cpp`) and lives as long as the thread does. When a node throws
//! (an out-of-memory in a Linear's backward, say), the engine marks the graph task failed and
//! returns at once, leaving the tasks it had already queued where they are. Each queued task
//! owns its node (and through the node's edges the rest of the graph behind it) and the
//! gradients waiting for it: saved activations, autocast's half-precision weight copies that
//! the node saved, gradients in flight, and through an `AccumulateGrad` node the parameter
//! itself. Dropping every Rust handle frees none of it: it was freed only by whichever backward
//! next ran on the thread (the engine discards a dead graph task's queued work first), so the
//! trial that ran out of memory ended above its baseline and the run stopped. Measured on the
//! CPU (counting allocator, allocations paired by size): bf16, 24 features, 3 hidden layers of
//! 64, batch 8, OOM in backward: 9,216 B left, the first layer's fp32 weight (6,144 B), two
//! fp32 biases (256 B each), a bf16 bias copy (128 B), the bf16 copy of the batch (384 B) and
//! two bf16 activations (1,024 B each); fp16 with "sqrt" checkpointing, 4 layers of 128, batch
//! 16: 111,872 B, a hidden fp32 weight (65,536 B), its fp16 copy (32,768 B), three fp16
//! activations (4,096 B each), two fp32 biases and an fp16 bias copy.
//!
//! On CUDA the same goes for the CPU work a backward leaves in the caller's queue (the device
//! threads keep popping theirs, and drop a dead graph task's tasks as they go).
//!
//! [`backward`] does exactly that at once: when a backward fails it runs an empty backward on
//! the same thread, which discards the failed graph's leftover tasks before its own, and
//! allocates nothing (its tensors have no elements), so it works under an exhausted budget too.
use tch::{Device, Kind, TchError, Tensor};

/// `t.backward()` for a scalar `t`; on failure, the engine's queue is drained before the error
/// is handed back, so that nothing of the failed backward outlives its tensors.
pub fn backward(t: &Tensor) -> Result<(), TchError> {
    t.f_backward().inspect_err(|_| drain_ready_queue())
}

/// Runs an empty backward on this thread: the engine pops (and so frees) the tasks a failed
/// graph task left in the thread's ready queue before it runs the new one (a task whose graph
/// task is gone sorts first: `NodeTask::getReentrantDepth`). No element, no allocation.
pub fn drain_ready_queue() {
    let _grad = GradEnabled::new();
    let run = || -> Result<(), TchError> {
        let leaf = Tensor::f_empty([0], (Kind::Float, Device::Cpu))?.f_set_requires_grad(true)?;
        let out = super::scalar::mul(&leaf, 2.0)?;
        Tensor::f_run_backward(&[&out], &[&leaf], false, false).map(drop)
    };
    // Nothing to report to: the backward that failed is the error the caller sees. It cannot
    // fail for memory (no bytes), and a libtorch that refuses it leaves things as they were.
    let _ = run();
}

/// Grad mode on until dropped, then back to what it was. tch has a guard for turning it off but
/// only a closure (`with_grad`, not restored on panic) for turning it on.
pub struct GradEnabled {
    was: bool,
}

impl GradEnabled {
    pub fn new() -> Self {
        // SAFETY: sets libtorch's thread-local grad mode flag and returns the old one; it
        // cannot fail and touches no Rust memory.
        let was = unsafe { torch_sys::at_grad_set_enabled(1) } != 0;
        GradEnabled { was }
    }
}

impl Default for GradEnabled {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for GradEnabled {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { torch_sys::at_grad_set_enabled(i32::from(self.was)) };
    }
}
