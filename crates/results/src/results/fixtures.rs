//! Fixtures for unit tests of whatever reads results (comparison, claims, figures, merge): a
//! manifest as a run writes one.
use super::manifest::{DeviceInfo, HostInfo, Versions};
use super::Manifest;
use crate::revision::GitInfo;

pub const GIB: u64 = 1 << 30;

pub fn manifest(experiment: &str, device: &str, budget: Option<u64>, capacity: u64) -> Manifest {
    Manifest {
        experiment: experiment.into(),
        spec_path: format!("experiments/{experiment}.toml"),
        spec_file: None,
        // A spec that parses, as every manifest's must to be read back.
        spec_source: format!(
            "[experiment]\nname = \"{experiment}\"\n[model]\nhidden = 8\ndepth = 1\n[data]\nsamples = 8\n\
             features = 4\nclasses = 2\n[training]\noptimizer = \"adam\"\nbatch_size = 4\nsteps = 1\n"
        ),
        spec: serde_json::json!({"description": "How deep before out of memory?"}),
        device: DeviceInfo {
            requested: crate::device::DeviceChoice::Auto,
            resolved: crate::device::RunDevice::Cuda(0),
            name: device.into(),
            slug: crate::device::slug(device),
            capacity_bytes: capacity,
            budget_bytes: budget,
            budget_mechanism: None,
        },
        versions: Versions {
            oomlab: "0.1.0".into(),
            tch: "0.24.0".into(),
            libtorch: "2.11.0".into(),
            libtorch_path: None,
            cuda_runtime: None,
            nvidia_driver: None,
        },
        git: GitInfo { revision: Some("0123456789abcdef".into()), dirty: Some(false) },
        host: HostInfo {
            hostname: "h".into(),
            os: "linux".into(),
            cpu: "cpu".into(),
            cpu_isa: None,
            torch_threads: 1,
            huge_pages: None,
        },
        command: vec!["oomlab".into()],
        started_at: "2025-01-01T00:00:00Z".into(),
        finished_at: None,
        status: crate::results::RunStatus::Complete,
        trials: 0,
        answers: Vec::new(),
        num_ooms: None,
        num_alloc_retries: None,
        workspace: None,
        data_location: None,
        trace: None,
        timings: None,
        resumed_at: Vec::new(),
        shard: None,
        shards: Vec::new(),
        not_run: Vec::new(),
        inputs: Vec::new(),
        outputs: None,
    }
}
