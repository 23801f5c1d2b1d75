//! One experiment's sweep from several folders (devices, budgets) overlaid: peak reserved memory
//! against the swept value, one line per folder, in bytes on the left and as a share of each
//! folder's budget (or capacity, without one) on the right, where devices of different sizes
//! line up: the line that reaches 100% first is the device that runs out first.
//!
//! Peak reserved is the figure drawn because it is what a budget caps (the caching allocator's
//! reservations; on the CPU reserved equals allocated). Trials that ran out of memory are
//! crosses in their folder's colour, at what they needed (allocated + requested) or at the
//! folder's limit when the message did not say.
//!
//! The same chart draws one run's variants, a line each, under the budget they share (none drawn
//! without one).
//!
//! [`data`] takes each folder's sweep from the comparison; [`draw`] draws the two panels.
mod data;
mod draw;

pub use data::{CompareSeries, CompareSweep, SeriesOf};
