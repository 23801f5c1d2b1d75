//! Which device a run uses: `auto`, `cpu`, `cuda` or `cuda:N`, as written in a spec or on the
//! command line, and its resolution against what libtorch sees.
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

impl DeviceChoice {
    /// The concrete device; `Auto` asks libtorch whether CUDA is there.
    pub fn resolve(self) -> Result<tch::Device, String> {
        match self {
            DeviceChoice::Cpu => Ok(tch::Device::Cpu),
            DeviceChoice::Auto if tch::Cuda::is_available() => Ok(tch::Device::Cuda(0)),
            DeviceChoice::Auto => Ok(tch::Device::Cpu),
            DeviceChoice::Cuda(n) => {
                let count = tch::Cuda::device_count() as usize;
                if n < count {
                    Ok(tch::Device::Cuda(n))
                } else if count == 0 {
                    Err(format!(
                        "cuda:{n} asked for, but libtorch sees no CUDA device; use --device cpu (or auto)"
                    ))
                } else {
                    Err(format!(
                        "cuda:{n} asked for, but libtorch sees {count} CUDA device(s): cuda:0..cuda:{}",
                        count - 1
                    ))
                }
            }
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
    fn slugs_are_folder_safe() {
        assert_eq!(slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(slug("cpu (AMD EPYC)"), "cpu-amd-epyc");
    }
}
