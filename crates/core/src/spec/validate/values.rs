//! Primitive checks: one value against its rule (whole numbers, counts, floats, sizes, words,
//! names), each error naming the key and placed at the value.
use std::ops::Range;

use toml::Value;

use super::keys::info;
use super::messages::Problem;
use super::suggest::did_you_mean;
use super::{Cx, SpecError};
use crate::spec::limits::MAX_NAME;
use crate::spec::raw::S;
use crate::spec::size::parse_size;
use crate::spec::{Field, Named};

impl Cx<'_> {
    /// A required key, or an error saying where to add it.
    pub(super) fn require<T>(
        &self,
        v: Option<T>,
        key: &str,
        table: &Option<Range<usize>>,
    ) -> Result<T, SpecError> {
        v.ok_or_else(|| self.missing(key, table))
    }

    /// An integer >= `min`.
    pub(super) fn int(&mut self, v: &S<i64>, key: &'static str, min: i64) -> Result<i64, SpecError> {
        self.spans.insert(key, v.span());
        let n = *v.get_ref();
        if n < min {
            return Err(self.bad(&v.span(), key, &format!("a whole number >= {min}"), n));
        }
        Ok(n)
    }

    /// A count >= `min` (`min` >= 0).
    pub(super) fn count(&mut self, v: &S<i64>, key: &'static str, min: i64) -> Result<usize, SpecError> {
        let n = self.int(v, key, min)?;
        usize::try_from(n).map_err(|_| self.bad(&v.span(), key, "a smaller whole number", n))
    }

    /// A count that may be left out when its field is swept (then a placeholder stands in until
    /// the sweep's first value replaces it), or that has a default.
    pub(super) fn count_or_swept(
        &mut self,
        v: Option<S<i64>>,
        field: Field,
        min: i64,
        table: &Option<Range<usize>>,
        swept: Option<Field>,
        default: Option<usize>,
    ) -> Result<usize, SpecError> {
        match v {
            Some(v) => self.count(&v, field.key(), min),
            None if swept == Some(field) => {
                self.omitted = Some(field);
                Ok(default.unwrap_or(1))
            }
            None => default.ok_or_else(|| self.missing(field.key(), table)),
        }
    }

    /// A seed: a whole number >= 0, default 0.
    pub(super) fn seed(&mut self, v: Option<S<i64>>, key: &'static str) -> Result<u64, SpecError> {
        match v {
            Some(v) => Ok(self.int(&v, key, 0)?.unsigned_abs()),
            None => Ok(0),
        }
    }

    /// A finite float for which `ok` holds.
    pub(super) fn float(
        &mut self,
        v: &S<f64>,
        key: &'static str,
        rule: &str,
        ok: fn(f64) -> bool,
    ) -> Result<f64, SpecError> {
        self.spans.insert(key, v.span());
        let x = *v.get_ref();
        if !(x.is_finite() && ok(x)) {
            // 1e308 as such, not its 309 digits.
            let shown = if x.is_finite() && x != 0.0 && !(1e-6..1e15).contains(&x.abs()) {
                format!("{x:e}")
            } else {
                x.to_string()
            };
            return Err(self.bad(&v.span(), key, rule, shown));
        }
        Ok(x)
    }

    /// One of a fixed set of words.
    /// One of a choice's words ([`Named::ALL`]), as the spec writes them.
    pub(super) fn named<T: Named>(&mut self, v: &S<String>, key: &'static str) -> Result<T, SpecError> {
        let options: Vec<(&str, T)> = T::ALL.iter().map(|&t| (t.as_str(), t)).collect();
        self.word(v, key, &options)
    }

    pub(super) fn word<T: Copy>(
        &mut self,
        v: &S<String>,
        key: &'static str,
        options: &[(&str, T)],
    ) -> Result<T, SpecError> {
        self.spans.insert(key, v.span());
        if let Some((_, t)) = options.iter().find(|(w, _)| w == v.get_ref()) {
            return Ok(*t);
        }
        let names: Vec<String> = options.iter().map(|(w, _)| format!("{w:?}")).collect();
        let example = info(key).map_or("", |i| i.example);
        let guess = did_you_mean(v.get_ref(), options.iter().map(|(w, _)| *w), |w| format!("{w:?}"));
        Err(self.at(
            &v.span(),
            Problem::value(
                key,
                format!("must be one of {}, got {:?}; {guess}e.g. {example}", names.join(", "), v.get_ref()),
            ),
        ))
    }

    pub(super) fn nonempty(&self, v: &S<String>, key: &str) -> Result<String, SpecError> {
        if v.get_ref().trim().is_empty() {
            return Err(self.bad(&v.span(), key, "a non-empty string", self.src(&v.span())));
        }
        Ok(v.get_ref().clone())
    }

    /// Errors on the first key present that does not belong, with `why` after its name.
    pub(super) fn reject(&self, keys: &[(&str, Option<Range<usize>>)], why: &str) -> Result<(), SpecError> {
        match keys.iter().find_map(|(k, s)| s.as_ref().map(|s| (k, s))) {
            Some((key, span)) => Err(self.at(span, Problem::sentence(*key, why))),
            None => Ok(()),
        }
    }

    /// A folder-safe name: lowercase letters, digits, `_` and `-`.
    pub(super) fn name(&self, v: &S<String>, key: &str) -> Result<String, SpecError> {
        let name = v.get_ref();
        if !crate::spec::limits::name_chars_ok(name) {
            return Err(self.bad(&v.span(), key, "lowercase letters, digits, _ or -", format!("{name:?}")));
        }
        // A name is a folder name, a file name and a chart label.
        if name.len() > MAX_NAME {
            return Err(self.bad(
                &v.span(),
                key,
                &format!("at most {MAX_NAME} characters"),
                format!("{} characters", name.len()),
            ));
        }
        Ok(name.clone())
    }

    /// A memory cap: a size ("16GiB") or a whole number of bytes, more than 0.
    pub(super) fn budget(&mut self, v: &Value, span: &Range<usize>, key: &str) -> Result<u64, SpecError> {
        let bytes = match v {
            // A quoted number without a unit is a size with its unit forgotten far more often
            // than bytes written on purpose (`budget = "2048"` ran as 2 KiB): refused, as
            // `--budget 2048` is; bytes are a plain number.
            Value::String(s)
                if !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') =>
            {
                let t = s.trim();
                return Err(self.at(
                    span,
                    Problem::value(
                        key,
                        format!(
                            "{s:?} has no unit: write \"{t}GiB\" (or \"{t}MiB\"), or {key} = {t} without quotes if \
                             you mean bytes"
                        ),
                    ),
                ));
            }
            Value::String(s) => {
                parse_size(s).map_err(|e| self.at(span, Problem::value(key, e.to_string())))?
            }
            Value::Integer(n) if *n >= 0 => n.unsigned_abs(),
            _ => return Err(self.bad(span, key, "a size or a whole number of bytes", v)),
        };
        if bytes == 0 {
            // A zero cap makes every allocation fail, which measures nothing.
            return Err(self.bad(span, key, "more than 0 bytes", v));
        }
        Ok(bytes)
    }
}
