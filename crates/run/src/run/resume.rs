//! `oomlab run SPEC --resume`: a killed or interrupted run continued from its completed trials.
//!
//! What a folder holds is checked against what would run now (the same spec text, device and
//! budget, else refused with the difference named). Its completed trials (a trial is complete
//! when its summary row is written; trace rows of a later trial and a torn last row go) are
//! written again through the run's own exporters into fresh files, the old ones (and trace.json) set aside
//! (`*.csv.resuming`) until that is done, so a crash while resuming loses nothing: the next
//! `--resume` starts from the set-aside files. The sweep then replays: a trial already done is
//! taken from the folder (the sweep's order must give the same variant and value), so a search
//! picks up where its bracket was; the rest run as usual.
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::probe::MemoryProbe;
use crate::results::outputs::{self, SET_ASIDE};
use crate::results::{self, ExperimentDir, Exporter, Manifest};
use crate::schema::{PhaseRecord, SummaryRow, TraceLevel};
use crate::spec::Spec;

/// The completed trials of a folder, in trial order, with their trace rows.
#[derive(Debug, Clone, Default)]
pub struct Done {
    pub rows: Vec<SummaryRow>,
    pub trace: Vec<PhaseRecord>,
    /// The interrupted run's manifest, whose start time the resumed run keeps.
    pub manifest: Option<Manifest>,
    /// A written trial whose trace rows were lost: it and the trials after it run again.
    pub lost: Option<crate::results::experiment::Lost>,
}

impl Done {
    /// The completed trial with this number, if any.
    pub fn trial(&self, trial: usize) -> Option<&SummaryRow> {
        self.rows.get(trial.wrapping_sub(1)).filter(|r| r.trial == trial)
    }

    /// The trace rows of one trial.
    pub fn records(&self, trial: usize) -> impl Iterator<Item = &PhaseRecord> {
        self.trace.iter().filter(move |r| r.trial == trial)
    }
}

/// Reads `dir` for resuming `spec` on `probe`'s device: refused when there is nothing to
/// resume, the run was complete, or what ran differs from what would run now.
pub fn load(
    dir: &Path,
    spec: &Spec,
    inputs: &[results::inputs::InputFile],
    probe: &dyn MemoryProbe,
    trace: TraceLevel,
) -> Result<Done> {
    if !dir.join(results::MANIFEST).exists() {
        bail!("--resume: nothing to resume in {} (no manifest.json); run without --resume", dir.display());
    }
    restore(dir)?;
    // Killed before its first trial ended (while warming up): a manifest and no rows yet.
    let (exp, lost) = if dir.join(results::SUMMARY).symlink_metadata().is_ok() {
        ExperimentDir::read_checked(dir).with_context(|| format!("--resume: reading {}", dir.display()))?
    } else {
        let manifest = Manifest::read(dir).with_context(|| format!("--resume: reading {}", dir.display()))?;
        let exp = ExperimentDir {
            dir: dir.to_path_buf(),
            manifest,
            rows: Vec::new(),
            trace: Vec::new(),
            cut_row: false,
        };
        (exp, None)
    };
    let m = &exp.manifest;
    // A complete run whose trace lost rows is resumed too: those trials are measured again.
    if m.status.is_complete() && lost.is_none() {
        bail!(
            "--resume: {} holds a complete run ({}); nothing to resume (--force runs it again)",
            dir.display(),
            crate::units::count(m.trials, "trial")
        );
    }
    if m.spec_source != spec.source {
        bail!(
            "--resume: the spec changed since the run in {} started ({}); resume with the spec as it was, \
             or run with --force",
            dir.display(),
            first_difference(&m.spec_source, &spec.source)
        );
    }
    if let Some(change) = results::inputs::changed(&m.inputs, inputs) {
        bail!(
            "--resume: a file the spec reads changed since the run in {} started ({change}); its trials would \
             mix two models or data sets: put the file back as it was, or run with --force",
            dir.display()
        );
    }
    let (oomlab, libtorch) = (env!("CARGO_PKG_VERSION"), crate::ffi::torch_version());
    if m.versions.oomlab != oomlab || m.versions.libtorch != libtorch {
        bail!(
            "--resume: the run in {} was made by oomlab {} with libtorch {}, this is oomlab {oomlab} with \
             libtorch {libtorch}; measurements of two builds do not mix: run with --force",
            dir.display(),
            m.versions.oomlab,
            m.versions.libtorch
        );
    }
    if m.device.name != probe.name() || m.device.budget_bytes != probe.budget() {
        let budget = |b: Option<u64>| b.map_or("none".to_string(), crate::spec::format_size);
        bail!(
            "--resume: the run in {} was on {} with budget {}, this one is on {} with budget {}; resume on \
             the same device with the same budget",
            dir.display(),
            m.device.name,
            budget(m.device.budget_bytes),
            probe.name(),
            budget(probe.budget())
        );
    }
    // Runs from before --trace synchronised at every phase.
    let was = m.trace.unwrap_or(TraceLevel::Sync);
    if was != trace {
        bail!(
            "--resume: the run in {} was traced with --trace {}, this one asks for --trace {}; a folder's \
             trials are measured one way: resume with --trace {}",
            dir.display(),
            was.as_str(),
            trace.as_str(),
            was.as_str()
        );
    }
    // Whole trials only: those before the first whose trace rows are not all there; it and the
    // trials after it are measured again (a later trial of a search depends on the ones before).
    let keep = lost.map_or(exp.rows.len(), |l| l.trial - 1);
    let rows: Vec<SummaryRow> = exp.rows.into_iter().take(keep).collect();
    let trace = exp.trace.into_iter().filter(|t| t.trial <= keep).collect();
    Ok(Done { rows, trace, manifest: Some(exp.manifest), lost })
}

