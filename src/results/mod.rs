//! Results on disk, one folder per device and experiment:
//! `results/<device-slug>/<experiment>/{manifest.json, trace.csv, summary.csv, *.png, *.svg}`.
//!
//! Exporters see records as they happen and flush after every trial, so a run killed mid-sweep
//! leaves every completed trial readable. Comparing runs is reading two such folders.
mod csv_out;
pub mod experiment;
pub mod fsio;
pub mod inputs;
mod lock;
pub mod manifest;
pub mod perfetto;
pub mod provenance;
mod strict_csv;
pub mod timings;

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::schema::{PhaseRecord, SummaryRow};
pub use csv_out::{SummaryCsv, TraceCsv};
pub use experiment::ExperimentDir;
pub use lock::{DirLock, LOCK};
pub use manifest::{Manifest, RunStatus};
pub use perfetto::PerfettoTrace;

/// Where `run`, `advise`, `bench` and `slurm` write unless `--out` says otherwise: a folder of
/// the user's own runs, apart from `results/`, which holds the repository's committed results
/// (`scripts/regenerate-figures` writes there, with `--out results`). A first run on a fresh
/// clone so never meets, nor replaces, results committed for its device.
pub const DEFAULT_OUT: &str = "runs";

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
    /// Takes back what the last `trial` wrote (all or part of it): another file failed to take
    /// the same trial, and a trial is in every file or in none.
    fn undo(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Hands a finished trial to every exporter, in order; when one fails (a full disk), those that
/// took it, and the one that failed, take it back, so that every file still ends at the same
/// whole trial. The error names the file.
pub fn write_trial(exporters: &mut [Box<dyn Exporter>], row: &SummaryRow) -> Result<()> {
    for i in 0..exporters.len() {
        if let Err(e) = exporters[i].trial(row) {
            for taken in exporters[..=i].iter_mut() {
                // The first error is the one to report; a failed undo adds to it.
                if let Err(u) = taken.undo() {
                    return Err(e.context(format!("{u:#}")));
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Whether `name`, in an experiment's folder, is something `run` (or `merge`) writes: its CSVs,
/// manifest and trace.json, the charts, and the temporary files of all of them. What `--force`
/// replaces; nothing else (`advice/`, a user's notes) is touched, nor `shards/`: shard runs'
/// results, each replaced only by its own `run --shard I/N --force`, which may have cost a
/// cluster hours.
pub fn is_run_output(name: &str) -> bool {
    let ours = [TRACE, SUMMARY, MANIFEST, perfetto::TRACE_JSON];
    ours.contains(&name)
        || name.ends_with(".png")
        || name.ends_with(".svg")
        || (name.starts_with('.') && (name.ends_with(".tmp") || name.contains(".tmp.")))
        || name.ends_with(".resuming")
}

/// Makes the results folder for a run and locks it for this process. The lock comes first, so
/// that of two runs to one folder only one checks, clears and writes it. A folder holding a
/// run's results is refused unless `force`, in which case they are removed first (all that a run
/// writes, so that no stale chart survives; nothing else, such as `advice/`).
pub fn prepare_dir(dir: &Path, force: bool) -> Result<DirLock> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is not a folder; give --out a folder to write results under", dir.display());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = DirLock::acquire(dir)?;
    let has_results = [TRACE, SUMMARY, MANIFEST, perfetto::TRACE_JSON]
        .iter()
        .any(|f| dir.join(f).symlink_metadata().is_ok());
    if has_results && !force {
        bail!(
            "{} already holds results; pass --force to replace them, or --out DIR to write elsewhere",
            dir.display()
        );
    }
    if force {
        let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == LOCK || !is_run_output(&name) {
                continue;
            }
            let path = e.path();
            // A link is removed itself, never what it points at.
            let folder = e.file_type().is_ok_and(|t| t.is_dir());
            let removed = if folder { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
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
        fs::create_dir_all(dir.join("advice")).unwrap();
        fs::write(dir.join("advice/advice.md"), "advise's own").unwrap();
        fs::write(dir.join("notes.txt"), "the user's").unwrap();
        fs::create_dir_all(dir.join("shards/1-of-2")).unwrap();
        fs::write(dir.join("shards/1-of-2").join(SUMMARY), "a shard's").unwrap();
        let err = prepare_dir(&dir, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "refusing must not touch the old results");
        let held = prepare_dir(&dir, true).unwrap();
        assert!(!dir.join(SUMMARY).exists() && !dir.join("stale.png").exists());
        assert!(
            dir.join("advice/advice.md").exists() && dir.join("notes.txt").exists(),
            "--force replaces what run writes only"
        );
        assert!(dir.join("shards/1-of-2").join(SUMMARY).exists(), "a whole run's --force keeps the shards");
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
