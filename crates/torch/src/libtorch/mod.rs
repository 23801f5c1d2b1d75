//! libtorch's quirks, worked around once, below every layer that calls libtorch (`nn` builds
//! models with them, `train` runs steps with them): tch's scalar-taking methods that panic where
//! libtorch reports an out-of-memory (`scalar`), and a backward that leaves the engine's queued
//! work behind when it fails (`autograd`); CUDA, loaded when first asked about (`cuda`). The raw bindings to oomlab's own C++ (allocator
//! statistics, optimizers, CUDA events) are `ffi`, below this.
pub mod autograd;
pub mod cuda;
pub mod scalar;
