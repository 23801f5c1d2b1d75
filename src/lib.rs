//! oomlab: reproduce, measure and explain GPU memory in neural-network training.
//!
//! The pipeline: a TOML [`spec`] is validated once into typed values; the [`sweep`] turns it
//! into trials; each trial trains a real libtorch model ([`nn`]) through `tch` ([`train`]) while a
//! [`probe`] reads the allocator at every phase boundary; out-of-memory is caught and parsed as
//! data ([`oom`]); [`results`] writes CSVs and a manifest as trials finish; [`chart`] draws them.
/// `println!` that never panics: a closed stdout (`oomlab run … | head -3`) ends the output,
/// not the work.
macro_rules! say {
    () => {{ use std::io::Write as _; let _ = writeln!(std::io::stdout()); }};
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = writeln!(std::io::stdout(), $($arg)*); }};
}

/// `print!` that never panics (see [`say!`]).
macro_rules! say_raw {
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = write!(std::io::stdout(), $($arg)*); }};
}

/// `eprintln!` that never panics (see [`say!`]).
macro_rules! note {
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = writeln!(std::io::stderr(), $($arg)*); }};
}

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

pub mod advise;
pub mod bench;
pub mod chart;
pub mod claims;
pub mod cli;
pub mod cluster;
pub mod comparison;
pub mod figures;
pub mod results;
pub mod run;
