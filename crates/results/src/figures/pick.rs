//! The one chart picker: which charts an experiment gets ([`select`]), which trials get a
//! timeline, and which trial stands for each variant on the charts that compare variants
//! (memory by category, time against memory: [`compared`]), its first trial that ran; in a
//! sweep, the one at the largest swept value every variant ran, so that the charts compare like
//! with like. The charts draw what they are handed.
use anyhow::{bail, Result};

use crate::chart::scale::swept_key;
use crate::chart::Compared;
use crate::schema::{Status, SummaryRow};
use crate::units::format_tick;

/// A chart to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// Peak against the swept value, for one variant ("" without variants).
    Sweep { variant: String },
    /// Peak against the swept value, a line per variant (those of the `Sweep` picks, in their
    /// order): where two variants or more sweep the same field (the strategies of `ddp`, the
    /// Adam implementations of `depth_sweep`).
    Variants { variants: Vec<String> },
    /// One trial's memory timeline.
    Timeline { trial: usize, why: Why },
    /// Memory by category, one bar per variant.
    Categories,
    /// Step time against peak memory, one point per variant.
    Tradeoff,
}

/// Why a trial's timeline is drawn; it goes into the title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The highest peak among the trials of its variant that ran.
    HighestFit,
    /// The first trial of its variant that ran out of memory.
    FirstOom,
    /// Asked for with `--trial`.
    Asked,
}

/// The charts for an experiment, in the order they are drawn: the sweep chart of each variant
/// with a swept value (and with two or more sweeping one field, theirs together), then the
/// timelines, each trial once, then with two variants or more the
/// category and time-against-memory charts. A trial asked for that is not in the summary is
/// an error (the reader keeps whole trials only).
pub fn select(rows: &[SummaryRow], extra_trials: &[usize]) -> Result<Vec<Pick>> {
    let mut variants: Vec<&str> = Vec::new();
    for r in rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let mut picks: Vec<Pick> = variants
        .iter()
        .filter(|v| rows.iter().any(|r| r.variant == **v && r.value.is_some_and(f64::is_finite)))
        .map(|v| Pick::Sweep { variant: v.to_string() })
        .collect();
    let swept: Vec<&SummaryRow> = rows.iter().filter(|r| r.value.is_some_and(f64::is_finite)).collect();
    if picks.len() >= 2 && swept.iter().all(|r| r.field == swept[0].field) {
        let variants = picks
            .iter()
            .filter_map(|p| match p {
                Pick::Sweep { variant } => Some(variant.clone()),
                _ => None,
            })
            .collect();
        picks.push(Pick::Variants { variants });
    }
    let mut trials: Vec<(usize, Why)> = Vec::new();
    for v in &variants {
        let mine = || rows.iter().filter(|r| r.variant == *v);
        let highest = mine()
            .filter(|r| r.status.fitted())
            .max_by_key(|r| (r.max_memory_allocated.max(r.max_memory_reserved), std::cmp::Reverse(r.trial)));
        let first_oom = mine()
            .filter(|r| r.status == Status::Oom)
            .min_by(|a, b| oom_order(a).partial_cmp(&oom_order(b)).unwrap_or(std::cmp::Ordering::Equal));
        trials.extend(highest.map(|r| (r.trial, Why::HighestFit)));
        trials.extend(first_oom.map(|r| (r.trial, Why::FirstOom)));
    }
    for &t in extra_trials {
        if !rows.iter().any(|r| r.trial == t) {
            let known: Vec<String> = rows.iter().map(|r| r.trial.to_string()).collect();
            bail!(
                "--trial {t}: no such trial in summary.csv or trace.csv (trials: {})",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            );
        }
        trials.push((t, Why::Asked));
    }
    let mut seen = Vec::new();
    for (trial, why) in trials {
        if !seen.contains(&trial) {
            seen.push(trial);
            picks.push(Pick::Timeline { trial, why });
        }
    }
    if variants.len() >= 2 {
        picks.extend([Pick::Categories, Pick::Tradeoff]);
    }
    Ok(picks)
}

/// The order "first OOM" means: the smallest swept value, then the earliest trial.
fn oom_order(r: &SummaryRow) -> (f64, usize) {
    (r.value.filter(|v| v.is_finite()).unwrap_or(f64::INFINITY), r.trial)
}

/// The trials that stand for each variant (see [`Compared`]).
pub fn compared(rows: &[SummaryRow]) -> Compared<'_> {
    let (trials, note) = choose(rows);
    Compared { trials, note }
}

