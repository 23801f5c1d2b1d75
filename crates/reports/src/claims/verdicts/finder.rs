//! Finding a batch that fits: the guide's halving strategy against oomlab's search (guided by
//! the estimate, or bisecting; results from before either grew then bisected).
use super::{claim, not_run, pct, search_kind, Get};
use crate::claims::{Claim, Verdict};

pub(super) fn finder(get: Get) -> Claim {
    const C: &str =
        "The guide's batch-size strategy (start large, halve until it fits) finds a batch that fits";
    const E: &str = "find_batch_halving";
    let (Some(search), Some(halve)) = (get("find_batch"), get(E)) else { return not_run(C, E) };
    let exact = search.answer("").and_then(|a| a.largest_fit);
    let halved = halve.rows.iter().find(|r| r.status.fitted()).and_then(|r| r.value).map(|v| v as u64);
    let leaks =
        search.rows.iter().chain(&halve.rows).filter(|r| r.after_allocated != r.baseline_allocated).count();
    let measured = format!(
        "{}: {} in {} probes; halving: {} in {} probes; probes that leaked: {leaks}",
        search_kind(search, ""),
        exact.map_or("-".into(), |v| v.to_string()),
        search.rows.len(),
        halved.map_or("-".into(), |v| v.to_string()),
        halve.rows.len()
    );
    // The two are compared only under one budget, and only against a boundary the search met.
    if search.manifest.device.budget_bytes != halve.manifest.device.budget_bytes {
        let why = format!(
            "the two ran under different budgets ({} and {}), so their batches are not comparable; run both \
             with the same `--budget`.",
            super::budget(search),
            super::budget(halve)
        );
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    if let Some(why) = super::capped(search, &[""]) {
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let first_oom = search.answer("").and_then(|a| a.first_oom);
    let verdict = match (exact, halved) {
        (Some(x), Some(h)) if h >= x => Verdict::Confirmed,
        (Some(_), Some(_)) => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let common = "both count the first optimizer step (where the optimizer makes its state)";
    // Why a larger batch can fit where a smaller did not, where the device has a reason to give.
    let allocator = if search.manifest.device.is_cuda() {
        " (under a budget, reserved memory decides, and the caching allocator's segment rounding lets \
         a larger batch pack where a smaller one does not)"
    } else {
        ""
    };
    let why = match (exact, halved) {
        // A fit above the search's boundary: under a budget on reserved memory, fitting is not
        // monotonic in the batch (the caching allocator's segments are rounded, so a larger
        // batch can pack where a smaller one leaves a block that does not fit), and the search
        // answers the boundary it meets. Saying "not the largest" here would be false.
        (Some(x), Some(h)) if h > x => format!(
            "{common}; halving found {h}, which fit, above the search's boundary ({x} fit, {} ran out): \
             here fitting is not monotonic in the batch{allocator}, and the search answers the first \
             boundary it meets; every probe back at its baseline.",
            first_oom.map_or("-".into(), |v| v.to_string())
        ),
        _ => format!(
            "{common}; halving finds a batch that fits but not the largest ({} of the exact answer), every \
             probe back at its baseline.",
            match (exact, halved) {
                (Some(x), Some(h)) => pct(h as f64 / x as f64),
                _ => "-".into(),
            }
        ),
    };
    claim(C, E, measured, verdict, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use crate::results::manifest::Answer;
    use crate::results::ExperimentDir;
    use crate::schema::{Status, SummaryRow};

    fn dir(experiment: &str, values: &[(u64, Status)], answer: Option<Answer>) -> ExperimentDir {
        let mut m = manifest(experiment, "CPU", Some(256 << 20), 1 << 34);
        m.answers = answer.into_iter().collect();
        let rows = values
            .iter()
            .enumerate()
            .map(|(i, &(v, status))| SummaryRow {
                trial: i + 1,
                field: Some(crate::spec::Field::BatchSize),
                value: Some(v as f64),
                status,
                ..SummaryRow::default()
            })
            .collect();
        ExperimentDir { dir: experiment.into(), manifest: m, rows, trace: Vec::new(), cut_row: false }
    }

    #[test]
    fn the_search_is_named_as_its_manifest_records_it() {
        let halve = dir("find_batch_halving", &[(200, Status::Oom), (100, Status::Ok)], None);
        let answer = |strategy: Option<&str>| Answer {
            largest_fit: Some(150),
            first_oom: Some(151),
            strategy: strategy.map(str::to_string),
            ..Answer::new("", crate::spec::Field::BatchSize)
        };
        let found = [(150, Status::Ok), (151, Status::Oom)];
        for (strategy, name) in [
            (Some("guided by the estimate (predicted 150)"), "guided search: 150 in 2 probes"),
            (Some("unguided: guided = false in the spec"), "bisection: 150 in 2 probes"),
            (None, "grow-then-bisect: 150 in 2 probes"),
        ] {
            let search = dir("find_batch", &found, Some(answer(strategy)));
            let get = |e: &str| [&search, &halve].into_iter().find(|d| d.manifest.experiment == e);
            let c = finder(&get);
            assert!(c.measured.starts_with(name), "{}", c.measured);
            assert!(c.measured.contains("halving: 100 in 2 probes"), "{}", c.measured);
        }
    }

    /// An H200 under 320 MiB: the guided search's boundary was 14848 (14849 out of memory), and
    /// halving's 16384 fit. The claim holds (halving found a batch that fits) and does not call
    /// that batch smaller than the largest; below the boundary it is partly so.
    #[test]
    fn a_halving_fit_above_the_searchs_boundary_is_not_called_smaller() {
        let answer = Answer {
            largest_fit: Some(14848),
            first_oom: Some(14849),
            strategy: Some("guided by the estimate (predicted 14848)".into()),
            ..Answer::new("", crate::spec::Field::BatchSize)
        };
        let search = dir("find_batch", &[(14848, Status::Ok), (14849, Status::Oom)], Some(answer));
        let verdict = |halving: &[(u64, Status)]| {
            let halve = dir("find_batch_halving", halving, None);
            let get = |e: &str| [&search, &halve].into_iter().find(|d| d.manifest.experiment == e);
            finder(&get)
        };
        let above = verdict(&[(32768, Status::Oom), (16384, Status::Ok)]);
        assert_eq!(above.verdict, Verdict::Confirmed);
        assert!(
            above.why.contains("not monotonic") && !above.why.contains("not the largest"),
            "{}",
            above.why
        );
        let below = verdict(&[(16384, Status::Oom), (8192, Status::Ok)]);
        assert_eq!(below.verdict, Verdict::Partly);
        assert!(below.why.contains("not the largest (55.2% of the exact answer)"), "{}", below.why);
    }

    /// The comparison holds only where it means something: under one budget, against a boundary
    /// the search met; the caching allocator explains a fit above it only on CUDA.
    #[test]
    fn the_two_are_judged_under_one_budget_against_a_measured_boundary() {
        let answer = |first_oom| Answer {
            largest_fit: Some(14848),
            first_oom,
            ..Answer::new("", crate::spec::Field::BatchSize)
        };
        let judge = |search: &ExperimentDir, halve: &ExperimentDir| {
            let get = |e: &str| [search, halve].into_iter().find(|d| d.manifest.experiment == e);
            finder(&get)
        };
        let halving = [(32768, Status::Oom), (16384, Status::Ok)];
        let search =
            dir("find_batch", &[(14848, Status::Ok), (14849, Status::Oom)], Some(answer(Some(14849))));

        let mut other = dir("find_batch_halving", &halving, None);
        other.manifest.device.budget_bytes = Some(1 << 30);
        let c = judge(&search, &other);
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:#?}");
        assert!(c.why.contains("different budgets (256.00 MiB and 1.00 GiB)"), "{}", c.why);

        let capped = dir("find_batch", &[(14848, Status::Ok)], Some(answer(None)));
        let c = judge(&capped, &dir("find_batch_halving", &halving, None));
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:#?}");
        assert!(c.why.contains("reached its max"), "{}", c.why);

        let mut cpu = search;
        cpu.manifest.device.resolved = crate::device::RunDevice::Cpu;
        let mut halve = dir("find_batch_halving", &halving, None);
        halve.manifest.device.resolved = crate::device::RunDevice::Cpu;
        let c = judge(&cpu, &halve);
        assert_eq!(c.verdict, Verdict::Confirmed, "{c:#?}");
        assert!(c.why.contains("14849 ran out") && !c.why.contains("reserved"), "{}", c.why);
        assert!(!c.why.contains("Adam"), "{}", c.why);
    }
}
