//! oomlab: reproduce, measure and explain GPU memory in neural-network training.
//!
//! The pipeline: a TOML [`spec`] is validated once into typed values; the [`sweep`] turns it
//! into trials; each trial trains a real libtorch model ([`nn`]) through `tch` ([`train`]) while a
//! [`probe`] reads the allocator at every phase boundary; out-of-memory is caught and parsed as
//! data ([`oom`]); [`results`] writes CSVs and a manifest as trials finish; [`chart`] draws them.
//!
//! Each floor of that house is a crate of the workspace (`crates/`), so that no layer can import
//! one above it: core, torch, train, then estimate and results, run, reports. This package is the
//! top floor, the command line ([`cli`]); its library hands every floor's modules on under one
//! name, as `oomlab::spec`, `oomlab::estimate`, ..., for the binary and the tests.
#[macro_use]
extern crate oomlab_core;

// The ground floor, under the paths every layer and test has always named it by.
pub use oomlab_core::{
    cache, device, fsio, hugepages, interrupt, markdown, revision, schema, shell, spec, step, sweep, units,
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
// Reports: advice, the claims judged, comparisons.
pub use oomlab_reports::{advise, claims, comparison};

pub mod cli;