fn choose(rows: &[SummaryRow]) -> (Vec<(String, &SummaryRow)>, Option<String>) {
    let ok: Vec<&SummaryRow> = rows.iter().filter(|r| r.status.fitted()).collect();
    let mut variants: Vec<&str> = Vec::new();
    for r in rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    if variants.iter().all(|v| v.is_empty()) {
        let mut mine = ok.clone();
        mine.sort_by(|a, b| swept(a).total_cmp(&swept(b)).then(a.trial.cmp(&b.trial)));
        return (mine.into_iter().map(|r| (trial_label(r), r)).collect(), None);
    }
    let key =
        rows.iter().find(|r| r.value.is_some_and(f64::is_finite)).map(|r| swept_key(r.field).to_string());
    // The largest value every variant fitted at; looked up in a set, as a spec may have hundreds
    // of variants of hundreds of values.
    let fitted: std::collections::HashSet<(&str, u64)> =
        ok.iter().filter_map(|r| Some((r.variant.as_str(), r.value?.to_bits()))).collect();
    let common = rows
        .iter()
        .filter_map(|r| r.value.filter(|v| v.is_finite()))
        .filter(|&v| variants.iter().all(|name| fitted.contains(&(*name, v.to_bits()))))
        .fold(None, |best: Option<f64>, v| Some(best.map_or(v, |b| b.max(v))));
    let picked = variants
        .iter()
        .filter_map(|name| {
            let mine = ok.iter().filter(|r| r.variant == *name);
            let row = match common {
                Some(v) => mine.into_iter().find(|r| r.value == Some(v)),
                // Without a sweep, the first that ran; in a sweep, the largest value that ran.
                None => mine.fold(None, |best: Option<&&SummaryRow>, r| match best {
                    Some(b) if swept(b) >= swept(r) => Some(b),
                    _ => Some(r),
                }),
            };
            row.map(|r| match (common, r.value.filter(|v| v.is_finite())) {
                (None, Some(v)) => {
                    (format!("{name} ({} {})", key.as_deref().unwrap_or("value"), format_tick(v)), *r)
                }
                _ => (name.to_string(), *r),
            })
        })
        .collect();
    let note = key.map(|key| match common {
        Some(v) => format!("each variant at {key} {}, the largest every variant ran", format_tick(v)),
        None => format!("each variant at the largest {key} it ran (no {key} ran in every variant)"),
    });
    (picked, note)
}

/// The swept value, or -inf without one, for ordering.
fn swept(r: &SummaryRow) -> f64 {
    r.value.filter(|v| v.is_finite()).unwrap_or(f64::NEG_INFINITY)
}

/// "batch_size 512", or "trial 3" without a sweep.
fn trial_label(r: &SummaryRow) -> String {
    match r.value.filter(|v| v.is_finite()) {
        Some(v) => format!("{} {}", swept_key(r.field), format_tick(v)),
        None => format!("trial {}", r.trial),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::test_support::summary;

    fn pick_trials(rows: &[SummaryRow]) -> Vec<(String, &SummaryRow)> {
        compared(rows).trials
    }

    fn comparison(rows: &[SummaryRow]) -> Option<String> {
        compared(rows).note
    }

    #[test]
    fn a_sweep_is_compared_at_the_largest_value_every_variant_ran() {
        let rows = [
            summary(1, "fp32", Some(512.0), Status::Ok),
            summary(2, "fp32", Some(1024.0), Status::Ok),
            summary(3, "fp32", Some(2048.0), Status::Oom),
            summary(4, "fp16", Some(512.0), Status::Ok),
            summary(5, "fp16", Some(1024.0), Status::Ok),
            summary(6, "fp16", Some(2048.0), Status::Ok),
        ];
        let picked: Vec<(String, usize)> =
            pick_trials(&rows).into_iter().map(|(l, r)| (l, r.trial)).collect();
        assert_eq!(picked, [("fp32".to_string(), 2), ("fp16".to_string(), 5)]);
        assert_eq!(
            comparison(&rows).as_deref(),
            Some("each variant at batch_size 1024, the largest every variant ran")
        );

        // No value that every variant ran: each its own largest.
        let rows = [
            summary(1, "a", Some(1.0), Status::Ok),
            summary(2, "a", Some(4.0), Status::Ok),
            summary(3, "b", Some(2.0), Status::Ok),
            summary(4, "c", Some(1.0), Status::Oom),
        ];
        let picked: Vec<(String, usize)> =
            pick_trials(&rows).into_iter().map(|(l, r)| (l, r.trial)).collect();
        assert_eq!(picked, [("a (batch_size 4)".to_string(), 2), ("b (batch_size 2)".to_string(), 3)]);
        assert!(comparison(&rows).is_some_and(|c| c.contains("no batch_size ran in every variant")));
    }

    #[test]
    fn variants_without_sweep_take_their_first_trial_that_ran() {
        let rows = [
            summary(1, "sgd", None, Status::Oom),
            summary(2, "sgd", None, Status::Ok),
            summary(3, "adam", None, Status::Ok),
            summary(4, "sgd", None, Status::Ok),
        ];
        let picked: Vec<(String, usize)> =
            pick_trials(&rows).into_iter().map(|(l, r)| (l, r.trial)).collect();
        assert_eq!(picked, [("sgd".to_string(), 2), ("adam".to_string(), 3)]);
        assert_eq!(comparison(&rows), None);
        // Without variants: every trial that ran, by swept value.
        let rows = [
            summary(1, "", Some(8.0), Status::Ok),
            summary(2, "", Some(2.0), Status::Ok),
            summary(3, "", Some(16.0), Status::Oom),
        ];
        let picked: Vec<(String, usize)> =
            pick_trials(&rows).into_iter().map(|(l, r)| (l, r.trial)).collect();
        assert_eq!(picked, [("batch_size 2".to_string(), 2), ("batch_size 8".to_string(), 1)]);
        let picked: Vec<String> =
            pick_trials(&[summary(7, "", None, Status::Ok)]).into_iter().map(|(l, _)| l).collect();
        assert_eq!(picked, ["trial 7"]);
    }
}
