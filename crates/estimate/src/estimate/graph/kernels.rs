//! What a kernel allocates inside one op, where no formula says: oneDNN's convolutions and
//! libtorch's CPU batch norm, measured.
//!
//! On the CPU a convolution runs in oneDNN, which reorders the input, the weight (at every call:
//! nothing is cached in training) and the output into its blocked layouts, with channels padded
//! to its vector width (16 on AVX-512, 8 on AVX2), and takes scratch buffers whose sizes depend
//! on the kernel it picks for the ISA, the shape and the thread count; all through libtorch's CPU
//! allocator. Batch norm's CPU kernels take per-thread buffers at a 1x1 spatial size. Rather than
//! guess oneDNN's choices, the estimate runs each distinct op once, on this CPU at the replay's
//! thread count, on zeros of the same shape, and records what it allocated and freed (the
//! counting allocator's event log, by data pointer): a [`Profile`]. The sizes are proportional to
//! the batch (activations and their reorders) or constant (weights, scratch), so two small
//! batches give them for any batch; a batch up to [`EXACT_UP_TO`] is measured as it is, since
//! oneDNN picks other kernels for some small batches (a 1x1 convolution under 16 rows on one
//! thread runs without oneDNN), and an op whose two measurements fit neither (bf16's
//! weight-gradient scratch) is measured at the real batch. The replay then makes those allocations and frees in that order.
//!
//! On CUDA the kernels' own buffers (cuDNN's workspaces) are not measured here: the estimate
//! counts the outputs and gradients only, and says so.
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use tch::{Device, Kind, Tensor};

use super::tensor::{Dt, Sym};
use super::Ctx;
use crate::estimate::cudnn_conv::{self, Pass};
use crate::estimate::ledger::Category::Transient;
use crate::estimate::Target;

/// Batches up to this are measured as they are; larger ones from two measurements, at this
/// batch and the next, extrapolated.
pub(crate) const EXACT_UP_TO: i64 = 17;

/// A size, `a + b * batch`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Affine {
    a: i64,
    b: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Event {
    Alloc(Affine),
    /// Frees the allocation made at this index among the profile's allocations.
    Free(usize),
}

/// What one op allocated and freed, and which of its allocations it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Profile {
    events: Vec<Event>,
    /// Indices among the allocations, in the op's result order (`None`: that result was not made).
    results: Vec<Option<usize>>,
}

impl Profile {
    /// From a measurement: `events` from the event log, `results` the data pointers of the op's
    /// outputs. Sizes are constant until [`Profile::fit`].
    fn measured(events: &[(i64, u64)], results: &[Option<u64>]) -> Profile {
        let mut allocs: Vec<u64> = Vec::new(); // the pointer of each allocation, by index
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut out = Vec::new();
        for &(delta, ptr) in events {
            if delta > 0 {
                live.insert(ptr, allocs.len());
                allocs.push(ptr);
                out.push(Event::Alloc(Affine { a: delta, b: 0 }));
            } else if let Some(i) = live.remove(&ptr) {
                out.push(Event::Free(i));
            }
            // A free of something made before the op (its input, say) is not the op's.
        }
        let results = results.iter().map(|r| r.and_then(|p| live.get(&p).copied())).collect();
        Profile { events: out, results }
    }

