//! Huge pages for CPU tensors (`THP_MEM_ALLOC_ENABLE`, on unless the environment says) change a
//! step's page faults, never its memory: the same trial with and without has the same bytes in
//! every phase, and each manifest records which it ran with.
use crate::common;

use std::path::{Path, PathBuf};

use common::{tiny_spec, untimed_csv, Sandbox};
use oomlab::results::manifest::Manifest;

/// Runs `spec` with the variable set to `value` (`None`: removed) into its own root.
fn run(sb: &Sandbox, spec: &Path, root: &str, value: Option<&str>) -> PathBuf {
    let out = sb.path().join(root);
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["run", spec.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    match value {
        Some(v) => cmd.env(oomlab::hugepages::VAR, v),
        None => cmd.env_remove(oomlab::hugepages::VAR),
    };
    let status = cmd.status().expect("oomlab runs");
    assert!(status.success(), "{root}");
    std::fs::read_dir(&out).unwrap().next().unwrap().unwrap().path().join("pages")
}

#[test]
fn huge_pages_change_no_byte_and_the_manifest_says_which() {
    let sb = Sandbox::new();
    // 1024 x 1024 weights and [512, 1024] activations: 4 MiB and 2 MiB tensors, past the
    // 2 MiB from which c10 asks for huge pages.
    let text = tiny_spec("pages", "hidden = 1024\ndepth = 2", None, "")
        .replace("samples = 32\nfeatures = 32", "samples = 512\nfeatures = 1024")
        .replace("batch_size = 4\nsteps = 1", "batch_size = 512\nsteps = 2");
    let spec = sb.spec("pages.toml", &text);
    let on = run(&sb, &spec, "on", Some("1"));
    let off = run(&sb, &spec, "off", Some("0"));
    let default = run(&sb, &spec, "default", None);
    let memory = |dir: &Path| {
        let trace = untimed_csv(dir, "trace.csv");
        assert!(trace.len() > 10, "{trace:?}");
        trace
    };
    assert_eq!(memory(&on), memory(&off), "huge pages changed a byte");
    assert_eq!(memory(&default), memory(&on));
    let pages = |dir: &Path| Manifest::read(dir).unwrap().host.huge_pages.unwrap_or_default();
    assert!(pages(&on).starts_with("THP_MEM_ALLOC_ENABLE=1, kernel"), "{}", pages(&on));
    assert!(pages(&off).starts_with("THP_MEM_ALLOC_ENABLE=0, kernel"), "{}", pages(&off));
    assert!(
        pages(&default).starts_with("THP_MEM_ALLOC_ENABLE=1, kernel"),
        "on unless set: {}",
        pages(&default)
    );
}
