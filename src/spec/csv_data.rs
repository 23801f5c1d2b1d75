//! A CSV data set read into plain numbers: what `data.kind = "csv"` names. The spec's
//! vocabulary, not the trainer's: the trainer makes tensors of it, and the estimate needs its
//! shape without training.
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::DataSpec;

/// The shape of the data a spec describes, without making it: (features, classes).
/// Reads a CSV's header and labels for that.
pub fn shape(spec: &DataSpec) -> Result<(usize, usize)> {
    match spec {
        DataSpec::Synthetic { features, classes, .. } => Ok((*features, *classes)),
        DataSpec::Csv { path, label } => {
            let t = read(path, label)?;
            Ok((t.features, t.classes))
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

/// Reads every column but `label` as a feature; labels must be integers 0..K.
pub fn read(path: &Path, label: &str) -> Result<Table> {
    let mut rd = csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let headers = rd.headers().with_context(|| format!("reading the header of {}", path.display()))?.clone();
    let Some(li) = headers.iter().position(|h| h == label) else {
        bail!(
            "{}: no column named `{label}` (data.label); columns are: {}",
            path.display(),
            headers.iter().collect::<Vec<_>>().join(", ")
        );
    };
    let features = headers.len() - 1;
    if features == 0 {
        bail!("{}: only the label column `{label}`; a feature column is needed", path.display());
    }
    let (mut values, mut labels) = (Vec::new(), Vec::new());
    for (i, rec) in rd.records().enumerate() {
        let row = i + 2; // 1-based, after the header
        let rec = rec.with_context(|| format!("{}: row {row}", path.display()))?;
        for (j, field) in rec.iter().enumerate() {
            let col = &headers[j];
            if j == li {
                let v: i64 = field.trim().parse().ok().filter(|v| *v >= 0).with_context(|| {
                    format!(
                        "{}: row {row}, column `{col}`: label `{field}` is not a class index (0, 1, 2, ...)",
                        path.display()
                    )
                })?;
                labels.push(v);
            } else {
                let v: f32 = field.trim().parse().with_context(|| {
                    format!("{}: row {row}, column `{col}`: `{field}` is not a number", path.display())
                })?;
                values.push(v);
            }
        }
    }
    if labels.is_empty() {
        bail!("{}: no data rows after the header", path.display());
    }
    let classes = (labels.iter().max().copied().unwrap_or(0) + 1).max(2) as usize;
    Ok(Table { values, labels, features, classes })
}
