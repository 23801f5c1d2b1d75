//! `trace.csv` (one row per trial x step x phase) and `summary.csv` (one row per trial).
use std::fs::File;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::Exporter;
use crate::schema::{PhaseRecord, SummaryRow};

fn writer(path: &Path) -> Result<csv::Writer<File>> {
    csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))
}

/// `trace.csv`. A trial's rows are kept until the trial ends and then written with one
/// `write_all`, so the file holds whole trials only: a trial dropped by a signal leaves none,
/// and a hard kill during that write leaves a part of one trial, which readers drop (its
/// summary row comes after).
pub struct TraceCsv {
    out: File,
    /// Whether the header is written (with the first trial's rows).
    header: bool,
    pending: Vec<PhaseRecord>,
}

impl TraceCsv {
    pub fn create(dir: &Path) -> Result<Self> {
        let path = dir.join(super::TRACE);
        let out = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TraceCsv { out, header: false, pending: Vec::new() })
    }
}

impl Exporter for TraceCsv {
    fn phase(&mut self, record: &PhaseRecord) -> Result<()> {
        self.pending.push(record.clone());
        Ok(())
    }
    fn trial(&mut self, row: &SummaryRow) -> Result<()> {
        let mut w = csv::WriterBuilder::new().has_headers(!self.header).from_writer(Vec::new());
        for r in self.pending.drain(..).filter(|r| r.trial == row.trial) {
            w.serialize(r).context("writing trace.csv")?;
            self.header = true;
        }
        let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("writing trace.csv: {e}"))?;
        self.out.write_all(&bytes).context("writing trace.csv")
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
