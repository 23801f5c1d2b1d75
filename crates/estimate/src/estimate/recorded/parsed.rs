//! A recording read as a step: each event's shape (an allocation and where it lives, a free
//! and what it frees, a phase's marks, the library spans, CUDA's extra calls placed where CUDA
//! makes them) and each allocation's size, before the sizes are fitted over the batch.
use std::collections::HashMap;

use anyhow::{bail, Result};

use super::super::cudnn_conv::{self, Pass};
use crate::ffi::{Where, ATTN_MARK, CONV_MARK, REDUCE_MARK, SPAN_BEGIN, SPAN_END};
use crate::schema::Phase;
use crate::train::record::{Recording, END, START};

/// What a recording is, apart from its sizes: each event's kind and, for a free, which
/// allocation it frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// An allocation, where it lives in a CUDA run; where it falls against the recording's
    /// library spans.
    Alloc {
        place: Place,
        span: Span,
    },
    Free(usize),
    Start,
    End,
    /// The outermost op that runs a CPU library of its own begins or ends (`ffi::SPAN_BEGIN`).
    SpanBegin,
    SpanEnd,
    /// A convolution begins (its calls come at the span's end, [`Shape::Cudnn`]).
    ConvMark,
    /// The `k`-th reduction of the recording ends.
    Reduce {
        k: usize,
        acc: i64,
    },
    /// One of the `k`-th convolution's cuDNN calls: after the forward's output, after the
    /// backward's input gradient (the data pass) or its weight gradient (the filter pass).
    Cudnn {
        k: usize,
        pass: Pass,
        dtype: &'static str,
        known: bool,
    },
    /// Allocation `of`, just made, is `_softmax_backward_data`'s output: CUDA's kernel
    /// (`softmax_backward_cuda_out`, SoftMax.cu, 2.11) then computes `Tensor tmp = grad * output`,
    /// a temporary of the output's size, which the CPU's does not.
    CudaTemp {
        of: usize,
    },
    /// A call of the CPU flash-attention kernel begins (a library span: its scratch is the CPU
    /// kernel's, its outputs what CUDA's fused kernels return).
    AttnMark,
    /// The `k`-th attention call, a backward, has made its last gradient: CUDA's
    /// memory-efficient kernel then takes its delta's temporaries and its workspace, and frees
    /// them before it returns ([`super::super::graph::efficient::backward`]).
    AttnTemps {
        k: usize,
        kind: tch::Kind,
    },
    /// The `k`-th attention call, a forward, has made its logsumexp, allocation `of`: CUDA's
    /// memory-efficient kernel pads it to 32 rows, which it holds as long as that lives.
    AttnPad {
        k: usize,
        of: usize,
        kind: tch::Kind,
    },
    /// A layer norm's backward (`native_layer_norm_backward`, a library span) ends, having
    /// returned allocation `input` (the input's gradient) and `grads` (the weight's, the
    /// bias's, each where asked for): on CUDA, past 64 Ki rows, its weight and bias gradients
    /// are reduced from partial sums ([`cuda_reduce::layer_norm_partial_rows`]).
    LayerNormGrads {
        input: usize,
        grads: [Option<usize>; 2],
    },
}

/// Where an allocation falls against the ops that run a CPU library of their own (oneDNN's
/// convolutions, batch and layer norm's CPU kernels), or that CUDA runs as a kernel of its own
/// (dropout; an embedding's backward, whose gradient alone is kept, as the built-in replay
/// keeps it: CUDA's index sort takes temporaries past 3072 indices, which an H200 showed before
/// the gradient, 64 KiB, outside the transformer_seq512 peak).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Span {
    /// Made outside any such op.
    Outside,
    /// Made inside one and outliving it: what the op returns (or keeps for its backward), which
    /// CUDA's kernel returns too.
    Output,
    /// Dropout's first, its mask: the CPU's `_dropout_impl` makes it in the input's dtype, CUDA's
    /// `native_dropout` (Dropout.cu, `dropout_cuda`) as bool, a byte an element, then the output
    /// as the CPU does.
    Mask,
    /// Made and freed inside one: the CPU library's scratch, which is not CUDA's.
    Scratch,
}

