//! `trace.csv` (one row per trial x step x phase) and `summary.csv` (one row per trial).
//!
//! Each file is created new (never through a name that exists) and holds whole trials only: a
//! trial's rows are serialized apart and written with one `write_all` when the trial ends, and a
//! write that fails (a full disk) is cut back to where the trial began ([`Exporter::undo`]), so
//! that no torn row, and no trace row without its summary row, is left behind.
use std::fs::File;
use std::io::{Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::Exporter;
use crate::fsio;
use crate::schema::{PhaseRecord, SummaryRow};

/// A CSV file written a trial at a time.
struct TrialFile {
    path: PathBuf,
    out: File,
    /// Whether the header is written (with the first rows).
    header: bool,
    /// The file's length before the last trial's rows, and after them.
    before: u64,
    len: u64,
}

impl TrialFile {
    fn create(path: PathBuf) -> Result<Self> {
        let out = fsio::create_new(&path)?;
        Ok(TrialFile { path, out, header: false, before: 0, len: 0 })
    }

    /// Appends `rows` (with the header, if it is not written yet) in one write.
    fn append<T: Serialize>(&mut self, rows: impl IntoIterator<Item = T>) -> Result<()> {
        let name = self.path.display().to_string();
        let mut w = csv::WriterBuilder::new().has_headers(!self.header).from_writer(Vec::new());
        let mut any = false;
        for r in rows {
            w.serialize(r).with_context(|| format!("writing {name}"))?;
            any = true;
        }
        let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("writing {name}: {e}"))?;
        self.before = self.len;
        self.out.write_all(&bytes).with_context(|| format!("writing {name}"))?;
        self.len += bytes.len() as u64;
        self.header |= any;
        Ok(())
    }

    /// Cuts the file back to where the last trial began.
    fn undo(&mut self) -> Result<()> {
        self.out
            .set_len(self.before)
            .and_then(|()| self.out.seek(SeekFrom::Start(self.before)).map(drop))
            .with_context(|| format!("cutting {} back to its last whole trial", self.path.display()))?;
        self.header &= self.before > 0;
        self.len = self.before;
        Ok(())
    }
}

/// `trace.csv`. A trial's rows are kept until the trial ends and then written at once, with its
/// variant and swept value (which the summary row brings), so the
/// file holds whole trials only: a trial dropped by a signal leaves none, and a hard kill during
/// that write leaves a part of one trial, which readers drop (its summary row comes after).
pub struct TraceCsv {
    file: TrialFile,
    pending: Vec<PhaseRecord>,
}

impl TraceCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(TraceCsv { file: TrialFile::create(dir.join(super::TRACE))?, pending: Vec::new() })
    }
}

impl Exporter for TraceCsv {
    fn phase(&mut self, record: &PhaseRecord) -> Result<()> {
        self.pending.push(record.clone());
        Ok(())
    }
    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        // Each row names its trial's variant and swept value, known only now (the summary row's).
        let mine = self.pending.drain(..).filter(|r| r.trial == row.trial).map(|r| PhaseRecord {
            variant: row.variant.clone(),
            value: row.value,
            ..r
        });
        self.file.append(mine)
    }
    fn undo(&mut self) -> Result<()> {
        self.file.undo()
    }
}

/// `summary.csv`: a row per trial, on disk when the trial's `trial` returns.
pub struct SummaryCsv(TrialFile);

impl SummaryCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(SummaryCsv(TrialFile::create(dir.join(super::SUMMARY))?))
    }
}

impl Exporter for SummaryCsv {
    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        self.0.append([row])
    }
    fn undo(&mut self) -> Result<()> {
        self.0.undo()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Phase;

    /// The recorder knows a phase, not the trial's variant or value: the rows get them from the
    /// summary row when the trial ends, all of them and only that trial's.
    #[test]
    fn trace_rows_are_written_with_their_trials_variant_and_value() {
        let tmp = tempfile::tempdir().unwrap();
        let mut trace = TraceCsv::create(tmp.path()).unwrap();
        let rec = |trial, phase| PhaseRecord {
            trial,
            variant: String::new(),
            value: None,
            step: 1,
            micro: 0,
            phase,
            memory_allocated: 1,
            memory_reserved: 1,
            max_memory_allocated: 1,
            max_memory_reserved: 1,
            device_used: None,
            phase_seconds: 0.0,
            elapsed_seconds: 0.0,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        };
        for (trial, variant, value) in [(1, "fused", 35.0), (2, "foreach", 0.5)] {
            trace.phase(&rec(trial, Phase::Forward)).unwrap();
            trace.phase(&rec(trial, Phase::Backward)).unwrap();
            let row =
                SummaryRow { trial, variant: variant.into(), value: Some(value), ..SummaryRow::default() };
            trace.trial(&row).unwrap();
        }
        let text = std::fs::read_to_string(tmp.path().join(super::super::TRACE)).unwrap();
        let cells: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').take(4).collect()).collect();
        assert_eq!(cells[0], ["trial", "variant", "value", "step"]);
        assert_eq!(
            cells[1..],
            [
                ["1", "fused", "35", "1"],
                ["1", "fused", "35", "1"],
                ["2", "foreach", "0.5", "1"],
                ["2", "foreach", "0.5", "1"]
            ]
        );
    }
}
