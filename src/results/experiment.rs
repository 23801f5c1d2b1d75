//! An experiment folder read back: its manifest, `summary.csv` and `trace.csv`, and the
//! questions every reader asks of them (the sweep's answer, the title, a phase's bytes).
//!
//! The one reader of a results folder: `plot`, `compare`, `claims` and the tests all read
//! through [`ExperimentDir::read`], so a folder a killed run left behind reads the same way
//! everywhere.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::manifest::{Answer, Manifest};
use crate::schema::{Phase, PhaseRecord, Status, SummaryRow};

/// One experiment's results folder, read whole.
#[derive(Debug, Clone)]
pub struct ExperimentDir {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub rows: Vec<SummaryRow>,
    pub trace: Vec<PhaseRecord>,
    /// Whether the files ended in part of a trial (half a row, or trace rows of a trial whose
    /// summary row was never written: a hard kill while they were written), left out.
    pub cut_row: bool,
}

impl ExperimentDir {
    /// Reads `manifest.json`, `summary.csv` and `trace.csv` from `dir`.
    pub fn read(dir: &Path) -> Result<ExperimentDir> {
        if !dir.is_dir() {
            bail!(
                "{} is not a folder; give an experiment's results folder, e.g. results/<device>/<experiment>",
                dir.display()
            );
        }
        let (rows, summary_cut) = read_whole_rows::<SummaryRow>(&dir.join(super::SUMMARY))?;
        let (mut trace, trace_cut) = read_whole_rows::<PhaseRecord>(&dir.join(super::TRACE))?;
        // A trial is complete when its summary row is written; trace rows of one that is not
        // are a part of a trial.
        let before = trace.len();
        trace.retain(|t| rows.iter().any(|r| r.trial == t.trial));
        Ok(ExperimentDir {
            dir: dir.to_path_buf(),
            manifest: Manifest::read(dir)?,
            rows,
            cut_row: summary_cut || trace_cut || trace.len() < before,
            trace,
        })
    }

    /// Reads `dir` when a run wrote results there (it has a `summary.csv`), else `None`.
    pub fn read_if_run(dir: &Path) -> Result<Option<ExperimentDir>> {
        if !dir.join(super::SUMMARY).exists() {
            return Ok(None);
        }
        Self::read(dir).map(Some)
    }

    /// The sweep's answer for a variant (`""` without variants): the manifest's, or, where it has
    /// none (a killed run writes none), the same worked out from the rows. `None` when the
    /// variant has no swept rows.
    pub fn answer(&self, variant: &str) -> Option<Answer> {
        if let Some(a) = self.manifest.answers.iter().find(|a| a.variant == variant) {
            return Some(a.clone());
        }
        let field = self.rows.iter().find(|r| r.variant == variant && !r.field.is_empty())?.field.clone();
        Some(answer(variant, &field, &self.rows))
    }

    /// The spec's description, or the experiment's name when it has none.
    pub fn title(&self) -> String {
        title(&self.manifest)
    }

    /// The first trial of a variant.
    pub fn variant(&self, name: &str) -> Option<&SummaryRow> {
        self.rows.iter().find(|r| r.variant == name)
    }

    /// Allocated bytes at the end of a phase of a step (the last micro-batch's, if several).
    pub fn allocated_after(&self, trial: usize, step: usize, phase: Phase) -> Option<u64> {
        self.trace
            .iter()
            .rfind(|t| t.trial == trial && t.step == step && t.phase == phase)
            .map(|t| t.memory_allocated)
    }

    /// The highest peak within one phase over a trial's steps.
    pub fn phase_peak(&self, trial: usize, phase: Phase) -> Option<u64> {
        self.trace
            .iter()
            .filter(|t| t.trial == trial && t.phase == phase)
            .map(|t| t.max_memory_allocated)
            .max()
    }

    /// Allocated bytes at the end of each step (its last phase), in step order.
    pub fn end_of_steps(&self, trial: usize) -> Vec<(usize, u64)> {
        let mut out: Vec<(usize, u64)> = Vec::new();
        for t in self.trace.iter().filter(|t| t.trial == trial && t.step > 0) {
            match out.last_mut() {
                Some(last) if last.0 == t.step => last.1 = t.memory_allocated,
                _ => out.push((t.step, t.memory_allocated)),
            }
        }
        out
    }

    /// Ok rows as (swept value, peak allocated) points, for one variant ("" for none).
    pub fn peaks(&self, variant: &str) -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter(|r| r.status == Status::Ok && r.variant == variant)
            .filter_map(|r| Some((r.value?, r.max_memory_allocated as f64)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }
}

/// The spec's description in a manifest, or the experiment's name when it has none.
pub fn title(m: &Manifest) -> String {
    m.spec
        .get("description")
        .and_then(|d| d.as_str())
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| m.experiment.clone())
}

