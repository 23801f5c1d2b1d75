//! `oomlab devices`: what libtorch sees here.
use anyhow::Result;
use bytesize::ByteSize;

use crate::device::cpu_name;
use crate::ffi;
use crate::probe::{CudaProbe, MemoryProbe};

pub fn print() -> Result<()> {
    say!("libtorch {} (headers built against)", ffi::torch_version());
    if let Some(path) = ffi::libtorch_path() {
        say!("  loaded from {path}");
    }
    say!("  CUDA runtime in libtorch: {}", ffi::cuda_runtime_version().unwrap_or_else(|| "none".into()));
    say!("  threads: {}", tch::get_num_threads());
    say!();
    say!("cpu      {}", cpu_name());
    // What a CPU run's budget is held against (the estimate notes a budget above the total).
    match crate::device::host_available() {
        Some((available, total)) => say!(
            "         memory: {} total, {} available",
            ByteSize::b(total).display().iec(),
            ByteSize::b(available).display().iec()
        ),
        None => say!("         memory: unknown (no /proc/meminfo)"),
    }
    let n = crate::libtorch::cuda::devices();
    if let Some(why) = crate::libtorch::cuda::load_error() {
        say!("cuda     libtorch_cuda would not load: {why}");
    } else if n == 0 {
        say!("cuda     none seen (no GPU, or no driver): runs use the CPU");
    }
    for i in 0..n {
        match CudaProbe::new(i, None) {
            Ok(p) => {
                let used = p
                    .device_used()
                    .map(|u| format!(", {} used", ByteSize::b(u).display().iec()))
                    .unwrap_or_default();
                say!("cuda:{i:<3} {}: {} total{used}", p.name(), ByteSize::b(p.capacity()).display().iec());
                if let Some(d) = p.driver_version() {
                    say!("         driver {d}");
                }
            }
            Err(e) => say!("cuda:{i:<3} cannot be read: {e:#}"),
        }
    }
    Ok(())
}
