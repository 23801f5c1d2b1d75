//! `trace.csv` (one row per trial x step x phase) and `summary.csv` (one row per trial).
use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

use super::Exporter;
use crate::schema::{PhaseRecord, SummaryRow};

fn writer(path: &Path) -> Result<csv::Writer<File>> {
    csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))
}

pub struct TraceCsv(csv::Writer<File>);

impl TraceCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(TraceCsv(writer(&dir.join(super::TRACE))?))
    }
}

impl Exporter for TraceCsv {
    fn phase(&mut self, record: &PhaseRecord) -> Result<()> {
        self.0.serialize(record).context("writing trace.csv")
    }
    fn trial(&mut self, _row: &SummaryRow) -> Result<()> {
        self.0.flush().context("flushing trace.csv")
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
