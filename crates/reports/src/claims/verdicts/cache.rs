//! The caching allocator: reserved memory is never below allocated, the gap being its cache.
use super::{claim, not_run, size, Get};
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;

pub(super) fn reserved(get: Get) -> Claim {
    const C: &str =
        "Reserved memory is at least the allocated memory; the gap is the caching allocator's cache";
    let all: Vec<&Experiment> = crate::claims::EXPERIMENTS.iter().filter_map(|n| get(n)).collect();
    let Some(first) = all.first() else { return not_run(C, "all") };
    if !first.manifest.device.is_cuda() {
        return claim(
            C,
            "all",
            "reserved = allocated in every row".into(),
            Verdict::NotTestable,
            "the CPU has no caching allocator: oomlab's counting allocator reports reserved = allocated. \
             Run the experiments on a GPU to test it."
                .into(),
        );
    }
    let rows = all.iter().flat_map(|e| e.trace.iter());
    let (mut below, mut max_gap, mut n) = (0usize, 0u64, 0usize);
    for t in rows {
        n += 1;
        if t.memory_reserved < t.memory_allocated {
            below += 1;
        }
        max_gap = max_gap.max(t.memory_reserved.saturating_sub(t.memory_allocated));
    }
    let verdict = if below == 0 { Verdict::Confirmed } else { Verdict::Refuted };
    claim(
        C,
        "all",
        format!("{below} of {n} phase ends had reserved < allocated; largest cache {}", size(max_gap as f64)),
        verdict,
        "every phase end of every experiment, from the caching allocator's own counters.".into(),
    )
}

/// The summary rows that recorded reserved memory around the final `empty_cache`.
fn released_rows<'a>(all: &[&'a Experiment]) -> Vec<&'a crate::schema::SummaryRow> {
    all.iter()
        .flat_map(|e| e.rows.iter())
        .filter(|r| r.released_reserved.is_some() && r.emptied_reserved.is_some())
        .collect()
}

pub(super) fn empty_cache(get: Get) -> Claim {
    const C: &str = "`del` and `torch.cuda.empty_cache()` free memory";
    let all: Vec<&Experiment> = crate::claims::EXPERIMENTS.iter().filter_map(|n| get(n)).collect();
    let rows = released_rows(&all);
    let Some(first) = all.first() else { return not_run(C, "all") };
    if rows.is_empty() {
        return claim(
            C,
            "all",
            "-".into(),
            Verdict::NotRun,
            "these results were made before oomlab recorded reserved memory around each trial's final \
             `empty_cache` (`released_reserved`, `emptied_reserved` in summary.csv): run the experiments \
             again."
                .into(),
        );
    }
    let back = rows.iter().filter(|r| r.after_allocated == r.baseline_allocated).count();
    let del = format!(
        "after each trial's tensors are dropped, allocated is back at its baseline in {back} of {} trials",
        rows.len()
    );
    if !first.manifest.device.is_cuda() {
        return claim(
            C,
            "all",
            format!("{del}; reserved = allocated"),
            Verdict::NotTestable,
            "dropping the last reference frees a tensor's memory at once (the `del` half, measured); the \
             CPU has no cache for `empty_cache` to return. Run the experiments on a GPU to test it."
                .into(),
        );
    }
    let (mut held, mut returned, mut largest) = (0u64, 0u64, 0u64);
    for r in &rows {
        let (released, emptied) = (r.released_reserved.unwrap_or(0), r.emptied_reserved.unwrap_or(0));
        held += released.saturating_sub(r.after_allocated);
        returned += released.saturating_sub(emptied);
        largest = largest.max(released.saturating_sub(r.after_allocated));
    }
    let share = if held == 0 { 1.0 } else { returned as f64 / held as f64 };
    let verdict = match (back == rows.len(), share >= 0.9) {
        (true, true) => Verdict::Confirmed,
        (false, false) => Verdict::Refuted,
        _ => Verdict::Partly,
    };
    claim(
        C,
        "all",
        format!(
            "{del}; the cache then still held up to {} (reserved minus allocated), of which \
             empty_cache returned {} overall",
            size(largest as f64),
            super::pct(share)
        ),
        verdict,
        "`del` frees the tensor to the caching allocator, not to the GPU: reserved stays until \
         `empty_cache` returns the wholly free segments (confirmed when allocated is back at its \
         baseline after every trial and empty_cache returns 90% or more of what the cache held)."
            .into(),
    )
}
