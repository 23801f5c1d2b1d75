//! DDP's engine as oomlab drives it (`oomlab::ffi::dist`: libtorch's gloo process group and
//! DistributedDataParallel's C++ reducer, wrapped as DDP's Python wraps a module) against
//! PyTorch's own `DistributedDataParallel` on CPU processes over gloo
//! (`scripts/reference/ddp_buckets.py`): at world sizes 2 and 3, default and small bucket caps,
//! every rank's buckets after the wrap and after each step (one bucket of every gradient at the
//! first step, rebuilt in the order the gradients came at the second), rank 0's weights on every
//! rank, and every gradient the mean of the ranks' own.
use std::sync::Arc;
use std::time::Duration;

use oomlab::ffi::dist::{Ddp, DdpOptions, Group, Rendezvous};
use serde::Deserialize;
use tch::{Kind, Tensor};

use crate::common::{self, Sandbox};

/// An MLP's widths: three Linear layers, parameters of 192 to 8 bytes.
const WIDTHS: [i64; 4] = [3, 16, 8, 2];
const STEPS: usize = 2;

/// One rank's answers, as the oracle writes them.
#[derive(Debug, Deserialize, PartialEq)]
struct RankRecord {
    buckets: Vec<Vec<u64>>,
    weight: Vec<f64>,
    grads: Vec<Vec<f64>>,
}

/// `ddp_buckets.py`'s starting values: distinct per parameter and per rank, exact in float32.
fn weights(shape: &[i64], index: usize, rank: usize) -> Tensor {
    let n: i64 = shape.iter().product();
    let t = Tensor::arange(n, (Kind::Float, tch::Device::Cpu)).remainder(7.0) / 8.0 + (index + rank) as f64;
    t.reshape(shape)
}

/// Runs `each` on every rank of a world of `size`, ranks as threads of this process meeting at a
/// fresh file; their answers in rank order.
fn ranks<T: Send + 'static>(size: usize, each: impl Fn(Arc<Group>) -> T + Send + Sync + 'static) -> Vec<T> {
    let sb = Sandbox::new();
    let at = Rendezvous::File(sb.path().join("store"));
    let each = Arc::new(each);
    let threads: Vec<_> = (0..size)
        .map(|rank| {
            let (at, each) = (at.clone(), Arc::clone(&each));
            std::thread::spawn(move || {
                each(Arc::new(Group::join(&at, rank, size, Duration::from_secs(120)).unwrap()))
            })
        })
        .collect();
    threads.into_iter().map(|r| r.join().unwrap()).collect()
}

/// Float32 parameters of `sizes` elements, ones, needing a gradient.
fn params_of(sizes: &[i64]) -> Vec<Tensor> {
    sizes
        .iter()
        .map(|&s| Tensor::ones([s], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true))
        .collect()
}

/// The oracle's run, through oomlab's engine: ranks as threads of this process.
fn oomlab_ranks(world: usize, cap: Option<u64>) -> Vec<RankRecord> {
    ranks(world, move |group| {
        let rank = group.rank();
        let mut params = Vec::new();
        for (i, pair) in WIDTHS.windows(2).enumerate() {
            params.push(weights(&[pair[1], pair[0]], 2 * i, rank).set_requires_grad(true));
            params.push(weights(&[pair[1]], 2 * i + 1, rank).set_requires_grad(true));
        }
        let refs: Vec<&Tensor> = params.iter().collect();
        let opts = DdpOptions { bucket_cap_bytes: cap, ..DdpOptions::default() };
        let ddp = Ddp::new(&group, &refs, &[], opts).unwrap();
        let first: Vec<f64> = Vec::try_from(params[0].flatten(0, -1).narrow(0, 0, 4)).unwrap();
        let mut record =
            RankRecord { buckets: vec![ddp.bucket_bytes().unwrap()], weight: first, grads: vec![] };
        for _ in 0..STEPS {
            for p in params.iter_mut() {
                p.zero_grad();
            }
            ddp.pre_forward().unwrap();
            let mut h = Tensor::ones([5, WIDTHS[0]], (Kind::Float, tch::Device::Cpu)) * (rank + 1) as f64;
            for (i, layer) in params.chunks(2).enumerate() {
                if i > 0 {
                    h = h.relu();
                }
                h = h.linear(&layer[0], Some(&layer[1]));
            }
            let loss = h.sum(Kind::Float);
            ddp.post_forward(&[&loss]).unwrap();
            loss.backward();
            record.buckets.push(ddp.bucket_bytes().unwrap());
            let grads = params.iter().flat_map(|p| Vec::<f64>::try_from(p.grad().flatten(0, -1)).unwrap());
            record.grads.push(grads.collect());
        }
        record
    })
}