fn set_aside_path(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(outputs::aside(name))
}

/// Puts back files a crashed resume had set aside: they hold what the folder had then. Only
/// those the manifest lists as set aside by oomlab: a file of that name that is not is the
/// user's, and never put over the run's.
fn restore(dir: &Path) -> Result<()> {
    for name in SET_ASIDE {
        let aside = set_aside_path(dir, name);
        if aside.exists() && outputs::is_listed(dir, &outputs::aside(name)) {
            fs::rename(&aside, dir.join(name)).with_context(|| format!("restoring {}", aside.display()))?;
        }
    }
    Ok(())
}

/// Sets the folder's CSVs aside before the exporters create them again, each listed in the
/// manifest as oomlab's before it is made.
pub fn set_aside(dir: &Path) -> Result<()> {
    let names: Vec<String> = SET_ASIDE.iter().map(|n| outputs::aside(n)).collect();
    outputs::claim(dir, &names)?;
    for name in SET_ASIDE {
        let path = dir.join(name);
        if path.exists() {
            fs::rename(&path, set_aside_path(dir, name))
                .with_context(|| format!("setting {} aside", path.display()))?;
        }
    }
    Ok(())
}

/// Writes the completed trials through `exporters`, as the run first did, then drops the
/// set-aside files.
pub fn replay(dir: &Path, done: &Done, exporters: &mut [Box<dyn Exporter>]) -> Result<()> {
    for row in &done.rows {
        for rec in done.records(row.trial) {
            exporters.iter_mut().try_for_each(|e| e.phase(rec))?;
        }
        results::write_trial(exporters, row)?;
    }
    // On disk before the old copies go, so that not even a power cut loses the trials.
    for name in SET_ASIDE {
        if let Ok(f) = fs::File::open(dir.join(name)) {
            f.sync_all().with_context(|| format!("syncing {}", dir.join(name).display()))?;
        }
    }
    fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))?;
    for name in SET_ASIDE {
        let aside = set_aside_path(dir, name);
        if aside.exists() {
            fs::remove_file(&aside).with_context(|| format!("removing {}", aside.display()))?;
        }
    }
    Ok(())
}

/// "line 12: `depth = 4` became `depth = 5`".
pub(crate) fn first_difference(was: &str, now: &str) -> String {
    let (mut a, mut b) = (was.lines(), now.lines());
    for n in 1.. {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), Some(y)) => return format!("line {n}: `{}` became `{}`", x.trim(), y.trim()),
            (Some(x), None) => return format!("line {n}: `{}` was removed", x.trim()),
            (None, Some(y)) => return format!("line {n}: `{}` was added", y.trim()),
            (None, None) => break,
        }
    }
    "the text differs".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_named() {
        assert_eq!(first_difference("a\nb = 1\n", "a\nb = 2\n"), "line 2: `b = 1` became `b = 2`");
        assert_eq!(first_difference("a\n", "a\nc\n"), "line 2: `c` was added");
        assert_eq!(first_difference("a\nc", "a"), "line 2: `c` was removed");
    }

    #[test]
    fn done_trials_are_found_by_number() {
        let row = |trial| SummaryRow { trial, ..SummaryRow::default() };
        let done = Done { rows: vec![row(1), row(2)], ..Done::default() };
        assert_eq!(done.trial(2).map(|r| r.trial), Some(2));
        assert!(done.trial(3).is_none() && done.trial(0).is_none());
    }
}
