//! `estimate`'s kernel profiles kept on disk (`kernel-profiles.json` in `$OOMLAB_CACHE`): each
//! op measured once per machine, read back by the next call, and never taken from another
//! machine, libtorch or revision. What the cache holds is shown to be used by changing it.
use crate::common;

use common::Sandbox;
use serde_json::Value;

const SPEC: &str = "[experiment]\nname = \"cached\"\n[model]\nkind = \"cnn\"\narch = \"resnet18\"\n\
[data]\nkind = \"images\"\nchannels = 3\nsize = 16\nsamples = 32\nclasses = 4\n\
[training]\noptimizer = \"adam\"\nbatch_size = 8\nsteps = 2\n[run]\ndevice = \"cpu\"\n";

fn estimate(sb: &Sandbox, spec: &std::path::Path) -> String {
    estimate_said(sb, spec).0
}

/// What `estimate` printed, and whether it said it was measuring kernels (on stderr).
fn estimate_said(sb: &Sandbox, spec: &std::path::Path) -> (String, bool) {
    let out = common::oomlab()
        .env("OOMLAB_CACHE", sb.path().join("cache"))
        .args(["estimate", spec.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr.contains("measuring this CPU's convolution"))
}

/// Every allocation a stored profile makes, made 1 GiB larger.
fn inflate(stored: &mut Value) {
    for entry in stored["entries"].as_array_mut().unwrap() {
        for event in entry[1]["events"].as_array_mut().unwrap() {
            if let Some(a) = event.get_mut("Alloc").and_then(|alloc| alloc.get_mut("a")) {
                *a = Value::from(a.as_i64().unwrap() + (1 << 30));
            }
        }
    }
}

#[test]
fn kernel_profiles_are_measured_once_per_machine_and_checked() {
    let sb = Sandbox::new();
    let spec = sb.spec("cached.toml", SPEC);
    let file = sb.path().join("cache").join("kernel-profiles.json");
    let (first, said) = estimate_said(&sb, &spec);
    assert!(said, "a cold estimate says why it takes a while");
    let git = oomlab::revision::git_info();
    if git.dirty != Some(false) {
        // The binary's code may differ from the revision it names: nothing is kept.
        assert!(!file.exists(), "a build from a tree with changes keeps no profiles on disk");
        return;
    }
    assert_eq!(
        estimate_said(&sb, &spec),
        (first.clone(), false),
        "a warm one measures nothing, so says nothing"
    );
    let read = || -> Value { serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap() };
    let stored = read();
    let machine = stored["machine"].as_str().unwrap().to_string();
    assert!(machine.contains("libtorch 2.11") && machine.contains(&git.revision.unwrap()), "{machine}");
    assert!(!stored["entries"].as_array().unwrap().is_empty(), "a ResNet's convolutions were profiled");
    assert_eq!(estimate(&sb, &spec), first, "read back, the same estimate");

    // The stored profiles are what the next call uses: made larger, the estimate grows.
    let mut inflated = stored.clone();
    inflate(&mut inflated);
    std::fs::write(&file, inflated.to_string()).unwrap();
    assert_ne!(estimate(&sb, &spec), first, "the stored profiles are used");

    // But not another machine's: the same inflated profiles under another name are measured
    // afresh, and the file is this machine's again.
    inflated["machine"] = Value::from(format!("another CPU | {machine}"));
    std::fs::write(&file, inflated.to_string()).unwrap();
    assert_eq!(estimate(&sb, &spec), first, "another machine's profiles are not used");
    assert_eq!(read()["machine"], Value::from(machine));
    // Nor a damaged file.
    std::fs::write(&file, "{ not json").unwrap();
    assert_eq!(estimate(&sb, &spec), first);
}
