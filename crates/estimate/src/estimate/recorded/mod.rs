//! The estimate for a model oomlab cannot replay: a TorchScript module, whose ops are in its
//! file. Its step is recorded on the CPU instead (`train::record`: every allocation and free
//! through the counting allocator, a mark at each phase's end) at three small batches; the
//! three sequences must match event for event (the same allocations, freed in the same order);
//! each allocation's size is fitted as `a + c * batch` from the smallest and largest batch and
//! must hold at the middle one; the sequence at the batch asked for is then synthesised and
//! replayed through the ledger, phase by phase, as the built-in kinds' replays are.
//!
//! Where the sequences differ, or a size is not affine in the batch (a kernel whose buffers
//! depend on it otherwise), the estimate says so and names the first event where they part;
//! the recording is then not trusted.
//!
//! For CUDA the same recording (made with CUDA's default optimizer implementation) is replayed
//! through the caching allocator's model, its device allocations alone: the code that makes a
//! tensor tags it the host's or the device's where the phase does not say (`ffi::Where`); the
//! scratch of ops that run a CPU library of their own (convolutions, norms: [`Span`]) is left
//! out; dropout's mask is CUDA's bool one; each bias sum gets CUDA's reduction staging, each
//! softmax backward CUDA's temporary, each layer norm backward past 64 Ki rows CUDA's partial
//! sums, each convolution's cuDNN calls their workspaces where a GPU measured them (the shim
//! reads each call off the op's arguments: [`Shape::Cudnn`]); and any other op must be one whose
//! CUDA allocations are the CPU's ([`cuda_op`]).

use anyhow::{bail, Result};

use super::cudnn_conv::{self, Pass};
use super::ledger::{Category, Held, Ledger};
use super::prediction::{PhasePrediction, PredictedOom, Prediction};
use super::{cuda_reduce, evidence, DataShape, Options, Target};
use crate::schema::Phase;
use crate::spec::Config;
use crate::train::record::{RecordedOn, Recording};

mod accumulation;
mod cuda_ops;
mod ladder;
mod parsed;

use cuda_ops::{cuda_op, cuda_scope, OpOnCuda};
use ladder::{at_batch, checked, checked_alike, data_on_host, fit, own_batch, Found, CHECK_LIMIT};
use parsed::{in_op, Parsed, Place, Shape, Span, ATTN_DIMS, CONV_DIMS};

/// How long `advise` lets one option's batch ladder record before the larger sets are left
/// untried: a step under autocast with much accumulation, on a CPU whose kernels change with
/// the batch (oneDNN's bf16 matmuls), can otherwise take minutes to be refused, and an advice
/// weighs dozens of options. A single estimate has no such limit (`Options::ladder_budget`).
pub const ADVISE_LADDER_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);

/// One event of a recorded step, its sizes fitted.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// An allocation of `a + c * batch` bytes; where it lives in a CUDA run; where
    /// it falls against the library spans.
    Alloc { a: i64, c: i64, place: Place, span: Span },
    /// The free of the `of`-th allocation.
    Free { of: usize },
    /// A phase's start: its peak starts afresh.
    Start,
    /// A phase's end.
    End,
    /// A sum of `rows` rows into each of `cols` outputs (each `a + c * batch`), accumulated in
    /// `acc` bytes, ends: CUDA's reduction kernel may have held a staging buffer for it.
    Reduce { rows: (i64, i64), cols: (i64, i64), acc: i64 },
    /// CUDA's kernel of the op that made the allocation just before takes a temporary of
    /// `a + c * batch` bytes and frees it before it returns (see [`Shape::CudaTemp`]).
    CudaTemp { a: i64, c: i64 },
    /// One of a convolution's cuDNN calls on CUDA ([`cudnn_conv`]): its workspace, where a GPU
    /// measured it, is held for the kernel. `dims`: the input's NCHW, the weight's KCRS, stride,
    /// padding and groups, each `a + c * batch`; `known`: a call the table could hold.
    Cudnn { pass: Pass, dims: [(i64, i64); CONV_DIMS], dtype: &'static str, known: bool },
    /// A CPU flash-attention backward has made its last gradient: CUDA's memory-efficient
    /// kernel takes its delta's temporaries and its workspace there. `dims`: the query's, key's
    /// and value's shapes, each `a + c * batch`.
    AttnTemps { dims: [(i64, i64); ATTN_DIMS], kind: tch::Kind },
    /// A CPU flash-attention forward has made its logsumexp, allocation `of`: CUDA's
    /// memory-efficient kernel pads it to 32 rows, held while `of` lives.
    AttnPad { of: usize, dims: [(i64, i64); ATTN_DIMS], kind: tch::Kind },
    /// A layer norm's backward has made its input's gradient (`input`'s bytes) and its weight's
    /// and bias's (each the allocation numbered, with its bytes), where it made them (see
    /// [`Shape::LayerNormGrads`]).
    LayerNormGrads { input: (i64, i64), grads: [Option<(usize, (i64, i64))>; 2] },
}

/// A step fitted over the batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    events: Vec<Event>,
    /// The op that made each allocation, in order (`""` where the recording names none).
    made_by: Vec<String>,
    phases: Vec<(usize, usize, Phase)>,
    param_count: u64,
    param_bytes: u64,
    /// Its micro-batches extended from a recording of [`accumulation::RECORDED`].
    extended: bool,
    /// Where the step was recorded (the first recording's; all of a fit's are made alike).
    on: RecordedOn,
}

