//! Memory probes: one trait over what the allocator says, for CUDA (the caching allocator)
//! and the CPU (oomlab's counting allocator); `fake` holds a scripted probe for unit tests and
//! a CPU probe with a played workspace for the workspace tests.
use anyhow::Result;

use crate::schema::MemSnapshot;

mod cpu;
mod cuda;
pub mod fake;

pub use cpu::{
    alone as cpu_alone, counters as cpu_counters, exclusive as cpu_exclusive, snapshot as cpu_snapshot,
    CpuProbe,
};
pub use cuda::CudaProbe;

/// Counters that only go up over a process's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Allocations refused after the cache was flushed.
    pub num_ooms: u64,
    /// cudaMalloc failures that a cache flush then satisfied (always 0 on CPU).
    pub num_alloc_retries: u64,
}

/// What a run needs to know about memory on its device.
pub trait MemoryProbe {
    /// The tch device tensors are made on.
    fn device(&self) -> tch::Device;
    /// A human name: "NVIDIA H100 80GB HBM3", "CPU (AMD EPYC)".
    fn name(&self) -> String;
    /// Total memory of the device, in bytes.
    fn capacity(&self) -> u64;
    /// The budget in force, if any.
    fn budget(&self) -> Option<u64>;
    /// Current and peak allocated and reserved bytes as the allocator counts them now. No wait
    /// is needed: the caching allocator (like the CPU's) counts on the host when a tensor is
    /// made or freed, not when the device gets to the work.
    fn snapshot(&self) -> Result<MemSnapshot>;
    /// Waits for the work queued on the device (CUDA); the CPU has nothing queued.
    fn wait(&self) -> Result<()> {
        Ok(())
    }
    /// Restarts the peaks from the current values.
    fn reset_peak(&self) -> Result<()>;
    /// Returns cached, unused memory to the device (a no-op on CPU, which has no cache).
    fn empty_cache(&self) -> Result<()>;
    fn counters(&self) -> Result<Counters>;
    /// The last allocation the budget refused, to the byte, where the allocator keeps it (the
    /// CPU's counting allocator); CUDA's refusals are known only from their rounded message.
    fn last_refusal(&self) -> Option<crate::ffi::Refusal> {
        None
    }
    /// Bytes the device reports in use by everyone (nvidia-smi's number), where it can tell.
    fn device_used(&self) -> Option<u64> {
        None
    }
    /// The NVIDIA driver version, where there is one and NVML can tell.
    fn driver_version(&self) -> Option<String> {
        None
    }
    /// The GPU's CUDA compute capability (major, minor), where NVML reads it: what the estimate
    /// tells GPU generations apart by (`estimate::GpuArch::from_capability`).
    fn compute_capability(&self) -> Option<(i32, i32)> {
        None
    }
}
