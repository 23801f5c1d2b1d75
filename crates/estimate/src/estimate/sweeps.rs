//! Sweeps, predicted: the trials a run would make, each predicted instead of trained, the
//! largest value of an integer field predicted to fit under a budget, and the guess that guides
//! a search ([`search_guide`]: `run` and this replay take it from the same function, so that
//! `oomlab estimate` predicts the probes a run will make).
use anyhow::{anyhow, Result};
use serde::Serialize;

use super::bounds::{self, Allowance};
use super::{data_shape, predict_with, DataShape, Options, Prediction};
use crate::spec::{Config, DataSpec, Field, OnOom, Spec, Sweep, SweepMode};
use crate::sweep::{self, Fit};

/// One trial of a sweep, predicted.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// The swept field's value (`None` without a sweep).
    pub value: Option<f64>,
    pub config: Config,
    pub prediction: Prediction,
    /// Under the budget (always true without one).
    pub fits: bool,
}

/// A variant's sweep, predicted.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPrediction {
    pub variant: Option<String>,
    pub field: Option<Field>,
    pub budget: Option<u64>,
    /// The trials the sweep's strategy would run, in its order, had each fitted or not as
    /// predicted (so a search's probes, guided or bisecting, and its answer, as a run would find
    /// it).
    pub points: Vec<SweepPoint>,
    /// Among `points`, as the run's answer: the largest value that fits, the smallest that does
    /// not.
    pub largest_fit: Option<u64>,
    pub first_oom: Option<u64>,
    /// For an integer field with a budget: the range searched (a search's start..max, a halving's
    /// 1..start, a list's min..max) and the largest value in it predicted to fit, found by
    /// bisection on the model (peak memory grows with every integer field); for a list, the
    /// largest of its own values predicted to fit (`from_list`), as its rows say.
    pub range: Option<(u64, u64)>,
    pub exact_largest_fit: Option<u64>,
    pub from_list: bool,
    /// A search's guide: the guess it probes first, or why it bisects without one.
    pub guide: Option<Guide>,
}

/// How a search chooses its probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Guide {
    /// Guided: the largest value in `1..=max` predicted to fit (0: not even 1), tried first.
    Guess(u64),
    /// Bisecting from `start` and `max`, for this reason.
    Unguided(String),
}

impl Guide {
    pub fn guess(&self) -> Option<u64> {
        match self {
            Guide::Guess(g) => Some(*g),
            Guide::Unguided(_) => None,
        }
    }

    /// "guided by the estimate (predicted 19215)" or "unguided: <why>".
    pub fn describe(&self) -> String {
        match self {
            // The guess is taken at the bound (see `guide_within`), which may put 1 over the
            // budget where the estimate itself fits a few (a large model's optimizer step).
            Guide::Guess(0) => {
                "guided by the estimate (at its bound not even 1 fits: tried from 1 up)".into()
            }
            Guide::Guess(g) => format!("guided by the estimate (predicted {g})"),
            Guide::Unguided(why) => format!("unguided: {why}"),
        }
    }
}

/// The guide of a search sweep (`None` for the other modes): where `guided` is on and the
/// estimate covers the base configuration, the largest value of the field in `1..=max`
/// predicted to fit `budget`, what is left for a trial (0 when not even 1 fits; the search
/// tries below `start` when `start` runs out, so the guess may be there too). Otherwise why
/// not: the spec turned it off, there is no budget to predict against, or the estimate refuses
/// the configuration (the message says why). The guess only orders the probes: a wrong one
/// costs probes, never the answer.
pub fn search_guide(base: &Config, sweep: &Sweep, budget: Option<u64>, options: &Options) -> Option<Guide> {
    guide_within(base, sweep, budget, options, &mut Allowance::default())
}

fn guide_within(
    base: &Config,
    sweep: &Sweep,
    budget: Option<u64>,
    options: &Options,
    allowance: &mut Allowance,
) -> Option<Guide> {
    let SweepMode::Search { start, max, guided, .. } = sweep.mode else { return None };
    Some(match budget {
        _ if !guided => Guide::Unguided("guided = false in the spec".into()),
        None => Guide::Unguided("no budget to predict against".into()),
        // The guess promises a fit: taken at the bound, so that where rules are unconfirmed
        // (CUDA past the lesson's sweep) the search starts below the boundary and climbs.
        Some(b) => {
            let mut from =
                |lo| fit_within(base, sweep.field, b, (lo, max), options, allowance, JudgedAt::Bound);
            // A search that starts above 1 may do so because the model cannot train on one row
            // (a batch norm over a 1x1 map): the estimate of 1 fails as the trial would, and the
            // guess is then sought from the search's start.
            match from(1).or_else(|e| if start > 1 { from(start) } else { Err(e) }) {
                Ok(v) => Guide::Guess(v.unwrap_or(0)),
                Err(e) => Guide::Unguided(format!("the estimate does not cover it ({e:#})")),
            }
        }
    })
}

/// Predicts every variant's sweep of a spec under `budget` (the run plan's, which
/// has merged the command line's with the spec's).
pub fn predict_spec(spec: &Spec, budget: Option<u64>, options: &Options) -> Result<Vec<SweepPrediction>> {
    predict_each(spec, budget, options).into_iter().map(|(_, p)| p).collect()
}

