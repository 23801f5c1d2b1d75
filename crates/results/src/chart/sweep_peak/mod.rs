//! The lesson's "how deep before out of memory" figure: peak allocated and peak reserved memory
//! against a swept value (depth, batch size, width, ...), with the trials that ran out of memory
//! marked where they would have needed to be, and the device's budget drawn across.
//!
//! An OOM is marked at what it would have needed at least (allocated + requested, from the
//! error message), or at the budget when the message did not say. The x axis turns
//! logarithmic (base 2) when the swept values span more than a factor of 64.
//!
//! When the summary carries the memory model's prediction (`predicted_peak`, from `oomlab
//! estimate`'s model), it is drawn too, as a thin dashed line through every trial, failed ones
//! included: where it crosses the budget is where the model says trials stop fitting, and how far
//! above the budget a failed trial's point sits is how much it would have needed.
//!
//! Rows that failed for another reason than memory (`Status::Error`) are kept and drawn as grey
//! rings on the x axis: they measured nothing, but hiding them would make a sweep look as if it
//! had never tried those values.
//!
//! [`data`] turns the summary's rows into the points drawn; [`draw`] draws them.
mod data;
mod draw;
#[cfg(test)]
mod tests;

pub use data::{PeakPoint, SweepPeak};
