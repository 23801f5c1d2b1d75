//! The order of the options: those predicted to fit first, fastest first (time per sample, an
//! epoch's, so that a smaller batch compares fairly; by how little they change where there are
//! no times), then the borderline, then those that do not fit from the
//! nearest miss; and which fitting option changes the least.
use std::cmp::Ordering;

use super::evaluate::{Evaluated, Verdict};

/// The options ranked (each given its rank, from 1, and its time relative to the spec as
/// written), and the rank of the smallest change that fits.
pub fn rank(mut options: Vec<Evaluated>, written: &Evaluated) -> (Vec<Evaluated>, Option<usize>) {
    for o in &mut options {
        o.relative_time = o.seconds_per_sample().zip(written.seconds_per_sample()).map(|(t, w)| t / w);
    }
    options.sort_by(order);
    let listed: Vec<bool> =
        options.iter().map(|o| o.verdict == Verdict::Fits && !adds_nothing(o, &options)).collect();
    for (i, (o, listed)) in options.iter_mut().zip(listed).enumerate() {
        o.rank = i + 1;
        o.listed = listed;
    }
    let smallest = options
        .iter()
        .filter(|o| o.verdict == Verdict::Fits)
        .min_by(|a, b| {
            (a.effect, a.candidate.changes.len())
                .cmp(&(b.effect, b.candidate.changes.len()))
                .then_with(|| by_time(a, b))
                .then(b.peak.cmp(&a.peak))
        })
        .map(|o| o.rank);
    (options, smallest)
}

/// An option adds a change to another that fits for less than this share of the time.
pub const NO_GAIN: f64 = 0.02;

/// Whether a fitting option with a strict subset of `o`'s changes is within [`NO_GAIN`] of its
/// time: then `o`'s extra change buys nothing worth listing.
pub fn adds_nothing(o: &Evaluated, all: &[Evaluated]) -> bool {
    let changes = &o.candidate.changes;
    all.iter().any(|p| {
        p.verdict == Verdict::Fits
            && p.candidate.changes.len() < changes.len()
            && p.candidate.changes.iter().all(|c| changes.contains(c))
            && match (p.seconds_per_sample(), o.seconds_per_sample()) {
                (Some(pt), Some(ot)) => pt <= ot * (1.0 + NO_GAIN),
                _ => true,
            }
    })
}

fn order(a: &Evaluated, b: &Evaluated) -> Ordering {
    a.verdict.cmp(&b.verdict).then_with(|| match a.verdict {
        // Without times, the least disruptive first: fewest changes, then the one that keeps the
        // most of what was written (the highest peak that fits: the largest micro-batch).
        Verdict::Fits => by_time(a, b)
            .then((a.effect, a.candidate.changes.len()).cmp(&(b.effect, b.candidate.changes.len())))
            .then(b.peak.cmp(&a.peak)),
        _ => a.peak.cmp(&b.peak),
    })
}

/// Faster first; an option without a time after those with one.
fn by_time(a: &Evaluated, b: &Evaluated) -> Ordering {
    match (a.seconds_per_sample(), b.seconds_per_sample()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::advise::candidates::{enumerate, Effect};
    use crate::spec::examples::mlp as config;
    use crate::spec::OptimizerSpec;

    const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };

    pub(in crate::advise) fn evaluated(
        describe: &str,
        verdict: Verdict,
        peak: u64,
        secs: Option<f64>,
        changes: usize,
    ) -> Evaluated {
        let mut c = enumerate(&config(3, 16, 32, ADAM), false, None)
            .into_iter()
            .find(|c| c.changes.len() == changes && c.effect() == Effect::Same)
            .unwrap();
        c.changes.truncate(changes);
        Evaluated {
            rank: 0,
            describe: describe.into(),
            effect: c.effect(),
            candidate: c,
            verdict,
            peak,
            peak_allocated: peak,
            headroom: 0,
            over_in: None,
            step_seconds: secs,
            relative_time: None,
            error: None,
            listed: false,
        }
    }

    #[test]
    fn fitting_options_by_time_then_misses_by_how_near() {
        let written = evaluated("written", Verdict::Oom, 100, Some(2.0), 0);
        let options = vec![
            evaluated("far miss", Verdict::Oom, 300, Some(1.0), 1),
            evaluated("slow fit, one change", Verdict::Fits, 50, Some(4.0), 1),
            evaluated("near miss", Verdict::Oom, 101, Some(1.0), 1),
            evaluated("fast fit, two changes", Verdict::Fits, 60, Some(3.0), 2),
            evaluated("borderline", Verdict::Borderline, 99, Some(0.5), 1),
        ];
        let (ranked, smallest) = rank(options, &written);
        let names: Vec<&str> = ranked.iter().map(|o| o.describe.as_str()).collect();
        assert_eq!(
            names,
            ["fast fit, two changes", "slow fit, one change", "borderline", "near miss", "far miss"]
        );
        assert_eq!(smallest, Some(2), "one change beats two, whatever the time");
        assert_eq!(ranked[0].relative_time, Some(1.5));
        assert_eq!(ranked.iter().map(|o| o.rank).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn without_times_the_fewest_changes_come_first() {
        let written = evaluated("written", Verdict::Oom, 100, None, 0);
        let options =
            vec![evaluated("two", Verdict::Fits, 10, None, 2), evaluated("one", Verdict::Fits, 90, None, 1)];
        let (ranked, smallest) = rank(options, &written);
        assert_eq!(ranked[0].describe, "one");
        assert_eq!(smallest, Some(1));
        // Among equal changes, the highest peak that fits: the least taken from what was written.
        let (ranked, _) = rank(
            vec![
                evaluated("small micro", Verdict::Fits, 10, None, 1),
                evaluated("large micro", Verdict::Fits, 80, None, 1),
            ],
            &written,
        );
        assert_eq!(ranked[0].describe, "large micro");
        let (_, none) = rank(vec![evaluated("miss", Verdict::Oom, 200, None, 1)], &written);
        assert_eq!(none, None);
    }

    #[test]
    fn an_added_change_is_listed_only_when_it_buys_time() {
        let written = evaluated("written", Verdict::Oom, 100, Some(2.0), 0);
        let two = evaluated("two", Verdict::Fits, 50, Some(0.995), 2);
        let mut one = two.clone();
        one.candidate.changes.truncate(1);
        let one = Evaluated { describe: "one".into(), step_seconds: Some(1.0), ..one };
        let (ranked, _) = rank(vec![two.clone(), one.clone()], &written);
        let listed = |r: &[Evaluated], d: &str| r.iter().find(|o| o.describe == d).unwrap().listed;
        assert!(listed(&ranked, "one") && !listed(&ranked, "two"), "0.5% faster is no gain");
        let faster = Evaluated { step_seconds: Some(0.5), ..two };
        let (ranked, _) = rank(vec![faster, one], &written);
        assert!(listed(&ranked, "one") && listed(&ranked, "two"), "twice as fast is");
        let miss = evaluated("miss", Verdict::Oom, 200, Some(0.1), 1);
        assert!(!rank(vec![miss], &written).0[0].listed, "what does not fit is not listed");
    }
}
