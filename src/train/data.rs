//! Training data made on the device: seeded synthetic data with a learnable target, or a CSV
//! file with a header and an integer label column.
use std::path::Path;

use anyhow::{bail, Context, Result};
use tch::{Device, Kind, Tensor};

use crate::spec::DataSpec;

#[derive(Debug)]
pub struct Dataset {
    /// `[samples, features]`, in the training dtype.
    pub x: Tensor,
    /// `[samples]`, int64 class indices.
    pub y: Tensor,
    pub features: usize,
    pub classes: usize,
}

impl Dataset {
    pub fn samples(&self) -> usize {
        self.x.size()[0] as usize
    }

    /// Bytes the data set holds on the device.
    pub fn bytes(&self) -> u64 {
        [&self.x, &self.y].iter().map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64).sum()
    }
}

/// The shape of the data a spec describes, without making it: (features, classes).
/// Reads a CSV's header and labels for that.
pub fn shape(spec: &DataSpec) -> Result<(usize, usize)> {
    match spec {
        DataSpec::Synthetic { features, classes, .. } => Ok((*features, *classes)),
        DataSpec::Csv { path, label } => {
            let t = read_csv(path, label)?;
            Ok((t.features, t.classes))
        }
    }
}

/// Makes the data set on `device`. Synthetic features are standard normal; labels are the argmax
/// of a fixed random linear teacher, so the task is learnable and the loss falls.
pub fn make(spec: &DataSpec, kind: Kind, device: Device) -> Result<Dataset, tch::TchError> {
    match spec {
        DataSpec::Synthetic { samples, features, classes, seed } => {
            tch::manual_seed(*seed as i64);
            let x = Tensor::f_randn([*samples as i64, *features as i64], (kind, device))?;
            let teacher = Tensor::f_randn([*features as i64, *classes as i64], (kind, device))?;
            let y = x.f_matmul(&teacher)?.f_argmax(1, false)?;
            Ok(Dataset { x, y, features: *features, classes: *classes })
        }
        DataSpec::Csv { path, label } => {
            let t = read_csv(path, label).map_err(|e| tch::TchError::FileFormat(format!("{e:#}")))?;
            let n = t.labels.len() as i64;
            let x = Tensor::f_from_slice(&t.values)?
                .f_reshape([n, t.features as i64])?
                .f_to_kind(kind)?
                .f_to_device(device)?;
            let y = Tensor::f_from_slice(&t.labels)?.f_to_device(device)?;
            Ok(Dataset { x, y, features: t.features, classes: t.classes })
        }
    }
}

struct Table {
    values: Vec<f32>,
    labels: Vec<i64>,
    features: usize,
    classes: usize,
}

/// Reads every column but `label` as a feature; labels must be integers 0..K.
fn read_csv(path: &Path, label: &str) -> Result<Table> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_data_is_seeded_and_shaped() {
        let spec = DataSpec::Synthetic { samples: 64, features: 5, classes: 3, seed: 7 };
        let a = make(&spec, Kind::Float, Device::Cpu).unwrap();
        let b = make(&spec, Kind::Float, Device::Cpu).unwrap();
        assert_eq!(a.x.size(), vec![64, 5]);
        assert_eq!(a.y.size(), vec![64]);
        assert!(a.x.equal(&b.x) && a.y.equal(&b.y), "same seed, same data");
        assert!(a.y.max().int64_value(&[]) < 3);
        assert_eq!(a.bytes(), 64 * 5 * 4 + 64 * 8);
    }

    #[test]
    fn csv_is_read_with_its_label_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.csv");
        std::fs::write(&p, "a,label,b\n1.5,0,2\n3,2,4\n").unwrap();
        let spec = DataSpec::Csv { path: p.clone(), label: "label".into() };
        let d = make(&spec, Kind::Float, Device::Cpu).unwrap();
        assert_eq!(d.x.size(), vec![2, 2]);
        assert_eq!((d.features, d.classes), (2, 3));
        assert_eq!(Vec::<f32>::try_from(d.x.flatten(0, -1)).unwrap(), vec![1.5, 2.0, 3.0, 4.0]);

        std::fs::write(&p, "a,label\nx,0\n").unwrap();
        let err = make(&spec, Kind::Float, Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("`a`"), "{err}");
        let spec = DataSpec::Csv { path: p, label: "class".into() };
        let err = format!("{:#}", shape(&spec).unwrap_err());
        assert!(err.contains("no column named `class`"), "{err}");
    }
}
