//! oomlab's training floor, above libtorch's: the networks a trial trains ([`nn`]: the built-in
//! kinds, a TorchScript module, checkpointing), and the trial itself ([`train`]: its data, the
//! step that composes the techniques, mixed precision, `torch.optim`'s optimizers, the phase
//! recorder, the warm-up, the preflight of a module, and a step recorded allocation by
//! allocation, on the CPU or the meta device, for the estimate).
pub mod nn;
pub mod train;

// The floors below, under the paths these modules name them by.
use oomlab_core::{device, interrupt, schema, spec, step};
use oomlab_torch::{ffi, libtorch, oom, probe};
