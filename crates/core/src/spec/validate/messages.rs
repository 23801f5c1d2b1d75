//! Messages: an error placed at `file:line:col`, naming the key and the fix, scoped to the
//! variant being validated, and serde's own errors reworded in the same form.
use std::fmt::{self, Display};
use std::ops::Range;

use super::key_path::{header_keys, key_path_at, number_variant};
use super::keys::{fix, info};
use super::suggest::did_you_mean;
use super::sweep::Point;
use super::{Cx, SpecError};
use crate::spec::Invalid;

/// What an error says, before it is placed in the file. The key is kept apart from the words
/// because a variant's label goes before it and a check's error is placed by it, and reading
/// either out of an English sentence breaks when the sentence changes.
#[derive(Debug, Clone)]
pub(super) enum Problem {
    /// `key: message`, what is wrong with the value of `key`.
    Value { key: String, message: String },
    /// `key message`, a sentence with the key as its subject: "data.path is only read for ...".
    Sentence { key: String, message: String },
    /// Words about no one key: TOML syntax, unknown keys and tables, a table written twice.
    Plain(String),
}

impl Problem {
    pub(super) fn value(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem::Value { key: key.into(), message: message.into() }
    }

    pub(super) fn sentence(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem::Sentence { key: key.into(), message: message.into() }
    }

    fn key_mut(&mut self) -> Option<&mut String> {
        match self {
            Problem::Value { key, .. } | Problem::Sentence { key, .. } => Some(key),
            Problem::Plain(_) => None,
        }
    }
}

impl Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Value { key, message } => write!(f, "{key}: {message}"),
            Problem::Sentence { key, message } => write!(f, "{key} {message}"),
            Problem::Plain(words) => f.write_str(words),
        }
    }
}

/// A check's error says the key first: `training.batch_size 256 is larger than ...`.
impl From<&Invalid> for Problem {
    fn from(e: &Invalid) -> Problem {
        let message = match e.fix {
            Some(fix) => format!("{}; {fix}", e.message),
            None => e.message.clone(),
        };
        Problem::sentence(e.key, message)
    }
}

