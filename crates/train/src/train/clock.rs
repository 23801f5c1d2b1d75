//! Where durations come from: the host's clock, or CUDA events the device records as it reaches
//! them in its stream. An event costs the host a few microseconds and no wait; reading the time
//! between two waits for the later one only, so a trace reads them a step late.
use std::time::Instant;

use anyhow::{anyhow, Result};

use crate::ffi::CudaEvent;

/// The clock for a device's phases.
#[derive(Debug, Clone, Copy)]
pub(super) enum Clock {
    /// The CPU: its work is done when a call returns, so the host's clock times it.
    Host,
    /// A CUDA device, by index: work is queued, so its own events time it.
    Cuda(i32),
}

/// A moment on a clock.
pub(super) enum Mark {
    Host(Instant),
    Cuda(CudaEvent),
}

impl Clock {
    pub fn of(device: tch::Device) -> Clock {
        match device {
            tch::Device::Cuda(i) => Clock::Cuda(i as i32),
            _ => Clock::Host,
        }
    }

    /// Now, on this clock (on CUDA: when the device reaches the work queued so far).
    pub fn mark(self) -> Result<Mark> {
        Ok(match self {
            Clock::Host => Mark::Host(Instant::now()),
            Clock::Cuda(i) => {
                Mark::Cuda(CudaEvent::record(i).map_err(|e| anyhow!("recording a CUDA event: {e}"))?)
            }
        })
    }
}

impl Mark {
    /// Seconds from this mark to a later one of the same clock; on CUDA, waits for `later`.
    pub fn seconds_to(&self, later: &Mark) -> Result<f64> {
        match (self, later) {
            (Mark::Host(a), Mark::Host(b)) => Ok(b.saturating_duration_since(*a).as_secs_f64()),
            (Mark::Cuda(a), Mark::Cuda(b)) => {
                a.seconds_to(b).map_err(|e| anyhow!("reading CUDA event times: {e}"))
            }
            _ => Err(anyhow!("two marks of different clocks cannot be compared")),
        }
    }
}

/// The minor page faults this process has taken so far (every thread's): each is a first touch
/// of a 4 KiB page of memory the kernel had not yet backed. A CPU step pays one for every page
/// of fresh memory it writes, as large tensors come from fresh mappings (glibc's allocator maps
/// them anew and unmaps them when freed); a GPU's caching allocator reuses its blocks and pays
/// none. `None` where the count cannot be read.
pub(super) fn minor_faults() -> Option<u64> {
    // SAFETY: getrusage writes a plain struct we own and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
    ok.then(|| u64::try_from(usage.ru_minflt).unwrap_or(0))
}
