//! Results on disk, one folder per device and experiment:
//! `results/<device-slug>/<experiment>/{manifest.json, trace.csv, summary.csv, *.png, *.svg}`.
//!
//! Exporters see records as they happen and flush after every trial, so a run killed mid-sweep
//! leaves every completed trial readable. Comparing runs is reading two such folders.
mod csv_out;
pub mod experiment;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod inputs;
pub mod lock;
pub mod manifest;
pub mod outputs;
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

/// Makes the results folder for a run and locks it for this process. The lock comes first, so
/// that of two runs to one folder only one checks, clears and writes it. A folder holding a
/// run's results is refused unless `force`, in which case the files its manifest lists as the
/// run's own are removed first (so that no stale chart survives), and nothing else: not
/// `advice/`, not `shards/`, not a file of the user's of any name. `legacy` names the files of a
/// run whose manifest predates that list (what that run wrote, worked out from its rows).
pub fn prepare_dir(dir: &Path, force: bool, legacy: &dyn Fn(&Path) -> Vec<String>) -> Result<DirLock> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is not a folder; give --out a folder to write results under", dir.display());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = DirLock::acquire(dir)?;
    let has_results = outputs::data_files().iter().any(|f| dir.join(f).symlink_metadata().is_ok());
    if has_results && !force {
        bail!(
            "{} already holds results{}; pass --force to replace them, or --out DIR to write elsewhere",
            dir.display(),
            lock.stopped_run(dir).map(|s| format!(" ({s}; --resume continues it)")).unwrap_or_default()
        );
    }
    if has_results {
        let names = match outputs::read(dir) {
            outputs::Listed::Names(names) => names,
            outputs::Listed::Unlisted => legacy(dir),
            outputs::Listed::NoManifest => bail!(
                "{} holds files named like a run's but no manifest.json that oomlab can read, so nothing there is \
                 known to be oomlab's; move them out of the folder, or write elsewhere with --out",
                dir.display()
            ),
        };
        for kept in outputs::remove(dir, &names)? {
            note!(
                "note: {} kept: it is a folder, and oomlab writes no folder of that name (the user's?)",
                kept.display()
            );
        }
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &Path) -> Vec<String> {
        Vec::new()
    }

    #[test]
    fn existing_results_need_force_which_removes_only_the_listed_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cpu/exp");
        drop(prepare_dir(&dir, false, &none).unwrap());
        fs::write(dir.join(SUMMARY), "old").unwrap();
        fs::write(dir.join(MANIFEST), r#"{"outputs": ["manifest.json", "summary.csv", "stale.png"]}"#)
            .unwrap();
        fs::write(dir.join("stale.png"), "old").unwrap();
        fs::write(dir.join("thesis.png"), "the user's").unwrap();
        fs::create_dir_all(dir.join("advice")).unwrap();
        fs::write(dir.join("advice/advice.md"), "advise's own").unwrap();
        fs::write(dir.join("notes.txt"), "the user's").unwrap();
        fs::create_dir_all(dir.join("shards/1-of-2")).unwrap();
        fs::write(dir.join("shards/1-of-2").join(SUMMARY), "a shard's").unwrap();
        let err = prepare_dir(&dir, false, &none).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "refusing must not touch the old results");
        let held = prepare_dir(&dir, true, &none).unwrap();
        assert!(
            !dir.join(SUMMARY).exists() && !dir.join("stale.png").exists() && !dir.join(MANIFEST).exists()
        );
        for kept in ["advice/advice.md", "notes.txt", "thesis.png"] {
            assert!(dir.join(kept).exists(), "--force removed {kept}, which its manifest does not list");
        }
        assert!(dir.join("shards/1-of-2").join(SUMMARY).exists(), "a whole run's --force keeps the shards");
        fs::write(dir.join(SUMMARY), "another run's").unwrap();
        let err = prepare_dir(&dir, true, &none).unwrap_err().to_string();
        assert!(err.contains("another oomlab run"), "{err}");
        assert!(dir.join(SUMMARY).exists(), "--force never clears a folder another run holds");
        drop(held);
        // Files named like a run's, with no manifest: nothing there is known to be oomlab's.
        let err = prepare_dir(&dir, true, &none).unwrap_err().to_string();
        assert!(err.contains("no manifest.json"), "{err}");
        assert!(dir.join(SUMMARY).exists());
        let file = tmp.path().join("a-file");
        fs::write(&file, "").unwrap();
        let err = prepare_dir(&file, false, &none).unwrap_err().to_string();
        assert!(err.contains("is not a folder"), "{err}");
    }
}
