//! A sweep across a cluster: a spec's independent trials dealt out to processes
//! (`run --shard I/N`, `run::shard`), their folders merged back into one experiment folder
//! (`oomlab merge`, [`merge`]), and the Slurm job arrays that run them (`oomlab slurm`,
//! [`slurm`]).
//!
//! A shard is a complete small results folder, `<out>/<device>/<experiment>/shards/I-of-N/`,
//! written by one process only; the merge renumbers the shards' trials into the order a single
//! process runs them (variants in spec order, each with its sweep values in order), so the merged
//! folder reads, charts and compares as one run's.
pub mod merge;
pub mod slurm;
