//! Training data made on the device: seeded synthetic features, images or token sequences, each
//! with a learnable target, or a CSV file with a header and an integer label column.
use tch::{Device, Kind, Tensor};

use crate::ffi;
use crate::spec::{csv_data, DataSpec, InputDtype};

#[derive(Debug)]
pub struct Dataset {
    /// `[samples, features]` or images `[samples, channels, size, size]` in the training dtype;
    /// tokens `[samples, seq_len]` int64; a tensors kind's first input.
    pub x: Tensor,
    /// A tensors kind's other inputs, in the forward's order; empty for every other kind.
    pub extra: Vec<Tensor>,
    /// `[samples]`, int64 class indices; a tensors kind's `[samples, *target]` class indices, or
    /// values in the training dtype (mse).
    pub y: Tensor,
    /// Elements of one sample: features, pixels (`channels * size^2`) or tokens.
    pub features: usize,
    pub classes: usize,
}

impl Dataset {
    pub fn samples(&self) -> usize {
        self.x.size()[0] as usize
    }

    /// Bytes the data set holds on the device.
    pub fn bytes(&self) -> u64 {
        let tensors = [&self.x, &self.y].into_iter().chain(&self.extra);
        tensors.map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64).sum()
    }
}

/// Makes the data set on `device`. Synthetic features and images are standard normal; their
/// labels are the argmax of a fixed random linear teacher, so the task is learnable and the loss
/// falls.
pub fn make(spec: &DataSpec, kind: Kind, device: Device) -> Result<Dataset, tch::TchError> {
    match spec {
        DataSpec::Synthetic { samples, features, classes, seed } => {
            tch::manual_seed(*seed as i64);
            let x = randn(&[*samples as i64, *features as i64], kind, device)?;
            let teacher = randn(&[*features as i64, *classes as i64], kind, device)?;
            let y = x.f_matmul(&teacher)?.f_argmax(1, false)?;
            Ok(Dataset { x, extra: Vec::new(), y, features: *features, classes: *classes })
        }
        DataSpec::Images { samples, channels, size, classes, seed } => {
            // As above, the teacher reading the flattened pixels.
            tch::manual_seed(*seed as i64);
            let (s, c, h) = (*samples as i64, *channels as i64, *size as i64);
            let x = randn(&[s, c, h, h], kind, device)?;
            let teacher = randn(&[c * h * h, *classes as i64], kind, device)?;
            let y = x.f_reshape([s, -1])?.f_matmul(&teacher)?.f_argmax(1, false)?;
            Ok(Dataset { x, extra: Vec::new(), y, features: (c * h * h) as usize, classes: *classes })
        }
        DataSpec::Tokens { samples, seq_len, vocab, classes, seed } => {
            // Token ids in 0..vocab. A sample's class is the residue (id modulo classes) its
            // tokens take most often, the first on a tie: a bag of tokens, which an encoder
            // without positions, mean-pooled, can learn. Counted with a scatter_add into a
            // [samples, classes] table, never a [samples, seq_len, classes] one-hot.
            tch::manual_seed(*seed as i64);
            let k = *classes as i64;
            let x = randint(*vocab as i64, &[*samples as i64, *seq_len as i64], Kind::Int64, device)?;
            let residues = x.f_remainder(k)?;
            let mut counts = zeros(&[*samples as i64, k], Kind::Int64, device)?;
            let _ = counts.f_scatter_add_(1, &residues, &residues.f_ones_like()?)?;
            let y = counts.f_argmax(1, false)?;
            Ok(Dataset { x, extra: Vec::new(), y, features: *seq_len, classes: *classes })
        }
        DataSpec::Csv { path, label } => {
            let t = csv_data::read(path, label).map_err(|e| tch::TchError::FileFormat(format!("{e:#}")))?;
            let n = t.labels.len() as i64;
            let x = Tensor::f_from_slice(&t.values)?.f_reshape([n, t.features as i64])?.f_to_kind(kind)?;
            let x = to(&x, device)?;
            let y = to(&Tensor::f_from_slice(&t.labels)?, device)?;
            Ok(Dataset { x, extra: Vec::new(), y, features: t.features, classes: t.classes })
        }
        DataSpec::Tensors { samples, inputs, target, classes, seed } => {
            // Each input in turn, then the target, from one seed: what a module's forward reads
            // and its loss compares with. Nothing here is learnable; the memory is the point.
            tch::manual_seed(*seed as i64);
            let rows = |shape: &[usize]| {
                std::iter::once(*samples as i64).chain(shape.iter().map(|&d| d as i64)).collect::<Vec<i64>>()
            };
            let mut made = Vec::with_capacity(inputs.len());
            for input in inputs {
                let shape = rows(&input.shape);
                made.push(match input.dtype {
                    InputDtype::Float => randn(&shape, kind, device)?,
                    InputDtype::Int64 { high } => randint(high as i64, &shape, Kind::Int64, device)?,
                    InputDtype::Bool => randint(2, &shape, Kind::Bool, device)?,
                });
            }
            let shape = rows(target);
            let y = match classes {
                Some(k) => randint(*k as i64, &shape, Kind::Int64, device)?,
                None => randn(&shape, kind, device)?,
            };
            let x = made.remove(0);
            let features = inputs[0].shape.iter().product();
            Ok(Dataset { x, extra: made, y, features, classes: classes.unwrap_or(0) })
        }
    }
}

