//! Training data made on the device: seeded synthetic data with a learnable target, or a CSV
//! file with a header and an integer label column.
use tch::{Device, Kind, Tensor};

use crate::spec::{csv_data, DataSpec};

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
            let t = csv_data::read(path, label).map_err(|e| tch::TchError::FileFormat(format!("{e:#}")))?;
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

        std::fs::write(&p, "a,label\nsecret,0\n").unwrap();
        let err = make(&spec, Kind::Float, Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("column 1"), "{err}");
        assert!(!err.contains("secret"), "the cell's text is not quoted: {err}");
        let spec = DataSpec::Csv { path: p, label: "class".into() };
        let err = format!("{:#}", csv_data::shape(&spec).unwrap_err());
        assert!(err.contains("no column named `class`"), "{err}");
    }
}
