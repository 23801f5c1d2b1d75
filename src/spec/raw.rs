//! The spec as written: serde structs that mirror the TOML tables, with unknown keys rejected.
//!
//! Every key is optional here and every value keeps its span, so that [`validate`](super::validate)
//! decides what is required and can point at the exact line of a bad value. Integers are read as
//! `i64` (not `usize`) so that `depth = -3` reaches validation and gets a message naming the key,
//! instead of a bare serde "invalid value".
use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// A value with the byte range it was written at.
pub(super) type S<T> = Spanned<T>;

/// A TOML table, with the span of its `[header]` (or inline `{ ... }`), if written at all.
pub(super) type Tab<T> = Option<S<Table<T>>>;

/// A struct read from a TOML table only. Serde's derived structs also accept a sequence, filling
/// fields by position, so without this `search = [1, 2, 4096]` would quietly mean start, factor,
/// max, and `[[model]]` would fail with a message about the first field instead of the table.
#[derive(Debug, Default)]
pub(super) struct Table<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapOnly<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                // The values are still read through toml's own map access, so spans survive.
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(MapOnly(PhantomData)).map(Table)
    }
}

/// The whole file. Tables keep their span (the `[table]` header) to say where a missing key goes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    pub experiment: Tab<RawExperiment>,
    pub model: Tab<RawModel>,
    pub data: Tab<RawData>,
    pub training: Tab<RawTraining>,
    pub run: Tab<RawRun>,
    pub sweep: Tab<RawSweep>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExperiment {
    pub name: Option<S<String>>,
    pub description: Option<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub hidden: Option<S<i64>>,
    pub depth: Option<S<i64>>,
}

/// Both kinds' keys live in one struct so that a key of the other kind gets a message saying so,
/// rather than "unknown key".
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawData {
    pub kind: Option<S<String>>,
    pub samples: Option<S<i64>>,
    pub features: Option<S<i64>>,
    pub classes: Option<S<i64>>,
    pub seed: Option<S<i64>>,
    pub path: Option<S<String>>,
    pub label: Option<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTraining {
    pub optimizer: Option<S<String>>,
    pub lr: Option<S<f64>>,
    pub momentum: Option<S<f64>>,
    pub weight_decay: Option<S<f64>>,
    pub batch_size: Option<S<i64>>,
    pub steps: Option<S<i64>>,
    pub dtype: Option<S<String>>,
    pub seed: Option<S<i64>>,
    pub accumulation: Option<S<i64>>,
    pub amp: Option<S<String>>,
    pub scaler: Tab<RawScaler>,
    /// `"none"`, `"sqrt"` or an integer, so kept as a TOML value.
    pub checkpoint: Option<S<toml::Value>>,
    pub mode: Option<S<String>>,
    pub history: Option<S<String>>,
}

/// `training.scaler`: the grad scaler of `amp = "fp16"`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScaler {
    pub init_scale: Option<S<f64>>,
    pub growth_factor: Option<S<f64>>,
    pub backoff_factor: Option<S<f64>>,
    pub growth_interval: Option<S<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub device: Option<S<String>>,
    /// A size string or an integer number of bytes, so kept as a TOML value.
    pub budget: Option<S<toml::Value>>,
    pub on_oom: Option<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSweep {
    pub field: Option<S<String>>,
    /// Kept as TOML values so that `2` and `2.5` stay apart and each element keeps its span.
    pub values: Option<S<Vec<S<toml::Value>>>>,
    pub search: Tab<RawSearch>,
    pub halve: Tab<RawHalve>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearch {
    pub start: Option<S<i64>>,
    pub factor: Option<S<i64>>,
    pub max: Option<S<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHalve {
    pub start: Option<S<i64>>,
}
