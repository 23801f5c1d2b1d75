//! The guides' worked examples, run as written: answer 004's OOM at batch 1024, its batch 64 and
//! its 64 x 16 accumulation; guide 002's 1000-1000-10 checkpointing example.
use super::checkpointing::ACTIVATION_SAVING;
use super::{claim, kept_by_forward, neither_fit_nor_oom, not_run, pct, size, Get};
use crate::claims::conditions::Conditions;
use crate::claims::{Claim, Verdict};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Answer 004's GPU: "likely out of 8 GB".
const ANSWER004: Conditions =
    Conditions { budget: Some(("8GiB", "answer 004's 8 GB GPU")), sizes: &[], settings: &[] };

pub(super) fn answer004_oom(get: Get) -> Claim {
    answer004_oom_judged(get).under(ANSWER004)
}

fn answer004_oom_judged(get: Get) -> Claim {
    const C: &str = "A 1000-2000-1000-10 MLP at batch 1024 is likely to run out of 8 GB (answer 004)";
    const E: &str = "answer004";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(r) = e.variant("batch1024") else { return not_run(C, E) };
    let budget = e.manifest.device.budget_bytes.map_or(8.0 * GIB, |b| b as f64);
    if let Some(unknown) = neither_fit_nor_oom(C, E, r) {
        return unknown;
    }
    if !r.status.fitted() {
        let m = format!("{} in {}", r.status, r.phase.map(|p| p.to_string()).unwrap_or_default());
        return claim(C, E, m, Verdict::Confirmed, "batch 1024 ran out of the budget.".into());
    }
    let peak = r.max_memory_allocated as f64;
    let measured = format!(
        "batch 1024 trained: peak {} ({} of {}), {} parameters",
        size(peak),
        pct(peak / budget),
        size(budget),
        r.param_count
    );
    let with_state = super::Kept::of(r).map_or_else(String::new, |k| {
        format!("; {} with its gradients and {}", size((r.param_count * k.bytes) as f64), k.state)
    });
    let why = format!(
        "the model holds {} parameters ({}{with_state}), and a batch of 1024 keeps a few [1024, 2000] \
         activations of 8 MB: about a hundredth of 8 GB. The answer's OOM needs a model or a batch a \
         hundred times larger.",
        r.param_count,
        size(r.param_bytes as f64)
    );
    claim(C, E, measured, Verdict::Refuted, why)
}

pub(super) fn answer004_accumulation(get: Get) -> Claim {
    const C: &str =
        "Accumulating 16 batches of 64 simulates batch 1024 in the memory of batch 64 (answer 004)";
    const E: &str = "answer004";
    let Some(e) = get(E) else { return not_run(C, E) };
    let ok = |v: &str| e.variant(v).filter(|r| r.status.fitted());
    let (Some(full), Some(small), Some(acc)) = (ok("batch1024"), ok("batch64"), ok("64x16")) else {
        return not_run(C, E);
    };
    let (Some(l_full), Some(l_acc)) = (full.final_loss, acc.final_loss) else { return not_run(C, E) };
    let loss_diff = (l_acc - l_full).abs() / l_full.abs().max(f64::MIN_POSITIVE);
    let peak = |r: &crate::schema::SummaryRow| r.max_memory_allocated as f64;
    let measured = format!(
        "peaks: 1024 {}, 64 {}, 64 x 16 {}; loss after the last step: 1024 {l_full:.6}, 64 x 16 \
         {l_acc:.6} (relative difference {loss_diff:.1e})",
        size(peak(full)),
        size(peak(small)),
        size(peak(acc))
    );
    let same_memory = peak(acc) <= peak(small) * 1.01;
    let same_training = loss_diff < 1e-4;
    let verdict = match (same_memory, same_training) {
        (true, true) => Verdict::Confirmed,
        (false, false) => Verdict::Refuted,
        _ => Verdict::Partly,
    };
    let why = "the two steps draw the same 1024 samples either way; the loss after the first update is \
               the mean over all 16 micro-batches of the last step, so it equals batch 1024's when the \
               accumulated gradient does (to float rounding: confirmed below 1e-4 relative), and the \
               peak is batch 64's when within 1%. oomlab divides each micro-batch's loss by 16; the \
               answer's loop does not, so its gradient is 16 times the mean (Adam barely notices, SGD \
               would take a 16 times larger step)."
        .to_string();
    claim(C, E, measured, verdict, why)
}

pub(super) fn checkpoint_example(get: Get) -> Claim {
    const C: &str = "Checkpointing layer1 and layer2 of the 1000-1000-10 example saves ~40-50% memory on \
                     activations (guide 002)";
    const E: &str = "checkpoint_example";
    let Some(e) = get(E) else { return not_run(C, E) };
    let kept = |v: &str| kept_by_forward(e, v);
    let (Some(none), Some(each), Some(both)) = (kept("none"), kept("each_layer"), kept("both_layers")) else {
        return not_run(C, E);
    };
    let saving = |k: f64| 1.0 - k / none;
    let measured = format!(
        "activations kept by forward: none {}, each layer alone {} (saved {}), both in one segment {} \
         (saved {})",
        size(none),
        size(each),
        pct(saving(each)),
        size(both),
        pct(saving(both))
    );
    let why = format!(
        "the guide checkpoints each layer on its own: a checkpointed segment keeps its input for the \
         recompute, which is what its Linear saved anyway, so nothing is saved and a forward is \
         recomputed; putting both layers in one segment drops the activation between them. Verdict \
         on the guide's way (each layer alone): {}.",
        ACTIVATION_SAVING.rule()
    );
    claim(C, E, measured, ACTIVATION_SAVING.judge(saving(each)), why)
}
