//! The autograd graph a forward records: one [`Node`] per differentiable op, what it saved, and
//! where its input gradients go.
use std::cell::RefCell;
use std::rc::Rc;

use super::kernels;
use super::tensor::{Dt, Inner, Sym};

/// A backward function, as libtorch's `Node`: its sequence number (the engine runs the highest
/// ready one first), what it computes, the tensors it saved, and one edge per input.
pub(crate) struct Node {
    pub(crate) seq: u64,
    pub(crate) rule: Rule,
    /// Saved tensors (handles without history): their storages live as long as the node holds
    /// them, until `release_variables` after the node has run, or until the graph goes.
    pub(crate) saved: RefCell<Vec<Sym>>,
    /// Per input: where its gradient goes, `None` when it needs none.
    pub(crate) next: Vec<Option<Edge>>,
    /// Per input: its dtype (libtorch's `InputMetadata`), to which the engine casts a gradient
    /// that arrives in another (mixed precision: an fp32 + bf16 sum).
    pub(crate) dts: Vec<Dt>,
}

/// A long graph (10^4 layers) would drop node by node recursively, one stack frame chain per
/// node, and overflow the stack. This drops it as the recursion would (a node's saved tensors,
/// then its edges in order, each node's whole subgraph before the next edge), from a loop.
impl Drop for Node {
    fn drop(&mut self) {
        self.saved.get_mut().clear();
        let mut pending: Vec<Edge> = std::mem::take(&mut self.next).into_iter().flatten().rev().collect();
        while let Some(edge) = pending.pop() {
            let Edge::Node(node, _) = edge else { continue };
            // The last handle on it: empty it here, so its own drop has nothing to recurse into.
            if let Ok(mut node) = Rc::try_unwrap(node) {
                node.saved.get_mut().clear();
                let next = std::mem::take(&mut node.next);
                drop(node);
                pending.extend(next.into_iter().flatten().rev());
            }
        }
    }
}

/// Where a gradient goes: another node's input (the output of it that the input was), or a
/// leaf's gradient accumulator (`AccumulateGrad`), which holds the leaf.
pub(crate) enum Edge {
    Node(Rc<Node>, usize),
    Leaf(Rc<Inner>),
}

impl Edge {
    /// The edge to `t`'s gradient, `None` when it requires none.
    pub(crate) fn of(t: &Sym) -> Option<Edge> {
        if !t.requires_grad() {
            return None;
        }
        Some(match t.grad_fn() {
            Some((node, output)) => Edge::Node(node, output),
            None => Edge::Leaf(t.0.clone()),
        })
    }
}

