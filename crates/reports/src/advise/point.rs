//! Which configuration of a spec to advise on: a variant (the first unless named) and, for a
//! sweep, one value of the swept field (the first predicted not to fit unless named): the trial
//! that ran out of memory, which is where the question "what do I change?" is asked.
use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use super::evaluate::Evaluator;
use crate::spec::{Config, Spec, SweepMode};

/// The swept field's value advised at, and why that one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The TOML key, e.g. `model.depth`.
    pub field: String,
    pub value: f64,
    pub why: String,
}

/// The variant's name and configuration (`None` for a spec without variants).
pub fn variant(spec: &Spec, name: Option<&str>) -> Result<(Option<String>, Config)> {
    let configs = spec.configs();
    let names: Vec<&str> = configs.iter().filter_map(|(n, _)| *n).collect();
    match name {
        None => {
            let (n, c) = configs.first().ok_or_else(|| anyhow!("the spec has no configuration"))?;
            Ok((n.map(str::to_string), (*c).clone()))
        }
        Some(wanted) if names.is_empty() => {
            bail!("--variant {wanted}: {} has no [[variant]]; leave --variant out", spec.path.display())
        }
        Some(wanted) => match configs.iter().find(|(n, _)| *n == Some(wanted)) {
            Some((_, c)) => Ok((Some(wanted.to_string()), (*c).clone())),
            None => bail!(
                "--variant {wanted}: {} has no such variant; it has {}",
                spec.path.display(),
                names.join(", ")
            ),
        },
    }
}

/// The configuration at `at` (or at the first value predicted not to fit), for a sweep.
pub fn choose(
    spec: &Spec,
    base: &Config,
    at: Option<f64>,
    eval: &Evaluator,
) -> Result<(Config, Option<Point>)> {
    let Some(sweep) = &spec.sweep else {
        if let Some(v) = at {
            bail!("--at {v}: {} has no [sweep]; leave --at out", spec.path.display());
        }
        return Ok((base.clone(), None));
    };
    let key = sweep.field.key();
    let with = |v: f64| {
        base.with(sweep.field, v).map_err(|e| anyhow!("--at {v}: {key} {}; pick another value", e.message))
    };
    if let Some(v) = at {
        let why = "as asked (--at)".to_string();
        return Ok((with(v)?, Some(Point { field: key.into(), value: v, why })));
    }
    if !sweep.field.is_integer() {
        bail!("{}: the sweep varies {key}, which advise cannot search; pass --at VALUE", spec.path.display());
    }
    let (lo, hi) = match &sweep.mode {
        // A list is run in its order and need not grow monotonically in memory: advised at one
        // of its own values, the first predicted not to fit, as the run would meet it.
        SweepMode::List(values) => {
            let values: Vec<u64> = values.iter().map(|&v| v as u64).collect();
            let (value, why) = first_not_fitting(&values, |v| eval.largest_fit(base, sweep.field, v, v))?;
            let value = value as f64;
            return Ok((with(value)?, Some(Point { field: key.into(), value, why })));
        }
        SweepMode::Search { start, max, .. } => (*start, *max),
        SweepMode::Halve { start } => (1, *start),
    };
    let (value, why) = match eval.largest_fit(base, sweep.field, lo, hi)? {
        None => (lo, format!("nothing from {lo} up is predicted to fit: the smallest value")),
        Some(v) if v >= hi => (hi, format!("every value up to {hi} is predicted to fit: the largest")),
        Some(v) => (v + 1, format!("the first value predicted not to fit ({v} is predicted to fit)")),
    };
    let value = value as f64;
    Ok((with(value)?, Some(Point { field: key.into(), value, why })))
}

/// The first of a list's values (in its order) that `fit` says does not fit, or its largest
/// when every one fits, and why.
fn first_not_fitting(values: &[u64], fit: impl Fn(u64) -> Result<Option<u64>>) -> Result<(u64, String)> {
    for (i, &v) in values.iter().enumerate() {
        if fit(v)?.is_none() {
            let why = match i {
                0 => "the list's first value, predicted not to fit".to_string(),
                _ => format!(
                    "the list's first value predicted not to fit (the {i} before it are predicted to fit)"
                ),
            };
            return Ok((v, why));
        }
    }
    let largest = values.iter().copied().max().unwrap_or(0);
    Ok((largest, format!("every value of the list is predicted to fit: the largest, {largest}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_advised_at_its_own_first_value_that_does_not_fit() {
        // Not monotone: 64 fits, 128 does not, 96 fits again.
        let fits = |v: u64| Ok([64, 96, 32].contains(&v).then_some(v));
        let (v, why) = first_not_fitting(&[64, 128, 96], fits).unwrap();
        assert_eq!(v, 128);
        assert!(why.contains("the 1 before it"), "{why}");
        assert_eq!(first_not_fitting(&[128, 64], fits).unwrap().0, 128);
        let (v, why) = first_not_fitting(&[64, 96, 32], fits).unwrap();
        assert_eq!(v, 96, "{why}");
        assert!(why.contains("every value"), "{why}");
    }
}
