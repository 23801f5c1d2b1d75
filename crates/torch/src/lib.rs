//! oomlab's libtorch, above the ground floor and below every layer that trains or estimates: the
//! C++ shim and its bindings ([`ffi`]: allocator statistics, the counting CPU allocator and its
//! event log, meta kernels, CUDA's autocast on meta tensors, PyTorch's optimizers), libtorch's
//! quirks worked around once ([`libtorch`]), out-of-memory told from other errors and parsed as
//! data ([`oom`]), and the probes that read an allocator at a phase boundary ([`probe`]).
pub mod ffi;
pub mod libtorch;
pub mod oom;
pub mod probe;

// The ground floor, under the paths these modules name it by.
use oomlab_core::{device, schema, units};