/// [`predict_spec`], each variant on its own: one that cannot be estimated (a module whose step
/// the estimate refuses) leaves the others their answers. Each with its variant's name.
pub fn predict_each(
    spec: &Spec,
    budget: Option<u64>,
    options: &Options,
) -> Vec<(Option<String>, Result<SweepPrediction>)> {
    let mut allowance = Allowance::default();
    spec.configs()
        .into_iter()
        .map(|(variant, base)| {
            let p = sweep_within(base, spec.sweep.as_ref(), spec.run.on_oom, budget, options, &mut allowance)
                .map(|mut p| {
                    p.variant = variant.map(str::to_string);
                    p
                });
            (variant.map(str::to_string), p)
        })
        .collect()
}

/// Predicts one base config's sweep (or the base alone without one).
pub fn predict_sweep(
    base: &Config,
    sweep: Option<&Sweep>,
    on_oom: OnOom,
    budget: Option<u64>,
    options: &Options,
) -> Result<SweepPrediction> {
    sweep_within(base, sweep, on_oom, budget, options, &mut Allowance::default())
}

/// [`predict_sweep`] within what is left of an estimate's bounds.
fn sweep_within(
    base: &Config,
    sweep: Option<&Sweep>,
    on_oom: OnOom,
    budget: Option<u64>,
    options: &Options,
    allowance: &mut Allowance,
) -> Result<SweepPrediction> {
    let shapes = Shapes::new(base)?;
    let options = &options.under(budget);
    let guide = sweep.and_then(|s| guide_within(base, s, budget, options, allowance));
    let guess = guide.as_ref().and_then(Guide::guess);
    let mut order = sweep::strategy(sweep.map(|s| &s.mode), on_oom, guess);
    let mut points = Vec::new();
    while let Some(value) = order.next() {
        let config = match sweep {
            Some(s) => base.with(s.field, value).map_err(|e| anyhow!("{} = {value}: {e}", s.field.key()))?,
            None => base.clone(),
        };
        let shape = shapes.of(&config);
        allowance.spend(bounds::check(&config, shape, options.target)?, true)?;
        let prediction = predict_with(&config, shape, options)?;
        let fits = budget.is_none_or(|b| prediction.fits(b));
        order.record(value, if fits { Fit::Fits } else { Fit::Oom });
        points.push(SweepPoint { value: sweep.map(|_| value), config, prediction, fits });
    }
    let values = |fit: bool| points.iter().filter(move |p| p.fits == fit).filter_map(|p| p.value);
    let (largest_fit, first_oom) = match sweep {
        Some(s) if s.field.is_integer() => {
            (values(true).map(|v| v as u64).max(), values(false).map(|v| v as u64).min())
        }
        _ => (None, None),
    };
    let range = sweep.filter(|s| s.field.is_integer()).and_then(|s| match &s.mode {
        SweepMode::Search { start, max, .. } => Some((*start, *max)),
        SweepMode::Halve { start } => Some((1, *start)),
        SweepMode::List(values) => {
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo.is_finite() && hi.is_finite()).then_some((lo as u64, hi as u64))
        }
    });
    let from_list = sweep.is_some_and(|s| matches!(s.mode, SweepMode::List(_)));
    let exact_largest_fit = match (sweep, budget, range) {
        // A list's values are the only ones it runs: its answer is its rows', whatever a value
        // between two of them would do (on CUDA a workspace can make a larger batch fit).
        (Some(_), Some(_), Some(_)) if from_list => largest_fit,
        (Some(s), Some(b), Some((lo, hi))) => {
            fit_within(base, s.field, b, (lo, hi), options, allowance, JudgedAt::Prediction)?
        }
        _ => None,
    };
    Ok(SweepPrediction {
        variant: None,
        field: sweep.map(|s| s.field),
        budget,
        points,
        largest_fit,
        first_oom,
        range,
        exact_largest_fit,
        from_list,
        guide,
    })
}

/// The largest value of `field` in `lo..=hi` for which `base` is predicted to fit in `budget`,
/// by bisection: predicted peaks never fall as depth, width, batch, samples, features, steps or
/// accumulation grow. A value the config cannot take (a batch larger than the data set) counts
/// as not fitting. `None` when not even `lo` fits.
pub fn largest_fit(
    base: &Config,
    field: Field,
    budget: u64,
    lo: u64,
    hi: u64,
    options: &Options,
) -> Result<Option<u64>> {
    fit_within(base, field, budget, (lo, hi), options, &mut Allowance::default(), JudgedAt::Prediction)
}

/// [`largest_fit`] judged at the bound ([`Prediction::fits_surely`]): the largest value that
/// fits even if every rule no GPU has confirmed is off by its margin. The same on the CPU.
pub fn largest_sure_fit(
    base: &Config,
    field: Field,
    budget: u64,
    lo: u64,
    hi: u64,
    options: &Options,
) -> Result<Option<u64>> {
    fit_within(base, field, budget, (lo, hi), options, &mut Allowance::default(), JudgedAt::Bound)
}

