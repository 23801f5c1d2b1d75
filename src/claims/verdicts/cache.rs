//! The caching allocator: reserved memory is never below allocated, the gap being its cache.
use super::{claim, not_run, size, Get};
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;

pub(super) fn reserved(get: Get) -> Claim {
    const C: &str =
        "Reserved memory is at least the allocated memory; the gap is the caching allocator's cache";
    let all: Vec<&Experiment> = crate::claims::EXPERIMENTS.iter().filter_map(|n| get(n)).collect();
    let Some(first) = all.first() else { return not_run(C, "all") };
    if first.manifest.device.resolved == "cpu" {
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
