//! What the model assumes about the run ([`Options`]): the target's allocator, libtorch's thread
//! count, the CUDA allocator's limit and the workspaces there before every trial.
use serde::Serialize;

use super::{GpuArch, Target, Workspaces};
use crate::spec::Config;

/// What the model assumes about the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Options {
    pub target: Target,
    /// libtorch's intra-op threads: a CPU reduction of a whole tensor to one number (the
    /// checkpointed backward's `sum`) takes a buffer of one result per thread.
    pub threads: usize,
    /// The budget as the allocator enforces it, if any: on CUDA the caching allocator's limit
    /// (a trial fits when the replay never needs a segment past it); on the CPU the counting
    /// allocator's cap (the first allocation past it is the one a run's OOM names).
    pub limit: Option<u64>,
    /// CUDA: the workspaces libtorch keeps for the process, there before every trial.
    pub workspaces: Workspaces,
    /// CUDA: the GPU's generation (its SM count sizes a reduction's staging buffer).
    pub gpu: GpuArch,
    /// A TorchScript module's recorded estimate: how long its batch ladder may record before the
    /// larger sets are left untried (`None`: every set). `advise`, which records a step for each
    /// of dozens of options, sets one; a single estimate waits for every set.
    #[serde(skip)]
    pub ladder_budget: Option<std::time::Duration>,
    /// A TorchScript module's recorded estimate past its recorded batches: checked by a
    /// recording of a step like it at the batch (one micro-batch, the foreach optimizer), shared
    /// by every option at that micro-batch, rather than by a recording of its own each. `advise`
    /// sets it; a single estimate records its own.
    #[serde(skip)]
    pub shared_checks: bool,
    /// The rank predicted where ranks differ (ZeRO's shards): `None`, the rank whose shard is
    /// the largest (the one whose optimizer state is the most); DDP's ranks are all alike.
    pub rank: Option<usize>,
}

impl Default for Options {
    /// The CPU, and this process's thread count.
    fn default() -> Self {
        Options {
            target: Target::Cpu,
            threads: tch::get_num_threads().max(1) as usize,
            limit: None,
            workspaces: Workspaces::default(),
            gpu: GpuArch::default(),
            ladder_budget: None,
            shared_checks: false,
            rank: None,
        }
    }
}

impl Options {
    /// CUDA on a GPU of `arch`, for a run of `configs` (whose warm-up makes the workspaces).
    pub fn cuda<'a>(arch: GpuArch, configs: impl IntoIterator<Item = &'a Config>) -> Self {
        Options {
            target: Target::Cuda,
            workspaces: Workspaces::for_run(arch, configs),
            gpu: arch,
            ..Options::default()
        }
    }

    /// With `budget` as the allocator's limit: on CUDA the caching allocator's, which decides
    /// what fits; on the CPU the counting allocator's cap, which a trial fits when its peak does,
    /// and which names the allocation it would refuse (what the run's OOM says it "tried to
    /// allocate").
    pub fn under(self, budget: Option<u64>) -> Self {
        Options { limit: budget, ..self }
    }

    /// For rank `rank` of a world whose ranks differ (ZeRO's).
    pub fn at_rank(self, rank: usize) -> Self {
        Options { rank: Some(rank), ..self }
    }
}
