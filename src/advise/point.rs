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
    let values: Vec<f64> = match &sweep.mode {
        SweepMode::List(v) => v.clone(),
        SweepMode::Search { start, max, .. } => vec![*start as f64, *max as f64],
        SweepMode::Halve { start } => vec![1.0, *start as f64],
    };
    if !sweep.field.is_integer() {
        bail!("{}: the sweep varies {key}, which advise cannot search; pass --at VALUE", spec.path.display());
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min) as u64;
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max) as u64;
    let (value, why) = match eval.largest_fit(base, sweep.field, lo, hi)? {
        None => (lo, format!("nothing from {lo} up is predicted to fit: the smallest value")),
        Some(v) if v >= hi => (hi, format!("every value up to {hi} is predicted to fit: the largest")),
        Some(v) => (v + 1, format!("the first value predicted not to fit ({v} is predicted to fit)")),
    };
    let value = value as f64;
    Ok((with(value)?, Some(Point { field: key.into(), value, why })))
}
