//! Trading time for memory: gradient checkpointing's saving and its cost in step time, and
//! gradient accumulation's smaller peak.
use super::{claim, kept_by_forward, not_run, pct, size, Get};
use crate::claims::band::Band;
use crate::claims::{Claim, Verdict};

/// "~40-50% memory on activations".
pub(super) const ACTIVATION_SAVING: Band = Band::new(0.40, 0.50, 0.05);
/// "~20-30%" more training time.
const SLOWDOWN: Band = Band::new(0.20, 0.30, 0.05);

pub(super) fn checkpoint_memory(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing saves ~40-50% memory on activations";
    const E: &str = "checkpointing";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(none) = kept_by_forward(e, "none") else { return not_run(C, E) };
    let savings: Vec<(&str, Option<f64>)> = ["every1", "every4", "sqrt"]
        .iter()
        .map(|v| (*v, kept_by_forward(e, v).map(|k| 1.0 - k / none)))
        .collect();
    let peak = |v: &str| e.variant(v).map(|r| r.max_memory_allocated as f64);
    let peak_saving = match (peak("none"), peak("sqrt")) {
        (Some(a), Some(b)) => pct(1.0 - b / a),
        _ => "-".into(),
    };
    let measured = format!(
        "activations kept by forward: none {}; saved {}; peak saved (sqrt) {peak_saving}",
        size(none),
        savings
            .iter()
            .map(|(v, s)| format!("{v} {}", s.map_or("-".into(), pct)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let verdict = savings[2].1.map_or(Verdict::NotRun, |s| ACTIVATION_SAVING.judge(s));
    let why = format!(
        "activations = memory the forward pass leaves allocated for backward (after forward minus \
         after to_device); checkpointing keeps only segment inputs, so the saving grows with depth \
         and is not a fixed 40-50% (verdict on sqrt(n) segments: {}).",
        ACTIVATION_SAVING.rule()
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn checkpoint_time(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing increases training time by ~20-30%";
    const E: &str = "checkpointing";
    let Some(e) = get(E) else { return not_run(C, E) };
    let secs = |v: &str| e.variant(v).and_then(|r| r.step_seconds);
    let Some(none) = secs("none") else { return not_run(C, E) };
    let slower: Vec<(&str, Option<f64>)> =
        ["every1", "every4", "sqrt"].iter().map(|v| (*v, secs(v).map(|s| s / none - 1.0))).collect();
    let measured = format!(
        "step time {none:.3} s without; {}",
        slower
            .iter()
            .map(|(v, s)| format!("{v} {}", s.map_or("-".into(), |s| format!("{:+.1}%", 100.0 * s))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let verdict = slower[2].1.map_or(Verdict::NotRun, |s| SLOWDOWN.judge(s));
    let why = format!(
        "mean step time over the steps after the first; recomputing the forward of each segment \
         costs about one more forward pass, a third of a step (verdict on sqrt(n): {}). Timings on a \
         shared 2-core CPU are noisy: a benchmark, not a test.",
        SLOWDOWN.rule()
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn accumulation(get: Get) -> Claim {
    const C: &str = "Gradient accumulation gives the effect of a larger batch without its memory";
    const E: &str = "accumulation";
    let Some(e) = get(E) else { return not_run(C, E) };
    let variants = ["1024x1", "256x4", "64x16", "32x32"];
    let rows: Vec<_> = variants.iter().filter_map(|v| e.variant(v).map(|r| (*v, r))).collect();
    let Some((_, full)) = rows.first().filter(|(v, _)| *v == "1024x1") else { return not_run(C, E) };
    let measured = rows
        .iter()
        .map(|(v, r)| {
            format!(
                "{v}: {} ({}), {}",
                size(r.max_memory_allocated as f64),
                pct(r.max_memory_allocated as f64 / full.max_memory_allocated as f64),
                r.step_seconds.map_or("-".into(), |s| format!("{s:.2} s"))
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let smallest =
        rows.last().map_or(1.0, |(_, r)| r.max_memory_allocated as f64 / full.max_memory_allocated as f64);
    let verdict = if smallest < 0.9 { Verdict::Confirmed } else { Verdict::Partly };
    let why = "the accumulated gradient equals the full batch's (the test `accumulated_gradient_equals_the_full_batch` \
               checks it to 1e-5), while the peak falls with the micro-batch down to the fixed cost of \
               parameters, gradients and optimizer state; the price is time per effective batch."
        .to_string();
    claim(C, E, measured, verdict, why)
}
