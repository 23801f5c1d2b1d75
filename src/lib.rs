//! oomlab: reproduce, measure and explain GPU memory in neural-network training.
//!
//! The pipeline: a TOML [`spec`] is validated once into typed values; the [`sweep`] turns it
//! into trials; each trial trains a real libtorch model ([`nn`]) through `tch` ([`train`]) while a
//! [`probe`] reads the allocator at every phase boundary; out-of-memory is caught and parsed as
//! data ([`oom`]); [`results`] writes CSVs and a manifest as trials finish; [`chart`] draws them.
#[macro_use]
extern crate oomlab_core;

// The ground floor, under the paths every layer and test has always named it by.
pub use oomlab_core::{
    cache, device, fsio, hugepages, interrupt, markdown, revision, schema, shell, spec, sweep, units,
};
// libtorch: the shim, its quirks, out-of-memory, probes.
pub use oomlab_torch::{ffi, libtorch, oom, probe};
// Training: the networks and the trial.
pub use oomlab_train::{nn, train};
// The estimate.
pub use oomlab_estimate::estimate;
// Results: the folder, the charts, the figures.
pub use oomlab_results::{chart, figures, results};
// Runs: the plan carried out, Slurm and shards, the bench.
pub use oomlab_run::{bench, cluster, run};

pub mod advise;
pub mod claims;
pub mod cli;
pub mod comparison;
