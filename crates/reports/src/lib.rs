//! oomlab's reports, above the runs: what to change after an out-of-memory, each option
//! estimated and the smallest that fits verified ([`advise`]); the lesson's claims judged from
//! committed results ([`claims`]); results from different devices side by side
//! ([`comparison`]).
pub mod advise;
pub mod claims;
pub mod comparison;

// The floors below, under the paths these modules name them by.
use oomlab_core::{cache, device, fsio, markdown, revision, schema, spec, units};
use oomlab_estimate::estimate;
use oomlab_results::{chart, results};
use oomlab_run::{bench, run};
use oomlab_torch::{ffi, libtorch, probe};
use oomlab_train::train;
