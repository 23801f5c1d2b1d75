//! A CSV data set read into plain numbers: what `data.kind = "csv"` names. The spec's
//! vocabulary, not the trainer's: the trainer makes tensors of it, and the estimate needs its
//! shape without training.
//!
//! The file is checked before it is read (a regular file of at most
//! [`MAX_CSV_BYTES`](super::limits::MAX_CSV_BYTES): not a device such as `/dev/zero`, a folder or
//! a pipe) and every value as it is read (features finite numbers, labels class indices). Its
//! contents are never quoted in a message, since `data.path` may name any file the user can read:
//! a message names the row and the column by number.
use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::limits::{MAX_CLASSES, MAX_CSV_BYTES, MAX_FEATURES};
use super::{DataSpec, Field, Spec, SweepMode};

/// The shape of the data a spec describes, without making it: (features, classes).
/// Reads a CSV's header and labels for that. For tensors: the first input's elements a sample,
/// and 0 classes under mse.
pub fn shape(spec: &DataSpec) -> Result<(usize, usize)> {
    match spec {
        DataSpec::Synthetic { features, classes, .. } => Ok((*features, *classes)),
        DataSpec::Images { channels, size, classes, .. } => Ok((channels * size * size, *classes)),
        DataSpec::Tokens { seq_len, classes, .. } => Ok((*seq_len, *classes)),
        DataSpec::Csv { path, label } => {
            let t = read(path, label)?;
            Ok((t.features, t.classes))
        }
        DataSpec::Tensors { inputs, classes, .. } => {
            Ok((inputs.first().map_or(0, |i| i.shape.iter().product()), classes.unwrap_or(0)))
        }
    }
}

/// A CSV data set: features row by row, a class index per row.
pub struct Table {
    pub values: Vec<f32>,
    pub labels: Vec<i64>,
    pub features: usize,
    pub classes: usize,
}

impl Table {
    /// The data rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }
}

/// Refuses a batch larger than the data set's `rows`: a batch is drawn without repeats.
pub fn enough_rows(path: &Path, rows: usize, batch_size: usize) -> Result<()> {
    if rows < batch_size {
        bail!(
            "{}: {rows} data rows (data.path), fewer than training.batch_size = {batch_size}: a batch is \
             drawn from the data set without repeats; lower training.batch_size or add rows",
            path.display()
        );
    }
    Ok(())
}

/// Reads each CSV data set a spec names and checks it against the batch sizes its trials will
/// draw, so that a file that is not one (a device, a folder, a missing or huge file), a bad value
/// in it (by row and column) or a data set too small for its batch is refused before anything is
/// written: every trial would fail on it, and a folder of failed trials would stand in the way
/// of the run with the file mended.
pub fn preflight(spec: &Spec) -> Result<()> {
    let mut read_already: Vec<(&Path, &str, usize)> = Vec::new();
    for (_, config) in spec.configs() {
        let DataSpec::Csv { path, label } = &config.data else { continue };
        let rows = match read_already.iter().find(|(p, l, _)| p == path && l == label) {
            Some(&(_, _, rows)) => rows,
            None => {
                let rows = read(path, label)?.rows();
                read_already.push((path, label, rows));
                rows
            }
        };
        let swept = spec.sweep.as_ref().filter(|s| s.field == Field::BatchSize).map(|s| &s.mode);
        let batches: Vec<usize> = match swept {
            None => vec![config.training.batch_size],
            Some(SweepMode::List(values)) => values.iter().map(|&b| b as usize).collect(),
            Some(SweepMode::Search { start, .. }) => vec![*start as usize],
            // Halving looks for a batch that fits: one too large for the data is one step of it.
            Some(SweepMode::Halve { .. }) => vec![1],
        };
        for batch in batches {
            enough_rows(path, rows, batch)?;
        }
    }
    Ok(())
}

/// Opens `path` for reading after checking that it is a regular file of at most
/// [`MAX_CSV_BYTES`].
fn open(path: &Path) -> Result<impl Read> {
    let meta = std::fs::metadata(path).with_context(|| format!("data.path: opening {}", path.display()))?;
    if !meta.is_file() {
        bail!(
            "{}: data.path is not a regular file (a folder, a device or a pipe); give the path of a CSV file",
            path.display()
        );
    }
    if meta.len() > MAX_CSV_BYTES {
        bail!(
            "{}: data.path is {} bytes, more than the limit of {MAX_CSV_BYTES} (1 GiB) for a CSV data set",
            path.display(),
            meta.len()
        );
    }
    let file = File::open(path).with_context(|| format!("data.path: opening {}", path.display()))?;
    // A file that grows while it is read stops at the limit.
    Ok(file.take(MAX_CSV_BYTES))
}

/// Reads every column but `label` as a feature; labels must be integers 0..K.
pub fn read(path: &Path, label: &str) -> Result<Table> {
    let mut rd = csv::Reader::from_reader(open(path)?);
    let at = || path.display();
    let headers = rd.headers().with_context(|| format!("{}: reading the header (data.path)", at()))?.clone();
    let Some(li) = headers.iter().position(|h| h == label) else {
        bail!(
            "{}: no column named `{label}` (data.label) among the header's {} columns; name the label column",
            at(),
            headers.len()
        );
    };
    let features = headers.len() - 1;
    if features == 0 {
        bail!("{}: only the label column `{label}`; a feature column is needed", at());
    }
    if features > MAX_FEATURES {
        bail!("{}: {features} feature columns, more than the limit of {MAX_FEATURES}", at());
    }
    let (mut values, mut labels) = (Vec::new(), Vec::new());
    for (i, rec) in rd.records().enumerate() {
        let row = i + 2; // 1-based, after the header
        let rec = rec.with_context(|| format!("{}: row {row}", at()))?;
        for (j, field) in rec.iter().enumerate() {
            // The cell's text is never quoted: the file may be anything the user can read.
            let col = j + 1;
            if j == li {
                let v = field.trim().parse::<i64>().ok().filter(|v| (0..MAX_CLASSES as i64).contains(v));
                let Some(v) = v else {
                    bail!(
                        "{}: row {row}, column {col} (`{label}`, data.label): a label must be a whole number \
                         from 0 to {} (a class index)",
                        at(),
                        MAX_CLASSES - 1
                    );
                };
                labels.push(v);
            } else {
                let Ok(v) = field.trim().parse::<f32>() else {
                    bail!("{}: row {row}, column {col}: not a number; features must be numbers", at());
                };
                if !v.is_finite() {
                    bail!(
                        "{}: row {row}, column {col}: not a finite number (NaN or infinite); features must be \
                         finite",
                        at()
                    );
                }
                values.push(v);
            }
        }
    }
    if labels.is_empty() {
        bail!("{}: no data rows after the header", at());
    }
    let classes = (labels.iter().max().copied().unwrap_or(0) + 1).max(2) as usize;
    Ok(Table { values, labels, features, classes })
}
