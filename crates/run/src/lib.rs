//! oomlab's runs, above the estimate and the results: a spec's plan carried out trial by trial
//! ([`run`]: the sweep guided by the estimate, the probes, resume, shards, progress), Slurm's
//! scripts and the merge of shards ([`cluster`]), and the bench that times oomlab's steps
//! against PyTorch's ([`bench`]).
#[macro_use]
extern crate oomlab_core;

pub mod bench;
pub mod cluster;
pub mod run;

// The floors below, under the paths these modules name them by.
use oomlab_core::{device, fsio, interrupt, schema, shell, spec, sweep, units};
use oomlab_estimate::estimate;
use oomlab_results::{chart, figures, results};
use oomlab_torch::{ffi, libtorch, probe};
use oomlab_train::train;