/// A recording read as a step: each event's shape, each allocation's size in order, and the op
/// of each event and each allocation (`""` where the recording names none), for messages.
pub(super) struct Parsed {
    pub(super) shapes: Vec<Shape>,
    pub(super) sizes: Vec<i64>,
    /// Each reduction's rows and columns, in turn.
    pub(super) dims: Vec<i64>,
    /// Each convolution's [`CONV_DIMS`] numbers, in turn.
    pub(super) conv_dims: Vec<i64>,
    /// Each flash attention call's [`ATTN_DIMS`] numbers (query, key, value), in turn.
    pub(super) attn_dims: Vec<i64>,
    pub(super) ops: Vec<String>,
    pub(super) made_by: Vec<String>,
}

impl Parsed {
    /// Up to the recording's last phase's end (what comes after is the trial's teardown, which
    /// frees in no fixed order).
    pub(super) fn new(r: &Recording) -> Result<Parsed> {
        let events = &r.events;
        let op = |i: usize| r.ops.get(i).cloned().unwrap_or_default();
        let (mut shapes, mut sizes, mut live) = (Vec::new(), Vec::new(), HashMap::new());
        let mut dims = Vec::new();
        let mut conv_dims = Vec::new();
        let mut attn_dims = Vec::new();
        // The convolution the span under way runs, if one: (its number, the recording's).
        let mut span_conv: Option<(usize, crate::ffi::Conv)> = None;
        // The flash attention the span under way runs, if one.
        let mut span_attn: Option<(usize, crate::ffi::Attn)> = None;
        let (mut ops, mut made_by): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        // The first allocation of the library span under way, if one is; where each allocation's
        // shape is (one freed within its span is the library's scratch).
        let (mut span, mut shape_of): (Option<usize>, Vec<usize>) = (None, Vec::new());
        // The op that opened the span under way (dropout's, a layer norm backward's node).
        let mut span_op = String::new();
        let end = events.iter().rposition(|e| *e == (0, END)).map_or(0, |i| i + 1);
        let mut phase = r.phases.iter().map(|p| p.2);
        let mut current = phase.next();
        for (i, &(delta, ptr)) in events[..end].iter().enumerate() {
            // What CUDA's kernel does besides, noted after the event (`Shape::CudaTemp`; a layer
            // norm's partial sums go inside its span instead, after its last output).
            let mut then = None;
            let shape = match delta {
                0 if ptr == START => Shape::Start,
                0 if ptr == SPAN_BEGIN => {
                    span = Some(sizes.len());
                    span_op = op(i);
                    Shape::SpanBegin
                }
                0 if ptr >= ATTN_MARK => {
                    let Some(a) = r.attns.get((ptr - ATTN_MARK) as usize) else {
                        bail!("event {i} marks an attention call the recording does not have");
                    };
                    span_attn = Some((attn_dims.len() / ATTN_DIMS, *a));
                    attn_dims.extend(a.q.iter().chain(&a.k).chain(&a.v));
                    Shape::AttnMark
                }
                0 if ptr >= CONV_MARK => {
                    let Some(c) = r.convs.get((ptr - CONV_MARK) as usize) else {
                        bail!("event {i} marks a convolution the recording does not have");
                    };
                    span_conv = Some((conv_dims.len() / CONV_DIMS, *c));
                    conv_dims.extend(c.input.iter().chain(&c.weight).chain(&[c.stride, c.padding, c.groups]));
                    Shape::ConvMark
                }
                0 if ptr == SPAN_END => {
                    let conv = span_conv.take();
                    let attn = span_attn.take();
                    if let Some(first) = span {
                        // What the span's op returned: what it made and did not free inside.
                        let outputs: Vec<usize> = (first..sizes.len())
                            .filter(|&a| {
                                matches!(shapes[shape_of[a]], Shape::Alloc { span: Span::Output, .. })
                            })
                            .collect();
                        // What CUDA's kernel does besides, each after the output it follows (or at
                        // the span's end).
                        let mut besides: Vec<(Option<usize>, Shape)> = Vec::new();
                        if let Some((k, conv)) = conv {
                            besides.extend(cudnn_calls(k, &conv, &outputs, &sizes));
                        }
                        if let Some((k, a)) = attn {
                            besides.extend(attention_calls(k, &a, &outputs, &sizes));
                        }
                        // The span opens at the autograd node (`NativeLayerNormBackward0`).
                        if span_op.contains("LayerNormBackward") || span_op.contains("layer_norm_backward") {
                            // The kernel's own outputs: the engine may add a gradient into its
                            // buffer within the same span.
                            let outputs: Vec<usize> = outputs
                                .iter()
                                .copied()
                                .filter(|&a| made_by[a].ends_with("aten::native_layer_norm_backward"))
                                .collect();
                            // CUDA's partial sums come inside the kernel, after its last output and
                            // before the engine frees what the node saved.
                            if let (Some(grads), Some(&last)) =
                                (layer_norm_grads(&outputs, &sizes), outputs.last())
                            {
                                besides.push((Some(last), grads));
                            }
                        }
                        let mut besides: Vec<(usize, Shape)> = besides
                            .into_iter()
                            .map(|(a, s)| (a.map_or(shapes.len(), |a| shape_of[a] + 1), s))
                            .collect();
                        // The later first, so that the earlier's place still holds.
                        besides.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
                        for (at, shape) in besides {
                            shapes.insert(at, shape);
                            ops.insert(at, op(i));
                            shape_of.iter_mut().filter(|s| **s >= at).for_each(|s| *s += 1);
                        }
                    }
                    span = None;
                    Shape::SpanEnd
                }
                0 if ptr >= REDUCE_MARK => {
                    let Some(r) = r.reduces.get((ptr - REDUCE_MARK) as usize) else {
                        bail!("event {i} marks a reduction the recording does not have");
                    };
                    dims.extend([r.rows, r.cols]);
                    Shape::Reduce { k: dims.len() / 2 - 1, acc: r.acc }
                }
                0 => {
                    current = phase.next();
                    Shape::End
                }
                d if d > 0 => {
                    live.insert(ptr, sizes.len());
                    shape_of.push(shapes.len());
                    sizes.push(d);
                    made_by.push(op(i));
                    let tag = r.tags.get(i).copied().unwrap_or_default();
                    let within = match span {
                        None => Span::Outside,
                        Some(first) if span_op.ends_with("aten::dropout") && first == sizes.len() - 1 => {
                            Span::Mask
                        }
                        Some(_) => Span::Output,
                    };
                    if span.is_none() && op(i).ends_with("aten::_softmax_backward_data") {
                        then = Some(Shape::CudaTemp { of: sizes.len() - 1 });
                    }
                    Shape::Alloc { place: Place::of(tag, current), span: within }
                }
                d => match live.remove(&ptr) {
                    Some(of) => {
                        if let (Some(first), Shape::Alloc { span, .. }) = (span, &mut shapes[shape_of[of]]) {
                            // Freed by the op that opened the span, not by a kernel inside it: the
                            // autograd engine adding a gradient into its input buffer, or a
                            // composite dropping what it does not return. Both run on CUDA too.
                            if of >= first && op(i) != span_op {
                                *span = Span::Scratch;
                            }
                        }
                        Shape::Free(of)
                    }
                    None => bail!(
                        "event {i}{} frees {} B made before the trial began: its step is not self-contained",
                        in_op(&op(i)),
                        -d
                    ),
                },
            };
            shapes.push(shape);
            ops.push(op(i));
            if let Some(then) = then {
                shapes.push(then);
                ops.push(op(i));
            }
        }
        // A run of frees with no allocation between them leaves the same bytes live, and the
        // same peak, in any order; some runs come in an order that is not the program's (the
        // autocast cast cache, a hash map, is cleared in the order of its keys, which are
        // addresses). Each run is put in the order of the allocations it frees.
        let mut i = 0;
        while i < shapes.len() {
            let run = shapes[i..].iter().take_while(|s| matches!(s, Shape::Free(_))).count();
            let mut frees: Vec<(Shape, String)> =
                shapes[i..i + run].iter().copied().zip(ops[i..i + run].iter().cloned()).collect();
            frees.sort_unstable_by_key(|(s, _)| match s {
                Shape::Free(of) => *of,
                _ => unreachable!("a run of frees"),
            });
            for (k, (shape, op)) in frees.into_iter().enumerate() {
                (shapes[i + k], ops[i + k]) = (shape, op);
            }
            i += run.max(1);
        }
        Ok(Parsed { shapes, sizes, dims, conv_dims, attn_dims, ops, made_by })
    }

