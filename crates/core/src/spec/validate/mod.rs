//! Raw spec to typed [`Spec`](super::Spec), with errors that name the file, line, key and fix.
//!
//! Every error is one line: `file:line:col: key: what is wrong; how to fix it`. Serde-level errors
//! (unknown keys, wrong types, TOML syntax) come with a byte span from `toml`; we turn the span
//! into a line and column and, by reading the text before it ([`key_path`]), into the table and
//! key it belongs to. Semantic errors use the spans that [`raw`](super::raw) keeps on every value.
//! Until it is placed ([`messages`]), an error is a [`Problem`](messages::Problem): its key apart
//! from its words, and the fix taken from the catalogue of keys ([`keys`]).
//!
//! Variants are numbered from 0 in keys, like list elements (`sweep.values[0]`): the first
//! `[[variant]]` is `variant[0]`. A variant's config is the base's `[model]`, `[data]` and
//! `[training]` with the variant's keys laid over them, validated exactly like the base; an error
//! about a value written in the variant names it `variant[i].training.amp`, and one about a value
//! it inherits (from the base or the sweep) is placed at that value and starts with
//! `in variant[i] "name" (line N):`.
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use super::raw::{RawSpec, S};
use super::{Field, Spec};

mod builders;
mod key_path;
mod keys;
mod kinds;
mod messages;
mod sweep;
mod values;

/// A spec that cannot be run, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// Parses and validates spec text read from `path`. Relative CSV paths are resolved against the
/// folder of `path`.
pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
    let mut cx = Cx { text, path, spans: HashMap::new(), omitted: None, scope: None };
    let raw: RawSpec = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    cx.spec(raw)
}

/// The variant whose config is being validated.
struct Scope {
    /// `variant[i]`.
    label: String,
    name: String,
    /// The line of its `[[variant]]` header.
    line: usize,
    /// The spans of the values and tables written in the variant (the rest are the base's).
    taken: Vec<Range<usize>>,
}

/// The text being validated, and what we learn about it on the way.
struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
    /// Where each key's value was written, to place the errors `Config::check` names by key.
    spans: HashMap<&'static str, Range<usize>>,
    /// The swept field, when its value was left out and comes from the sweep's first value.
    omitted: Option<Field>,
    /// Set while a variant's config is validated.
    scope: Option<Scope>,
}

/// The span of an optional value.
fn span<T>(v: &Option<S<T>>) -> Option<Range<usize>> {
    v.as_ref().map(|v| v.span())
}

#[cfg(test)]
mod tests;
