//! Probes for tests, never used by a real run: `FakeProbe`, scripted numbers for a step's unit
//! tests, and `PlayedWorkspace`, the real CPU allocator with a workspace played before trials.
use std::cell::RefCell;

use anyhow::Result;

use super::{Counters, MemoryProbe};
use crate::schema::MemSnapshot;

/// Returns the snapshots it was given, in order, then repeats the last.
#[derive(Default)]
pub struct FakeProbe {
    pub snapshots: RefCell<Vec<MemSnapshot>>,
    pub capacity: u64,
    pub budget: Option<u64>,
}

impl MemoryProbe for FakeProbe {
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }
    fn name(&self) -> String {
        "fake".into()
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn budget(&self) -> Option<u64> {
        self.budget
    }
    fn snapshot(&self) -> Result<MemSnapshot> {
        let mut s = self.snapshots.borrow_mut();
        Ok(if s.len() > 1 { s.remove(0) } else { s.first().copied().unwrap_or_default() })
    }
    fn reset_peak(&self) -> Result<()> {
        Ok(())
    }
    fn empty_cache(&self) -> Result<()> {
        Ok(())
    }
    fn counters(&self) -> Result<Counters> {
        Ok(Counters::default())
    }
}

/// The real CPU probe, playing a GPU's process-lifetime workspace: `workspace` bytes appear at
/// the first allocation libtorch makes after the probe opens (as cuBLAS's does at the first
/// matrix product) and stay. With `leak`, each clean-up after work (`empty_cache` following new
/// allocations) leaves that many more bytes behind, as a genuine leak would.
pub struct PlayedWorkspace {
    inner: super::CpuProbe,
    workspace: u64,
    leak: u64,
    opened_at: u64,
    seen: std::cell::Cell<u64>,
    leaked: std::cell::Cell<u64>,
}

impl PlayedWorkspace {
    pub fn new(workspace: u64, leak: u64) -> Result<Self> {
        let inner = super::CpuProbe::new(None)?;
        let opened_at = crate::ffi::cpu_allocations();
        Ok(PlayedWorkspace { inner, workspace, leak, opened_at, seen: opened_at.into(), leaked: 0.into() })
    }

    fn extra(&self) -> u64 {
        let ws = if crate::ffi::cpu_allocations() > self.opened_at { self.workspace } else { 0 };
        ws + self.leaked.get()
    }
}

impl MemoryProbe for PlayedWorkspace {
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }
    fn name(&self) -> String {
        "played workspace".into()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn budget(&self) -> Option<u64> {
        None
    }
    fn snapshot(&self) -> Result<MemSnapshot> {
        let s = self.inner.snapshot()?;
        let x = self.extra();
        Ok(MemSnapshot {
            memory_allocated: s.memory_allocated + x,
            memory_reserved: s.memory_reserved + x,
            max_memory_allocated: s.max_memory_allocated + x,
            max_memory_reserved: s.max_memory_reserved + x,
        })
    }
    fn reset_peak(&self) -> Result<()> {
        self.inner.reset_peak()
    }
    fn empty_cache(&self) -> Result<()> {
        let now = crate::ffi::cpu_allocations();
        if now > self.seen.get() {
            self.leaked.set(self.leaked.get() + self.leak);
            self.seen.set(now);
        }
        Ok(())
    }
    fn counters(&self) -> Result<Counters> {
        self.inner.counters()
    }
}