impl Cx<'_> {
    /// `file:line:col: problem`.
    pub(super) fn at(&self, span: &Range<usize>, problem: Problem) -> SpecError {
        let (line, col) = line_col(self.text, span.start);
        SpecError(format!("{}:{line}:{col}: {}", self.path.display(), self.scoped(Some(span), problem)))
    }

    /// `file: problem`, for what has no place in the text.
    pub(super) fn nowhere(&self, problem: Problem) -> SpecError {
        SpecError(format!("{}: {}", self.path.display(), self.scoped(None, problem)))
    }

    /// While a variant is validated: a problem with a value written in the variant gets the
    /// variant's index before its key, and one with a value inherited from the base or the sweep
    /// says which variant it breaks.
    fn scoped(&self, span: Option<&Range<usize>>, mut problem: Problem) -> String {
        let Some(s) = &self.scope else { return problem.to_string() };
        let written_in_variant = span.is_some_and(|span| s.taken.contains(span));
        match problem.key_mut() {
            Some(key) if written_in_variant => {
                *key = format!("{}.{key}", s.label);
                problem.to_string()
            }
            _ => format!("in {} {:?} (line {}): {problem}", s.label, s.name, s.line),
        }
    }

    /// `key: must be RULE, got GOT; FIX`.
    pub(super) fn bad(&self, span: &Range<usize>, key: &str, rule: &str, got: impl Display) -> SpecError {
        self.at(span, Problem::value(key, format!("must be {rule}, got {got}; {}", fix(key))))
    }

    /// A required key that is absent; placed at its table's header when the table is there.
    pub(super) fn missing(&self, key: &str, table: &Option<Range<usize>>) -> SpecError {
        let top = key.split('.').next().unwrap_or(key);
        let in_variant =
            self.scope.as_ref().is_some_and(|s| table.as_ref().is_some_and(|t| s.taken.contains(t)));
        let under = if top.starts_with("variant[") {
            "[[variant]]".to_string()
        } else if in_variant {
            format!("[variant.{top}]")
        } else {
            format!("[{top}]")
        };
        let message = match info(key) {
            // A key inside an inline table (sweep.search.start): show the whole inline table.
            Some(i) if key.matches('.').count() > 1 && !top.starts_with("variant[") => {
                format!("is missing; write it as {}", i.example)
            }
            Some(i) => format!("is missing; add {} under {under} ({})", i.example, i.about),
            None => format!("is missing; add it under {under}"),
        };
        let problem = Problem::sentence(key, message);
        match table {
            Some(span) => self.at(span, problem),
            None => self.nowhere(problem),
        }
    }

    /// A config refused by `Config::check`, placed at the value of the key it names.
    pub(super) fn check_error(&self, e: &Invalid) -> SpecError {
        match self.spans.get(e.key) {
            Some(span) => self.at(span, e.into()),
            None => self.nowhere(e.into()),
        }
    }

    /// A sweep value refused by `Config::with`, with a plain fix where the check has none.
    pub(super) fn point_error(&self, p: &Point, e: &Invalid) -> SpecError {
        let fix = if e.fix.is_some() { "" } else { "; change this value or remove it" };
        self.at(&p.span, Problem::value(&p.key, format!("{e}{fix}")))
    }

    /// The source text of a span, on one line and shortened, to quote a value as written.
    pub(super) fn src(&self, span: &Range<usize>) -> String {
        let s = self.text.get(span.clone()).unwrap_or_default();
        let first = s.lines().next().unwrap_or_default();
        if first.chars().count() > 40 || first.len() < s.len() {
            let short: String = first.chars().take(40).collect();
            format!("{short}...")
        } else {
            first.to_string()
        }
    }

    /// A serde/TOML error, reworded with the key it is about.
    pub(super) fn toml_error(&self, e: &toml::de::Error) -> SpecError {
        let msg = e.message().trim();
        let Some(span) = e.span() else {
            return self.nowhere(Problem::Plain(format!("not valid TOML: {msg}")));
        };
        let (path, header) = key_path_at(self.text, span.start);
        let path = number_variant(self.text, span.start, path);
        let here = self.src(&span);
        let problem = if let Some(rest) = msg.strip_prefix("unknown field ") {
            Problem::Plain(unknown_key(rest, &path, header))
        } else if let Some(rest) =
            msg.strip_prefix("invalid type: ").or_else(|| msg.strip_prefix("invalid value: "))
        {
            // A wrong-typed table is reported at its header: the key is in the span itself.
            let line_before = self.text.get(..span.start).and_then(|t| t.rsplit('\n').next());
            let is_header = here.starts_with('[') && line_before.is_some_and(|l| l.trim().is_empty());
            let key = if is_header { header_keys(&here) } else { path };
            let key = key.join(".");
            let expected = rest.rsplit_once(", expected ").map_or("", |(_, x)| x);
            let message = format!("must be {}, got {here}; {}", plain_type(expected), fix(&key));
            Problem::Value { key, message }
        } else if msg == "duplicate key" {
            let mut key = path;
            key.push(here.trim_matches(['"', '\'']).to_string());
            let variant = key.first().filter(|k| header && k.starts_with("variant[")).cloned();
            if let Some(variant) = variant {
                // A header names the table as written: [variant.training], in variant[1].
                key[0] = "variant".into();
                let table = key.join(".");
                Problem::Plain(format!(
                    "[{table}] is written twice in {variant}; merge the two into one table"
                ))
            } else if header {
                Problem::Plain(format!("[{}] is written twice; merge the two into one table", key.join(".")))
            } else {
                Problem::sentence(key.join("."), "is written twice; keep one of them")
            }
        } else if path.is_empty() {
            Problem::Plain(format!("not valid TOML: {msg}"))
        } else {
            Problem::Plain(format!("not valid TOML at {}: {msg}", path.join(".")))
        };
        self.at(&span, problem)
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

/// serde's name for a type in words: `i64` is "a whole number".
fn plain_type(expected: &str) -> &str {
    match expected {
        "i64" => "a whole number",
        "f64" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "a list",
        "" => "something else",
        other => other,
    }
}

/// "unknown field `widht`, expected `hidden` or `depth`" (after "unknown field ") as our message.
fn unknown_key(rest: &str, path: &[String], header: bool) -> String {
    // serde quotes names in backticks: the unknown one first, then those expected.
    let names: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let (name, expected) = names.split_first().map_or(("?", &[][..]), |(n, e)| (*n, e));
    if path.is_empty() {
        let tables: Vec<String> = expected
            .iter()
            .map(|t| if *t == "variant" { "[[variant]]".into() } else { format!("[{t}]") })
            .collect();
        let guess = did_you_mean(name, expected.iter().copied(), |t| {
            if t == "variant" {
                "[[variant]]".into()
            } else {
                format!("[{t}]")
            }
        });
        return if header {
            format!("unknown table [{name}]; {guess}expected one of: {}", tables.join(", "))
        } else {
            format!("unknown key `{name}` outside any table; keys go under one of: {}", tables.join(", "))
        };
    }
    let place = match path {
        [table] if !table.contains('[') => format!("[{table}]"),
        _ => path.join("."),
    };
    if let [variant] = path {
        if variant.starts_with("variant") && ["experiment", "run", "sweep"].contains(&name) {
            return format!(
                "unknown key `{name}` in {place}: [{name}] is the whole spec's and cannot be varied; move it out of the variant (a variant may set model, data and training)"
            );
        }
    }
    let guess = did_you_mean(name, expected.iter().copied(), |k| format!("`{k}`"));
    format!("unknown key `{name}` in {place}; {guess}expected one of: {}", expected.join(", "))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::spec::validate::Scope;

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(line_col("é = 1\nab", 5), (1, 5));
        assert_eq!(line_col("é = 1\nab", 8), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }

    const TEXT: &str = "[training]\nlr = 0.5\nbatch_size = 8\n";

    /// A context over TEXT with `training.lr` written at line 2, column 6.
    fn cx(scope: Option<Scope>) -> Cx<'static> {
        let spans = HashMap::from([("training.lr", 16..19)]);
        Cx { text: TEXT, path: Path::new("s.toml"), spans, omitted: None, scope }
    }

    fn invalid(key: &'static str, message: &str, fix: Option<&'static str>) -> Invalid {
        Invalid { key, message: message.into(), fix }
    }

    #[test]
    fn a_check_error_is_placed_by_its_key_not_by_its_words() {
        // Words that start with another key, and with a colon, must not move the error.
        let e = invalid("training.lr", "data.samples: is not a key this message is about", None);
        assert_eq!(
            cx(None).check_error(&e).0,
            "s.toml:2:6: training.lr data.samples: is not a key this message is about"
        );
        // A key with no value written (a default) has no place in the text.
        let e = invalid("training.steps", "must be at least 1", None);
        assert_eq!(cx(None).check_error(&e).0, "s.toml: training.steps must be at least 1");
        let e = invalid("training.lr", "is odd", Some("lower it"));
        assert_eq!(cx(None).check_error(&e).0, "s.toml:2:6: training.lr is odd; lower it");
    }

    #[test]
    fn a_swept_value_gets_a_plain_fix_only_where_the_check_has_none() {
        let p = Point { value: 0.5, span: 16..19, key: "sweep.values[1]".into() };
        let e = invalid("training.lr", "is odd", None);
        assert_eq!(
            cx(None).point_error(&p, &e).0,
            "s.toml:2:6: sweep.values[1]: training.lr is odd; change this value or remove it"
        );
        let e = invalid("training.lr", "is odd", Some("lower it"));
        assert_eq!(
            cx(None).point_error(&p, &e).0,
            "s.toml:2:6: sweep.values[1]: training.lr is odd; lower it"
        );
    }

    #[test]
    fn in_a_variant_the_label_goes_before_the_key_of_a_value_written_there() {
        // The variant wrote [training] (its header at 0..10) and lr, not batch_size.
        let taken = vec![0..10, 16..19];
        let cx = cx(Some(Scope { label: "variant[1]".into(), name: "v".into(), line: 9, taken }));
        let value = Problem::value("training.lr", "must be a number > 0, got 0");
        assert_eq!(
            cx.at(&(16..19), value.clone()).0,
            "s.toml:2:6: variant[1].training.lr: must be a number > 0, got 0"
        );
        let sentence = Problem::sentence("training.lr", "is missing");
        assert_eq!(cx.at(&(16..19), sentence).0, "s.toml:2:6: variant[1].training.lr is missing");
        // A value of the base's that the variant breaks: the variant is named in front.
        assert_eq!(
            cx.at(&(20..34), value.clone()).0,
            r#"s.toml:3:1: in variant[1] "v" (line 9): training.lr: must be a number > 0, got 0"#
        );
        assert_eq!(
            cx.nowhere(value).0,
            r#"s.toml: in variant[1] "v" (line 9): training.lr: must be a number > 0, got 0"#
        );
        // Words with no key have nowhere to put the label.
        assert_eq!(
            cx.at(&(16..19), Problem::Plain("not valid TOML: x".into())).0,
            r#"s.toml:2:6: in variant[1] "v" (line 9): not valid TOML: x"#
        );
    }
}
