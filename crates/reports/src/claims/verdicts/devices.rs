//! What one device's allocator cannot see: the CUDA context beside it, and several GPUs.
use super::{claim, not_run, size, Get};
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;

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

pub(super) fn multi_gpu(_get: Get) -> Claim {
    claim(
        "Multi-GPU training (DataParallel, DistributedDataParallel) scales memory linearly",
        "none",
        "-".into(),
        Verdict::NotTestable,
        "it needs several GPUs in one job; oomlab measures one device per process. What it can show: \
         how a model's memory splits into what data parallelism copies to every GPU (parameters, \
         gradients, optimizer state) and what it divides (activations and the batch), in \
         `memory_breakdown`; and results from different GPUs side by side (`oomlab compare`)."
            .into(),
    )
}
