//! Where a result was made: the machine, the versions and the source revision, gathered in one
//! place for every file that records them (a run's manifest, the bench's BENCH.md, advise's
//! advice.json). Each file keeps its own field names, so that committed results still read; what
//! they record is gathered here once.
use crate::revision::{git_info, GitInfo};

/// This process's machine, versions and revision.
#[derive(Debug, Clone)]
pub struct Provenance {
    /// The host's name.
    pub hostname: String,
    /// "linux x86_64".
    pub os: String,
    /// "CPU (AMD EPYC)": the model name from /proc/cpuinfo.
    pub cpu: String,
    /// "avx2 avx512f avx512_bf16": its extensions that oneDNN picks kernels by.
    pub cpu_isa: String,
    /// libtorch's intra-op threads.
    pub torch_threads: i32,
    /// Whether CPU tensors could be huge pages (`crate::hugepages::describe`).
    pub huge_pages: String,
    pub oomlab: &'static str,
    pub tch: &'static str,
    pub libtorch: String,
    pub git: GitInfo,
    /// The command line, as typed.
    pub command: Vec<String>,
}

impl Provenance {
    pub fn here() -> Provenance {
        Provenance {
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            cpu: crate::device::cpu_name(),
            cpu_isa: crate::device::cpu_isa(),
            torch_threads: tch::get_num_threads(),
            huge_pages: crate::hugepages::describe(),
            oomlab: env!("CARGO_PKG_VERSION"),
            tch: crate::ffi::TCH_VERSION,
            libtorch: crate::ffi::torch_version(),
            git: git_info(),
            command: std::env::args().collect(),
        }
    }
}