    /// The profile linear through this one (at batch `n0`) and `other` (at `n0 + 1`): each size
    /// proportional to the batch or constant; `None` when the two did not allocate alike or a
    /// size is neither (the op is then measured at the real batch).
    fn fit(&self, other: &Profile, n0: i64) -> Option<Profile> {
        if self.events.len() != other.events.len() || self.results != other.results {
            return None;
        }
        let events = self
            .events
            .iter()
            .zip(&other.events)
            .map(|(e0, e1)| match (e0, e1) {
                (Event::Alloc(s0), Event::Alloc(s1)) => {
                    let b = s1.a - s0.a;
                    let a = s0.a - b * n0;
                    // A size proportional to the batch (a reorder of it) or constant (the
                    // weights', a scratch buffer) extrapolates; one that is neither (oneDNN's
                    // bf16 weight-gradient scratch doubles from batch 17 to 18 as its work is
                    // split otherwise, then stays) does not.
                    (a == 0 || b == 0).then_some(Event::Alloc(Affine { a, b }))
                }
                (Event::Free(i), Event::Free(j)) if i == j => Some(Event::Free(*i)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Profile { events, results: self.results.clone() })
    }

    /// Replays the profile at `batch`: scratch allocations as bytes, each result as a tensor of
    /// the shape `results` gives (in result order). What the op made and did not free or return
    /// goes at its end.
    fn replay(&self, ctx: &Rc<Ctx>, batch: i64, results: &[(Vec<i64>, Dt)]) -> Vec<Option<Sym>> {
        let mut made: Vec<Option<Sym>> = Vec::new();
        let result_of = |index: usize| self.results.iter().position(|r| *r == Some(index));
        for e in &self.events {
            match e {
                Event::Alloc(size) => {
                    let index = made.len();
                    made.push(Some(match result_of(index) {
                        Some(k) => Sym::alloc(ctx, &results[k].0, results[k].1, Transient),
                        None => {
                            let bytes = (size.a + size.b * batch).max(0);
                            Sym::alloc(ctx, &[bytes], Dt(Kind::Uint8), Transient)
                        }
                    }));
                }
                Event::Free(i) => drop(made[*i].take()),
            }
        }
        let out = self.results.iter().map(|r| r.and_then(|i| made[i].take())).collect();
        drop(made);
        out
    }
}

/// What identifies a measured op.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum Key {
    ConvForward {
        input: Vec<i64>,
        weight: Vec<i64>,
        bias: bool,
        stride: i64,
        padding: i64,
        groups: i64,
        kind: i32,
    },
    ConvBackward {
        input: Vec<i64>,
        weight: Vec<i64>,
        mask: [bool; 3],
        stride: i64,
        padding: i64,
        groups: i64,
        kind: i32,
    },
    /// `param`: the weight's and running statistics' dtype (fp32 under autocast, where the
    /// input is low precision).
    BnForward {
        input: Vec<i64>,
        kind: i32,
        param: i32,
    },
    BnBackward {
        input: Vec<i64>,
        mask: [bool; 3],
        kind: i32,
        param: i32,
    },
}

/// Whether the first kernel measured in this process is said on stderr (`oomlab estimate` asks:
/// a cold estimate of a CNN measures for seconds to a minute, and silence reads as a hang; a
/// run keeps its own output, `--quiet` included).
static ANNOUNCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says on stderr, at the first kernel this process measures, that it is measuring and why.
pub fn announce_profiling() {
    ANNOUNCE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Measured profiles, per thread count, for the life of the process, and on disk for the next
/// ([`Stored`]).
static PROFILES: Mutex<Option<HashMap<(Key, usize), Profile>>> = Mutex::new(None);

/// The profiles kept on disk (`kernel-profiles.json` in the cache folder), so that `estimate`
/// measures each op once per machine rather than once per call (seconds for a ResNet under
/// mixed precision). They hold for the machine that measured them: `machine` names the CPU (its
/// model and instruction flags: oneDNN picks its kernels by them), libtorch's version, the git
/// revision of oomlab and the binary's own build (the ops are run by its code); a file whose
/// `machine` differs is measured afresh. A build from a tree with changes keeps nothing on disk.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    machine: String,
    entries: Vec<((Key, usize), Profile)>,
}

/// This machine, libtorch and the revision this binary was built from (embedded by build.rs), as
/// [`Stored::machine`]; `None` where no revision can be named (built from a tree with changes,
/// or without git).
fn machine() -> Option<&'static str> {
    static MACHINE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    MACHINE
        .get_or_init(|| {
            let git = crate::revision::git_info();
            let revision = git.revision.filter(|_| git.dirty == Some(false))?;
            let info = crate::device::cpuinfo();
            let field = |name: &str| crate::device::cpuinfo_field(&info, name);
            Some(format!(
                "{} | {} | libtorch {} | oomlab {revision}",
                field("model name"),
                field("flags"),
                crate::ffi::torch_version()
            ))
        })
        .as_deref()
}

fn stored_path() -> Option<PathBuf> {
    machine()?;
    crate::cache::dir().map(|d| d.join("kernel-profiles.json"))
}