fn pytorch_ranks(world: usize, cap: Option<u64>) -> Vec<RankRecord> {
    let sb = Sandbox::new();
    let out = sb.path().join("ddp.json");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference/ddp_buckets.py");
    let widths: Vec<String> = WIDTHS.iter().map(i64::to_string).collect();
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script).args(["--widths", &widths.join(","), "--world", &world.to_string()]);
    cmd.args(["--steps", &STEPS.to_string()]).arg("--out").arg(&out);
    if let Some(cap) = cap {
        cmd.args(["--bucket-cap-bytes", &cap.to_string()]);
    }
    let ran = cmd.env("PYTHONPATH", common::torch_site()).output().expect("python3 runs");
    assert!(ran.status.success(), "PyTorch's DDP failed:\n{}", String::from_utf8_lossy(&ran.stderr));
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

#[test]
fn ddp_holds_the_buckets_and_gradients_pytorchs_ddp_holds_on_every_rank() {
    // A process of its own: gloo's threads and the reducers they serve stay out of the other
    // tests' way, and theirs out of these.
    common::in_own_process(|| {
        // Each case's PyTorch processes run while this process's ranks do theirs.
        let cases = [(2, None), (2, Some(256)), (3, Some(64))];
        let oracle: Vec<_> =
            cases.iter().map(|&(world, cap)| std::thread::spawn(move || pytorch_ranks(world, cap))).collect();
        for (&(world, cap), oracle) in cases.iter().zip(oracle) {
            let ours = {
                let _in_process = common::in_process();
                oomlab_ranks(world, cap)
            };
            let theirs = oracle.join().unwrap();
            let case = format!("world {world}, bucket cap {cap:?}");
            assert_eq!(ours.len(), world, "{case}");
            assert_eq!(theirs.len(), world, "{case}");
            // The first step's one bucket of every gradient (872 bytes), then rebuilt under the cap.
            let total: u64 = WIDTHS.windows(2).map(|p| ((p[0] * p[1] + p[1]) * 4) as u64).sum();
            for (rank, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                assert_eq!(a.buckets, b.buckets, "{case}, rank {rank}: the reducer's buckets");
                assert_eq!(a.buckets[0], [total], "{case}, rank {rank}");
                assert_eq!(a.weight, b.weight, "{case}, rank {rank}: rank 0's weights after the wrap");
                assert_eq!(a.weight, theirs[0].weight, "{case}, rank {rank}");
                assert_eq!(a.grads.len(), STEPS, "{case}");
                for (step, (ga, gb)) in a.grads.iter().zip(&b.grads).enumerate() {
                    assert_eq!(ga.len(), gb.len(), "{case}, rank {rank}, step {step}");
                    for (x, y) in ga.iter().zip(gb) {
                        assert!(
                            (x - y).abs() <= 1e-6 * y.abs().max(1.0),
                            "{case}, rank {rank}, step {step}: {x} {y}"
                        );
                    }
                }
            }
            if let Some(cap) = cap {
                let rebuilt = &ours[0].buckets[STEPS];
                assert!(rebuilt.len() > 1, "{case}: rebuilt under the cap: {rebuilt:?}");
                assert!(
                    rebuilt.iter().sum::<u64>() == total && rebuilt.iter().all(|&b| b > 0),
                    "{case}: {cap}"
                );
            }
        }
    });
}

