//! Which of the CPU's matrix products run in oneDNN, whose scratch buffers the estimate leaves
//! out.
//!
//! libtorch hands a CPU matrix product (`addmm`, `mm`) to oneDNN when its dtype is one oneDNN
//! serves on this CPU and it is not tiny: bf16 on every x86 CPU libtorch builds for, fp16 only
//! on CPUs with AVX512-FP16 (Sapphire Rapids and later; `ideep::has_fp16_type_support`).
//! Elsewhere fp16 products run ATen's own kernels, which allocate only their output, and the
//! estimate is exact. oneDNN allocates one scratch buffer through the CPU allocator for each
//! product, from tens of KiB to a few MiB by the shapes, the threads and the CPU's blocking (on
//! this Xeon an fp16 `[512, 512] x [512, 512]` took 1.4 MiB, bf16 258 KiB): the estimate falls
//! short of a measured peak by at most one such buffer.
use crate::spec::Amp;

/// Whether `amp`'s matrix products run in oneDNN on this CPU.
pub fn lowp_matmul(amp: &Amp) -> bool {
    match amp {
        Amp::Off => false,
        Amp::Bf16 => true,
        Amp::Fp16 { .. } => fp16_kernels(),
    }
}

/// The CPU has AVX512-FP16, which every CPU with AMX-FP16 has too.
fn fp16_kernels() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512fp16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
