//! `oomlab advise` through the real binary, for the tests of advise: its cache in the sandbox.
use assert_cmd::Command;
use serde_json::Value;

use super::{tiny_spec, Sandbox};

pub fn oomlab(sb: &Sandbox) -> Command {
    let mut c = super::oomlab();
    c.current_dir(sb.path()).env("OOMLAB_CACHE", sb.path().join("cache"));
    c
}

/// Runs advise, expecting success, and returns its JSON.
pub fn advise_json(sb: &Sandbox, args: &[&str]) -> Value {
    let out = oomlab(sb).arg("advise").args(args).arg("--json").arg("-q").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "advise {args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

pub fn stderr_of(sb: &Sandbox, args: &[&str]) -> String {
    let out = oomlab(sb).arg("advise").args(args).output().unwrap();
    assert!(!out.status.success(), "advise {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Three hidden layers of 64, Adam, batch 32: its peak is about 200 KiB.
pub fn spec(sb: &Sandbox, budget: &str) -> String {
    let text = tiny_spec("adv", "hidden = 64\ndepth = 3", None, &format!("budget = \"{budget}\"\n"))
        .replace("optimizer = \"sgd\"", "optimizer = \"adam\"")
        .replace("batch_size = 4", "batch_size = 32")
        .replace("steps = 1", "steps = 2");
    sb.spec("adv.toml", &text).display().to_string()
}