impl Fit {
    /// Fits recordings at three batches, smallest first; or takes one recording as it is.
    /// `for_cuda`: without the CPU libraries' scratch ([`Parsed::without_scratch`]), which
    /// the CUDA replay leaves out anyway, so that oneDNN's batch-dependent scratch does not part
    /// the recordings.
    fn new(recordings: &[(usize, Recording)], for_cuda: bool) -> Result<Fit> {
        let parsed: Vec<(usize, Parsed)> = recordings
            .iter()
            .map(|(b, r)| Parsed::new(r).map(|p| (*b, if for_cuda { p.without_scratch() } else { p })))
            .collect::<Result<_>>()?;
        let (b0, first) = &parsed[0];
        for (b, other) in &parsed[1..] {
            let n = first.shapes.len().max(other.shapes.len());
            if let Some(i) = (0..n).find(|&i| first.shapes.get(i) != other.shapes.get(i)) {
                bail!(
                    "its step allocates differently at batch {b0} and batch {b}: the recordings part at event {i}, \
                     {} at batch {b0} against {} at batch {b}",
                    first.describe(i),
                    other.describe(i)
                );
            }
        }
        let what = |k: usize| format!("allocation {k}{}", in_op(&first.made_by[k]));
        let coefficients = affine(&parsed, |p| &p.sizes, what, "B")?;
        // A reduction's rows and columns, each fitted as the sizes are.
        let dims = affine(
            &parsed,
            |p| &p.dims,
            |k| format!("reduction {}'s {}", k / 2, if k % 2 == 0 { "rows" } else { "columns" }),
            "",
        )?;
        let conv_dims =
            affine(&parsed, |p| &p.conv_dims, |k| format!("convolution {}'s shape", k / CONV_DIMS), "")?;
        let attn_dims =
            affine(&parsed, |p| &p.attn_dims, |k| format!("attention call {}'s shape", k / ATTN_DIMS), "")?;
        let attn =
            |k: usize| -> [(i64, i64); ATTN_DIMS] { std::array::from_fn(|d| attn_dims[k * ATTN_DIMS + d]) };
        let events = first
            .shapes
            .iter()
            .scan(0usize, |next, s| {
                Some(match *s {
                    Shape::Alloc { place, span } => {
                        let (a, c) = coefficients[*next];
                        *next += 1;
                        Some(Event::Alloc { a, c, place, span })
                    }
                    Shape::Free(of) => Some(Event::Free { of }),
                    Shape::Start => Some(Event::Start),
                    Shape::End => Some(Event::End),
                    Shape::Reduce { k, acc } => {
                        Some(Event::Reduce { rows: dims[2 * k], cols: dims[2 * k + 1], acc })
                    }
                    Shape::CudaTemp { of } => {
                        let (a, c) = coefficients[of];
                        Some(Event::CudaTemp { a, c })
                    }
                    Shape::LayerNormGrads { input, grads } => Some(Event::LayerNormGrads {
                        input: coefficients[input],
                        grads: grads.map(|g| g.map(|k| (k, coefficients[k]))),
                    }),
                    Shape::Cudnn { k, pass, dtype, known } => Some(Event::Cudnn {
                        pass,
                        dims: std::array::from_fn(|d| conv_dims[k * CONV_DIMS + d]),
                        dtype,
                        known,
                    }),
                    Shape::AttnTemps { k, kind } => Some(Event::AttnTemps { dims: attn(k), kind }),
                    Shape::AttnPad { k, of, kind } => Some(Event::AttnPad { of, dims: attn(k), kind }),
                    // Each allocation knows where it fell against the spans.
                    Shape::SpanBegin | Shape::SpanEnd | Shape::ConvMark | Shape::AttnMark => None,
                })
            })
            .flatten()
            .collect();
        let r = &recordings[0].1;
        Ok(Fit {
            events,
            made_by: first.made_by.clone(),
            phases: r.phases.clone(),
            param_count: r.row.param_count,
            param_bytes: r.row.param_bytes,
            extended: false,
            on: r.on.clone(),
        })
    }