/// Which end of a prediction a fit is judged at: the prediction itself, or its bound
/// ([`Prediction::fits_surely`]; the same where every rule used is confirmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JudgedAt {
    Prediction,
    Bound,
}

/// [`largest_fit`] within what is left of an estimate's bounds.
fn fit_within(
    base: &Config,
    field: Field,
    budget: u64,
    (lo, hi): (u64, u64),
    options: &Options,
    allowance: &mut Allowance,
    at: JudgedAt,
) -> Result<Option<u64>> {
    if !field.is_integer() {
        return Err(anyhow!("{} is not an integer field", field.key()));
    }
    let shapes = Shapes::new(base)?;
    let options = &options.under(Some(budget));
    let mut fits = |v: u64| -> Result<bool> {
        let Ok(config) = base.with(field, v as f64) else { return Ok(false) };
        let shape = shapes.of(&config);
        if shape.samples < config.training.batch_size {
            return Ok(false); // a CSV's rows cannot make that batch
        }
        allowance.spend(bounds::check(&config, shape, options.target)?, false)?;
        let p = predict_with(&config, shape, options)?;
        Ok(match at {
            JudgedAt::Prediction => p.fits(budget),
            JudgedAt::Bound => p.fits_surely(budget),
        })
    };
    if lo > hi || !fits(lo)? {
        return Ok(None);
    }
    if fits(hi)? {
        return Ok(Some(hi));
    }
    // fits(a), !fits(b)
    let (mut a, mut b) = (lo, hi);
    while b - a > 1 {
        let mid = a + (b - a) / 2;
        if fits(mid)? {
            a = mid;
        } else {
            b = mid;
        }
    }
    Ok(Some(a))
}

/// Data shapes per config: a synthetic spec's own, or a CSV's read once (its shape cannot be
/// swept).
struct Shapes(Option<DataShape>);

impl Shapes {
    fn new(base: &Config) -> Result<Self> {
        Ok(Shapes(match base.data {
            DataSpec::Csv { .. } => Some(data_shape(&base.data)?),
            _ => None,
        }))
    }

    fn of(&self, config: &Config) -> DataShape {
        match (&config.data, self.0) {
            (DataSpec::Csv { .. }, Some(shape)) => shape,
            (DataSpec::Csv { .. }, None) => unreachable!("a CSV's shape is read in Shapes::new"),
            // Made by oomlab: its shape is the spec's, read without touching a file.
            (data, _) => data_shape(data).expect("only a CSV's shape is read from a file"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::examples::mlp as config;
    use crate::spec::OptimizerSpec;

    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };

    #[test]
    fn the_search_path_and_bisection_agree() {
        let base = config(1, 128, 4, ADAM);
        let opts = Options::default();
        let peak =
            |d: usize| predict_with(&config(d, 128, 4, ADAM), Shapes(None).of(&base), &opts).unwrap().peak;
        // A budget between depth 9's peak and depth 10's.
        let budget = (peak(9) + peak(10)) / 2;
        let search = |guided| Sweep {
            field: Field::Depth,
            mode: SweepMode::Search {
                start: 1,
                factor: 2,
                max: 64,
                guided,
                anchor: None,
                implied_max: false,
            },
        };
        let p = predict_sweep(&base, Some(&search(false)), OnOom::Continue, Some(budget), &opts).unwrap();
        let tried: Vec<u64> = p.points.iter().map(|p| p.value.unwrap() as u64).collect();
        assert_eq!(tried, [1, 64, 32, 16, 8, 12, 10, 9]);
        assert_eq!((p.largest_fit, p.first_oom), (Some(9), Some(10)));
        assert_eq!(p.exact_largest_fit, Some(9));
        assert_eq!(p.guide, Some(Guide::Unguided("guided = false in the spec".into())));
        // Guided, the replay knows its own guess: the predicted largest fit, then the one above.
        let p = predict_sweep(&base, Some(&search(true)), OnOom::Continue, Some(budget), &opts).unwrap();
        let tried: Vec<u64> = p.points.iter().map(|p| p.value.unwrap() as u64).collect();
        assert_eq!(tried, [9, 10]);
        assert_eq!((p.largest_fit, p.first_oom, p.guide), (Some(9), Some(10), Some(Guide::Guess(9))));
        let p = predict_sweep(&base, Some(&search(true)), OnOom::Continue, None, &opts).unwrap();
        assert_eq!(p.guide, Some(Guide::Unguided("no budget to predict against".into())));
        assert_eq!(largest_fit(&base, Field::Depth, budget, 1, 5, &opts).unwrap(), Some(5));
        assert_eq!(largest_fit(&base, Field::Depth, peak(1) - 1, 1, 5, &opts).unwrap(), None);
    }

    #[test]
    fn a_batch_beyond_the_data_set_does_not_fit() {
        let base = config(1, 16, 4, ADAM);
        // 32 samples: batch 33 is not a valid config.
        assert_eq!(
            largest_fit(&base, Field::BatchSize, u64::MAX, 1, 1000, &Options::default()).unwrap(),
            Some(32)
        );
    }
}