/// The profiles on disk for this machine; none when there are none, they are another's, or the
/// file cannot be read (it is a cache).
fn load_stored() -> HashMap<(Key, usize), Profile> {
    let Some(path) = stored_path() else { return HashMap::new() };
    let text = crate::fsio::read_text(&path, crate::fsio::SMALL_LIMIT).ok();
    match text.and_then(|t| serde_json::from_str::<Stored>(&t).ok()) {
        Some(s) if Some(s.machine.as_str()) == machine() => s.entries.into_iter().collect(),
        _ => HashMap::new(),
    }
}

/// Writes every profile known to the disk cache, whole or not at all; a cache that cannot be
/// written is only a cache, so errors are dropped.
fn save_stored(map: &HashMap<(Key, usize), Profile>) {
    let (Some(path), Some(machine)) = (stored_path(), machine()) else { return };
    let stored = Stored {
        machine: machine.to_string(),
        entries: map.iter().map(|(k, p)| (k.clone(), p.clone())).collect(),
    };
    let Ok(text) = serde_json::to_string(&stored) else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = crate::fsio::write_atomic(&path, text.as_bytes());
}

fn kind_code(k: Kind) -> i32 {
    match k {
        Kind::Float => 0,
        Kind::Double => 1,
        Kind::Half => 2,
        Kind::BFloat16 => 3,
        _ => 4,
    }
}

fn with_batch(shape: &[i64], n: i64) -> Vec<i64> {
    let mut s = shape.to_vec();
    s[0] = n;
    s
}

/// The profile of the op `key` at `batch`, measured if no run has yet: `run(n)` makes the
/// inputs at batch `n` (outside the log), runs the op (inside it) and returns the outputs' data
/// pointers.
fn profile(
    ctx: &Ctx,
    key: Key,
    batch: i64,
    run: impl Fn(i64) -> Option<(Vec<(i64, u64)>, Vec<Option<u64>>)>,
) -> Option<Profile> {
    // The measurement reads the counting allocator's event log.
    crate::ffi::cpu_install().ok()?;
    let measure = |n: i64| -> Option<Profile> {
        let mut cache = PROFILES.lock().unwrap_or_else(|e| e.into_inner());
        let map = cache.get_or_insert_with(load_stored);
        let exact_key = (key_at(&key, n), ctx.threads);
        if let Some(p) = map.get(&exact_key) {
            return Some(p.clone());
        }
        if ANNOUNCE.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let cached = match (machine(), stored_path()) {
                (None, _) => "not kept: a build from a tree with changes".to_string(),
                (Some(_), None) => {
                    "not kept: no cache folder ($OOMLAB_CACHE, $XDG_CACHE_HOME or $HOME)".into()
                }
                (Some(_), Some(p)) => format!("kept in {}", p.display()),
            };
            oomlab_core::note!(
                "estimate: measuring this CPU's convolution and batch-norm kernels, once per machine \
                 ({cached}): seconds to a minute the first time"
            );
        }
        let (events, results) = on_threads(ctx.threads, || run(n))?;
        let p = Profile::measured(&events, &results);
        map.insert(exact_key, p.clone());
        save_stored(map);
        Some(p)
    };
    if batch <= EXACT_UP_TO {
        return measure(batch);
    }
    let (p0, p1) = (measure(EXACT_UP_TO)?, measure(EXACT_UP_TO + 1)?);
    p0.fit(&p1, EXACT_UP_TO).or_else(|| measure(batch))
}

/// `key` with its batch set to `n`.
fn key_at(key: &Key, n: i64) -> Key {
    let mut k = key.clone();
    match &mut k {
        Key::ConvForward { input, .. }
        | Key::ConvBackward { input, .. }
        | Key::BnForward { input, .. }
        | Key::BnBackward { input, .. } => input[0] = n,
    }
    k
}

/// Runs `f` with libtorch on `threads` intra-op threads, and the CPU budget lifted (a probe is
/// not the trial's).
fn on_threads<T>(threads: usize, f: impl FnOnce() -> T) -> T {
    let before = tch::get_num_threads();
    let cap = crate::ffi::cpu_cap();
    crate::ffi::cpu_set_cap(None);
    tch::set_num_threads(threads as i32);
    let _no_grad = tch::no_grad_guard();
    let out = f();
    tch::set_num_threads(before);
    crate::ffi::cpu_set_cap(cap);
    out
}

fn zeros(shape: &[i64], kind: Kind) -> Option<Tensor> {
    Tensor::f_zeros(shape, (kind, Device::Cpu)).ok()
}

