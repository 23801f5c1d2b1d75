//! The bench's chart: per configuration, each contender's median step time with its p10-p90
//! spread, as a multiple of PyTorch's default loop on that configuration (1 = as fast as
//! PyTorch; lower is faster), with the target for oomlab `off` marked across its bar.
//!
//! Relative, not in seconds: the configurations' steps range from a millisecond (3 x 256) to
//! seconds (the lesson's model on a CPU), which no one axis shows; PyTorch's own median is
//! written above each group.
//!
//! [`data`] takes the figures from the bench's analysis; [`draw`] draws the groups of bars.
mod data;
mod draw;

pub use data::{BenchBar, BenchChart, BenchGroup, BenchSeries};
