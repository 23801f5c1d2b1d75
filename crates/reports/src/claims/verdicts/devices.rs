//! What one device's allocator cannot see: the CUDA context beside it; and several GPUs, each
//! rank its own process and allocator.
use super::{claim, not_run, pct, size, Get};
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;
use crate::schema::Phase;

/// "~500MB-2GB".
const CONTEXT: (f64, f64) = (500e6, 2e9);

pub(super) fn cuda_context(get: Get) -> Claim {
    const C: &str = "The CUDA context takes ~500 MB-2 GB";
    let all: Vec<&Experiment> = crate::claims::EXPERIMENTS.iter().filter_map(|n| get(n)).collect();
    let Some(first) = all.first() else { return not_run(C, "all") };
    if !first.manifest.device.is_cuda() {
        return claim(
            C,
            "all",
            "-".into(),
            Verdict::NotTestable,
            "a CPU has no CUDA context. On a GPU oomlab records NVML's used memory (`device_used`) beside \
             the allocator's reserved memory; their difference before a trial allocates is the context \
             (with the libraries' handles and what the driver keeps)."
                .into(),
        );
    }
    // Each experiment's first phase end: the process has its context, the allocator little.
    let outside: Vec<f64> = all
        .iter()
        .filter_map(|e| e.trace.first())
        .filter_map(|t| Some(t.device_used? as f64 - t.memory_reserved as f64))
        .collect();
    if outside.is_empty() {
        return claim(
            C,
            "all",
            "no device_used recorded".into(),
            Verdict::NotRun,
            "NVML was not reachable when these ran, or they traced with `--trace off`.".into(),
        );
    }
    let lo = outside.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = outside.iter().copied().fold(0.0, f64::max);
    let inside = |x: f64| x >= CONTEXT.0 && x <= CONTEXT.1;
    let verdict = match (inside(lo), inside(hi)) {
        (true, true) => Verdict::Confirmed,
        (false, false) => Verdict::Refuted,
        _ => Verdict::Partly,
    };
    claim(
        C,
        "all",
        format!("device used beyond reserved at each experiment's start: {} to {}", size(lo), size(hi)),
        verdict,
        "NVML's used memory minus the caching allocator's reserved at the end of each experiment's \
         first phase, over the experiments run; confirmed when all are within 500 MB-2 GB. NVML counts \
         the whole device: on a GPU shared with other processes their memory is in it too."
            .into(),
    )
}

/// The guides' "Multi-GPU Training: linear scaling", read for memory: N GPUs each holding
/// 1/N of one GPU's. Judged on `ddp`: one global batch over 1, 2 and 4 DDP ranks, each rank a
/// process with its own allocator.
pub(super) fn multi_gpu(get: Get) -> Claim {
    const C: &str = "Multi-GPU training (DataParallel, DistributedDataParallel) scales memory linearly";
    const E: &str = "ddp";
    let Some(e) = get(E) else { return not_run(C, E) };
    // Each variant's rows that trained, by world size: (world, per-rank peak, trial).
    let worlds = |variant: &str| -> Vec<(usize, u64, usize)> {
        let mut w: Vec<_> = e
            .rows
            .iter()
            .filter(|r| r.variant == variant && r.status.fitted())
            .filter_map(|r| Some((r.world_size?, r.max_memory_allocated, r.trial)))
            .collect();
        w.sort_unstable();
        w
    };
    let default = worlds("buckets");
    let (Some(&(one, at_one, first)), Some(&(most, at_most, last))) = (default.first(), default.last())
    else {
        return not_run(C, E);
    };
    if one != 1 || most < 2 {
        return claim(
            C,
            E,
            "-".into(),
            Verdict::NotJudged,
            "the run has no trial at one rank and one at several to set side by side.".into(),
        );
    }
    let ratio = at_most as f64 / at_one as f64;
    let linear = 1.0 / most as f64;
    let peaks = |rows: &[(usize, u64, usize)]| {
        rows.iter().map(|&(w, p, _)| format!("{} at {w}", size(p as f64))).collect::<Vec<_>>().join(", ")
    };
    let views = worlds("bucket_view");
    let views = if views.is_empty() {
        String::new()
    } else {
        format!("; with gradient_as_bucket_view {}", peaks(&views))
    };
    // ZeRO stage 1 on the same ranks: the largest rank's peak (the one with the largest shard of
    // the optimizer's state; a trial's row is its highest rank).
    let zero = worlds("zero");
    let zero_at_most = zero.iter().find(|&&(w, _, _)| w == most).map(|&(_, p, _)| p);
    let zero = match zero_at_most {
        Some(p) => format!(
            "; with ZeRO stage 1 (ZeroRedundancyOptimizer) {}, at {most} ranks {} of one rank's",
            peaks(&zero),
            pct(p as f64 / at_one as f64)
        ),
        None => String::new(),
    };
    // What the forward keeps for the backward: the part of a rank that its batch share divides.
    let kept = |trial: usize| {
        Some(
            e.allocated_after(trial, 1, Phase::Forward)? as f64
                - e.allocated_after(trial, 1, Phase::ToDevice)? as f64,
        )
    };
    let activations = match (kept(first), kept(last)) {
        (Some(a), Some(b)) => format!(
            " (the activations a rank keeps for its backward: {} at 1 rank, {} at {most})",
            size(a),
            size(b)
        ),
        _ => String::new(),
    };
    let measured = format!(
        "per-rank peak at one global batch of {}: {} ranks{views}; at {most} ranks {} of one rank's (linear: {}){zero}",
        e.variant("buckets").map_or(0, |r| r.batch_size * r.world_size.unwrap_or(1)),
        peaks(&default),
        pct(ratio),
        pct(linear)
    );
    let verdict = if ratio <= 1.1 * linear {
        Verdict::Confirmed
    } else if ratio >= 0.9 {
        Verdict::Refuted
    } else {
        Verdict::Partly
    };
    claim(
        C,
        E,
        measured,
        verdict,
        format!(
            "read for memory, linear scaling is N GPUs each holding 1/N of one GPU's: confirmed when the \
             per-rank peak at {most} ranks is within 10% of 1/{most} of one rank's, refuted when it is over 90% of \
             it. DistributedDataParallel keeps the whole model, its gradients and the optimizer's state on every \
             rank and adds its gradient buckets (a second copy of the gradients, unless \
             gradient_as_bucket_view); only the batch and the activations divide{activations}. So the global \
             batch grows with the ranks, each taking its share, but what one GPU must hold does not fall: a \
             model whose states do not fit one GPU does not fit N under DDP. ZeRO stage 1 (strategy = \"zero\") \
             keeps on each rank the optimizer's state of its shard of the parameters only, so Adam's two moments \
             divide over the ranks; the parameters, the gradients and DDP's buckets do not, and the step's own \
             temporaries follow the rank's largest parameters. Measured on CPU ranks over gloo, each a process \
             with its own allocator, held to PyTorch's DDP and ZeroRedundancyOptimizer; on GPUs NCCL's own \
             buffers come beside. `oomlab estimate` answers for a rank at any world size."
        ),
    )
}