    /// Without what a CPU library allocated and freed inside its span (its scratch, which a
    /// CUDA run does not make) and the frees of it: what the CUDA replay reads, whatever
    /// scratch oneDNN takes at one batch and not at another.
    pub(super) fn without_scratch(self) -> Parsed {
        let Parsed { shapes, sizes, dims, conv_dims, attn_dims, ops, made_by } = self;
        let mut kept = Vec::with_capacity(sizes.len());
        let mut next = 0;
        for s in &shapes {
            if let Shape::Alloc { span, .. } = s {
                kept.push((*span != Span::Scratch).then(|| {
                    next += 1;
                    next - 1
                }));
            }
        }
        let renumber = |of: usize| kept.get(of).copied().flatten();
        let (mut out, mut out_ops) = (Vec::with_capacity(shapes.len()), Vec::with_capacity(ops.len()));
        for (shape, op) in shapes.into_iter().zip(ops) {
            let shape = match shape {
                Shape::Alloc { span: Span::Scratch, .. } => None,
                Shape::Free(of) => renumber(of).map(Shape::Free),
                Shape::CudaTemp { of } => renumber(of).map(|of| Shape::CudaTemp { of }),
                Shape::AttnPad { k, of, kind } => renumber(of).map(|of| Shape::AttnPad { k, of, kind }),
                Shape::LayerNormGrads { input, grads } => renumber(input)
                    .map(|input| Shape::LayerNormGrads { input, grads: grads.map(|g| g.and_then(renumber)) }),
                other => Some(other),
            };
            if let Some(shape) = shape {
                out.push(shape);
                out_ops.push(op);
            }
        }
        // Each allocation's size and op, the kept ones'.
        fn kept_only<T>(v: Vec<T>, kept: &[Option<usize>]) -> Vec<T> {
            v.into_iter().zip(kept).filter(|(_, k)| k.is_some()).map(|(x, _)| x).collect()
        }
        let (sizes, made_by) = (kept_only(sizes, &kept), kept_only(made_by, &kept));
        Parsed { shapes: out, sizes, dims, conv_dims, attn_dims, ops: out_ops, made_by }
    }

