//! What this host is: its CPU's name and memory (from /proc), the instruction sets oneDNN picks
//! kernels by, and what the CPU has matrix instructions for. libtorch runs bf16 and fp16 on any x86 CPU, but
//! without these it converts to fp32 and back around every kernel (oneDNN's reference paths):
//! measured on a 2-core AMD EPYC (AVX2 only), a ResNet-18 bf16 step took 33x fp32's time per
//! sample and a Transformer encoder's 26x. Memory is the same either way; only time differs, and
//! so whether a spec can afford a low-precision variant (`skip_on_cpu_without`).
use anyhow::{bail, Context, Result};
use serde::Serialize;

/// A low precision that has matrix instructions of its own on some CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HalfPrecision {
    Bf16,
    Fp16,
}

impl HalfPrecision {
    /// The spec's spelling.
    pub fn key(self) -> &'static str {
        match self {
            HalfPrecision::Bf16 => "bf16",
            HalfPrecision::Fp16 => "fp16",
        }
    }

    /// The instructions that do it natively, in words.
    pub fn instructions(self) -> &'static str {
        match self {
            HalfPrecision::Bf16 => "AVX512-BF16 or AMX-BF16",
            HalfPrecision::Fp16 => "AVX512-FP16 or AMX-FP16",
        }
    }
}

/// Which low precisions this CPU has matrix instructions for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuCaps {
    pub bf16: bool,
    pub fp16: bool,
}

/// The text of /proc/cpuinfo, empty where it cannot be read.
pub fn cpuinfo() -> String {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()
}

/// The value of the first line of `info` (/proc/cpuinfo's text) whose key starts with `name`
/// ("model name", "flags"), trimmed; empty where there is none.
pub fn cpuinfo_field<'a>(info: &'a str, name: &str) -> &'a str {
    info.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_once(':')).map_or("", |(_, v)| v.trim())
}

impl CpuCaps {
    /// This machine's CPU, from the flags in /proc/cpuinfo (none where it cannot be read).
    pub fn here() -> CpuCaps {
        CpuCaps::from_cpuinfo(&cpuinfo())
    }

    /// From the text of /proc/cpuinfo: its first `flags` line.
    pub fn from_cpuinfo(info: &str) -> CpuCaps {
        let flags: Vec<&str> = cpuinfo_field(info, "flags").split_whitespace().collect();
        let has = |f: &str| flags.contains(&f);
        CpuCaps { bf16: has("avx512_bf16") || has("amx_bf16"), fp16: has("avx512_fp16") || has("amx_fp16") }
    }

    pub fn has(self, p: HalfPrecision) -> bool {
        match p {
            HalfPrecision::Bf16 => self.bf16,
            HalfPrecision::Fp16 => self.fp16,
        }
    }
}

/// This host's memory (MemTotal), where /proc/meminfo says.
pub fn host_memory() -> Option<u64> {
    meminfo().ok().map(|(total, _)| total)
}

/// (MemAvailable, MemTotal) in bytes: how much memory the host has left, of how much.
pub fn host_available() -> Option<(u64, u64)> {
    meminfo().ok().map(|(total, available)| (available, total))
}

/// (MemTotal, MemAvailable) in bytes, from /proc/meminfo.
pub fn meminfo() -> Result<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    match (field("MemTotal:"), field("MemAvailable:")) {
        (Some(t), Some(a)) => Ok((t, a)),
        _ => bail!("/proc/meminfo has no MemTotal or MemAvailable line"),
    }
}

/// "CPU (AMD EPYC)": the model name from /proc/cpuinfo.
pub fn cpu_name() -> String {
    match cpuinfo_field(&cpuinfo(), "model name") {
        "" => "CPU".to_string(),
        m => format!("CPU ({m})"),
    }
}

/// The vector and matrix extensions oneDNN picks its kernels by, as /proc/cpuinfo names them.
const ISA_FLAGS: [&str; 9] = [
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "amx_fp16",
];

/// "avx2 avx512f avx512_bf16": the extensions of [`ISA_FLAGS`] this CPU has, in that order.
/// Two CPUs of one model name can differ here (a virtual machine's "AMD EPYC" is Zen 2 or
/// Zen 4), and oneDNN's convolution and low-precision buffers with them, so a result names it
/// beside the CPU's name. Empty where /proc/cpuinfo cannot be read.
pub fn isa_here() -> String {
    isa_from_cpuinfo(&cpuinfo())
}

/// [`isa_here`] from the text of /proc/cpuinfo (its first `flags` line).
pub fn isa_from_cpuinfo(info: &str) -> String {
    let flags: Vec<&str> = cpuinfo_field(info, "flags").split_whitespace().collect();
    ISA_FLAGS.iter().filter(|f| flags.contains(f)).copied().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_the_first_lines_value_trimmed() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC \nflags\t\t: fpu avx2\nmodel name\t: other\n";
        assert_eq!(cpuinfo_field(info, "model name"), "AMD EPYC");
        assert_eq!(cpuinfo_field(info, "flags"), "fpu avx2");
        assert_eq!(cpuinfo_field(info, "bogomips"), "");
    }

    #[test]
    fn the_isa_lists_the_extensions_onednn_dispatches_on() {
        let zen2 = "processor\t: 0\nflags\t\t: fpu sse avx f16c avx2 fma\n";
        let zen4 = "flags\t\t: avx avx2 avx512f avx512dq avx512_bf16 avx512_vnni\n";
        assert_eq!(isa_from_cpuinfo(zen2), "avx2");
        assert_eq!(isa_from_cpuinfo(zen4), "avx2 avx512f avx512_vnni avx512_bf16");
        assert_ne!(isa_from_cpuinfo(zen2), isa_from_cpuinfo(zen4), "one model name, two kernels' worth");
        assert_eq!(isa_from_cpuinfo(""), "");
    }

    #[test]
    fn flags_decide_each_precision() {
        let amd = "processor\t: 0\nflags\t\t: fpu avx f16c avx2\n";
        assert_eq!(CpuCaps::from_cpuinfo(amd), CpuCaps { bf16: false, fp16: false });
        let zen4 = "flags\t\t: avx2 avx512f avx512_bf16\n";
        assert_eq!(CpuCaps::from_cpuinfo(zen4), CpuCaps { bf16: true, fp16: false });
        let spr = "flags\t\t: avx512_fp16 amx_bf16 amx_tile\n";
        let caps = CpuCaps::from_cpuinfo(spr);
        assert!(caps.has(HalfPrecision::Bf16) && caps.has(HalfPrecision::Fp16));
        assert_eq!(CpuCaps::from_cpuinfo(""), CpuCaps { bf16: false, fp16: false });
    }
}
