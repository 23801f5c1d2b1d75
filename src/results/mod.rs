//! Results on disk, one folder per device and experiment:
//! `results/<device-slug>/<experiment>/{manifest.json, trace.csv, summary.csv, *.png, *.svg}`.
//!
//! Exporters see records as they happen and flush after every trial, so a run killed mid-sweep
//! leaves every completed trial readable. Comparing runs is reading two such folders.
mod csv_out;
pub mod experiment;
pub mod manifest;
pub mod perfetto;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::schema::{PhaseRecord, SummaryRow};
pub use csv_out::{SummaryCsv, TraceCsv};
pub use experiment::ExperimentDir;
pub use manifest::Manifest;
pub use perfetto::PerfettoTrace;

pub const TRACE: &str = "trace.csv";
pub const SUMMARY: &str = "summary.csv";
pub const MANIFEST: &str = "manifest.json";

/// Something that writes records as a run produces them.
pub trait Exporter {
    fn phase(&mut self, _record: &PhaseRecord) -> Result<()> {
        Ok(())
    }
    /// Called when a trial ends; its rows must be on disk when this returns.
    fn trial(&mut self, _row: &SummaryRow) -> Result<()> {
        Ok(())
    }
}

/// Makes the results folder for a run. An existing folder with results in it is refused unless
/// `force`, in which case its old contents are removed first, so no stale file survives.
pub fn prepare_dir(dir: &Path, force: bool) -> Result<PathBuf> {
    let has_results = [TRACE, SUMMARY, MANIFEST].iter().any(|f| dir.join(f).exists());
    if has_results {
        if !force {
            bail!(
                "{} already holds results; pass --force to replace them, or --out DIR to write elsewhere",
                dir.display()
            );
        }
        fs::remove_dir_all(dir).with_context(|| format!("removing old results in {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_results_need_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cpu/exp");
        prepare_dir(&dir, false).unwrap();
        fs::write(dir.join(SUMMARY), "old").unwrap();
        fs::write(dir.join("stale.png"), "old").unwrap();
        let err = prepare_dir(&dir, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "refusing must not touch the old results");
        prepare_dir(&dir, true).unwrap();
        assert!(!dir.join(SUMMARY).exists() && !dir.join("stale.png").exists());
    }
}