    /// Event `i` in words, with its op and, for a free, the op that made what it frees.
    pub(super) fn describe(&self, i: usize) -> String {
        match self.shapes.get(i) {
            None => "the end of the recording".into(),
            Some(Shape::Alloc { place, .. }) => {
                let whose = match place {
                    Place::Host => " (the host's)",
                    Place::Data => " (the data's)",
                    Place::Device => "",
                };
                format!("an allocation{}{whose}", in_op(&self.ops[i]))
            }
            Some(Shape::Free(of)) => {
                format!("the free{} of allocation {of}{}", in_op(&self.ops[i]), by_op(&self.made_by[*of]))
            }
            Some(Shape::Start) => "a phase's start".into(),
            Some(Shape::End) => "a phase's end".into(),
            Some(Shape::Reduce { .. }) => format!("the end of a reduction{}", in_op(&self.ops[i])),
            Some(Shape::SpanBegin) => format!("the start of {}", self.ops[i]),
            Some(Shape::SpanEnd) => "the end of a library's op".into(),
            Some(Shape::CudaTemp { .. }) => format!("CUDA's temporary{}", in_op(&self.ops[i])),
            Some(Shape::LayerNormGrads { .. }) => "the end of a layer norm's backward".into(),
            Some(Shape::ConvMark) => format!("the start of a convolution{}", in_op(&self.ops[i])),
            Some(Shape::Cudnn { pass, .. }) => format!("cuDNN's {pass:?} call{}", in_op(&self.ops[i])),
            Some(Shape::AttnMark) => format!("the start of an attention call{}", in_op(&self.ops[i])),
            Some(Shape::AttnTemps { .. }) => {
                format!("CUDA attention's backward temporaries{}", in_op(&self.ops[i]))
            }
            Some(Shape::AttnPad { .. }) => {
                format!("CUDA attention's logsumexp padding{}", in_op(&self.ops[i]))
            }
        }
    }
}

