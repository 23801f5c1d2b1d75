//! Memory through one trial: what was allocated and reserved at the end of every phase, and the
//! peaks within it, step after step, so that a reader sees the pattern of a training step
//! (forward builds activations up, backward frees them for gradients, the first optimizer step
//! adds its state) and where an out-of-memory struck.
//!
//! The x axis counts phases, one unit each, in the order they ran: a 50 µs `zero_grad` gets
//! as much room as a 2 s `backward`, since what matters here is the memory pattern, not time
//! (the phase times are in the Chrome trace). Each phase is a column:
//!
//! - a light blue bar up to the peak allocated within the phase;
//! - an orange dash at the peak reserved within it;
//! - solid lines through the allocated and reserved memory at the end of each phase, with a dot
//!   at the column's right edge (the end of the phase);
//! - the memory the device reports as used (NVML) when the trace has it;
//! - when given, the memory model's predicted peak of each phase (`oomlab estimate`), as a
//!   green tick across the column: where it sits on the bar's top, the model saw that phase.
//!
//! Steps are shaded alternately and numbered under the plot; a band of colours there names the
//! phase of each column. An OOM is a red cross in the column of the phase it struck, at what it
//! needed (allocated + requested), or at the budget when its message did not say.
//!
//! [`data`] takes the trial's phases from the trace; [`draw`] draws the plot, and [`band`] the
//! band of phases and steps under it.
mod band;
mod data;
mod draw;
#[cfg(test)]
mod tests;

pub use data::{OomMark, Timeline, TimelinePoint};
