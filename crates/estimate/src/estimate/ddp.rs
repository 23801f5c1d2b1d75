//! DistributedDataParallel's gradient buckets, laid out as its reducer lays them out, from the
//! parameters' sizes alone: what each rank holds besides its gradients (one flat buffer per
//! bucket), at any world size, without ranks.
//!
//! The rules, from PyTorch 2.11 (`torch/nn/parallel/distributed.py`'s `_ddp_init_helper`,
//! `c10d::compute_bucket_assignment_by_size` and `Reducer::rebuild_buckets` in
//! `torch/csrc/distributed/c10d/reducer.cpp`):
//!
//! - A bucket gathers parameters of one dtype (and device) in the order given until its bytes
//!   reach the current limit; then the next limit applies, the last one for every bucket after.
//!   What is left open at the end makes a last bucket. Given in parameter order, the buckets are
//!   sorted by their first parameter; given in the order the gradients came, they stay so.
//! - At the wrap (the first step's buckets): without `find_unused_parameters` (or with a static
//!   graph) one limit of `usize::MAX`, so one bucket of every parameter; else the limits
//!   `[first_bucket, cap]` (1 MiB and 25 MiB by default; `[cap]` when `bucket_cap_mb` is
//!   given). The reducer takes them last bucket first (`reversed(bucket_indices)`).
//! - At the second step's forward, unless it looks for unused parameters without a static graph,
//!   the reducer rebuilds them in the order the first backward's gradients came, limits
//!   `[first_bucket, cap]` (the first bucket the cap itself when `bucket_cap_mb` is given).
use oomlab_torch::ffi::dist::DdpOptions;

/// DDP's default `bucket_cap_mb` (25 MiB) and `dist._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB).
pub const DEFAULT_CAP: u64 = 25 << 20;
pub const DEFAULT_FIRST: u64 = 1 << 20;
/// `_sync_module_states`'s `broadcast_bucket_size`: the wrap broadcasts rank 0's parameters
/// in flat buffers of up to 250 MiB.
pub const BROADCAST_BUCKET: u64 = 250 << 20;

/// A parameter as the reducer sees it: its bytes, and what may share a bucket with it (its dtype
/// and device, as one key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub bytes: u64,
    pub key: u32,
}

/// A bucket: the parameters it holds (their indices in the module's order) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub params: Vec<usize>,
    pub bytes: u64,
}

/// `compute_bucket_assignment_by_size` over `order` (indices into `params`): buckets of one key
/// each, closed as they reach the current limit. `ready` says `order` is the order the gradients
/// came (the buckets keep it); otherwise it is the parameters' order and the buckets are sorted
/// by their first parameter.
pub fn assign(params: &[Param], order: &[usize], limits: &[u64], ready: bool) -> Vec<Bucket> {
    assert!(!limits.is_empty(), "a bucket limit");
    // Per key, in the order each key first appears: the open bucket and which limit applies.
    let mut open: Vec<(u32, Bucket, usize)> = Vec::new();
    let mut out = Vec::new();
    for &i in order {
        let p = params[i];
        let at = match open.iter().position(|(k, ..)| *k == p.key) {
            Some(at) => at,
            None => {
                open.push((p.key, Bucket { params: Vec::new(), bytes: 0 }, 0));
                open.len() - 1
            }
        };
        let (_, bucket, limit) = &mut open[at];
        bucket.params.push(i);
        bucket.bytes += p.bytes;
        if bucket.bytes >= limits[*limit] {
            out.push(std::mem::replace(bucket, Bucket { params: Vec::new(), bytes: 0 }));
            *limit = (*limit + 1).min(limits.len() - 1);
        }
    }
    // What is left open. (The reducer walks a hash map of keys here; with one dtype, as every
    // model oomlab trains has, there is one.)
    out.extend(open.into_iter().map(|(_, b, _)| b).filter(|b| !b.params.is_empty()));
    if !ready {
        out.sort_by_key(|b| b.params.iter().copied().min());
    }
    out
}