/// Where an allocation lives in a CUDA run. The recording on the CPU is the same wherever the
/// data set lives, so one fit serves both places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Host,
    Device,
    /// The data set's, or a batch's gathering: the host's where the data set is
    /// (`data.location = "host"`), else the device's.
    Data,
}

impl Place {
    /// An allocation tagged `tag` in `phase`: what the code tagged; else the data set and each
    /// batch's gathering are the data's, the model phase's reading of the file the host's (its
    /// parameters are tagged the device's), the rest (the step's tensors) the device's.
    pub(super) fn of(tag: Where, phase: Option<Phase>) -> Place {
        match (tag, phase) {
            (Where::Host, _) => Place::Host,
            (Where::Device, _) => Place::Device,
            (Where::Phase, Some(Phase::Data | Phase::ToDevice)) => Place::Data,
            (Where::Phase, Some(Phase::Model)) => Place::Host,
            (Where::Phase, _) => Place::Device,
        }
    }

    /// Whether it is the host's in a CUDA run whose data set is the host's when `data_on_host`.
    pub(super) fn host(self, data_on_host: bool) -> bool {
        match self {
            Place::Host => true,
            Place::Device => false,
            Place::Data => data_on_host,
        }
    }
}

/// The numbers a convolution's call is fitted by: the input's NCHW, the weight's KCRS, stride,
/// padding, groups.
pub(super) const CONV_DIMS: usize = 11;

/// CUDA's cuDNN calls of convolution `k` (the `conv` a span ran, which returned `outputs`),
/// each with the output it follows (`None`: the span's end): the forward's after the last
/// output; the backward's data pass after its input gradient and filter pass after its weight
/// gradient (told by their bytes: the input's and the weight's), each only where the backward
/// made it.
pub(super) fn cudnn_calls(
    k: usize,
    conv: &crate::ffi::Conv,
    outputs: &[usize],
    sizes: &[i64],
) -> Vec<(Option<usize>, Shape)> {
    let element = conv.kind.elt_size_in_bytes() as i64;
    let bytes = |d: &[i64; 4]| d.iter().product::<i64>() * element;
    let (dtype, known) = (cudnn_conv::dtype_name(conv.kind), conv.known);
    let call = |pass| Shape::Cudnn { k, pass, dtype, known };
    if !conv.backward {
        return vec![(outputs.last().copied(), call(Pass::Forward))];
    }
    // Which gradients it makes, where the call said: a weight's gradient may be the input's
    // size at some batch (a patch embedding's 8x8 kernel over 32x32 images at batch 4).
    let [wants_input, wants_weight, _] = conv.makes.unwrap_or([true, true, true]);
    let input = outputs.iter().copied().find(|&a| wants_input && sizes[a] == bytes(&conv.input));
    let weight = outputs
        .iter()
        .copied()
        .find(|&a| wants_weight && Some(a) != input && sizes[a] == bytes(&conv.weight));
    let data = input.map(|a| (Some(a), call(Pass::Data)));
    data.into_iter().chain(weight.map(|a| (Some(a), call(Pass::Filter)))).collect()
}