/// The estimate's buckets (`oomlab::estimate::ddp`, from the parameters' sizes alone) against
/// the real reducer's, at the wrap and once rebuilt, for random parameter sizes and caps, with
/// and without `find_unused_parameters`: the same buckets, in the same order.
#[test]
fn the_estimates_buckets_are_the_reducers_for_random_models() {
    // A process of its own: gloo's threads and the reducers they serve stay out of the other
    // tests' way, and theirs out of these.
    common::in_own_process(|| {
        use oomlab::estimate::ddp::{self, Param};
        let mut rng = common::rng::Rng(0x5eed_0dd9);
        let _in_process = common::in_process();
        for case in 0..24 {
            let n = 2 + rng.below(10);
            // Mostly small parameters, now and then one past the default first bucket (1 MiB).
            let sizes: Vec<i64> = (0..n)
                .map(|_| {
                    let most = if rng.below(4) == 0 { 400_000 } else { 3000 };
                    1 + rng.below(most) as i64
                })
                .collect();
            let cap = match rng.below(3) {
                0 => None,
                _ => Some(64 + rng.below(40_000) as u64),
            };
            let opts = DdpOptions {
                bucket_cap_bytes: cap,
                find_unused_parameters: rng.below(3) == 0,
                ..DdpOptions::default()
            };
            let seen = ranks(2, {
                let sizes = sizes.clone();
                move |group| {
                    let params = params_of(&sizes);
                    let refs: Vec<&Tensor> = params.iter().collect();
                    let ddp = Ddp::new(&group, &refs, &[], opts).unwrap();
                    let mut seen = vec![ddp.bucket_bytes().unwrap()];
                    for _ in 0..2 {
                        ddp.pre_forward().unwrap();
                        // A chain, each parameter after the last: the gradients come last first.
                        let mut h = Tensor::zeros([], (Kind::Float, tch::Device::Cpu));
                        for p in &params {
                            h += p.sum(Kind::Float);
                        }
                        ddp.post_forward(&[&h]).unwrap();
                        h.backward();
                        seen.push(ddp.bucket_bytes().unwrap());
                    }
                    seen
                }
            });
            let params: Vec<Param> = sizes.iter().map(|&s| Param { bytes: 4 * s as u64, key: 0 }).collect();
            let bytes = |b: Vec<ddp::Bucket>| b.into_iter().map(|b| b.bytes).collect::<Vec<u64>>();
            let wrap = bytes(ddp::at_wrap(&params, &opts));
            let ready: Vec<usize> = (0..n).rev().collect();
            let second =
                if ddp::rebuilds(&opts) { bytes(ddp::rebuilt(&params, &ready, &opts)) } else { wrap.clone() };
            let what = format!("case {case}: sizes {sizes:?}, {opts:?}");
            for s in &seen {
                assert_eq!(s[0], wrap, "{what}: at the wrap");
                assert_eq!(s[1], wrap, "{what}: after the first step");
                assert_eq!(s[2], second, "{what}: after the second step");
            }
        }
    });
}

/// What a rank's wrap leaves allocated, counted by oomlab's CPU allocator (the counts of both
/// ranks of this process, which hold the same): its buckets' flat buffers, as
/// `estimate::ddp::wrap_bytes` says, for random models and caps.
#[test]
fn a_ranks_wrap_leaves_its_buckets_allocated() {
    // A process of its own: gloo's threads and the reducers they serve stay out of the other
    // tests' way, and theirs out of these.
    common::in_own_process(|| {
        use oomlab::estimate::ddp::{self, Param};
        use std::sync::Barrier;
        let _in_process = common::in_process();
        let _probe = oomlab::probe::CpuProbe::new(None).expect("the counting allocator");
        let mut rng = common::rng::Rng(0x0b0c_4e75);
        for case in 0..8 {
            let n = 2 + rng.below(8);
            let sizes: Vec<i64> = (0..n).map(|_| 1 + rng.below(5000) as i64).collect();
            let cap = if rng.below(2) == 0 { None } else { Some(64 + rng.below(8000) as u64) };
            let opts = DdpOptions { bucket_cap_bytes: cap, ..DdpOptions::default() };
            let sync = Arc::new(Barrier::new(3));
            let both = std::thread::spawn({
                let (sizes, sync) = (sizes.clone(), Arc::clone(&sync));
                move || {
                    ranks(2, move |group| {
                        let params = params_of(&sizes);
                        let refs: Vec<&Tensor> = params.iter().collect();
                        sync.wait(); // counted before the wrap
                        sync.wait();
                        let ddp = Ddp::new(&group, &refs, &[], opts).unwrap();
                        sync.wait(); // counted after
                        sync.wait();
                        drop(ddp);
                    })
                }
            });
            let params: Vec<Param> = sizes.iter().map(|&s| Param { bytes: 4 * s as u64, key: 0 }).collect();
            let total: u64 = params.iter().map(|p| p.bytes).sum();
            assert_eq!(
                ddp::wrap_bytes(&params, &opts),
                total,
                "the first step's buckets hold every gradient"
            );
            sync.wait();
            let before = oomlab::ffi::cpu_stats().allocated;
            sync.wait();
            sync.wait();
            // Rank 0's broadcast of its parameters runs on gloo's thread, whose work item keeps the
            // flat copy until that thread lets it go, after the wrap has returned: on a busy machine
            // the count holds it a moment longer (seen: one copy of the parameters). What stays is
            // the buckets.
            let mut after = oomlab::ffi::cpu_stats().allocated;
            let settled = std::time::Instant::now() + Duration::from_secs(10);
            while (after - before) as u64 != 2 * ddp::wrap_bytes(&params, &opts)
                && std::time::Instant::now() < settled
            {
                std::thread::sleep(Duration::from_millis(20));
                after = oomlab::ffi::cpu_stats().allocated;
            }
            sync.wait();
            both.join().unwrap();
            assert_eq!(
                (after - before) as u64,
                2 * ddp::wrap_bytes(&params, &opts),
                "case {case}: sizes {sizes:?}, {opts:?}"
            );
        }
    });
}