    /// The step at `batch`, replayed phase by phase under `cap` through `on`'s allocator (the
    /// counting allocator's budget; CUDA's caching allocator, the device's allocations alone,
    /// after its workspaces): each phase's end, peak and what was live, the bytes filed under
    /// the phase that allocated them (a recording cannot tell a gradient from a temporary); and
    /// the first allocation the cap refused, with the phase it fell in.
    fn replay(&self, batch: usize, cap: Option<u64>, on: &On) -> Result<Replayed> {
        let mut ledger = match on.cuda {
            None => Ledger::cpu(cap),
            Some(workspaces) => Ledger::cuda(cap, workspaces.in_order()),
        };
        if on.record {
            ledger.record();
        }
        let mut oom = None;
        let mut held: Vec<Option<Held>> = Vec::new();
        // What CUDA holds besides an allocation, as long as it lives (a logsumexp's padding).
        let mut besides: std::collections::HashMap<usize, Held> = std::collections::HashMap::new();
        let mut cudnn = cudnn_conv::Coverage::default();
        let mut phases = self.phases.iter();
        let mut out = Vec::new();
        let mut current = phases.next().copied();
        let label = |ledger: &mut Ledger, at: Option<(usize, usize, Phase)>| match at {
            Some((step, micro, phase)) => ledger.label(step, micro, phase),
            None => ledger.unlabel(),
        };
        label(&mut ledger, current);
        let at = |(a, c): (i64, i64)| a.saturating_add(c.saturating_mul(batch as i64)).max(0) as u64;
        for e in &self.events {
            match *e {
                // The host's tensors, and a CPU library's scratch, are not CUDA's.
                Event::Alloc { place, span, .. }
                    if on.cuda.is_some() && (place.host(on.data_on_host) || span == Span::Scratch) =>
                {
                    held.push(None)
                }
                Event::Alloc { a, c, span, .. } => {
                    if on.record {
                        ledger.at_op(self.made_by.get(held.len()).map(String::as_str));
                    }
                    let bytes =
                        a.checked_add(c.checked_mul(batch as i64).unwrap_or(i64::MAX)).unwrap_or(i64::MAX);
                    let bytes = match on.cuda {
                        Some(_) if span == Span::Mask => bytes / on.element.max(1),
                        _ => bytes,
                    };
                    let bytes = u64::try_from(bytes)
                        .map_err(|_| anyhow::anyhow!("a size fitted below 0 B at batch {batch}"))?;
                    let category = current.map_or(Category::Transient, |(_, _, p)| category(p));
                    held.push(Some(ledger.hold(category, bytes)));
                }
                Event::Free { of } => {
                    if let Some(h) = held.get_mut(of).and_then(Option::take) {
                        if on.record {
                            ledger.at_op(self.made_by.get(of).map(String::as_str));
                        }
                        ledger.release(h);
                    }
                    if let Some(h) = besides.remove(&of) {
                        ledger.release(h);
                    }
                }
                Event::AttnTemps { dims, kind } => {
                    if on.cuda.is_none() {
                        continue;
                    }
                    let d: [i64; ATTN_DIMS] = dims.map(|x| at(x) as i64);
                    if let Some(t) = efficient_temps(kind, &d) {
                        // As `_efficient_attention_backward` takes them (efficient::backward):
                        // the delta's product, sum and result; the product and sum go; then the
                        // workspace; then the delta and the workspace.
                        let [product, sum, delta] = t.delta.map(|b| ledger.hold(Category::Transient, b));
                        ledger.release(sum);
                        ledger.release(product);
                        let workspace = ledger.hold(Category::Transient, t.workspace);
                        ledger.release(delta);
                        ledger.release(workspace);
                    }
                }
                Event::AttnPad { of, dims, kind } => {
                    if on.cuda.is_none() || held.get(of).is_none_or(Option::is_none) {
                        continue;
                    }
                    let d: [i64; ATTN_DIMS] = dims.map(|x| at(x) as i64);
                    if efficient_temps(kind, &d).is_some() {
                        let (b, h, m) = (d[0], d[1], d[2]);
                        let pad = (b * h * ((m + 31) / 32 * 32 - m) * 4) as u64;
                        if pad > 0 {
                            let category = current.map_or(Category::Transient, |(_, _, p)| category(p));
                            besides.insert(of, ledger.hold(category, pad));
                        }
                    }
                }
                Event::Start => ledger.reset_peak(),
                Event::Reduce { rows, cols, acc } => {
                    let Some(gpu) = on.gpu else { continue };
                    ledger.hold_staging(cuda_reduce::sum_rows_staging(at(rows), at(cols), acc as u64, gpu));
                }
                Event::Cudnn { pass, dims, dtype, known } => {
                    let Some(gpu) = on.gpu else { continue };
                    let d = dims.map(at).map(|v| v as i64);
                    let call = cudnn_conv::Call {
                        pass,
                        input: [d[0], d[1], d[2], d[3]],
                        weight: [d[4], d[5], d[6], d[7]],
                        stride: d[8],
                        padding: d[9],
                        groups: d[10],
                        dtype,
                    };
                    let bytes = if known { cudnn_conv::workspace(gpu, &call) } else { None };
                    ledger.hold_workspace(
                        crate::estimate::ledger::BlockAction::Cudnn,
                        bytes,
                        call.to_string(),
                    );
                    cudnn.add(call, bytes.is_some());
                }
                Event::CudaTemp { a, c } => {
                    if on.cuda.is_some() {
                        let temp = ledger.hold(Category::Transient, at((a, c)));
                        ledger.release(temp);
                    }
                }
                Event::LayerNormGrads { input, grads } => {
                    let Some(gpu) = on.gpu else { continue };
                    let element = on.element.max(1) as u64;
                    // Each gradient still on the device, and its bytes.
                    let grads: Vec<(usize, u64)> = grads
                        .iter()
                        .flatten()
                        .filter(|(k, _)| held.get(*k).is_some_and(Option::is_some))
                        .map(|&(k, size)| (k, at(size)))
                        .collect();
                    let Some(&(k, bytes)) = grads.first() else { continue };
                    let width = (bytes / element).max(1);
                    let Some(rows) =
                        cuda_reduce::layer_norm_partial_rows(at(input) / (width * element), width, gpu)
                    else {
                        continue;
                    };
                    if on.record {
                        ledger.at_op(self.made_by.get(k).map(String::as_str));
                    }
                    let partials: Vec<Held> = grads
                        .iter()
                        .map(|_| ledger.hold(Category::Transient, rows * width * element))
                        .collect();
                    let category = current.map_or(Category::Transient, |(_, _, p)| category(p));
                    // `*dgamma = dgamma_blocks.sum(0)`: the sum's own tensor, then the one it
                    // replaces freed.
                    for &(k, bytes) in &grads {
                        let sum = ledger.hold(category, bytes);
                        let acc = if element == 8 { 8 } else { 4 };
                        ledger.hold_staging(cuda_reduce::sum_rows_staging(rows, width, acc, gpu));
                        if let Some(old) = held[k].replace(sum) {
                            ledger.release(old);
                        }
                    }
                    // Locals go in the reverse of their making: dbeta_blocks first.
                    for partial in partials.into_iter().rev() {
                        ledger.release(partial);
                    }
                }
                Event::End => {
                    let Some((step, micro, phase)) = current else { bail!("more phase marks than phases") };
                    if let (None, Some(refused)) = (&oom, ledger.refused()) {
                        oom = Some(PredictedOom {
                            phase_index: out.len(),
                            requested: refused.requested,
                            reserved: refused.reserved,
                        });
                    }
                    let (reserved_end, reserved_peak) = ledger.reserved();
                    out.push(PhasePrediction {
                        step,
                        micro,
                        phase,
                        allocated_end: ledger.live().total(),
                        peak: ledger.peak(),
                        reserved_end,
                        reserved_peak,
                        by_category: ledger.at_peak(),
                        end_by_category: ledger.live(),
                    });
                    current = phases.next().copied();
                    label(&mut ledger, current);
                }
            }
        }
        let baseline = ledger.baseline();
        Ok(Replayed { phases: out, oom, baseline, blocks: ledger.take_log(), cudnn: cudnn.counts() })
    }
}

impl Fit {
    /// Each allocation's op, where it lives, and where it falls against the spans.
    fn allocations(&self) -> impl Iterator<Item = (&str, Place, Span)> {
        let allocs = self.events.iter().filter_map(|e| match e {
            Event::Alloc { place, span, .. } => Some((*place, *span)),
            _ => None,
        });
        self.made_by.iter().map(String::as_str).zip(allocs).map(|(op, (place, span))| (op, place, span))
    }

    /// Whether every op that allocates on the device allocates on CUDA what it allocates on the
    /// CPU ([`cuda_op`]); the first that does not, named. Inside a library span the op's
    /// scratch is dropped and its outputs are CUDA's kernel's (the convolution and batch norm
    /// rules say what that leaves out).
    /// Returns the ops allowed unchecked ([`OpOnCuda::Unchecked`]), each once.
    fn cuda_ops(&self, data_on_host: bool) -> std::result::Result<Vec<String>, String> {
        let mut unchecked: Vec<String> = Vec::new();
        for (op, ..) in
            self.allocations().filter(|&(_, place, span)| !place.host(data_on_host) && span == Span::Outside)
        {
            if cuda_op(op)? == OpOnCuda::Unchecked {
                let inner = op.rsplit(" > ").next().unwrap_or(op).to_string();
                if !unchecked.contains(&inner) {
                    unchecked.push(inner);
                }
            }
        }
        Ok(unchecked)
    }