fn ptr(t: &Tensor) -> Option<u64> {
    t.defined().then(|| t.data_ptr() as u64)
}

/// A convolution's shapes and wiring, as its backward needs them.
pub(crate) struct ConvBackward {
    input: Vec<i64>,
    weight: Vec<i64>,
    bias: bool,
    stride: i64,
    padding: i64,
    groups: i64,
    dt: Dt,
}

impl ConvBackward {
    /// CUDA: the workspace of one of the convolution's cuDNN calls, held for the kernel, where
    /// a GPU measured it; either way a mark for `estimate --blocks` ([`cudnn_conv`]).
    fn cudnn_workspace(&self, ctx: &Rc<Ctx>, pass: Pass) {
        let four = |v: &[i64]| -> Option<[i64; 4]> { v.try_into().ok() };
        let (Some(input), Some(weight)) = (four(&self.input), four(&self.weight)) else { return };
        let call = cudnn_conv::Call {
            pass,
            input,
            weight,
            stride: self.stride,
            padding: self.padding,
            groups: self.groups,
            dtype: cudnn_conv::dtype_name(self.dt.0),
        };
        let bytes = cudnn_conv::workspace(ctx.gpu, &call);
        ctx.ledger.hold_workspace(crate::estimate::ledger::BlockAction::Cudnn, bytes, call.to_string());
        ctx.cudnn_calls.borrow_mut().add(call, bytes.is_some());
    }
}

/// The output shape of a convolution of `input` by `weight`.
fn conv_output(input: &[i64], weight: &[i64], stride: i64, padding: i64) -> Vec<i64> {
    let side = |x: i64, k: i64| (x + 2 * padding - k) / stride + 1;
    vec![input[0], weight[0], side(input[2], weight[2]), side(input[3], weight[3])]
}

/// `F.conv2d`: the output and what its backward needs; on the CPU what oneDNN makes on the way.
pub(crate) fn conv_forward(
    ctx: &Rc<Ctx>,
    x: &Sym,
    w: &Sym,
    bias: bool,
    stride: i64,
    padding: i64,
    groups: i64,
) -> (Sym, Rc<ConvBackward>) {
    let (input, weight, dt) = (x.shape(), w.shape(), x.dt());
    let out_shape = conv_output(&input, &weight, stride, padding);
    let rule = Rc::new(ConvBackward {
        input: input.clone(),
        weight: weight.clone(),
        bias,
        stride,
        padding,
        groups,
        dt,
    });
    if ctx.target == Target::Cuda {
        let out = Sym::alloc(ctx, &out_shape, dt, Transient);
        rule.cudnn_workspace(ctx, Pass::Forward);
        return (out, rule);
    }
    let key = Key::ConvForward {
        input: input.clone(),
        weight: weight.clone(),
        bias,
        stride,
        padding,
        groups,
        kind: kind_code(dt.0),
    };
    let run = |n: i64| {
        let (xi, wi) = (zeros(&with_batch(&input, n), dt.0)?, zeros(&weight, dt.0)?);
        let b = if bias { Some(zeros(&[weight[0]], dt.0)?) } else { None };
        let (out, events) = crate::ffi::cpu_events(|| {
            xi.f_conv2d(&wi, b.as_ref(), [stride; 2], [padding; 2], [1, 1], groups).ok()
        });
        let out = out?;
        Some((events, vec![ptr(&out)]))
    };
    let made = profile(ctx, key, input[0], run)
        .map(|p| p.replay(ctx, input[0], &[(out_shape.clone(), dt)]))
        .and_then(|mut r| r.pop().flatten());
    let out = made.unwrap_or_else(|| Sym::alloc(ctx, &out_shape, dt, Transient));
    (out, rule)
}

