//! Helpers for integration tests: isolated temp folders and spec files.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A temp folder that lives as long as the value; results and specs go inside it.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a spec file and returns its path.
    pub fn spec(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write spec");
        p
    }

    /// The results root.
    pub fn out(&self) -> PathBuf {
        self.path().join("results")
    }
}

/// A tiny synthetic MLP spec trained on CPU; `extra` is appended (e.g. a [sweep] table).
pub fn tiny_spec(name: &str, model: &str, budget: Option<u64>, extra: &str) -> String {
    let budget = budget.map(|b| format!("budget = \"{b}\"\n")).unwrap_or_default();
    format!(
        r#"[experiment]
name = "{name}"

[model]
{model}

[data]
samples = 32
features = 32
classes = 4

[training]
optimizer = "sgd"
lr = 0.01
batch_size = 4
steps = 1

[run]
device = "cpu"
{budget}{extra}
"#
    )
}
