//! Results on disk, one folder per device and experiment:
//! `results/<device-slug>/<experiment>/{manifest.json, trace.csv, summary.csv, *.png, *.svg}`.
//!
//! Exporters see records as they happen and flush after every trial, so a run killed mid-sweep
//! leaves every completed trial readable. Comparing runs is reading two such folders.
mod csv_out;
pub mod experiment;
mod lock;
pub mod manifest;
pub mod perfetto;
pub mod timings;

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::schema::{PhaseRecord, SummaryRow};
pub use csv_out::{SummaryCsv, TraceCsv};
pub use experiment::ExperimentDir;
pub use lock::{DirLock, LOCK};
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

/// Makes the results folder for a run and locks it for this process. The lock comes first, so
/// that of two runs to one folder only one checks, clears and writes it. An existing folder
/// with results in it is refused unless `force`, in which case its old contents are removed
/// first, so no stale file survives.
pub fn prepare_dir(dir: &Path, force: bool) -> Result<DirLock> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is not a folder; give --out a folder to write results under", dir.display());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = DirLock::acquire(dir)?;
    let has_results = [TRACE, SUMMARY, MANIFEST].iter().any(|f| dir.join(f).exists());
    if has_results {
        if !force {
            bail!(
                "{} already holds results; pass --force to replace them, or --out DIR to write elsewhere",
                dir.display()
            );
        }
        let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let path = e?.path();
            if path.file_name() == Some(std::ffi::OsStr::new(LOCK)) {
                continue;
            }
            let removed = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
            removed.with_context(|| format!("removing old results {}", path.display()))?;
        }
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_results_need_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cpu/exp");
        drop(prepare_dir(&dir, false).unwrap());
        fs::write(dir.join(SUMMARY), "old").unwrap();
        fs::write(dir.join("stale.png"), "old").unwrap();
        let err = prepare_dir(&dir, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "refusing must not touch the old results");
        let held = prepare_dir(&dir, true).unwrap();
        assert!(!dir.join(SUMMARY).exists() && !dir.join("stale.png").exists());
        fs::write(dir.join(SUMMARY), "another run's").unwrap();
        let err = prepare_dir(&dir, true).unwrap_err().to_string();
        assert!(err.contains("another oomlab run"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "--force never clears a folder another run holds");
        drop(held);
        let file = tmp.path().join("a-file");
        fs::write(&file, "").unwrap();
        let err = prepare_dir(&file, false).unwrap_err().to_string();
        assert!(err.contains("is not a folder"), "{err}");
    }
}