/// The largest swept value of `field` that trained and the smallest that ran out of memory,
/// for a variant: what a run records as its answer, and what a reader works out where a killed
/// run recorded none.
pub fn answer(variant: &str, field: &str, rows: &[SummaryRow]) -> Answer {
    let values = |status: Status| {
        rows.iter()
            .filter(move |r| r.status == status && r.variant == variant && r.field == field)
            .filter_map(|r| r.value)
    };
    Answer {
        variant: variant.to_string(),
        field: field.to_string(),
        largest_fit: values(Status::Ok).map(|v| v as u64).max(),
        first_oom: values(Status::Oom).map(|v| v as u64).min(),
        ..Answer::default()
    }
}

/// A CSV without a last row cut short. The writers flush as their buffers fill, so a run killed
/// while writing can leave half a row at the end of a file; everything up to the last line
/// break is read, and that half row dropped; the flag says whether there was one.
fn read_whole_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(Vec<T>, bool)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    Ok((deserialize(csv::Reader::from_reader(&bytes[..whole]), path)?, whole < bytes.len()))
}

fn deserialize<T: serde::de::DeserializeOwned, R: std::io::Read>(
    mut rd: csv::Reader<R>,
    path: &Path,
) -> Result<Vec<T>> {
    rd.deserialize()
        .enumerate()
        .map(|(i, r)| r.with_context(|| format!("{}: row {}", path.display(), i + 2)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trial: usize, variant: &str, value: f64, status: Status) -> SummaryRow {
        SummaryRow {
            trial,
            variant: variant.into(),
            field: "model.depth".into(),
            value: Some(value),
            status,
            ..SummaryRow::default()
        }
    }

    #[test]
    fn a_row_cut_short_by_a_kill_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let head = "trial,step,micro,phase,memory_allocated,memory_reserved,max_memory_allocated,\
                    max_memory_reserved,device_used,phase_seconds,elapsed_seconds\n";
        let row = "1,0,0,data,10,10,12,12,,0.5,0.5\n";
        std::fs::write(tmp.path().join(super::super::TRACE), format!("{head}{row}1,0,0,mod")).unwrap();
        let trace_of = |dir: &Path| read_whole_rows::<PhaseRecord>(&dir.join(super::super::TRACE)).unwrap();
        let (trace, cut) = trace_of(tmp.path());
        assert_eq!(trace.len(), 1);
        assert_eq!(trace[0].max_memory_allocated, 12);
        assert!(cut, "the cut row is noticed");
        std::fs::write(tmp.path().join(super::super::TRACE), format!("{head}{row}")).unwrap();
        assert_eq!(trace_of(tmp.path()), (trace, false));
    }

    /// A folder cut by a hard kill: a torn summary row and the trace rows of a trial whose
    /// summary row never came are left out, and said to be.
    #[test]
    fn a_folder_cut_mid_trial_reads_as_its_whole_trials() {
        let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/cpu-amd-epyc/depth_sweep");
        let tmp = tempfile::tempdir().unwrap();
        std::fs::copy(committed.join(super::super::MANIFEST), tmp.path().join(super::super::MANIFEST))
            .unwrap();
        let summary = std::fs::read_to_string(committed.join(super::super::SUMMARY)).unwrap();
        let mut lines = summary.lines();
        let (head, first, second) = (lines.next().unwrap(), lines.next().unwrap(), lines.next().unwrap());
        let torn = &second[..second.len() / 2];
        std::fs::write(tmp.path().join(super::super::SUMMARY), format!("{head}\n{first}\n{torn}")).unwrap();
        let trace = std::fs::read_to_string(committed.join(super::super::TRACE)).unwrap();
        let kept: Vec<&str> = trace.lines().take_while(|l| !l.starts_with("3,")).collect();
        std::fs::write(tmp.path().join(super::super::TRACE), kept.join("\n") + "\n").unwrap();

        let exp = ExperimentDir::read(tmp.path()).unwrap();
        assert_eq!(exp.rows.len(), 1);
        assert!(exp.trace.iter().all(|t| t.trial == 1) && !exp.trace.is_empty(), "trial 2's rows left out");
        assert!(exp.cut_row);
    }

    #[test]
    fn the_answer_is_per_variant_and_field() {
        let rows = [
            row(1, "a", 1.0, Status::Ok),
            row(2, "a", 8.0, Status::Oom),
            row(3, "a", 4.0, Status::Ok),
            row(4, "a", 6.0, Status::Oom),
            row(5, "b", 40.0, Status::Ok),
            row(6, "b", 2.0, Status::Error),
        ];
        let a = answer("a", "model.depth", &rows);
        assert_eq!((a.largest_fit, a.first_oom), (Some(4), Some(6)));
        let b = answer("b", "model.depth", &rows);
        assert_eq!((b.largest_fit, b.first_oom), (Some(40), None));
        assert_eq!(answer("a", "training.batch_size", &rows).largest_fit, None);
    }

    #[test]
    fn an_answer_from_before_the_probe_counts_still_reads() {
        let old =
            r#"{"variant": "", "field": "training.batch_size", "largest_fit": 19215, "first_oom": 19216}"#;
        let a: Answer = serde_json::from_str(old).unwrap();
        assert_eq!((a.largest_fit, a.first_oom), (Some(19215), Some(19216)));
        assert_eq!((a.probes, a.probe_seconds, a.guess, a.strategy), (None, None, None, None));
    }
}
