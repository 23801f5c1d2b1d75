//! Where the memory goes: one stacked bar per variant, split into data, parameters, optimizer
//! state, gradients, batch and activations, each measured from the trace of the variant's
//! first training step, with the trial's measured peak marked across the bar.
//!
//! The categories are differences of `memory_allocated` at the ends of phases, clamped at 0:
//!
//! | category        | after                | minus                                   |
//! |-----------------|----------------------|-----------------------------------------|
//! | data            | `data` (step 0)      | the trial's baseline                    |
//! | parameters      | `model` (step 0)     | `data`                                  |
//! | optimizer state | first `zero_grad`    | `model`, and the loss kept (4 or 8 B)   |
//! | gradients       | first `optimizer_step` | first `zero_grad`                     |
//! | batch           | first `to_device`    | `model`                                 |
//! | activations     | first `forward`      | first `to_device`                       |
//!
//! The components are not all live at once (the batch and activations are gone when the
//! optimizer state appears), so the stack can be taller or shorter than the measured peak; the
//! peak line says what the trial really needed. Modes without backward have no optimizer step
//! nor zero_grad: their optimizer state and gradients are 0.
//!
//! The trial that stands for each variant is the one `figures::compared` picks.
//!
//! [`data`] measures the categories from the trace; [`draw`] stacks them.
mod data;
mod draw;
#[cfg(test)]
mod tests;

pub use data::{CategoryBar, CategoryBars, CATEGORY_NAMES};
