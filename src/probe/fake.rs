//! A scripted probe for unit tests of pure logic (sweeps, reports). Never used by a real run.
use std::cell::RefCell;

use anyhow::Result;

use super::{Counters, MemoryProbe};
use crate::record::MemSnapshot;

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
