//! The spec as written: serde structs that mirror the TOML tables, with unknown keys rejected.
//!
//! Every key is optional here and every value keeps its span, so that [`validate`](super::validate)
//! decides what is required and can point at the exact line of a bad value. Integers are read as
//! `i64` (not `usize`) so that `depth = -3` reaches validation and gets a message naming the key,
//! instead of a bare serde "invalid value".
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

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
#[derive(Debug, Default, Clone)]
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
    pub parallel: Tab<RawParallel>,
    /// `[[variant]]` tables, in order.
    pub variant: Option<Vec<S<Table<RawVariant>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExperiment {
    pub name: Option<S<String>>,
    pub description: Option<S<String>>,
}

/// Every kind's keys live in one struct so that a key of another kind gets a message saying so,
/// rather than "unknown key".
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub kind: Option<S<String>>,
    // mlp
    pub hidden: Option<S<i64>>,
    pub depth: Option<S<i64>>,
    pub widths: Option<S<Vec<S<i64>>>>,
    // cnn (depth too, for arch = "plain")
    pub arch: Option<S<String>>,
    pub channels: Option<S<i64>>,
    pub conv: Option<S<String>>,
    pub kernel: Option<S<i64>>,
    // transformer
    pub d_model: Option<S<i64>>,
    pub nhead: Option<S<i64>>,
    pub num_layers: Option<S<i64>>,
    pub dim_feedforward: Option<S<i64>>,
    pub dropout: Option<S<f64>>,
    pub norm_first: Option<S<bool>>,
    // torchscript
    pub path: Option<S<String>>,
    pub loss: Option<S<String>>,
    pub units: Option<S<String>>,
}

/// Every kind's keys live in one struct so that a key of another kind gets a message saying so,
/// rather than "unknown key".
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawData {
    pub kind: Option<S<String>>,
    pub samples: Option<S<i64>>,
    pub features: Option<S<i64>>,
    pub classes: Option<S<i64>>,
    pub seed: Option<S<i64>>,
    pub path: Option<S<String>>,
    pub label: Option<S<String>>,
    pub location: Option<S<String>>,
    // images
    pub channels: Option<S<i64>>,
    pub size: Option<S<i64>>,
    // tokens
    pub seq_len: Option<S<i64>>,
    pub vocab: Option<S<i64>>,
    // tensors
    pub inputs: Option<S<Vec<S<Table<RawInput>>>>>,
    pub target: Option<S<Vec<S<i64>>>>,
}

/// One of `data.inputs` (`data.kind = "tensors"`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInput {
    pub name: Option<S<String>>,
    pub shape: Option<S<Vec<S<i64>>>>,
    pub dtype: Option<S<String>>,
    pub high: Option<S<i64>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
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
    pub optimizer_impl: Option<S<String>>,
}

/// `training.scaler`: the grad scaler of `amp = "fp16"`.
#[derive(Debug, Default, Clone, Deserialize)]
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
    pub skip_predicted_oom: Option<S<f64>>,
    pub rounds: Option<S<i64>>,
}

/// `[parallel]`: the strategy's name, the world, how the batch is counted, and the strategy's
/// knobs (every strategy's here, so that a knob of another gets a message saying so).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParallel {
    pub strategy: Option<S<String>>,
    pub world_size: Option<S<i64>>,
    pub batch: Option<S<String>>,
    // ddp
    pub bucket_cap_mb: Option<S<f64>>,
    pub gradient_as_bucket_view: Option<S<bool>>,
    pub find_unused_parameters: Option<S<bool>>,
    pub static_graph: Option<S<bool>>,
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
    pub guided: Option<S<bool>>,
    pub anchor: Option<S<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHalve {
    pub start: Option<S<i64>>,
}

/// A `[[variant]]`: a name and partial `[model]`, `[data]` and `[training]` tables. `[run]` and
/// `[sweep]` are the spec's own and cannot be varied.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVariant {
    pub name: Option<S<String>>,
    pub skip_on_cpu_without: Option<S<String>>,
    pub model: Tab<RawModel>,
    pub data: Tab<RawData>,
    pub training: Tab<RawTraining>,
    pub parallel: Tab<RawParallel>,
}

/// Laying a variant's keys over the base's: a key written in `over` replaces this one's, keys
/// absent from `over` stay, and nested tables (`training.scaler`) are merged the same way, key by
/// key. The spans of everything taken from `over` are pushed to `taken`, so that an error can
/// tell a value written in the variant from one inherited from the base.
pub(super) trait Overlay {
    fn overlay(&mut self, over: Self, taken: &mut Vec<Range<usize>>);
}

/// Implements [`Overlay`] for a raw table. The struct is destructured in full, so a key added to
/// it and not listed here is a compile error rather than a key that variants silently ignore.
macro_rules! overlay {
    ($name:ident { $($key:ident),* } $(tables { $($table:ident),* })?) => {
        impl Overlay for $name {
            fn overlay(&mut self, over: Self, taken: &mut Vec<Range<usize>>) {
                let $name { $($key,)* $($($table,)*)? } = over;
                $(
                    if let Some(v) = $key {
                        taken.push(v.span());
                        self.$key = Some(v);
                    }
                )*
                $($( overlay_table(&mut self.$table, $table, taken); )*)?
            }
        }
    };
}

overlay!(RawModel {
    kind,
    hidden,
    depth,
    widths,
    arch,
    channels,
    conv,
    kernel,
    d_model,
    nhead,
    num_layers,
    dim_feedforward,
    dropout,
    norm_first,
    path,
    loss,
    units
});
overlay!(RawData {
    kind,
    samples,
    features,
    classes,
    seed,
    path,
    label,
    location,
    channels,
    size,
    seq_len,
    vocab,
    inputs,
    target
});
overlay!(RawTraining {
    optimizer, lr, momentum, weight_decay, batch_size, steps, dtype, seed, accumulation, amp,
    checkpoint, mode, history, optimizer_impl
} tables { scaler });
overlay!(RawParallel {
    strategy,
    world_size,
    batch,
    bucket_cap_mb,
    gradient_as_bucket_view,
    find_unused_parameters,
    static_graph
});
overlay!(RawScaler { init_scale, growth_factor, backoff_factor, growth_interval });

/// Lays table `over` over `base`. The result keeps the span of `over`'s header when it was
/// written (a key missing from the merged table is then asked for in the variant), else `base`'s.
pub(super) fn overlay_table<T: Overlay + Default>(
    base: &mut Tab<T>,
    over: Tab<T>,
    taken: &mut Vec<Range<usize>>,
) {
    let Some(over) = over else { return };
    let span = over.span();
    taken.push(span.clone());
    let mut merged = base.take().map(|b| b.into_inner().0).unwrap_or_default();
    merged.overlay(over.into_inner().0, taken);
    *base = Some(S::new(span, Table(merged)));
}
