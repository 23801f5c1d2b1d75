//! The CUDA probe: the caching allocator's own statistics (what `torch.cuda.memory_allocated`
//! and friends return), and NVML for what nvidia-smi shows.
//!
//! A budget becomes the allocator's per-process memory fraction (budget / total), applied before
//! the first allocation. Since that path cannot be tested without a GPU, the probe checks it
//! when it starts: an allocation just over the budget must fail, or the run is refused.
use anyhow::{anyhow, bail, Context, Result};
use bytesize::ByteSize;
use nvml_wrapper::Nvml;

use super::{Counters, MemoryProbe};
use crate::ffi;
use crate::schema::MemSnapshot;
use crate::units::format_bytes;

pub struct CudaProbe {
    index: usize,
    budget: Option<u64>,
    total: u64,
    nvml: Option<Nvml>,
    name: String,
}

impl CudaProbe {
    pub fn new(index: usize, budget: Option<u64>) -> Result<Self> {
        // Held while the probe opens: the budget is the process's only once it took effect.
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        admit(&opened, budget)?;
        let nvml = Nvml::init().ok();
        let (_, total) = ffi::cuda_mem_info(index as i32)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("reading the memory of cuda:{index}"))?;
        let name = nvml
            .as_ref()
            .and_then(|n| n.device_by_index(index as u32).ok()?.name().ok())
            .unwrap_or_else(|| format!("CUDA device {index}"));
        if let Some(b) = budget {
            if b > total {
                bail!(
                    "a budget of {} is more than {name}'s {}: lower `budget` or --budget",
                    ByteSize::b(b).display().iec(),
                    ByteSize::b(total).display().iec()
                );
            }
            let fraction = b as f64 / total as f64;
            let setting = format!("per_process_memory_fraction:{fraction:.9}");
            ffi::set_allocator_settings(&setting).map_err(anyhow::Error::msg)?;
        }
        let probe = CudaProbe { index, budget, total, nvml, name };
        if let Some(b) = budget {
            probe.check_budget_bites(b)?;
        }
        *opened = Some(budget);
        Ok(probe)
    }

    /// Allocates just over the budget: the allocator must refuse it. It does not where anything
    /// made the caching allocator before the fraction was set (it reads the setting once, as it
    /// starts): a process opens its first CUDA probe with the budget, before any CUDA work.
    fn check_budget_bites(&self, budget: u64) -> Result<()> {
        let over = budget + (1 << 20);
        if over > self.total {
            return Ok(()); // the card itself enforces this budget
        }
        let t = tch::Tensor::f_empty([over as i64], (tch::Kind::Uint8, self.device()));
        let held = t.is_ok();
        drop(t);
        self.empty_cache()?;
        if held {
            bail!(
                "the CUDA allocator accepted {} under a budget of {}: the per-process memory \
                 fraction did not take effect in this libtorch; run without a budget",
                ByteSize::b(over).display().iec(),
                ByteSize::b(budget).display().iec()
            );
        }
        Ok(())
    }

    fn stats(&self) -> Result<ffi::RawStats> {
        ffi::cuda_stats(self.index as i32).map_err(|e| anyhow!("reading CUDA allocator stats: {e}"))
    }
}

/// The budget the process's first CUDA probe opened with (`None` inside: no budget), once one
/// has: the caching allocator reads its memory fraction once, as it starts.
static OPENED: std::sync::Mutex<Option<Option<u64>>> = std::sync::Mutex::new(None);

/// Lets a probe open with `budget` where none has opened yet, or with the budget the first
/// opened with; refuses another, which the allocator would not apply (a smaller one would fail
/// the check below, a larger one would be capped at the first without a word). `opened` is
/// set by the caller once its probe has opened.
fn admit(opened: &Option<Option<u64>>, budget: Option<u64>) -> Result<()> {
    let size =
        |b: Option<u64>| b.map_or("no budget".to_string(), |b| format!("a budget of {}", format_bytes(b)));
    match *opened {
        None => Ok(()),
        Some(first) if first == budget => Ok(()),
        Some(first) => bail!(
            "this process opened the GPU with {} and cannot change it to {}: the CUDA caching allocator \
             reads its memory fraction once, as it starts; run each budget in its own oomlab command",
            size(first),
            size(budget)
        ),
    }
}

impl MemoryProbe for CudaProbe {
    fn device(&self) -> tch::Device {
        tch::Device::Cuda(self.index)
    }
    fn name(&self) -> String {
        self.name.clone()
    }
    fn capacity(&self) -> u64 {
        self.total
    }
    fn budget(&self) -> Option<u64> {
        self.budget
    }
    fn snapshot(&self) -> Result<MemSnapshot> {
        let s = self.stats()?;
        Ok(MemSnapshot {
            memory_allocated: s.allocated.max(0) as u64,
            memory_reserved: s.reserved.max(0) as u64,
            max_memory_allocated: s.allocated_peak.max(0) as u64,
            max_memory_reserved: s.reserved_peak.max(0) as u64,
        })
    }
    fn wait(&self) -> Result<()> {
        tch::Cuda::synchronize(self.index as i64);
        Ok(())
    }
    fn reset_peak(&self) -> Result<()> {
        ffi::cuda_reset_peak(self.index as i32).map_err(anyhow::Error::msg)
    }
    fn empty_cache(&self) -> Result<()> {
        tch::Cuda::synchronize(self.index as i64);
        ffi::cuda_empty_cache().map_err(anyhow::Error::msg)
    }
    fn counters(&self) -> Result<Counters> {
        let s = self.stats()?;
        Ok(Counters {
            num_ooms: s.num_ooms.max(0) as u64,
            num_alloc_retries: s.num_alloc_retries.max(0) as u64,
        })
    }
    fn compute_capability(&self) -> Option<(i32, i32)> {
        let cc =
            self.nvml.as_ref()?.device_by_index(self.index as u32).ok()?.cuda_compute_capability().ok()?;
        Some((cc.major, cc.minor))
    }
    fn driver_version(&self) -> Option<String> {
        self.nvml.as_ref()?.sys_driver_version().ok()
    }
    fn device_used(&self) -> Option<u64> {
        let info = self.nvml.as_ref()?.device_by_index(self.index as u32).ok()?.memory_info().ok()?;
        Some(info.used)
    }
}

#[cfg(test)]
mod tests {
    use super::admit;

    /// Before any probe opened, any budget; after, the same one again, and another refused
    /// with both named.
    #[test]
    fn a_process_keeps_the_budget_its_first_probe_opened_with() {
        admit(&None, Some(2 << 30)).unwrap();
        let opened = Some(Some(1 << 30));
        admit(&opened, Some(1 << 30)).unwrap();
        let e = admit(&opened, Some(2 << 30)).unwrap_err().to_string();
        assert!(
            e.contains("1.00 GiB") && e.contains("2.00 GiB") && e.contains("its own oomlab command"),
            "{e}"
        );
        let e = admit(&opened, None).unwrap_err().to_string();
        assert!(e.contains("to no budget"), "{e}");

        let unbudgeted = Some(None);
        admit(&unbudgeted, None).unwrap();
        assert!(admit(&unbudgeted, Some(1 << 30)).is_err());
    }
}
