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
mod suggest;
mod sweep;
mod values;

/// A spec that cannot be run, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// Parses and validates spec text read from `path`. Relative CSV paths are resolved against the
/// folder of `path`.
///
/// Misspelt keys and tables are all reported at once, a line each in file order, with the first
/// other error among them (a later misspelling past a wrong value waits for that value's fix):
/// serde stops at the first unknown key, so each one found is blanked out of the text
/// (spaces for its bytes, so every later line and column is still the file's) and the text read
/// again, as if the key had not been written. A key that cannot be blanked alone (inside an inline
/// table, or a value over several lines) ends the search there, so no error is an artefact of
/// the blanking.
pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
    let mut text = text.to_string();
    let mut unknown: Vec<(usize, String)> = Vec::new();
    let last = loop {
        let mut cx = Cx { text: &text, path, spans: HashMap::new(), omitted: None, scope: None };
        let raw = match toml::from_str::<RawSpec>(&text) {
            Ok(raw) => raw,
            Err(e) => {
                let error = cx.toml_error(&e);
                let start = e.span().map_or(0, |s| s.start);
                // Without a place in the text there is nothing to blank: the search ends there.
                let blanked = (e.span().is_some() && e.message().starts_with("unknown field "))
                    .then(|| blank_unknown(&text, start));
                match blanked.flatten() {
                    Some(next) if unknown.len() < MAX_REPORTED => {
                        unknown.push((start, error.0));
                        text = next;
                        continue;
                    }
                    _ => break Err((start, error)),
                }
            }
        };
        // The position of a semantic error is read back from its line and column only to order
        // it; one after the unknown keys is said last whatever its place.
        break cx.spec(raw).map_err(|e| (usize::MAX, e));
    };
    if unknown.is_empty() {
        return last.map_err(|(_, e)| e);
    }
    if let Err((at, e)) = last {
        unknown.push((at, e.0));
    }
    unknown.sort_by_key(|(at, _)| *at);
    Err(SpecError(unknown.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join("\n")))
}

/// The most unknown keys said in one pass; a file with more is likely not a spec at all.
const MAX_REPORTED: usize = 20;

/// `text` with the unknown key or `[table]` that starts at byte `at` blanked out, or `None`
/// where it cannot be blanked alone: the key shares its line with another, or its value runs
/// over several lines, or the text without it is not TOML.
fn blank_unknown(text: &str, at: usize) -> Option<String> {
    let line_start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let line_end = |from: usize| text[from..].find('\n').map_or(text.len(), |i| from + i);
    let first = &text[line_start..line_end(line_start)];
    let end = if first.trim_start().starts_with('[') {
        // A whole table: its header and every line up to the next header.
        let mut end = line_end(line_start);
        while end < text.len() {
            let next = line_end(end + 1);
            if text[end + 1..next].trim_start().starts_with('[') {
                break;
            }
            end = next;
        }
        end
    } else {
        let alone = first.trim_end_matches('\r');
        if !text[line_start..at].trim().is_empty() || toml::from_str::<toml::Table>(alone).is_err() {
            return None;
        }
        line_end(line_start)
    };
    let mut blanked = text.to_string();
    // A space for each byte, not each character: every offset after it stays the file's.
    let spaces: String = text[line_start..end].bytes().map(|b| if b == b'\n' { '\n' } else { ' ' }).collect();
    blanked.replace_range(line_start..end, &spaces);
    toml::from_str::<toml::Table>(&blanked).is_ok().then_some(blanked)
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
