//! Finding a batch that fits: the guide's halving strategy against oomlab's grow-then-bisect
//! search.
use super::{claim, not_run, pct, Get};
use crate::claims::{Claim, Verdict};
use crate::schema::Status;

pub(super) fn finder(get: Get) -> Claim {
    const C: &str =
        "The guide's batch-size strategy (start large, halve until it fits) finds a batch that fits";
    const E: &str = "find_batch_halving";
    let (Some(search), Some(halve)) = (get("find_batch"), get(E)) else { return not_run(C, E) };
    let exact = search.answer("").and_then(|a| a.largest_fit);
    let halved = halve.rows.iter().find(|r| r.status == Status::Ok).and_then(|r| r.value).map(|v| v as u64);
    let leaks =
        search.rows.iter().chain(&halve.rows).filter(|r| r.after_allocated != r.baseline_allocated).count();
    let measured = format!(
        "grow-then-bisect: {} in {} probes; halving: {} in {} probes; probes that leaked: {leaks}",
        exact.map_or("-".into(), |v| v.to_string()),
        search.rows.len(),
        halved.map_or("-".into(), |v| v.to_string()),
        halve.rows.len()
    );
    let verdict = match (exact, halved) {
        (Some(x), Some(h)) if h == x => Verdict::Confirmed,
        (Some(_), Some(_)) => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let why = format!(
        "both count the first optimizer step (where Adam makes its state); halving finds a batch that \
         fits but not the largest ({} of the exact answer), every probe back at its baseline.",
        match (exact, halved) {
            (Some(x), Some(h)) => pct(h as f64 / x as f64),
            _ => "-".into(),
        }
    );
    claim(C, E, measured, verdict, why)
}
