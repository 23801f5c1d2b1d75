//! Sweep parsing: `[sweep]` as a field and a list, search or halving, and every value it will
//! try checked against each config up front, so that a bad one is refused before the first trial
//! rather than mid-sweep.
use std::ops::Range;

use toml::Value;

use super::messages::Problem;
use super::{span, Cx, SpecError};
use crate::spec::raw::{RawHalve, RawSearch, RawSweep, Tab, Table, S};
use crate::spec::{limits, Config, Field, SweepMode};

/// The most a search without `max` may reach, whatever its configs take: 2^40, past any batch or
/// width a device holds.
pub(super) const IMPLIED_MAX_CAP: u64 = 1 << 40;

/// A value of a sweep, with where it was written and the key to name it by.
pub(super) struct Point {
    pub value: f64,
    pub span: Range<usize>,
    pub key: String,
}

/// A parsed `[sweep]` before the base config it will be checked against exists.
pub(super) struct Draft {
    pub field: Field,
    pub field_span: Range<usize>,
    pub mode: SweepMode,
    /// The values to check against each config: every list value, a search's start and max, or
    /// a halving's start.
    pub points: Vec<Point>,
}

impl Cx<'_> {
    pub(super) fn sweep(&mut self, raw: Tab<RawSweep>) -> Result<Option<Draft>, SpecError> {
        let Some(raw) = raw else { return Ok(None) };
        let header = raw.span();
        let s = raw.into_inner().0;
        let field = self.require(s.field, "sweep.field", &Some(header.clone()))?;
        let keys: Vec<&str> = Field::ALL.iter().map(|f| f.key()).collect();
        let Some(f) = Field::from_key(field.get_ref()) else {
            return Err(self.at(
                &field.span(),
                Problem::value(
                    "sweep.field",
                    format!(
                        "{:?} is not a field that can be swept; use one of: {}",
                        field.get_ref(),
                        keys.join(", ")
                    ),
                ),
            ));
        };
        let given: Vec<(&str, Range<usize>)> =
            [("values", span(&s.values)), ("search", span(&s.search)), ("halve", span(&s.halve))]
                .into_iter()
                .filter_map(|(k, s)| s.map(|s| (k, s)))
                .collect();
        if given.len() > 1 {
            // Placed at the one written last.
            let last = given.iter().map(|(_, s)| s).max_by_key(|s| s.start).cloned().unwrap_or_default();
            let names = match given.as_slice() {
                [(a, _), (b, _)] => format!("both {a} and {b}"),
                _ => "all three".into(),
            };
            return Err(self.at(
                &last,
                Problem::value(
                    "sweep",
                    format!("give one of values, search and halve, not {names}; remove all but one"),
                ),
            ));
        }
        let (points, mode) = match (s.values, s.search, s.halve) {
            (Some(values), _, _) => self.list(f, values)?,
            (_, Some(search), _) => self.search(f, search)?,
            (_, _, Some(halve)) => self.halve(f, halve)?,
            (None, None, None) => {
                return Err(self.at(
                    &header,
                    Problem::value(
                        "sweep",
                        format!(
                            "no values, search or halve to sweep {} over; add e.g. {}, {} or {}",
                            f.key(),
                            list_example(f),
                            "search = { start = 1, factor = 2, max = 4096 }",
                            "halve = { start = 4096 }"
                        ),
                    ),
                ));
            }
        };
        Ok(Some(Draft { field: f, field_span: field.span(), mode, points }))
    }

    fn list(&mut self, field: Field, values: S<Vec<S<Value>>>) -> Result<(Vec<Point>, SweepMode), SpecError> {
        if values.get_ref().is_empty() {
            return Err(self.at(
                &values.span(),
                Problem::value(
                    "sweep.values",
                    format!("the list is empty; give at least one value, e.g. {}", list_example(field)),
                ),
            ));
        }
        let n = values.get_ref().len();
        if n > limits::MAX_SWEEP_VALUES {
            return Err(self.at(
                &values.span(),
                Problem::value(
                    "sweep.values",
                    format!(
                        "{n} values; a list sweep takes at most {} (each is a trial): sweep fewer, or search = \
                         {{ ... }} for the largest that fits",
                        limits::MAX_SWEEP_VALUES
                    ),
                ),
            ));
        }
        let mut points: Vec<Point> = Vec::new();
        for (i, v) in values.into_inner().into_iter().enumerate() {
            let key = format!("sweep.values[{i}]");
            let span = v.span();
            let value = match v.get_ref() {
                Value::Integer(n) => *n as f64,
                Value::Float(x) => *x,
                _ => {
                    return Err(self.at(
                        &span,
                        Problem::value(
                            key,
                            format!(
                                "must be a number, got {}; e.g. {}",
                                self.src(&span),
                                list_example(field)
                            ),
                        ),
                    ))
                }
            };
            if field.is_integer() && value.fract() != 0.0 {
                return Err(self.at(
                    &span,
                    Problem::value(
                        key,
                        format!(
                            "{} takes whole numbers, got {}; e.g. {}",
                            field.key(),
                            self.src(&span),
                            list_example(field)
                        ),
                    ),
                ));
            }
            if let Some(j) = points.iter().position(|p| p.value == value) {
                return Err(self.at(
                    &span,
                    Problem::value(
                        key,
                        format!(
                            "{} repeats sweep.values[{j}]: each value runs once; remove it",
                            self.src(&span)
                        ),
                    ),
                ));
            }
            points.push(Point { value, span, key });
        }
        let mode = SweepMode::List(points.iter().map(|p| p.value).collect());
        Ok((points, mode))
    }

    fn search(
        &mut self,
        field: Field,
        search: S<Table<RawSearch>>,
    ) -> Result<(Vec<Point>, SweepMode), SpecError> {
        let span = Some(search.span());
        self.whole_number_field(field, &search.span(), "search", "searched")?;
        let s = search.into_inner().0;
        let start_v = self.require(s.start, "sweep.search.start", &span)?;
        let start = self.int(&start_v, "sweep.search.start", 1)?;
        let factor = match &s.factor {
            Some(v) => self.int(v, "sweep.search.factor", 2)?,
            None => 2,
        };
        let mut points =
            vec![Point { value: start as f64, span: start_v.span(), key: "sweep.search.start".into() }];
        // Without a max, the largest value the configs take, found once they are known
        // (`implied_max`); until then none bounds the anchor.
        let max = match &s.max {
            Some(max_v) => {
                let max = self.int(max_v, "sweep.search.max", 1)?;
                if max < start {
                    return Err(self.at(
                        &max_v.span(),
                        Problem::value(
                            "sweep.search.max",
                            format!("must be >= start ({start}), got {max}; raise max or lower start"),
                        ),
                    ));
                }
                points.push(Point { value: max as f64, span: max_v.span(), key: "sweep.search.max".into() });
                Some(max)
            }
            None => None,
        };
        let anchor = match &s.anchor {
            Some(v) => {
                let a = self.int(v, "sweep.search.anchor", 1)?;
                if let Some(max) = max.filter(|&m| a > m) {
                    return Err(self.at(
                        &v.span(),
                        Problem::value(
                            "sweep.search.anchor",
                            format!("must be <= max ({max}), got {a}; lower the anchor or raise max"),
                        ),
                    ));
                }
                points.push(Point { value: a as f64, span: v.span(), key: "sweep.search.anchor".into() });
                Some(a.unsigned_abs())
            }
            None => None,
        };
        let mode = SweepMode::Search {
            start: start.unsigned_abs(),
            factor: factor.unsigned_abs(),
            max: max.map_or(u64::MAX, i64::unsigned_abs),
            guided: s.guided.is_none_or(|g| *g.get_ref()),
            anchor,
            implied_max: max.is_none(),
        };
        Ok((points, mode))
    }

    /// A search without `max` bounded by what its configs take: the largest value of `field`
    /// that every one of `configs` accepts (`Config::with`), found by doubling from `start`
    /// and bisecting, at most [`IMPLIED_MAX_CAP`].
    pub(super) fn implied_max(mode: &mut SweepMode, field: Field, configs: &[&Config]) {
        let SweepMode::Search { start, max, implied_max: true, .. } = mode else { return };
        let takes = |v: u64| configs.iter().all(|c| c.with(field, v as f64).is_ok());
        let (mut ok, mut over) = (*start, None);
        while over.is_none() && ok < IMPLIED_MAX_CAP {
            let next = (ok * 2).min(IMPLIED_MAX_CAP);
            if takes(next) {
                ok = next;
            } else {
                over = Some(next);
            }
        }
        if let Some(mut bad) = over {
            while bad - ok > 1 {
                let mid = ok + (bad - ok) / 2;
                if takes(mid) {
                    ok = mid;
                } else {
                    bad = mid;
                }
            }
        }
        *max = ok;
    }

    /// Searching and halving step through whole numbers: refuse them on a float field.
    fn whole_number_field(
        &self,
        field: Field,
        span: &std::ops::Range<usize>,
        mode: &str,
        done: &str,
    ) -> Result<(), SpecError> {
        if field.is_integer() {
            return Ok(());
        }
        Err(self.at(
            span,
            Problem::value(
                format!("sweep.{mode}"),
                format!(
                    "{} is not a whole-number field, so it cannot be {done}; list its values instead, e.g. {}",
                    field.key(),
                    list_example(field)
                ),
            ),
        ))
    }

    fn halve(
        &mut self,
        field: Field,
        halve: S<Table<RawHalve>>,
    ) -> Result<(Vec<Point>, SweepMode), SpecError> {
        let span = Some(halve.span());
        self.whole_number_field(field, &halve.span(), "halve", "halved")?;
        let h = halve.into_inner().0;
        let start_v = self.require(h.start, "sweep.halve.start", &span)?;
        let start = self.int(&start_v, "sweep.halve.start", 1)?;
        let points =
            vec![Point { value: start as f64, span: start_v.span(), key: "sweep.halve.start".into() }];
        Ok((points, SweepMode::Halve { start: start.unsigned_abs() }))
    }

    /// Checks a config (the base or a variant), filling in a swept field left out of its table,
    /// and checks every sweep point against it so that a bad value is refused now rather than
    /// mid-sweep.
    pub(super) fn checked(&mut self, mut base: Config, draft: Option<&Draft>) -> Result<Config, SpecError> {
        let Some(d) = draft else {
            base.check().map_err(|m| self.check_error(&m))?;
            return Ok(base);
        };
        if base.get(d.field).is_none() {
            return Err(self.at(
                &d.field_span,
                Problem::value(
                    "sweep.field",
                    format!(
                        "{} does not apply to this spec's {} and {} data: it is {}; sweep another field",
                        d.field.key(),
                        base.model.describe(),
                        base.data.kind(),
                        d.field.applies_to()
                    ),
                ),
            ));
        }
        match (self.omitted, d.points.first()) {
            (Some(f), Some(first)) => {
                self.spans.insert(f.key(), first.span.clone());
                base = base.with(f, first.value).map_err(|m| self.point_error(first, &m))?;
            }
            _ => base.check().map_err(|m| self.check_error(&m))?,
        }
        for p in &d.points {
            base.with(d.field, p.value).map_err(|m| self.point_error(p, &m))?;
        }
        Ok(base)
    }
}

/// An example list for a field, in its kind of number.
fn list_example(field: Field) -> &'static str {
    if field.is_integer() {
        "values = [1, 2, 4]"
    } else {
        "values = [0.0001, 0.001, 0.01]"
    }
}