    /// Whether the step calls the CPU's flash attention, and if so whether CUDA's
    /// memory-efficient kernel, which the replay models, is the one every call would take
    /// (else the CPU kernel's outputs stand in for another backend's).
    fn attention(&self) -> Option<bool> {
        let calls: Vec<bool> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::AttnTemps { dims, kind } | Event::AttnPad { dims, kind, .. } => {
                    let d: [i64; ATTN_DIMS] = dims.map(|(a, c)| a + c);
                    Some(efficient_temps(*kind, &d).is_some())
                }
                _ => None,
            })
            .collect();
        (!calls.is_empty()).then(|| calls.iter().all(|&m| m))
    }

    /// Whether the step, recorded on meta for CUDA, ran CUDA's memory-efficient attention with a
    /// mask that needs a gradient ([`cuda_ops::efficient_on_meta`]).
    fn efficient_with_bias(&self) -> bool {
        self.made_by.iter().any(|op| cuda_ops::efficient_on_meta(op))
    }

    /// Whether the step runs a convolution (a library span whose op is one).
    fn convolves(&self) -> bool {
        self.allocations()
            .any(|(op, _, span)| span != Span::Outside && op.to_lowercase().contains("convolution"))
    }
}

/// The allocator a fit is replayed through: the CPU's, or CUDA's caching allocator holding
/// these workspaces for the process.
#[derive(Debug, Clone, Copy, Default)]
struct On {
    cuda: Option<super::Workspaces>,
    /// CUDA's GPU, whose SM count sizes a reduction's staging buffer.
    gpu: Option<super::GpuArch>,
    /// Log every allocation and free (`estimate --blocks`).
    record: bool,
    /// The training dtype's bytes an element (a dropout mask's on the CPU).
    element: i64,
    /// The data set, and each batch's gathering, are the host's ([`Place::Data`]).
    data_on_host: bool,
}

impl On {
    fn of(config: &Config, options: &Options, record: bool) -> On {
        let cuda = options.target == Target::Cuda;
        On {
            cuda: cuda.then_some(options.workspaces),
            gpu: cuda.then_some(options.gpu),
            record,
            element: config.training.dtype.kind().elt_size_in_bytes() as i64,
            data_on_host: data_on_host(config),
        }
    }
}

/// A fit's replay at one batch.
#[derive(Debug, Clone)]
struct Replayed {
    phases: Vec<PhasePrediction>,
    oom: Option<PredictedOom>,
    /// Allocated and reserved before the trial (CUDA's workspaces).
    baseline: (u64, u64),
    /// Every allocation and free replayed, when `On::record` asked for them.
    blocks: Vec<super::BlockEvent>,
    /// On CUDA: of the distinct cuDNN calls, how many a GPU measured, and how many in all.
    cudnn: (usize, usize),
}

impl Replayed {
    /// Each phase's end and peak: what a check compares.
    fn bytes(&self) -> Vec<(u64, u64)> {
        self.phases.iter().map(|p| (p.allocated_end, p.peak)).collect()
    }

    fn peak(&self) -> u64 {
        self.phases.iter().map(|p| p.peak).max().unwrap_or(0)
    }
}

/// What CUDA's memory-efficient attention backward takes besides its gradients, for a call of
/// `kind` with the query's, key's and value's shapes `d`: its delta's three temporaries (the
/// product and sum of float32 `grad_out * out`, and the delta) and its workspace; `None` where
/// that kernel is not modelled (another dtype or head dimension: the CPU's outputs stand in,
/// under the attention rule's margin).
struct EfficientTemps {
    delta: [u64; 3],
    workspace: u64,
}

fn efficient_temps(kind: tch::Kind, d: &[i64; ATTN_DIMS]) -> Option<EfficientTemps> {
    let (b, h, m, k, kv) = (d[0], d[1], d[2], d[3], d[11]);
    if !super::graph::efficient::modelled(kind, k) || k != kv {
        return None;
    }
    let f = 4u64;
    Some(EfficientTemps {
        delta: [(b * m * h * kv) as u64 * f, (b * m * h) as u64 * f, (b * h * m) as u64 * f],
        workspace: super::graph::efficient::workspace_bytes(b, h, m, k),
    })
}

/// Where a phase's allocations are filed.
fn category(phase: Phase) -> Category {
    match phase {
        Phase::Data => Category::Data,
        Phase::Model => Category::Params,
        Phase::ToDevice => Category::Batch,
        Phase::Forward => Category::Activations,
        Phase::Backward => Category::Grads,
        Phase::OptimizerStep => Category::OptimizerState,
        _ => Category::Transient,
    }
}

/// Each of the values `of` picks from every recording, fitted as `a + c * batch` from the
/// smallest and largest batch and checked at the others; `what` names the `k`-th, `unit` its
/// unit, where one is not affine.
fn affine(
    parsed: &[(usize, Parsed)],
    of: impl Fn(&Parsed) -> &Vec<i64>,
    what: impl Fn(usize) -> String,
    unit: &str,
) -> Result<Vec<(i64, i64)>> {
    let ((b0, first), (b2, last)) = (&parsed[0], &parsed[parsed.len() - 1]);
    let mut coefficients = Vec::with_capacity(of(first).len());
    for (k, (&lo, &hi)) in of(first).iter().zip(of(last)).enumerate() {
        let (db, ds) = ((*b2 - *b0) as i64, hi - lo);
        if db == 0 {
            // One batch: the recording as it is.
            coefficients.push((lo, 0));
            continue;
        }
        if ds % db != 0 {
            bail!(
                "{} is {lo}{unit} at batch {b0} and {hi}{unit} at batch {b2}: not affine in the batch",
                what(k)
            );
        }
        let c = ds / db;
        let a = lo - c * *b0 as i64;
        for (b, p) in &parsed[1..parsed.len() - 1] {
            if of(p)[k] != a + c * *b as i64 {
                bail!(
                    "{} is {}{unit} at batch {b}, where {lo}{unit} at {b0} and {hi}{unit} at {b2} make it {}: not \
                     affine in the batch",
                    what(k),
                    of(p)[k],
                    a + c * *b as i64
                );
            }
        }
        coefficients.push((a, c));
    }
    Ok(coefficients)
}

/// A ladder's refusal in short: each set's first words, up to where its recordings part
/// ("at batches [4, 6, 8], its step allocates differently at batch 4 and batch 6").
fn in_short(why: &str) -> String {
    why.split("; at batches")
        .map(|set| set.split(": the recordings part").next().unwrap_or(set).trim_start_matches("; "))
        .collect::<Vec<_>>()
        .join("; at batches")
}