impl ConvBackward {
    /// `convolution_backward` for the gradients `wants` asks for (input, weight, bias).
    pub(crate) fn apply(&self, ctx: &Rc<Ctx>, wants: [bool; 3]) -> Vec<Option<Sym>> {
        let mask = [wants[0], wants[1], wants[2] && self.bias];
        let dt = self.dt;
        let shapes = [(self.input.clone(), dt), (self.weight.clone(), dt), (vec![self.weight[0]], dt)];
        let plain = || -> Vec<Option<Sym>> {
            shapes.iter().zip(mask).map(|((s, d), m)| m.then(|| Sym::alloc(ctx, s, *d, Transient))).collect()
        };
        if ctx.target == Target::Cuda {
            // Each pass's output, then the workspace its kernel takes (cudnn_convolution_backward:
            // the data pass, then the filter pass).
            let passes = [Some(Pass::Data), Some(Pass::Filter), None];
            let made = shapes.iter().zip(mask).zip(passes).map(|(((s, d), m), pass)| {
                m.then(|| {
                    let grad = Sym::alloc(ctx, s, *d, Transient);
                    if let Some(pass) = pass {
                        self.cudnn_workspace(ctx, pass);
                    }
                    grad
                })
            });
            return made.collect();
        }
        let key = Key::ConvBackward {
            input: self.input.clone(),
            weight: self.weight.clone(),
            mask,
            stride: self.stride,
            padding: self.padding,
            groups: self.groups,
            kind: kind_code(dt.0),
        };
        let run = |n: i64| {
            let input = with_batch(&self.input, n);
            let out = conv_output(&input, &self.weight, self.stride, self.padding);
            let (g, xi, wi) = (zeros(&out, dt.0)?, zeros(&input, dt.0)?, zeros(&self.weight, dt.0)?);
            let bias_size = self.bias.then_some(self.weight[0]);
            let (grads, events) = crate::ffi::cpu_events(|| {
                crate::ffi::conv2d_backward(
                    &g,
                    &xi,
                    &wi,
                    bias_size,
                    self.stride,
                    self.padding,
                    self.groups,
                    mask,
                )
                .ok()
            });
            let [gi, gw, gb] = grads?;
            Some((events, vec![ptr(&gi), ptr(&gw), ptr(&gb)]))
        };
        match profile(ctx, key, self.input[0], run) {
            Some(p) => p.replay(ctx, self.input[0], &shapes),
            None => plain(),
        }
    }
}

/// The dtype a norm saves its statistics in (mean and rstd, or mean and invstd) for its
/// backward. On the CPU, `param_scalar_type` (`layer_norm.cpp`, `Normalization.cpp`): float32
/// when the input is half precision and the parameters float32 (autocast's mixed case), else
/// the input's own dtype, so a float16 or bfloat16 model keeps half-size statistics and a
/// float64 one double. On CUDA, the accumulate type: float32 for half precision, else the
/// input's.
pub(crate) fn norm_stat_dt(target: Target, input: Dt, param: Dt) -> Dt {
    let low = matches!(input.0, Kind::Half | Kind::BFloat16);
    match target {
        Target::Cpu if low && param.0 != Kind::Float => input,
        _ if low => Dt(Kind::Float),
        _ => input,
    }
}

/// `nn.BatchNorm2d` in training after `num_batches_tracked.add_(1)`: `native_batch_norm`'s
/// output, the saved mean and inverse standard deviation (`[C]`, in [`norm_stat_dt`]), and its
/// temporaries.
/// `param` is the weight's dtype (fp32 under autocast, where the input is low precision).
/// Returns (output, save_mean, save_invstd).
pub(crate) fn batch_norm_forward(ctx: &Rc<Ctx>, x: &Sym, param: Dt) -> (Sym, Sym, Sym) {
    let (input, dt) = (x.shape(), x.dt());
    let c = input[1];
    let stat = norm_stat_dt(ctx.target, dt, param);
    let stats = || (Sym::alloc(ctx, &[c], stat, Transient), Sym::alloc(ctx, &[c], stat, Transient));
    if ctx.target == Target::Cuda {
        // cudnn_batch_norm: the output, the saved mean and variance (its reserve is empty).
        let out = Sym::alloc(ctx, &input, dt, Transient);
        let (m, v) = stats();
        return (out, m, v);
    }
    let key = Key::BnForward { input: input.clone(), kind: kind_code(dt.0), param: kind_code(param.0) };
    let run = |n: i64| {
        let xi = zeros(&with_batch(&input, n), dt.0)?;
        let p = param.0;
        let (w, b, rm, rv) = (zeros(&[c], p)?, zeros(&[c], p)?, zeros(&[c], p)?, zeros(&[c], p)?);
        let (outs, events) = crate::ffi::cpu_events(|| {
            Tensor::f_native_batch_norm(&xi, Some(&w), Some(&b), Some(&rm), Some(&rv), true, 0.1, 1e-5).ok()
        });
        let (o, m, v) = outs?;
        Some((events, vec![ptr(&o), ptr(&m), ptr(&v)]))
    };
    let shapes = [(input.clone(), dt), (vec![c], stat), (vec![c], stat)];
    let replayed = profile(ctx, key, input[0], run).map(|p| p.replay(ctx, input[0], &shapes));
    match replayed {
        Some(mut r) if r.iter().all(Option::is_some) => {
            let v = r.pop().flatten().expect("checked");
            let m = r.pop().flatten().expect("checked");
            (r.pop().flatten().expect("checked"), m, v)
        }
        _ => {
            let out = Sym::alloc(ctx, &input, dt, Transient);
            let (m, v) = stats();
            (out, m, v)
        }
    }
}

