//! `trace.csv` (one row per trial x step x phase) and `summary.csv` (one row per trial).
use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

use super::Exporter;
use crate::schema::{PhaseRecord, SummaryRow};

fn writer(path: &Path) -> Result<csv::Writer<File>> {
    csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))
}

/// `trace.csv`. A trial's rows are kept until the trial ends and then written together, so
/// the file holds whole trials only: a trial dropped by a signal leaves none, and a hard kill
/// can cut at most the last row being written.
pub struct TraceCsv {
    out: csv::Writer<File>,
    pending: Vec<PhaseRecord>,
}

impl TraceCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(TraceCsv { out: writer(&dir.join(super::TRACE))?, pending: Vec::new() })
    }
}

impl Exporter for TraceCsv {
    fn phase(&mut self, record: &PhaseRecord) -> Result<()> {
        self.pending.push(record.clone());
        Ok(())
    }
    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        for r in self.pending.drain(..).filter(|r| r.trial == row.trial) {
            self.out.serialize(r).context("writing trace.csv")?;
        }
        self.out.flush().context("flushing trace.csv")
    }
}

pub struct SummaryCsv(csv::Writer<File>);

impl SummaryCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(SummaryCsv(writer(&dir.join(super::SUMMARY))?))
    }
}

impl Exporter for SummaryCsv {
    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        self.0.serialize(row).context("writing summary.csv")?;
        self.0.flush().context("flushing summary.csv")
    }
}