/// Predicts a trial of `config` (a TorchScript module) from its recorded step; with `record`,
/// every allocation and free of the replay too.
pub(super) fn predict(
    config: &Config,
    shape: DataShape,
    options: &Options,
    record: bool,
) -> Result<(Prediction, Vec<super::BlockEvent>)> {
    let path = match &config.model {
        crate::spec::ModelSpec::Torchscript(s) => s.path.display().to_string(),
        other => other.describe(),
    };
    let cuda = options.target == Target::Cuda;
    if cuda {
        cuda_scope(config, crate::train::record::meta_for(true)).map_err(|why| {
            anyhow::anyhow!(
                "{path}: the CUDA estimate of a TorchScript module replays its step recorded on the CPU, which {why}; \
                 `oomlab run` measures it on a GPU, and `--device cpu` estimates it on the CPU"
            )
        })?;
    }
    // The step CUDA runs: its default optimizer implementation (foreach), recorded on the CPU.
    let recorded = as_run_on(config, options.target);
    let batch = config.training.batch_size;
    // No set of the ladder agreed: the step recorded at the batch itself, where it can be.
    let fitted = match fit(&recorded, shape.samples, options.ladder_budget, cuda) {
        Ok((fit, batches)) => Ok((fit, batches, None)),
        Err(e) => own_batch(&recorded, shape.samples, batch, cuda, format!("{e:#}"))
            .map(|(fit, found)| (fit, [batch; 3], Some(found))),
    };
    let (fit, batches, own) =
        fitted.map_err(|e| anyhow::anyhow!("{path}: {e:#}; `oomlab run` measures it at the batch"))?;
    let unchecked = match cuda {
        true => fit.cuda_ops(data_on_host(config)).map_err(|why| {
            anyhow::anyhow!("{path}: {why}; `oomlab run` measures it on a GPU, and `--device cpu` estimates it on the CPU")
        })?,
        false => Vec::new(),
    };
    let (replayed, found) = match own {
        Some(found) => (fit.replay(batch, options.limit, &On::of(config, options, record))?, found),
        None => at_batch(
            &fit,
            batches,
            batch,
            options.limit,
            On::of(config, options, record),
            |b| {
                options.shared_checks
                    && checked_alike(&recorded, shape.samples, options.ladder_budget, cuda, b)
            },
            |b| checked(&recorded, b, cuda),
        )?,
    };
    let how = match found {
        Found::Fitted => format!("replayed at batch {batch}"),
        Found::Checked => format!(
            "replayed at batch {batch}, past them, and checked there by a recording of its own (the same bytes)"
        ),
        Found::CheckedAlike => format!(
            "replayed at batch {batch}, past them, and checked there by a recording of a step like it (one \
             micro-batch, the foreach optimizer: the same bytes as its fit)"
        ),
        Found::Corrected { off } => format!(
            "but at batch {batch}, past them, the fit was {:+.2}% off the peak of a recording there (a kernel \
             whose buffers change with the batch): these are that recording's bytes",
            off * 100.0
        ),
        Found::Own { ref why } => format!(
            "no set of the ladder's batches agreed ({}), so these are that recording's bytes, exact at this batch \
             alone (a kernel's buffers that change with the batch, as oneDNN's on some CPUs)",
            in_short(why)
        ),
        Found::Unchecked { peak } => format!(
            "replayed at batch {batch}, extrapolated and not checked (a check would record a step of {} on this \
             host, over oomlab's {} limit for one): a kernel whose buffers change past the recorded batches would \
             not be seen",
            crate::spec::format_size(peak),
            crate::spec::format_size(CHECK_LIMIT)
        ),
    };
    let Replayed { phases, oom, baseline, blocks, cudnn } = replayed;
    let peak = phases.iter().map(|p| p.peak).max().unwrap_or(0);
    let reserved_peak = phases.iter().map(|p| p.reserved_peak).max().unwrap_or(0);
    let mut rules = evidence::rules(config, &phases, options.target, options.gpu);
    if cuda && fit.convolves() {
        rules.push(evidence::CONVOLUTIONS);
    }
    // Whether the step attends, and through the kernel the replay models (read once, for the
    // rule and the note).
    let attention = if cuda { fit.attention() } else { None };
    if cuda {
        match attention {
            Some(true) => rules.push(evidence::EFFICIENT_ATTENTION),
            Some(false) => rules.push(evidence::ATTENTION),
            None => {}
        }
        if fit.efficient_with_bias() {
            rules.push(evidence::EFFICIENT_ATTENTION_BIAS);
        }
        if !unchecked.is_empty() {
            rules.push(evidence::UNCHECKED_OPS);
        }
    }
    let bound = evidence::bound(rules, &phases, baseline);
    let extended = match fit.extended {
        true => format!(
            "; its {} micro-batches from a recording of {}, whose middle ones repeat event for event",
            config.training.techniques.accumulation,
            accumulation::RECORDED
        ),
        false => String::new(),
    };
    let on = match &fit.on {
        RecordedOn::Meta if cuda => {
            "on the meta device (every op's outputs as shapes: no arithmetic, no memory)".to_string()
        }
        // What a CPU run takes besides its ops' outputs (oneDNN's and MKL's buffers) is not in it.
        RecordedOn::Meta => {
            "on the meta device (every op's outputs as shapes: no arithmetic, no memory; the \
                             CPU libraries' own scratch, which a run here also takes, left out)"
                .to_string()
        }
        RecordedOn::Cpu { not_meta: None } => "on this CPU".to_string(),
        RecordedOn::Cpu { not_meta: Some(why) } => format!("on this CPU (not on the meta device: {why})"),
    };
    let mut notes = vec![match found {
        Found::Own { .. } => format!(
            "{}: its step recorded {on} at batch {batch} itself (every allocation and free{extended}): {how}; bytes \
             are filed by the phase that made them",
            config.model.describe(),
        ),
        _ => format!(
            "{}: its step recorded {on} at batches {batches:?} (every allocation and free{extended}), each size \
             fitted as affine in the batch and checked, {how}; bytes are filed by the phase that made them",
            config.model.describe(),
        ),
    }];
    if cuda {
        notes.push(format!(
            "cuda: the recording's device allocations (the host's left out: the data set and each batch's \
             gathering, the file's records, step counters, scalars wrapped as tensors) replayed through libtorch \
             2.11's caching allocator, after {} of cuBLAS/cuBLASLt workspaces; the optimizer as PyTorch runs it \
             on CUDA ({})",
            crate::spec::format_size(options.workspaces.total()),
            recorded.training.techniques.optimizer_impl.map_or("", crate::spec::Named::as_str)
        ));
        if cudnn.1 > 0 {
            notes.push(format!("cuda: {}", super::cudnn_note(cudnn)));
        }
        match attention {
            Some(true) => notes.push(
                "cuda: scaled_dot_product_attention recorded through the CPU's flash kernel (dropout set to 0 for \
                 the recording: CUDA's fused kernels keep no mask), replayed as CUDA's memory-efficient kernel: \
                 its output and logsumexp padded to 32 rows, its backward's delta and workspace"
                    .to_string(),
            ),
            Some(false) => notes.push(
                "cuda: scaled_dot_product_attention at a dtype or head dimension the replay does not model: the \
                 CPU flash kernel's outputs stand in for CUDA's backend (the attention rule's margin)"
                    .to_string(),
            ),
            None => {}
        }
        if fit.efficient_with_bias() {
            notes.push(
                "cuda: scaled_dot_product_attention with a mask that needs a gradient recorded on the meta device \
                 as CUDA's memory-efficient kernel runs it (the CPU would take its math path, keeping [L, L] scores \
                 CUDA does not): output, logsumexp padded to 32 rows, the mask's gradient padded to 16 columns, \
                 the backward's delta and workspace (the attention-efficient-bias rule's margin)"
                    .to_string(),
            );
        }
        if recorded.training.techniques.amp != crate::spec::Amp::Off && matches!(fit.on, RecordedOn::Meta) {
            notes.push(format!(
                "cuda: training.amp = \"{}\" recorded on the meta device under CUDA's autocast: PyTorch 2.11's \
                 CUDA op lists (ATen/autocast_mode.h: matmuls and convolutions in {}, losses, norms, softmax and \
                 sums in float32, the widest type for the rest of its lists) and cast cache{}",
                recorded.training.techniques.amp.as_str(),
                match recorded.training.techniques.amp {
                    crate::spec::Amp::Bf16 => "bf16",
                    _ => "fp16",
                },
                match recorded.training.techniques.amp {
                    crate::spec::Amp::Fp16 { .. } => ", the grad scaler's steps all taken",
                    _ => "",
                }
            ));
        }
        if !unchecked.is_empty() {
            notes.push(format!(
                "cuda: ops whose CUDA kernels are CUDA's own and not checked against the CPU's, their recorded \
                 allocations standing in (the unchecked-ops rule's margin): {}",
                unchecked.join(", ")
            ));
        }
    }
    let prediction = Prediction {
        bound,
        peak,
        reserved_peak,
        baseline_allocated: baseline.0,
        baseline_reserved: baseline.1,
        oom,
        param_count: fit.param_count,
        param_bytes: fit.param_bytes,
        // What the step's optimizer kept, as recorded: a parameter without a gradient (frozen,
        // or unused by the forward) has no state, which the module's own bytes do not say.
        optimizer_state_bytes: phases.iter().map(|p| p.end_by_category.optimizer_state).max().unwrap_or(0),
        shape,
        options: *options,
        notes,
        phases,
    };
    Ok((prediction, blocks))
}