/// Standard normal values of `shape` on `device`; on the meta device (which tch cannot name in a
/// factory call, [`ffi::META`]) the shape alone, made there.
fn randn(shape: &[i64], kind: Kind, device: Device) -> Result<Tensor, tch::TchError> {
    match device {
        ffi::META => ffi::meta_empty(shape, kind).map_err(tch::TchError::Torch),
        _ => Tensor::f_randn(shape, (kind, device)),
    }
}

/// Integers in `0..high` of `shape` on `device` (on the meta device, the shape alone).
fn randint(high: i64, shape: &[i64], kind: Kind, device: Device) -> Result<Tensor, tch::TchError> {
    match device {
        ffi::META => ffi::meta_empty(shape, kind).map_err(tch::TchError::Torch),
        _ => Tensor::f_randint(high, shape, (kind, device)),
    }
}

/// Zeros of `shape` on `device` (on the meta device, the shape alone).
fn zeros(shape: &[i64], kind: Kind, device: Device) -> Result<Tensor, tch::TchError> {
    match device {
        ffi::META => ffi::meta_empty(shape, kind).map_err(tch::TchError::Torch),
        _ => Tensor::f_zeros(shape, (kind, device)),
    }
}

/// `t` on `device`, as `t.to(device)`: itself where it is there already, else a copy (on the
/// meta device, its shape).
pub fn to(t: &Tensor, device: Device) -> Result<Tensor, tch::TchError> {
    match device {
        d if t.device() == d => Ok(t.shallow_clone()),
        ffi::META => ffi::to_meta(t).map_err(tch::TchError::Torch),
        _ => t.f_to_device(device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_data_is_seeded_and_shaped() {
        let _alone = crate::probe::cpu_alone();
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
    fn images_and_tokens_are_seeded_and_shaped() {
        let _alone = crate::probe::cpu_alone();
        let spec = DataSpec::Images { samples: 6, channels: 3, size: 4, classes: 5, seed: 2 };
        let a = make(&spec, Kind::Float, Device::Cpu).unwrap();
        assert_eq!((a.x.size(), a.y.size(), a.features), (vec![6, 3, 4, 4], vec![6], 48));
        assert!(a.x.equal(&make(&spec, Kind::Float, Device::Cpu).unwrap().x));
        let spec = DataSpec::Tokens { samples: 7, seq_len: 9, vocab: 11, classes: 3, seed: 2 };
        let t = make(&spec, Kind::Float, Device::Cpu).unwrap();
        assert_eq!((t.x.size(), t.x.kind(), t.features), (vec![7, 9], Kind::Int64, 9));
        assert!(t.x.max().int64_value(&[]) < 11 && t.x.min().int64_value(&[]) >= 0);
        // Each label is the residue mod 3 its row's tokens take most often (the first on a tie).
        let labels: Vec<i64> = Vec::try_from(&t.y).unwrap();
        for (row, label) in labels.iter().enumerate() {
            let ids: Vec<i64> = Vec::try_from(t.x.get(row as i64)).unwrap();
            let count = |r: i64| ids.iter().filter(|&&id| id % 3 == r).count();
            let best = (0..3).max_by_key(|&r| (count(r), std::cmp::Reverse(r))).unwrap();
            assert_eq!(*label, best, "row {row}: {ids:?}");
        }
    }

    #[test]
    fn tensors_are_made_input_by_input_with_their_target() {
        let _alone = crate::probe::cpu_alone();
        use crate::spec::TensorInput;
        let input = |shape: &[usize], dtype| TensorInput { name: "i".into(), shape: shape.to_vec(), dtype };
        let inputs = vec![
            input(&[3, 2], InputDtype::Float),
            input(&[5], InputDtype::Int64 { high: 7 }),
            input(&[5], InputDtype::Bool),
        ];
        let spec = DataSpec::Tensors { samples: 9, inputs, target: vec![5], classes: Some(4), seed: 1 };
        let d = make(&spec, Kind::Double, Device::Cpu).unwrap();
        assert_eq!(
            (d.x.size(), d.x.kind()),
            (vec![9, 3, 2], Kind::Double),
            "float inputs take the training dtype"
        );
        let (ids, mask) = (&d.extra[0], &d.extra[1]);
        assert_eq!(
            (ids.size(), ids.kind(), mask.size(), mask.kind()),
            (vec![9, 5], Kind::Int64, vec![9, 5], Kind::Bool)
        );
        assert!(ids.max().int64_value(&[]) < 7 && ids.min().int64_value(&[]) >= 0);
        assert_eq!((d.y.size(), d.y.kind()), (vec![9, 5], Kind::Int64));
        assert!(d.y.max().int64_value(&[]) < 4);
        assert_eq!((d.samples(), d.features, d.classes), (9, 6, 4));
        assert_eq!(d.bytes(), 9 * 6 * 8 + 9 * 5 * 8 + 9 * 5 + 9 * 5 * 8, "every input and the target");
        assert!(d.extra[0].equal(&make(&spec, Kind::Double, Device::Cpu).unwrap().extra[0]), "seeded");
        // Without classes (mse) the target is values in the training dtype.
        let DataSpec::Tensors { samples, inputs, seed, .. } = spec else { unreachable!() };
        let mse = DataSpec::Tensors { samples, inputs, target: vec![], classes: None, seed };
        let d = make(&mse, Kind::Float, Device::Cpu).unwrap();
        assert_eq!((d.y.size(), d.y.kind(), d.classes), (vec![9], Kind::Float, 0));
    }

    #[test]
    fn csv_is_read_with_its_label_column() {
        let _alone = crate::probe::cpu_alone();
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
