//! oomlab's estimate, above training: a trial's memory per phase and category predicted without
//! training it ([`estimate`]), from a model of libtorch's allocators and workspaces that replays
//! the built-in kinds' code, or from a TorchScript module's step recorded on the CPU or the meta
//! device.
pub mod estimate;

// The floors below, under the paths these modules name them by.
use oomlab_core::{cache, device, fsio, revision, schema, spec, step, sweep, units, zero};
use oomlab_torch::ffi;
use oomlab_train::{nn, train};