/// The numbers each flash attention call is fitted by: its query's, key's and value's shapes.
pub(super) const ATTN_DIMS: usize = 12;

/// What CUDA's fused kernel does besides the CPU flash kernel's `outputs` (the allocations that
/// outlived its span): a backward's delta temporaries and workspace after its last gradient; a
/// forward's logsumexp padding (`[batch, heads, len]` in the accumulate type: the output of that
/// size), each after the output it follows.
fn attention_calls(
    k: usize,
    a: &crate::ffi::Attn,
    outputs: &[usize],
    sizes: &[i64],
) -> Vec<(Option<usize>, Shape)> {
    if a.backward {
        return vec![(outputs.last().copied(), Shape::AttnTemps { k, kind: a.kind })];
    }
    let acc = if a.kind == tch::Kind::Double { 8 } else { 4 };
    let lse = a.q[0] * a.q[1] * a.q[2] * acc;
    outputs
        .iter()
        .copied()
        .find(|&o| sizes[o] == lse)
        .map(|of| vec![(Some(of), Shape::AttnPad { k, of, kind: a.kind })])
        .unwrap_or_default()
}

/// A layer norm backward's outputs (the allocations that outlived its span, in order) as its
/// input's gradient and its weight's and bias's: `layer_norm_backward_cpu` makes `dX`, then
/// `dgamma` and `dbeta`, each where asked for. Without the input's gradient (two outputs of one
/// size) the rows are not known, and nothing is noted.
pub(super) fn layer_norm_grads(outputs: &[usize], sizes: &[i64]) -> Option<Shape> {
    match *outputs {
        [input, gamma, beta] => Some(Shape::LayerNormGrads { input, grads: [Some(gamma), Some(beta)] }),
        [input, grad] if sizes[input] != sizes[grad] => {
            Some(Shape::LayerNormGrads { input, grads: [Some(grad), None] })
        }
        _ => None,
    }
}

pub(super) fn in_op(op: &str) -> String {
    if op.is_empty() {
        String::new()
    } else {
        format!(" in {op}")
    }
}

fn by_op(op: &str) -> String {
    if op.is_empty() {
        String::new()
    } else {
        format!(" (made in {op})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A patch embedding's backward (8x8 kernel, 3 channels, 64 filters) over 32x32 images that
    /// need no gradient: at batch 4 its weight's gradient is the input's size, 49,152 bytes, and
    /// is still the filter pass, as the call's `output_mask` says.
    #[test]
    fn a_gradient_is_told_by_what_the_backward_makes_not_only_by_its_size() {
        let conv = |makes| crate::ffi::Conv {
            input: [4, 3, 32, 32],
            weight: [64, 3, 8, 8],
            stride: 8,
            padding: 0,
            groups: 1,
            kind: tch::Kind::Float,
            backward: true,
            makes,
            known: true,
        };
        let sizes = [49_152, 256];
        let passes = |makes| -> Vec<Pass> {
            cudnn_calls(0, &conv(makes), &[0, 1], &sizes)
                .into_iter()
                .map(|(_, s)| match s {
                    Shape::Cudnn { pass, .. } => pass,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(passes(Some([false, true, true])), [Pass::Filter]);
        // Read by size alone, as where the mask is not known, the first fits the input.
        assert_eq!(passes(None), [Pass::Data]);
    }
}