/// `native_batch_norm_backward` for the gradients `wants` asks for (input, weight, bias); the
/// weight's and bias's in `param`, the weight's dtype.
pub(crate) fn batch_norm_backward(
    ctx: &Rc<Ctx>,
    input: &[i64],
    dt: Dt,
    param: Dt,
    wants: [bool; 3],
) -> Vec<Option<Sym>> {
    let c = input[1];
    let shapes = [(input.to_vec(), dt), (vec![c], param), (vec![c], param)];
    let plain = || -> Vec<Option<Sym>> {
        shapes.iter().zip(wants).map(|((s, d), m)| m.then(|| Sym::alloc(ctx, s, *d, Transient))).collect()
    };
    if ctx.target == Target::Cuda {
        return plain();
    }
    let key = Key::BnBackward {
        input: input.to_vec(),
        mask: wants,
        kind: kind_code(dt.0),
        param: kind_code(param.0),
    };
    let run = |n: i64| {
        let shape = with_batch(input, n);
        let (g, xi) = (zeros(&shape, dt.0)?, zeros(&shape, dt.0)?);
        let p = param.0;
        let (w, rm, rv) = (zeros(&[c], p)?, zeros(&[c], p)?, zeros(&[c], p)?);
        let stat = norm_stat_dt(Target::Cpu, dt, param).0;
        let (sm, si) = (zeros(&[c], stat)?, zeros(&[c], stat)?);
        let (grads, events) = crate::ffi::cpu_events(|| {
            crate::ffi::batch_norm_backward(&g, &xi, [&w, &rm, &rv, &sm, &si], wants).ok()
        });
        let [gi, gw, gb] = grads?;
        Some((events, vec![ptr(&gi), ptr(&gw), ptr(&gb)]))
    };
    match profile(ctx, key, input[0], run) {
        Some(p) => p.replay(ctx, input[0], &shapes),
        None => plain(),
    }
}

/// CUDA: a bias gradient's `sum_to` over `rows` rows runs the reduction kernel, which holds a
/// staging buffer and semaphores for its life ([`crate::estimate::cuda_reduce`]). Nothing on
/// the CPU.
pub(crate) fn bias_sum_staging(ctx: &Rc<Ctx>, rows: i64, bias: &[i64], dt: Dt) {
    if ctx.target != Target::Cuda {
        return;
    }
    let cols: i64 = bias.iter().product();
    let acc = if dt.0 == Kind::Double { 8 } else { 4 };
    let staging =
        crate::estimate::cuda_reduce::sum_rows_staging(rows.max(0) as u64, cols.max(0) as u64, acc, ctx.gpu);
    ctx.ledger.hold_staging(staging);
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// The profile through two event logs (`(delta, pointer)`) at batches `n0` and `n0 + 1`.
    pub(crate) fn fit(e0: &[(i64, u64)], e1: &[(i64, u64)], n0: i64) -> Option<Profile> {
        Profile::measured(e0, &[]).fit(&Profile::measured(e1, &[]), n0)
    }

    impl Profile {
        /// The allocations' sizes at `batch`, in order.
        pub(crate) fn sizes_at(&self, batch: i64) -> Vec<i64> {
            self.events
                .iter()
                .filter_map(|e| match e {
                    Event::Alloc(s) => Some(s.a + s.b * batch),
                    Event::Free(_) => None,
                })
                .collect()
        }
    }
}
