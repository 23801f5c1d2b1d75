//! oomlab: reproduce, measure and explain GPU memory in neural-network training.
//!
//! The pipeline: a TOML [`spec`] is validated once into typed values; the [`sweep`] turns it
//! into trials; each trial trains a real libtorch model through `tch` ([`train`]) while a
//! [`probe`] reads the allocator at every phase boundary; out-of-memory is caught and parsed as
//! data ([`oom`]); [`results`] writes CSVs and a manifest as trials finish; [`chart`] draws them.
pub mod chart;
pub mod claims;
pub mod cli;
pub mod comparison;
pub mod device;
pub mod estimate;
pub mod ffi;
pub mod figures;
pub mod oom;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod results;
pub mod run;
pub mod schema;
pub mod spec;
pub mod sweep;
pub mod train;
pub mod units;
