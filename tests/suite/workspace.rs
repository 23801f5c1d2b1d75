//! A GPU keeps cuBLAS workspaces for the life of the process, made at the first matrix products.
//! Played on the CPU (the real trainer and counting allocator, plus bytes that appear at the
//! first allocation and stay), a sweep must run every trial with the workspace in each baseline,
//! and a genuine leak must still stop the run.
use crate::common;

use common::{tiny_spec, Sandbox};
use oomlab::probe::fake::PlayedWorkspace;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{run_on, RunOptions};
use oomlab::schema::Status;

const WORKSPACE: u64 = 68_157_440; // the H100's 65 MiB

fn five_trial_sweep(sb: &Sandbox) -> oomlab::spec::Spec {
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3, 4, 5]\n";
    let path = sb.spec("ws.toml", &tiny_spec("ws", "hidden = 32", None, sweep));
    oomlab::spec::load(&path).unwrap()
}

fn options(sb: &Sandbox) -> RunOptions {
    RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() }
}

#[test]
fn a_persistent_workspace_is_baseline_not_a_leak() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let spec = five_trial_sweep(&sb);
    let probe = PlayedWorkspace::new(WORKSPACE, 0).unwrap();
    let report = run_on(&Plan::new(spec, Overrides::default(), false), &options(&sb), &probe).unwrap();
    assert_eq!(report.rows.len(), 5);
    for row in &report.rows {
        assert_eq!(row.status, Status::Ok, "{row:?}");
        assert_eq!(row.baseline_allocated, WORKSPACE, "trial {}", row.trial);
        assert_eq!(row.after_allocated, WORKSPACE, "trial {}", row.trial);
        assert!(row.max_memory_allocated > WORKSPACE);
    }
    let ws = report.manifest.workspace.expect("the manifest records the workspace");
    assert_eq!((ws.allocated_bytes, ws.reserved_bytes), (WORKSPACE, WORKSPACE));
    // The written manifest says so too.
    let text = std::fs::read_to_string(report.dir.join("manifest.json")).unwrap();
    let written: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(written["workspace"]["allocated_bytes"], WORKSPACE);
    assert_eq!(written["status"], "complete");
    let location = written["data_location"].as_str().unwrap();
    assert!(location.starts_with("host: on the CPU") && location.contains("same memory"), "{location}");
}

#[test]
fn a_genuine_leak_still_stops_the_run() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let spec = five_trial_sweep(&sb);
    let probe = PlayedWorkspace::new(WORKSPACE, 4096).unwrap();
    let Err(err) = run_on(&Plan::new(spec, Overrides::default(), false), &options(&sb), &probe) else {
        panic!("a run whose trials leak must fail");
    };
    let msg = format!("{err:#}");
    assert!(msg.contains("trial 1 (depth 1) leaked 4.0 KiB"), "{msg}");
    let summary = std::fs::read_to_string(sb.out().join("played-workspace/ws/summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 2, "the leaking trial's row is kept, no more ran");
}