/// The buckets the reducer is made with, in its order.
pub fn at_wrap(params: &[Param], opts: &DdpOptions) -> Vec<Bucket> {
    let limits = if opts.static_graph || !opts.find_unused_parameters {
        vec![u64::MAX]
    } else {
        match opts.bucket_cap_bytes {
            None => vec![DEFAULT_FIRST, DEFAULT_CAP],
            Some(cap) => vec![cap],
        }
    };
    let order: Vec<usize> = (0..params.len()).collect();
    let mut buckets = assign(params, &order, &limits, false);
    buckets.reverse();
    buckets
}

/// What a rank's wrap leaves allocated once it returns: its buckets' flat buffers and nothing
/// else the CPU allocator counts (measured: `tests/suite/ddp_engine.rs`). Rank 0's broadcast
/// of the parameters and buffers is transient.
pub fn wrap_bytes(params: &[Param], opts: &DdpOptions) -> u64 {
    at_wrap(params, opts).iter().map(|b| b.bytes).sum()
}

/// Whether the reducer rebuilds its buckets at the second step (`should_rebuild_buckets`).
pub fn rebuilds(opts: &DdpOptions) -> bool {
    opts.static_graph || !opts.find_unused_parameters
}

/// The buckets rebuilt at the second step's forward, from the order the first backward's
/// gradients came in (`ready`: indices into `params`).
pub fn rebuilt(params: &[Param], ready: &[usize], opts: &DdpOptions) -> Vec<Bucket> {
    let (first, cap) = match opts.bucket_cap_bytes {
        None => (DEFAULT_FIRST, DEFAULT_CAP),
        Some(cap) => (cap, cap),
    };
    assign(params, ready, &[first, cap], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(sizes: &[u64]) -> Vec<Param> {
        sizes.iter().map(|&n| Param { bytes: 4 * n, key: 0 }).collect()
    }

    /// An MLP 3-16-8-2's parameters: weight, bias per layer.
    fn mlp() -> Vec<Param> {
        floats(&[48, 16, 128, 8, 16, 2])
    }

    #[test]
    fn the_first_steps_bucket_holds_every_parameter_unless_unused_ones_are_looked_for() {
        let b = at_wrap(&mlp(), &DdpOptions::default());
        assert_eq!(b, [Bucket { params: (0..6).collect(), bytes: 872 }]);
        let looked =
            DdpOptions { find_unused_parameters: true, bucket_cap_bytes: Some(256), ..Default::default() };
        // Parameter order, closed at 256 bytes: [w1 b1] (256), [w2] (512), [b2 w3 b3] (104);
        // the reducer takes them last first.
        let b = at_wrap(&mlp(), &looked);
        let params: Vec<Vec<usize>> = b.iter().map(|b| b.params.clone()).collect();
        assert_eq!(params, [vec![3, 4, 5], vec![2], vec![0, 1]]);
        assert_eq!(b.iter().map(|b| b.bytes).sum::<u64>(), 872);
    }

    #[test]
    fn rebuilt_buckets_follow_the_gradients_order_under_the_first_limit_then_the_cap() {
        // Gradients come last layer first: b3 w3 b2 w2 b1 w1.
        let ready = [5, 4, 3, 2, 1, 0];
        let opts = DdpOptions { bucket_cap_bytes: Some(256), ..Default::default() };
        let b = rebuilt(&mlp(), &ready, &opts);
        assert_eq!(
            b.iter().map(|b| b.bytes).collect::<Vec<_>>(),
            [616, 256],
            "as PyTorch's DDP (ddp_engine)"
        );
        // By default the first bucket closes at 1 MiB and the rest at 25 MiB.
        let big = floats(&[200_000, 100, 200_000, 100, 7_000_000]);
        let b = rebuilt(&big, &[4, 3, 2, 1, 0], &DdpOptions::default());
        assert_eq!(b.iter().map(|b| b.params.len()).collect::<Vec<_>>(), [1, 4]);
        assert!(rebuilds(&DdpOptions::default()));
        assert!(!rebuilds(&DdpOptions { find_unused_parameters: true, ..Default::default() }));
    }

    #[test]
    fn dtypes_never_share_a_bucket() {
        let params = [Param { bytes: 8, key: 0 }, Param { bytes: 4, key: 1 }, Param { bytes: 8, key: 0 }];
        let b = assign(&params, &[0, 1, 2], &[u64::MAX], false);
        assert_eq!(b, [Bucket { params: vec![0, 2], bytes: 16 }, Bucket { params: vec![1], bytes: 4 }]);
    }
}
