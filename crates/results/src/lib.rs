//! oomlab's results, above training: a run's folder on disk ([`results`]: exporters that flush
//! after every trial and undo a half-written one, the manifest, the lock, untrusted reads), the
//! charts ([`chart`], drawn by plotters from prepared data), and the lesson's figures picked from
//! committed results ([`figures`]).
#[macro_use]
extern crate oomlab_core;

pub mod chart;
pub mod figures;
pub mod results;

// The floors below, under the paths these modules name them by.
use oomlab_core::{device, fsio, hugepages, interrupt, revision, schema, shell, spec, units};
use oomlab_torch::ffi;
use oomlab_train::train;
