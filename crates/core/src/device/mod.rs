//! Which device a run uses: `auto`, `cpu`, `cuda` or `cuda:N`, as written in a spec or on the
//! command line, and its resolution against what libtorch sees; and what the CPU is (`cpu`: its
//! name's source, its instruction sets, the half precisions it has matrix instructions for),
//! which the spec, the probes and the estimate all read.

mod cpu;

pub use cpu::{
    cpu_name, cpuinfo, cpuinfo_field, host_available, host_memory, isa_here as cpu_isa, meminfo, CpuCaps,
    HalfPrecision,
};

use std::fmt;
use std::str::FromStr;

/// A device as the user asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// CUDA device 0 when libtorch sees a GPU, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a device: use auto, cpu, cuda or cuda:N (N = 0, 1, ...)");
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            _ => {
                let n = s.strip_prefix("cuda:").ok_or_else(bad)?;
                n.parse().map(DeviceChoice::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The device a run used: the CPU or CUDA device N (what `auto` and `cuda` resolve to). Written
/// `cpu` or `cuda:N`, and only those are read back: readers ask one question of it, CPU or GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunDevice {
    Cpu,
    Cuda(usize),
}

impl RunDevice {
    /// The device libtorch runs on (anything but CUDA is the CPU here).
    pub fn of(device: tch::Device) -> RunDevice {
        match device {
            tch::Device::Cuda(i) => RunDevice::Cuda(i),
            _ => RunDevice::Cpu,
        }
    }

    pub fn is_cuda(self) -> bool {
        matches!(self, RunDevice::Cuda(_))
    }
}

impl fmt::Display for RunDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunDevice::Cpu => f.write_str("cpu"),
            RunDevice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for RunDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("cuda:").map(str::parse::<u32>) {
            _ if s == "cpu" => Ok(RunDevice::Cpu),
            Some(Ok(n)) => Ok(RunDevice::Cuda(n as usize)),
            _ => Err(format!("{s:?} is not a device a run uses (\"cpu\" or \"cuda:N\")")),
        }
    }
}

/// Serde as the words a person writes (`Display` out, `FromStr` in), so that files say `cuda:0`.
macro_rules! serde_as_text {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_text!(DeviceChoice);
serde_as_text!(RunDevice);

impl DeviceChoice {
    /// The concrete device on a machine with `cuda_devices` CUDA devices: `auto` is `cuda:0`
    /// where there is one, else the CPU; `cuda:N` must exist.
    pub fn resolve(self, cuda_devices: usize) -> Result<tch::Device, String> {
        match self {
            DeviceChoice::Cpu => Ok(tch::Device::Cpu),
            DeviceChoice::Auto if cuda_devices > 0 => Ok(tch::Device::Cuda(0)),
            DeviceChoice::Auto => Ok(tch::Device::Cpu),
            DeviceChoice::Cuda(n) if n < cuda_devices => Ok(tch::Device::Cuda(n)),
            DeviceChoice::Cuda(n) if cuda_devices == 0 => Err(format!(
                "cuda:{n} asked for, but libtorch sees no CUDA device; use --device cpu (or auto)"
            )),
            DeviceChoice::Cuda(n) => Err(format!(
                "cuda:{n} asked for, but libtorch sees {cuda_devices} CUDA device(s): cuda:0..cuda:{}",
                cuda_devices - 1
            )),
        }
    }
}

/// A folder name for a device: lower case, `[a-z0-9-]` only ("nvidia-h100-80gb-hbm3", "cpu-amd-epyc").
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!("cpu".parse(), Ok(DeviceChoice::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceChoice::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceChoice::Cuda(3)));
        assert!("gpu".parse::<DeviceChoice>().unwrap_err().contains("cuda:N"));
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn resolves_against_the_devices_there_are() {
        use tch::Device;
        assert_eq!(DeviceChoice::Auto.resolve(0), Ok(Device::Cpu));
        assert_eq!(DeviceChoice::Auto.resolve(2), Ok(Device::Cuda(0)));
        assert_eq!(DeviceChoice::Cpu.resolve(4), Ok(Device::Cpu));
        assert_eq!(DeviceChoice::Cuda(0).resolve(1), Ok(Device::Cuda(0)));
        assert_eq!(DeviceChoice::Cuda(3).resolve(4), Ok(Device::Cuda(3)));
        let none = DeviceChoice::Cuda(0).resolve(0).unwrap_err();
        assert!(none.contains("no CUDA device") && none.contains("--device cpu"), "{none}");
        let past = DeviceChoice::Cuda(2).resolve(2).unwrap_err();
        assert!(past.contains("sees 2 CUDA device(s): cuda:0..cuda:1"), "{past}");
    }

    #[test]
    fn slugs_are_folder_safe() {
        assert_eq!(slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(slug("cpu (AMD EPYC)"), "cpu-amd-epyc");
    }
}
