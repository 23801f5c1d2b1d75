//! What libtorch 2.11 keeps on a GPU for the life of the process, as the estimate models it
//! (`aten/src/ATen/cuda/CublasHandlePool.cpp`; checked against the 2.11.0 wheel's binary):
//!
//! - a cuBLAS workspace per (handle, stream), made through the caching allocator at a handle's
//!   first use: 32 MiB on compute capability 9.0 (H100, H200), 8,519,680 bytes (4096 KiB x 2 +
//!   16 KiB x 8) on every other GPU, or what `CUBLAS_WORKSPACE_CONFIG` (`:SIZE_KiB:COUNT`...)
//!   says;
//! - a cuBLASLt workspace per handle, 1 MiB (`CUBLASLT_WORKSPACE_SIZE`, KiB, capped at the
//!   cuBLAS one; shared with it under `TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`), made at the first
//!   `addmm` with a bias (a Linear's forward);
//! - handles are per thread: the main thread runs the forward, the autograd engine's device
//!   thread the backward (its own cuBLAS workspace; a checkpointed backward's recompute also
//!   makes its cuBLASLt one).
//!
//! On an H100 a training run keeps 32 + 1 + 32 = 65 MiB (68,157,440 bytes), a forward-only one
//! 33 MiB: as measured. The run's warm-up (`train::warmup`) makes them all before the first
//! trial, so the estimate starts every trial with them in place.
use serde::Serialize;

use crate::spec::{Config, Mode};

const MIB: u64 = 1 << 20;

/// The GPU generation, as far as libtorch's workspace sizes depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuArch {
    /// Compute capability 9.0: H100, H200.
    #[default]
    Hopper,
    /// Any other: Volta, Turing, Ampere, Ada, Blackwell.
    Other,
}

impl GpuArch {
    /// From a CUDA compute capability.
    pub fn from_capability(major: i32, minor: i32) -> Self {
        if (major, minor) == (9, 0) {
            GpuArch::Hopper
        } else {
            GpuArch::Other
        }
    }

    /// A GPU or generation name, for `estimate --gpu`.
    pub fn parse(name: &str) -> Result<Self, String> {
        NamedGpu::parse(name).map(|g| g.arch)
    }

    /// The generation of a GPU from its name as a manifest records it ("NVIDIA H100 80GB HBM3"),
    /// for reading a run whose compute capability was not kept.
    pub fn from_device_name(name: &str) -> Self {
        let upper = name.to_ascii_uppercase();
        if ["H100", "H200", "GH200"].iter().any(|m| upper.contains(m)) {
            GpuArch::Hopper
        } else {
            GpuArch::Other
        }
    }

    /// The cuBLAS workspace of one handle, in bytes.
    pub fn cublas_workspace(self) -> u64 {
        if let Some(configured) = std::env::var("CUBLAS_WORKSPACE_CONFIG").ok().and_then(|v| parse_config(&v))
        {
            return configured;
        }
        match self {
            GpuArch::Hopper => 32 * MIB,
            GpuArch::Other => 4096 * 1024 * 2 + 16 * 1024 * 8,
        }
    }

    /// The cuBLASLt workspace of one handle, in bytes (0 when it shares the cuBLAS one).
    pub fn cublaslt_workspace(self) -> u64 {
        if std::env::var("TORCH_CUBLASLT_UNIFIED_WORKSPACE").is_ok_and(|v| v == "1") {
            return 0;
        }
        let kib = std::env::var("CUBLASLT_WORKSPACE_SIZE").ok().and_then(|v| v.trim().parse::<u64>().ok());
        (kib.unwrap_or(1024) * 1024).min(self.cublas_workspace())
    }
}

/// A GPU named with `--gpu`: its generation, and the most memory any card sold under that name
/// has, to tell a budget no such card can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedGpu {
    pub arch: GpuArch,
    /// As the user wrote it, lower-cased ("h100").
    pub name: &'static str,
    /// In GB as the cards are sold (the H100 NVL's 94, not the SXM's 80); `None` for a
    /// generation (`hopper`, `other`).
    pub most_memory_gb: Option<u64>,
}

/// Every name `--gpu` takes: (name, generation, the largest card's memory in GB).
const GPUS: &[(&str, GpuArch, Option<u64>)] = &[
    ("h100", GpuArch::Hopper, Some(94)),
    ("h200", GpuArch::Hopper, Some(141)),
    ("gh200", GpuArch::Hopper, Some(144)),
    ("hopper", GpuArch::Hopper, None),
    ("sm90", GpuArch::Hopper, None),
    ("a100", GpuArch::Other, Some(80)),
    ("a10", GpuArch::Other, Some(24)),
    ("a40", GpuArch::Other, Some(48)),
    ("v100", GpuArch::Other, Some(32)),
    ("t4", GpuArch::Other, Some(16)),
    ("l4", GpuArch::Other, Some(24)),
    ("l40", GpuArch::Other, Some(48)),
    ("l40s", GpuArch::Other, Some(48)),
    ("rtx4090", GpuArch::Other, Some(24)),
    ("rtx3090", GpuArch::Other, Some(24)),
    ("b200", GpuArch::Other, Some(192)),
    ("b100", GpuArch::Other, Some(192)),
    ("gb200", GpuArch::Other, Some(192)),
    ("other", GpuArch::Other, None),
];