/// `config` as it runs on `target`: on CUDA, with PyTorch's default optimizer implementation
/// there (foreach) unless the spec names one, which the CPU recording then runs.
fn as_run_on(config: &Config, target: Target) -> Config {
    let mut c = config.clone();
    let t = &mut c.training.techniques;
    t.optimizer_impl = Some(crate::spec::OptimizerImpl::resolve(t.optimizer_impl, target == Target::Cuda));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::ffi::{Where, REDUCE_MARK, SPAN_BEGIN, SPAN_END};
    use crate::schema::SummaryRow;
    use crate::train::record::{END, START};

    fn recording(events: Vec<(i64, u64)>) -> Recording {
        Recording {
            ops: Vec::new(),
            tags: Vec::new(),
            reduces: Vec::new(),
            convs: Vec::new(),
            attns: Vec::new(),
            events,
            phases: vec![(0, 0, Phase::Model), (1, 0, Phase::Forward)],
            row: SummaryRow { param_count: 3, param_bytes: 12, ..SummaryRow::default() },
            on: RecordedOn::Cpu { not_meta: None },
        }
    }

    /// Parameters of 12 B, then a forward whose activation is 8 B a row and whose temporary is
    /// 4 B a row and 16 B more, freed before the activation.
    fn step(b: i64) -> Recording {
        let (start, end) = ((0, START), (0, END));
        recording(vec![start, (12, 1), end, start, (8 * b, 2), (4 * b + 16, 3), (-(4 * b + 16), 3), end])
    }

    /// A library's scratch taken at one batch and not at the others (oneDNN's convolutions at
    /// small batches) parts the CPU's recordings, not the CUDA replay's, which has no scratch.
    #[test]
    fn scratch_that_comes_and_goes_with_the_batch_parts_the_cpus_fit_and_not_cudas() {
        let (start, end, begin, finish) = ((0, START), (0, END), (0, SPAN_BEGIN), (0, SPAN_END));
        let with = |b: i64, scratch: bool| {
            let mut events = vec![start, (12, 1), end, start, begin, (8 * b, 2)];
            if scratch {
                events.extend([(100, 3), (-100, 3)]);
            }
            events.extend([finish, end]);
            let mut r = recording(events);
            // The span is the convolution's; its kernel frees the scratch.
            r.ops = r
                .events
                .iter()
                .map(|e| match *e {
                    e if e == begin => "aten::convolution",
                    (-100, 3) => "aten::convolution > aten::mkldnn_convolution",
                    _ => "",
                })
                .map(String::from)
                .collect();
            r
        };
        let recordings = [(2, with(2, true)), (3, with(3, false)), (5, with(5, false))];
        let e = Fit::new(&recordings, false).unwrap_err().to_string();
        assert!(e.contains("allocates differently"), "{e}");
        let fit = Fit::new(&recordings, true).unwrap();
        let phases = fit.replay(1000, None, &On::default()).unwrap().phases;
        assert_eq!((phases[1].allocated_end, phases[1].peak), (12 + 8000, 12 + 8000));
        // Where every recording takes it, the CPU's fit keeps it and CUDA's leaves it out.
        let recordings = [(2, with(2, true)), (3, with(3, true)), (5, with(5, true))];
        let peak =
            |for_cuda| Fit::new(&recordings, for_cuda).unwrap().replay(1000, None, &On::default()).unwrap();
        assert_eq!((peak(false).phases[1].peak, peak(true).phases[1].peak), (12 + 8000 + 100, 12 + 8000));
    }

    #[test]
    fn a_step_affine_in_the_batch_is_synthesised_at_any_batch() {
        let fit = Fit::new(&[(2, step(2)), (3, step(3)), (5, step(5))], false).unwrap();
        let Replayed { phases, oom, .. } = fit.replay(1000, None, &On::default()).unwrap();
        assert!(oom.is_none());
        assert_eq!(phases.len(), 2);
        assert_eq!((phases[0].allocated_end, phases[0].peak), (12, 12));
        assert_eq!((phases[1].allocated_end, phases[1].peak), (12 + 8000, 12 + 8000 + 4016));
        assert_eq!(phases[1].by_category.activations, 8000 + 4016);
        assert_eq!(fit.param_bytes, 12);
        // Under a cap, the first allocation past it is refused, in the phase it falls in.
        let oom = fit.replay(1000, Some(12 + 8000 + 100), &On::default()).unwrap().oom;
        let oom = oom.expect("the temporary does not fit");
        assert_eq!((oom.phase_index, oom.requested), (1, 4016));
    }

    #[test]
    fn past_the_recorded_batches_a_recording_at_the_batch_checks_the_fit_and_wins_where_they_part() {
        let fit = Fit::new(&[(2, step(2)), (3, step(3)), (5, step(5))], false).unwrap();
        let exact = |b: usize| Ok(Arc::new(Fit::new(&[(b, step(b as i64))], false).unwrap()));
        // Within the recorded batches: no recording asked for.
        let (_, found) = at_batch(
            &fit,
            [2, 3, 5],
            4,
            None,
            On::default(),
            |_| panic!("not asked"),
            |_| panic!("not recorded"),
        )
        .unwrap();
        assert_eq!(found, Found::Fitted);
        // Past them, the same bytes: checked.
        let (r, found) = at_batch(&fit, [2, 3, 5], 100, None, On::default(), |_| false, exact).unwrap();
        assert_eq!((found, r.phases[1].peak), (Found::Checked, 12 + 800 + 416));
        // A step like it checked there: no recording of its own.
        let (r, found) =
            at_batch(&fit, [2, 3, 5], 100, None, On::default(), |b| b == 100, |_| panic!("not recorded"))
                .unwrap();
        assert_eq!((found, r.phases[1].peak), (Found::CheckedAlike, 12 + 800 + 416));
        // A kernel that takes 100 B more a row past batch 50: the recording's bytes, and by how
        // much the fit was off.
        let bigger = |b: usize| {
            let mut r = step(b as i64);
            r.events[5].0 += 100 * b as i64;
            r.events[6].0 -= 100 * b as i64;
            Ok(Arc::new(Fit::new(&[(b, r)], false).unwrap()))
        };
        let (r, found) = at_batch(&fit, [2, 3, 5], 100, None, On::default(), |_| false, bigger).unwrap();
        assert_eq!(r.phases[1].peak, 12 + 800 + 416 + 10_000);
        let Found::Corrected { off } = found else { panic!("{found:?}") };
        assert!((off - (-10_000.0 / 11_228.0)).abs() < 1e-9, "{off}");
        // Over the limit for a check: the fit, said to be unchecked.
        let (_, found) = at_batch(
            &fit,
            [2, 3, 5],
            100_000_000,
            None,
            On::default(),
            |_| panic!("not asked"),
            |_| panic!("not recorded"),
        )
        .unwrap();
        assert!(matches!(found, Found::Unchecked { .. }), "{found:?}");
    }

    /// On CUDA: the host's allocations and a CPU library's scratch go, dropout's mask is a byte
    /// an element, a bias sum over enough rows holds the reduction's staging buffer, and blocks
    /// are the caching allocator's (512 B at least) after its workspaces.
    #[test]
    fn a_recording_replayed_for_cuda_keeps_the_devices_allocations_as_cuda_makes_them() {
        let (start, end) = ((0, START), (0, END));
        let (begin, finish) = ((0, SPAN_BEGIN), (0, SPAN_END));
        let step = |b: i64| {
            let mut r = recording(vec![
                start,
                (12, 1),  // a parameter (tagged the device's)
                (100, 2), // the file's records (the model phase's default: the host's)
                end,
                start,
                begin, // dropout: its mask (float32), then its output
                (4 * 1024 * b, 3),
                (4 * 1024 * b, 4),
                finish,
                begin, // a convolution: oneDNN's scratch, then the output
                (64 * b, 5),
                (8 * b, 6),
                (-64 * b, 5),
                finish,
                (8, 7), // a wrapped scalar (tagged the host's)
                (-8, 7),
                (0, REDUCE_MARK), // a bias sum of [b * 512, 2048]
                end,
            ]);
            r.tags = r
                .events
                .iter()
                .map(|e| match e.1 {
                    1 => Where::Device,
                    7 => Where::Host,
                    _ => Where::Phase,
                })
                .collect();
            r.ops = r
                .events
                .iter()
                .map(|e| if *e == begin { "aten::dropout".to_string() } else { String::new() })
                .collect();
            r.reduces = vec![crate::ffi::Reduce { rows: 512 * b, cols: 2048, acc: 4 }];
            r
        };
        let fit = Fit::new(&[(2, step(2)), (3, step(3)), (4, step(4))], false).unwrap();
        let workspaces = super::super::Workspaces::for_run(super::super::GpuArch::Hopper, []);
        let cuda = On {
            cuda: Some(workspaces),
            gpu: Some(super::super::GpuArch::Hopper),
            record: false,
            element: 4,
            data_on_host: true,
        };
        let b = 4;
        let on_cpu = fit.replay(b, None, &On::default()).unwrap();
        assert_eq!(on_cpu.phases[0].allocated_end, 112);
        assert_eq!(on_cpu.phases[1].allocated_end, 112 + 8 * 1024 * b as u64 + 8 * b as u64);
        let on_cuda = fit.replay(b, None, &cuda).unwrap();
        assert_eq!(on_cuda.baseline.0, workspaces.total());
        // Phases count the trial's own blocks; the workspaces are the baseline.
        assert_eq!(on_cuda.phases[0].allocated_end, 512, "the parameter alone, a 512 B block");
        let (mask, out) = (1024 * b as u64, 4 * 1024 * b as u64);
        assert_eq!(on_cuda.phases[1].allocated_end, 512 + mask + out + 512, "no scratch, no scalar");
        let staging = super::super::cuda_reduce::sum_rows_staging(
            512 * b as u64,
            2048,
            4,
            super::super::GpuArch::Hopper,
        )
        .expect("2048 rows stage");
        assert!(
            on_cuda.phases[1].peak >= on_cuda.phases[1].allocated_end + staging.0,
            "{:?}",
            on_cuda.phases[1]
        );
    }

    /// On CUDA a softmax backward takes a temporary of its output's size right after it; a
    /// layer norm backward past 64 Ki rows takes its partial sums after its three gradients,
    /// inside the kernel (before the engine's frees), and replaces the weight's and bias's
    /// gradients by their sums; a gradient the engine frees inside the node's span (adding it
    /// into its input buffer) is CUDA's too, not a library's scratch.
    #[test]
    fn softmax_and_layer_norm_backward_take_what_cudas_kernels_take() {
        const SOFTMAX: &str =
            "autograd::engine::evaluate_function: SoftmaxBackward0 > aten::_softmax_backward_data";
        const NODE: &str = "autograd::engine::evaluate_function: NativeLayerNormBackward0";
        const KERNEL: &str =
            "autograd::engine::evaluate_function: NativeLayerNormBackward0 > aten::native_layer_norm_backward";
        let (start, end) = ((0, START), (0, END));
        let step = |b: i64| {
            let rows = 512 * b; // normalized rows of width 64, fp32
            let events = vec![
                (start, ""),
                (end, ""),
                (start, ""),
                ((4 * 1024 * b, 1), SOFTMAX),
                ((0, SPAN_BEGIN), NODE),
                ((4 * 64 * rows, 2), KERNEL), // dX
                ((256, 3), KERNEL),           // dgamma
                ((256, 4), KERNEL),           // dbeta
                ((64 * b, 5), KERNEL),        // the CPU kernel's buffer
                ((-64 * b, 5), KERNEL),
                ((-4 * 64 * rows, 2), NODE), // the engine adds dX into its buffer
                ((0, SPAN_END), NODE),
                (end, ""),
            ];
            let mut r = recording(events.iter().map(|e| e.0).collect());
            r.ops = events.iter().map(|e| e.1.to_string()).collect();
            r.tags = vec![Where::Phase; events.len()];
            r
        };
        let fit = Fit::new(&[(2, step(2)), (3, step(3)), (4, step(4))], false).unwrap();
        let hopper = super::super::GpuArch::Hopper;
        let workspaces = super::super::Workspaces::for_run(hopper, []);
        let cuda =
            On { cuda: Some(workspaces), gpu: Some(hopper), record: true, element: 4, data_on_host: true };
        let asked = |b: usize| -> Vec<(&'static str, u64)> {
            let replayed = fit.replay(b, None, &cuda).unwrap();
            replayed
                .blocks
                .iter()
                .filter(|e| e.action != crate::estimate::ledger::BlockAction::SegmentAlloc)
                .map(|e| (e.action.as_str(), e.requested))
                .collect()
        };
        // 256 rows of 512: 131,072 normalized rows, over 64 Ki: 4096 partial rows (the grid's
        // cap, 32 Ki blocks over 2 warps, is 16,384).
        let b = 256u64;
        let (softmax, dx) = (4 * 1024 * b, 4 * 64 * 512 * b);
        let partial = 4096 * 64 * 4;
        let staging = super::super::cuda_reduce::sum_rows_staging(4096, 64, 4, hopper).expect("stages");
        let sum = |g: &mut Vec<(&'static str, u64)>| {
            g.extend([("alloc", 256), ("alloc", staging.0), ("alloc", staging.1)]);
            g.extend([("free", staging.1), ("free", staging.0), ("free", 256)]);
        };
        let mut want = vec![("alloc", softmax), ("alloc", softmax), ("free", softmax)];
        want.extend([("alloc", dx), ("alloc", 256), ("alloc", 256), ("alloc", partial), ("alloc", partial)]);
        sum(&mut want);
        sum(&mut want);
        want.extend([("free", partial), ("free", partial), ("free", dx)]);
        assert_eq!(asked(b as usize), want);
        // At 128 rows of 512 (65,536 normalized rows) the kernel writes its gradients in place.
        let b = 128u64;
        let (softmax, dx) = (4 * 1024 * b, 4 * 64 * 512 * b);
        let want = vec![
            ("alloc", softmax),
            ("alloc", softmax),
            ("free", softmax),
            ("alloc", dx),
            ("alloc", 256),
            ("alloc", 256),
            ("free", dx),
        ];
        assert_eq!(asked(b as usize), want);
    }

    /// An op is CUDA's as recorded when it is on the list (by its innermost name), refused with
    /// why when CUDA's kernel is known to allocate otherwise, refused as unchecked otherwise.
    #[test]
    fn frees_between_the_same_allocations_may_come_in_any_order() {
        // The forward's activation and temporary, both freed at its end: in one order at
        // batch 3, the other at batches 2 and 5 (as a hash map's clear may free them).
        let step = |b: i64, swapped: bool| {
            let (act, tmp) = ((-(8 * b), 2), (-(4 * b + 16), 3));
            let frees = if swapped { [tmp, act] } else { [act, tmp] };
            let (start, end) = ((0, START), (0, END));
            let mut events = vec![start, (12, 1), end, start, (8 * b, 2), (4 * b + 16, 3)];
            events.extend(frees);
            events.push(end);
            recording(events)
        };
        let fit = Fit::new(&[(2, step(2, false)), (3, step(3, true)), (5, step(5, false))], false).unwrap();
        let phases = fit.replay(100, None, &On::default()).unwrap().phases;
        assert_eq!((phases[1].allocated_end, phases[1].peak), (12, 12 + 800 + 416));
    }

    #[test]
    fn a_size_not_affine_or_a_sequence_that_changes_is_refused() {
        let mut square = step(3);
        square.events[4].0 = 9 * 8; // b^2 * 8 at b = 3, where 8b would be 24
        let e = Fit::new(&[(2, step(2)), (3, square), (5, step(5))], false).unwrap_err().to_string();
        assert!(e.contains("allocation 1") && e.contains("not affine"), "{e}");
        let mut longer = step(5);
        longer.events.insert(5, (7, 9));
        let e = Fit::new(&[(2, step(2)), (3, step(3)), (5, longer)], false).unwrap_err().to_string();
        // One more allocation at event 5: the two first differ where the other frees (event 6).
        assert!(e.contains("part at event 6"), "{e}");
        let e = Fit::new(&[(2, recording(vec![(-4, 7), (0, END)])), (3, step(3)), (5, step(5))], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("made before the trial"), "{e}");
    }
}
