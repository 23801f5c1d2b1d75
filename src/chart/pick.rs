//! Which trial stands for each variant on the charts that compare variants (memory by category,
//! time against memory): its first trial that ran; in a sweep, the one at the largest swept
//! value every variant ran, so that the charts compare like with like.
use super::scale::swept_key;
use crate::schema::SummaryRow;
use crate::units::format_tick;

/// The trial that stands for each variant, with the variant's name, in the order the variants
/// first appear. Only trials that ran count. In a sweep, the largest swept value at which
/// every variant ran; when there is none, each variant's largest value that ran. Without
/// variants (all names empty), every trial that ran, labelled "trial N" or "<key> <value>".
pub fn pick_trials(rows: &[SummaryRow]) -> Vec<(String, &SummaryRow)> {
    choose(rows).0
}

/// Which swept value the picked trials are compared at, for the reader: "each variant at
/// batch_size 8192, the largest every variant ran", or None without a sweep or variants.
pub fn comparison(rows: &[SummaryRow]) -> Option<String> {
    choose(rows).1
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
    let common = rows
        .iter()
        .filter_map(|r| r.value.filter(|v| v.is_finite()))
        .filter(|&v| variants.iter().all(|name| ok.iter().any(|r| r.variant == *name && r.value == Some(v))))
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
    use crate::schema::Status;

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
