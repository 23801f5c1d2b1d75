//! The CPU probe: oomlab's counting allocator (see `ffi/shim.cpp`) installed as libtorch's CPU
//! allocator. The CPU has no caching allocator, so reserved always equals allocated.
use std::sync::{Mutex, MutexGuard};

use anyhow::{bail, Context, Result};
use bytesize::ByteSize;

use super::{Counters, MemoryProbe};
use crate::ffi;
use crate::schema::MemSnapshot;

/// The counter and cap are process-wide, so only one CPU probe may live at a time; others wait.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds the CPU probe now.
    static HELD_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the CPU's counters to itself, as a probe has them: under the probe's lock,
/// unless this thread holds the probe already (the recorded estimate asked for between a run's
/// trials, by its guided search).
pub fn exclusive<T>(f: impl FnOnce() -> T) -> T {
    if HELD_HERE.with(|h| h.get()) {
        return f();
    }
    let _only = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f()
}

/// The CPU's counters held as [`exclusive`] holds them, for as long as the guard lives: for a
/// test that allocates CPU tensors without a probe, so that a probe's test elsewhere in the same
/// process counts its own bytes alone (and tests that seed libtorch's one generator do not
/// interleave). [`exclusive`] inside passes; a [`CpuProbe`] made inside would wait for ever.
pub struct Alone {
    _only: Option<MutexGuard<'static, ()>>,
}

/// See [`Alone`].
pub fn alone() -> Alone {
    if HELD_HERE.with(|h| h.get()) {
        return Alone { _only: None };
    }
    let only = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD_HERE.with(|h| h.set(true));
    Alone { _only: Some(only) }
}

impl Drop for Alone {
    fn drop(&mut self) {
        if self._only.is_some() {
            HELD_HERE.with(|h| h.set(false));
        }
    }
}

pub struct CpuProbe {
    budget: Option<u64>,
    capacity: u64,
    name: String,
    _only: MutexGuard<'static, ()>,
}

impl CpuProbe {
    /// Installs the counting allocator and sets the budget as its cap. A budget above the memory
    /// the machine has available is refused: the cap would never bite, and the machine would.
    pub fn new(budget: Option<u64>) -> Result<Self> {
        let only = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        ffi::cpu_install().map_err(anyhow::Error::msg).context("installing the counting CPU allocator")?;
        let (total, available) = crate::device::meminfo()?;
        if let Some(b) = budget {
            let live = ffi::cpu_stats().allocated.max(0) as u64;
            if b > available + live {
                bail!(
                    "a CPU budget of {} is more than this machine's available memory ({}): the \
                     machine would run out before the budget does; lower `budget` in the spec or \
                     pass a smaller --budget",
                    ByteSize::b(b).display().iec(),
                    ByteSize::b(available).display().iec()
                );
            }
        }
        ffi::cpu_set_cap(budget);
        HELD_HERE.with(|h| h.set(true));
        Ok(CpuProbe { budget, capacity: total, name: crate::device::cpu_name(), _only: only })
    }
}

impl Drop for CpuProbe {
    fn drop(&mut self) {
        ffi::cpu_set_cap(None);
        HELD_HERE.with(|h| h.set(false));
    }
}

impl MemoryProbe for CpuProbe {
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }
    fn name(&self) -> String {
        self.name.clone()
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn budget(&self) -> Option<u64> {
        self.budget
    }
    fn snapshot(&self) -> Result<MemSnapshot> {
        Ok(snapshot())
    }
    fn reset_peak(&self) -> Result<()> {
        ffi::cpu_reset_peak();
        Ok(())
    }
    fn empty_cache(&self) -> Result<()> {
        Ok(())
    }
    fn counters(&self) -> Result<Counters> {
        Ok(counters())
    }
    fn last_refusal(&self) -> Option<ffi::Refusal> {
        ffi::cpu_last_refusal()
    }
}

/// The counting allocator's counters now (reserved is allocated: the CPU has no cache).
pub fn snapshot() -> MemSnapshot {
    let s = ffi::cpu_stats();
    MemSnapshot {
        memory_allocated: s.allocated.max(0) as u64,
        memory_reserved: s.reserved.max(0) as u64,
        max_memory_allocated: s.allocated_peak.max(0) as u64,
        max_memory_reserved: s.reserved_peak.max(0) as u64,
    }
}

/// The out-of-memory errors the counting allocator has raised (it never retries).
pub fn counters() -> Counters {
    Counters { num_ooms: ffi::cpu_stats().num_ooms.max(0) as u64, num_alloc_retries: 0 }
}