impl NamedGpu {
    pub fn parse(name: &str) -> Result<Self, String> {
        let lower = name.to_ascii_lowercase();
        GPUS.iter()
            .find(|(n, ..)| *n == lower)
            .map(|&(name, arch, most_memory_gb)| NamedGpu { arch, name, most_memory_gb })
            .ok_or_else(|| {
                format!(
                    "`{name}` is not a GPU oomlab knows: use h100 or h200 (Hopper, 32 MiB cuBLAS workspaces), or \
                     a100, v100, t4, l4, l40s, rtx4090, b200 or `other` (8.125 MiB)"
                )
            })
    }

    /// Whether `budget` is more than any card of this name has. Compared in GiB, which is more
    /// than the GB the cards are sold by, so that no card of the name is ever wrongly excluded.
    pub fn cannot_give(&self, budget: u64) -> bool {
        self.most_memory_gb.is_some_and(|gb| budget > gb * 1024 * MIB)
    }
}

/// `CUBLAS_WORKSPACE_CONFIG`: the sum of SIZE KiB x COUNT over its `:SIZE:COUNT` pairs; `None`
/// when it has none.
fn parse_config(text: &str) -> Option<u64> {
    let numbers: Vec<u64> = text.split(':').skip(1).map(|n| n.trim().parse().ok()).collect::<Option<_>>()?;
    if numbers.is_empty() || !numbers.len().is_multiple_of(2) {
        return None;
    }
    Some(numbers.chunks(2).map(|p| p[0] * 1024 * p[1]).sum())
}

/// The workspaces a run keeps, in the order its warm-up makes them; 0 where a run makes none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Workspaces {
    /// The main thread's cuBLAS workspace (the forward's products).
    pub main_cublas: u64,
    /// The main thread's cuBLASLt workspace (the forward's Linear with bias).
    pub main_cublaslt: u64,
    /// The autograd thread's cuBLAS workspace (the backward's products).
    pub backward_cublas: u64,
    /// The autograd thread's cuBLASLt workspace (a checkpointed segment's recompute).
    pub backward_cublaslt: u64,
}

impl Workspaces {
    /// What a run of these configurations keeps after its warm-up, on a GPU of `arch`.
    pub fn for_run<'a>(arch: GpuArch, configs: impl IntoIterator<Item = &'a Config>) -> Self {
        let (mut backward, mut recompute) = (false, false);
        for c in configs {
            let trains = c.training.techniques.mode == Mode::Train;
            backward |= trains;
            // `{ sequential = 1 }` checkpoints nothing: no recompute.
            recompute |= trains && c.training.techniques.checkpoint.segments(c.model.units()).is_some();
        }
        let (cublas, lt) = (arch.cublas_workspace(), arch.cublaslt_workspace());
        Workspaces {
            main_cublas: cublas,
            main_cublaslt: lt,
            backward_cublas: if backward { cublas } else { 0 },
            backward_cublaslt: if recompute { lt } else { 0 },
        }
    }

    /// The sizes, in the order they are made.
    pub fn in_order(&self) -> impl Iterator<Item = u64> {
        [self.main_cublas, self.main_cublaslt, self.backward_cublas, self.backward_cublaslt].into_iter()
    }

    pub fn total(&self) -> u64 {
        self.in_order().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_device_name_gives_its_generation() {
        assert_eq!(GpuArch::from_device_name("NVIDIA H100 80GB HBM3"), GpuArch::Hopper);
        assert_eq!(GpuArch::from_device_name("NVIDIA H200"), GpuArch::Hopper);
        assert_eq!(GpuArch::from_device_name("Tesla T4"), GpuArch::Other);
    }

    #[test]
    fn a_budget_past_every_card_of_a_name_is_told() {
        let t4 = NamedGpu::parse("T4").unwrap();
        assert!(!t4.cannot_give(15 * 1024 * MIB), "the lesson's 15.90 GiB fits a 16 GB card's name");
        assert!(t4.cannot_give(40 * 1024 * MIB));
        assert!(!NamedGpu::parse("h100").unwrap().cannot_give(90 * 1024 * MIB), "the H100 NVL has 94 GB");
        assert!(!NamedGpu::parse("hopper").unwrap().cannot_give(u64::MAX), "a generation names no card");
    }

    #[test]
    fn parses_libtorchs_workspace_config() {
        assert_eq!(parse_config(":4096:8"), Some(32 * MIB));
        assert_eq!(parse_config(":4096:2:16:8"), Some(8_519_680));
        assert_eq!(parse_config(":16:8"), Some(128 * 1024));
        assert_eq!(parse_config("junk"), None);
        assert_eq!(parse_config(":4096"), None);
    }

    #[test]
    fn names_and_capabilities() {
        assert_eq!(GpuArch::parse("H100"), Ok(GpuArch::Hopper));
        assert_eq!(GpuArch::parse("a100"), Ok(GpuArch::Other));
        assert!(GpuArch::parse("tpu").unwrap_err().contains("h100"));
        // Every name the error suggests is one that parses.
        for name in ["h100", "h200", "a100", "v100", "t4", "l4", "l40s", "rtx4090", "b200", "other"] {
            assert!(NamedGpu::parse(name).is_ok(), "{name}");
        }
        assert_eq!(GpuArch::from_capability(9, 0), GpuArch::Hopper);
        assert_eq!(GpuArch::from_capability(10, 0), GpuArch::Other);
        assert_eq!(GpuArch::from_capability(8, 0), GpuArch::Other);
    }
}