/// A node's backward, with the shapes it needs (`backward::apply` runs it).
pub(crate) enum Rule {
    /// `addmm(bias, mat1, weight.t())`; edges `[bias, mat1, weight]`. The input's gradient
    /// (`grad.mm(weight)`), then the weight's, then the bias's `sum_to` (in `validate_outputs`).
    Addmm {
        mat1: Vec<i64>,
        weight: Vec<i64>,
        bias: Vec<i64>,
    },
    /// `mm(a, b)` / `bmm(a, b)`; edges `[a, b]`. `b`'s gradient first, then `a`'s.
    Mm {
        a: Vec<i64>,
        b: Vec<i64>,
    },
    /// `threshold_backward`: a new tensor of the output's shape.
    Relu {
        shape: Vec<i64>,
    },
    /// `grad * other` for a factor that needs no grad (a dropout mask, checkpointing's upstream).
    MulByConstant {
        shape: Vec<i64>,
    },
    /// `grad * s` for a C++ scalar `s`: the scalar wrapped (8 bytes, cast to the dtype on the
    /// CPU), then the product.
    MulScalar {
        shape: Vec<i64>,
    },
    /// `grad / s` (a loss divided by the micro-batches): as `MulScalar`.
    DivScalar {
        shape: Vec<i64>,
    },
    /// `sum()`: `grad.expand(shape)`, a view.
    Sum {
        shape: Vec<i64>,
    },
    /// `mean(dim)` and `adaptive_avg_pool2d(1)`: the input's gradient, with a wrapped scalar
    /// for the division.
    MeanLike {
        input: Vec<i64>,
    },
    /// `a + b` and `a.add_(b)`: the same gradient to both (a broadcast one reduced to its input's
    /// shape in `validate_outputs`, a new tensor).
    Add {
        shapes: [Vec<i64>; 2],
    },
    /// `log_softmax`: a new `[N, K]`.
    LogSoftmax {
        shape: Vec<i64>,
    },
    /// `nll_loss`: a new `[N, K]` (zeros, the targets filled).
    NllLoss {
        input: Vec<i64>,
    },
    /// `_safe_softmax`: a new tensor of its shape.
    Softmax {
        shape: Vec<i64>,
    },
    /// `native_layer_norm_backward`: the input's gradient, the weight's and the bias's, a copy
    /// of the incoming gradient when it is not contiguous, and per-thread partial sums of the
    /// weight's and bias's gradients (`2 * threads * d` floats, CPU) that go at once.
    LayerNorm {
        input: Vec<i64>,
        d: i64,
    },
    /// `native_batch_norm_backward` (CPU): a temporary of the input's size, the weight's and
    /// bias's gradients, the input's; per-thread buffers at a 1x1 spatial size.
    BatchNorm {
        input: Vec<i64>,
    },
    /// `max_pool2d_with_indices_backward`: zeros of the input's size.
    MaxPool {
        input: Vec<i64>,
    },
    /// `embedding_dense_backward`: zeros of the weight's size.
    Embedding {
        weight: Vec<i64>,
    },
    /// `convolution_backward`; edges `[input, weight, bias]`: what its kernels allocate (on the
    /// CPU measured once per shape, [`kernels`]), then the gradients.
    Conv(Rc<kernels::ConvBackward>),
    /// A view (`view`, `reshape`, `flatten`, `unflatten`, `_unsafe_view`): the gradient
    /// reshaped to the input's shape, a copy when the incoming one cannot be viewed so.
    View {
        input: Vec<i64>,
    },
    /// `transpose`, `permute` (`order`: the forward's dimension order), `unsqueeze(d)`,
    /// `squeeze(d)`, and `clone` or `expand` to the same shape: the gradient viewed back,
    /// nothing allocated.
    Permute {
        order: Vec<usize>,
    },
    Unsqueeze {
        dim: usize,
    },
    Squeeze {
        dim: usize,
    },
    Pass,
    /// `select`: zeros of the input's size, the gradient copied into its slice.
    Select {
        input: Vec<i64>,
    },
    /// `_scaled_dot_product_flash_attention_for_cpu`'s backward: zeros for the three gradients,
    /// the incoming gradient made contiguous (it arrives permuted), and per-thread buffers.
    Flash {
        q: Vec<i64>,
        k: Vec<i64>,
        v: Vec<i64>,
    },
    /// CUDA's `_scaled_dot_product_efficient_attention` backward ([`super::efficient`]).
    Efficient {
        q: Vec<i64>,
        k: Vec<i64>,
        v: Vec<i64>,
        kernel: super::efficient::Kernel,
    },
    /// CUDA's `_scaled_dot_product_cudnn_attention` backward ([`super::cudnn_attention`]).
    Cudnn(Rc<super::cudnn_attention::Layouts>),
    /// `x.to(dtype)` (autocast's casts): the gradient cast back to `dt`, the input's.
    ToCopy {
        dt: Dt,
    },
}

impl Rule {
    /// The libtorch node it stands for, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Rule::Addmm { .. } => "AddmmBackward0",
            Rule::Mm { .. } => "MmBackward0/BmmBackward0",
            Rule::Relu { .. } => "ReluBackward0",
            Rule::MulByConstant { .. } => "MulBackward0",
            Rule::MulScalar { .. } => "MulBackward1",
            Rule::DivScalar { .. } => "DivBackward1",
            Rule::Sum { .. } => "SumBackward0",
            Rule::MeanLike { .. } => "MeanBackward1",
            Rule::Add { .. } => "AddBackward0",
            Rule::LogSoftmax { .. } => "LogSoftmaxBackward0",
            Rule::NllLoss { .. } => "NllLossBackward0",
            Rule::Softmax { .. } => "SafeSoftmaxBackward0",
            Rule::LayerNorm { .. } => "NativeLayerNormBackward0",
            Rule::BatchNorm { .. } => "NativeBatchNormBackward0",
            Rule::MaxPool { .. } => "MaxPool2DWithIndicesBackward0",
            Rule::Embedding { .. } => "EmbeddingBackward0",
            Rule::Conv(_) => "ConvolutionBackward0",
            Rule::View { .. } => "ViewBackward0",
            Rule::Permute { .. } => "PermuteBackward0",
            Rule::Unsqueeze { .. } => "UnsqueezeBackward0",
            Rule::Squeeze { .. } => "SqueezeBackward0",
            Rule::Pass => "CloneBackward0",
            Rule::Select { .. } => "SelectBackward0",
            Rule::Flash { .. } => "ScaledDotProductFlashAttentionForCpuBackward0",
            Rule::Efficient { .. } => "ScaledDotProductEfficientAttentionBackward0",
            Rule::Cudnn(_) => "ScaledDotProductCudnnAttentionBackward0",
            Rule::ToCopy { .. } => "ToCopyBackward0",
        }
    }
}
