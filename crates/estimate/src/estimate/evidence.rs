//! What of a CUDA prediction a GPU has confirmed, and how far the rest could be off.
//!
//! The CUDA replay applies rules of two kinds: some were held against a real GPU's allocator
//! statistics (the fixtures in `tests/fixtures/h100`, each rule naming the GPU and the revision
//! that measured it), the others come from PyTorch's source only. A prediction lists both and
//! carries a [`Bound`]: its peak widened by the margin of the widest unconfirmed rule it relied
//! on, as a fraction of the trial's own bytes at each phase's peak.
//!
//! The margins are not guesses about PyTorch's code; they are the gaps measured where nobody had
//! looked (issue #30: plain PyTorch 2.11 on an H100, held outside this repository), before the
//! reduction kernel's staging buffer ([`super::cuda_reduce`], read from the source) explained
//! most of them, with room:
//! fp32 MLPs whose peak holds activations measured 5-12% above the prediction (a prediction 12%
//! under needs 13.6% more), so 15%; the same MLPs under fp16 or bf16 autocast about a fifth
//! above (25% under needs 33%), so a third. Kinds whose kernels no GPU has measured take the
//! activations' margin. Where every rule a prediction used is confirmed (the lesson's batch-32
//! depth sweep on an H100; on an H200, `experiments/gpu`: activation-heavy MLPs in fp32, fp16
//! and bf16, plain SGD, a float32 Transformer through memory-efficient attention, a bf16 one
//! through cuDNN's), the bound on
//! allocated memory is the prediction. Reserved memory keeps its own
//! margin where the H200 saw the cache grow more than the replay (`reserved_margin`).
//!
//! Who uses which end: whatever promises a fit (`advise`'s "fits", the guided search's first
//! guess) uses the bound; whatever gives up on a trial before running it
//! (`run.skip_predicted_oom`) uses the prediction, the low end, so that no trial that could fit
//! is skipped. On the CPU the replay is exact (the counting allocator is the oracle): the bound
//! is the prediction.
use serde::Serialize;

use super::{Categories, GpuArch, PhasePrediction, Target};
use crate::spec::{Amp, Config, DataSpec, ModelSpec, OptimizerSpec, TransformerSpec};

/// Where a rule was confirmed on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Confirmation {
    pub gpu: &'static str,
    /// oomlab's revision that measured it.
    pub revision: &'static str,
    /// The fixture in this repository that holds the measurement.
    pub fixture: &'static str,
}

/// One rule of the CUDA replay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    pub name: &'static str,
    /// What the rule decides.
    pub covers: &'static str,
    pub confirmed: Option<Confirmation>,
    /// Unconfirmed: how much more than the prediction the truth may be, as a fraction of the
    /// trial's own bytes at a phase's peak.
    pub margin: f64,
    /// How much more reserved memory may be, on the same scale, confirmed or not: a GPU can
    /// confirm the allocated bytes of a rule and still show reserved memory the replay does not
    /// have (transient workspaces that grow the cache).
    pub reserved_margin: f64,
}

const H100_DEPTH: Confirmation = Confirmation {
    gpu: "NVIDIA H100 80GB HBM3",
    revision: "0c09e94",
    fixture: "tests/fixtures/h100/h100-depth-summaries.csv",
};
const H100_TRACE: Confirmation =
    Confirmation { fixture: "tests/fixtures/h100/h100-depth8-trace.csv", ..H100_DEPTH };

const H200: Confirmation = Confirmation {
    gpu: "NVIDIA H200",
    revision: "8d5a056",
    fixture: "tests/fixtures/h200 (scripts/validate-gpu --specs experiments/gpu)",
};

/// The same GPU, on `experiments/amp_models` at batch 1024 (`scripts/validate-gpu --only
/// amp_models`): the bf16 Transformer's allocated and reserved peaks to the byte.
const H200_AMP: Confirmation = Confirmation { fixture: "tests/fixtures/h200/amp_models", ..H200 };

/// The same GPU on the suite's `optimizers`, `accumulation`, `inference_vs_training`,
/// `depthwise_separable` and `resnet_checkpointing` (`scripts/validate-gpu --only ...`): SGD,
/// SGD with momentum, Adam and AdamW (foreach) and accumulation to the byte.
const H200_SUITE: Confirmation =
    Confirmation { revision: "133b964", fixture: "tests/fixtures/h200/optimizers", ..H200 };

/// The same GPU on `experiments/gpu/attention_half`: cuDNN attention under bf16 and fp16 at heads
/// of 32, 64 and 128 over 200 to 512 tokens, with dropout and without: reserved memory to the
/// byte, allocated 0.09-0.50% above PyTorch's (equal-sized free blocks taken in another order:
/// the allocator breaks ties by device address, which the driver picks).
const H200_ATTENTION: Confirmation = Confirmation { fixture: "tests/fixtures/h200/attention_half", ..H200 };

/// Activations under 1% of what the trial holds at the end of every phase: the regime the H100
/// fixtures ran (the depth sweep at batch 32 keeps 0.2-0.3% of its bytes in activations). Phase
/// ends, not peaks: at a peak the newest tensors are still in flight (an output no node has saved
/// yet, a weight's gradient not yet its `.grad`), filed as transient until then.
const CONFIRMED_ACTIVATION_SHARE: f64 = 0.01;

pub const WORKSPACES: Rule = Rule {
    name: "workspaces",
    covers: "cuBLAS and cuBLASLt workspaces kept for the process (65 MiB on Hopper)",
    confirmed: Some(H100_TRACE),
    margin: 0.0,
    reserved_margin: 0.0,
};
pub const ALLOCATOR: Rule = Rule {
    name: "allocator",
    covers:
        "the caching allocator's blocks, pools, segments and splits; the budget as a cap on reserved memory",
    confirmed: Some(H100_DEPTH),
    margin: 0.0,
    reserved_margin: 0.0,
};
pub const ADAM: Rule = Rule {
    name: "adam",
    covers: "parameters, gradients, Adam's state and its step's temporaries (for-loop; foreach and fused boundaries)",
    confirmed: Some(H100_DEPTH),
    margin: 0.0,
    reserved_margin: 0.0,
};
pub const SGD: Rule = Rule {
    name: "sgd",
    covers: "plain SGD's step on CUDA (no state; foreach)",
    confirmed: Some(H200),
    margin: 0.0,
    reserved_margin: 0.0,
};
pub const OTHER_OPTIMIZERS: Rule = Rule {
    name: "optimizer",
    covers: "SGD with momentum's and AdamW's state and step temporaries on CUDA",
    // An H100 had their depth boundaries exact in every implementation; an H200 their peaks
    // (foreach, the 5000-wide MLP of `optimizers`) to the byte.
    confirmed: Some(H200_SUITE),
    margin: 0.05,
    reserved_margin: 0.05,
};
pub const ACTIVATIONS: Rule = Rule {
    name: "activations",
    covers:
        "what CUDA kernels allocate for activations and gradients in flight past the batch-32 sweep, the \
             reduction kernel's staging buffer for bias gradients included (Reduce.cuh)",
    // An H200 confirmed the allocated bytes to the byte for MLPs of 4 x 2048 at batches of 512
    // to 8192 and 16 x 1024 at 2048 (checkpointed or not), and reserved memory to the byte once
    // the MLP's backward freed the incoming gradient rather than the one just made (both [B, H]:
    // which of two equal blocks goes decides whether the next request finds a merged free block
    // or makes a segment; PyTorch's history with addresses showed it). Reserved keeps 2%: among
    // equal free blocks the allocator takes the lowest device address, and the driver, not
    // PyTorch, picks addresses (the replay assumes the order made).
    confirmed: Some(H200),
    margin: 0.15,
    reserved_margin: 0.02,
};
pub const AUTOCAST_MLP: Rule = Rule {
    name: "autocast-mlp",
    covers: "autocast's CUDA op lists, cast cache and the grad scaler's kernels for Linear, ReLU and cross_entropy",
    confirmed: Some(H200),
    margin: 1.0 / 3.0,
    reserved_margin: 0.0,
};
pub const AUTOCAST_TRANSFORMER: Rule = Rule {
    name: "autocast-transformer",
    covers:
        "autocast's CUDA op lists and cast cache for the Transformer encoder's embedding, Linear, LayerNorm \
             and dropout, and cross_entropy's log_softmax in the logits' dtype with nll_loss's cast up",
    confirmed: Some(H200_AMP),
    margin: 1.0 / 3.0,
    reserved_margin: 0.0,
};
pub const AUTOCAST: Rule = Rule {
    name: "autocast",
    covers: "autocast's CUDA op lists and cast cache for convolutions and batch norm",
    confirmed: None,
    margin: 1.0 / 3.0,
    reserved_margin: 1.0 / 3.0,
};
pub const CONVOLUTIONS: Rule = Rule {
    name: "cudnn",
    covers: "cuDNN's convolutions: each call's workspace is cuDNN's heuristic choice per shape, dtype, GPU and \
             cuDNN version, read from a table an H200 measured (src/estimate/cudnn_workspaces.csv: ResNet-50 at \
             224 and batch 32, ResNet-18 on 64 x 64 at batch 1024 in fp32 and bf16) and taken as none for a \
             call it does not hold (there an H200's peak was up to 31% of the trial's own bytes above the \
             replay: four standard 3 x 3 convolutions of 256 channels on 16 x 16 images, a 19 MB workspace at \
             the peak)",
    confirmed: None,
    // Above the widest gap measured without the table (31.5% of the trial's bytes,
    // `depthwise_separable`), kept where the table holds every call: it was read off the same
    // runs it matches, and another GPU or cuDNN version picks its own plans. Under a budget
    // cuDNN tries plans that need less before it gives up (Conv_v8.cpp), so this bounds the
    // peak without a budget, not where a budget fails.
    margin: 0.35,
    // Without a budget the workspaces grow the cache: ResNet-18 at batch 1024 reserved 25% more
    // than the replay without the table (46% of the trial's bytes). Under a budget cuDNN falls
    // back to algorithms that need less, so this is how far reserved memory may go, not where a
    // budget fails.
    reserved_margin: 0.5,
};
pub const EFFICIENT_ATTENTION: Rule = Rule {
    name: "attention-efficient",
    covers:
        "scaled_dot_product_attention through memory-efficient attention (float32, head dimension 32 to 64): \
             its output, padded logsumexp, backward delta and workspace",
    confirmed: Some(H200),
    margin: 0.15,
    reserved_margin: 0.0,
};
pub const EFFICIENT_ATTENTION_BIAS: Rule = Rule {
    name: "attention-efficient-bias",
    covers: "memory-efficient attention with a mask that needs a gradient (T5's position bias), float32 heads \
             of 32 to 64: recorded on the meta device as PyTorch 2.11's CUDA sources allocate (the mask expanded, \
             its gradient [batch, heads, queries, keys rounded up to 16]), not yet measured on a GPU",
    confirmed: None,
    margin: 0.15,
    reserved_margin: 0.15,
};
pub const CUDNN_ATTENTION: Rule = Rule {
    name: "attention-cudnn",
    covers: "scaled_dot_product_attention through cuDNN (fp16 and bf16 on Hopper), at the shapes an H200 \
             measured (heads of 32, 64 and 128 over 64 to 512 tokens, with dropout or without): its dropout \
             seed and offset, output laid out as the query, fp32 statistics, and its two workspaces",
    confirmed: Some(H200_ATTENTION),
    margin: 0.15,
    reserved_margin: 0.0,
};
pub const CUDNN_ATTENTION_SHAPES: Rule = Rule {
    name: "attention-cudnn-shape",
    covers:
        "cuDNN attention where no GPU measured it (heads other than 32, 64 and 128, sequences under 64 or \
             over 512 tokens): its workspaces are cuDNN's choice per plan, modelled as at the measured shapes",
    confirmed: None,
    margin: 0.15,
    reserved_margin: 0.15,
};
pub const ATTENTION: Rule = Rule {
    name: "attention",
    covers:
        "scaled_dot_product_attention's other CUDA backends (flash under fp16 and bf16 on Ampere and Ada, \
             cuDNN on Blackwell, other head dimensions), for which the math path stands in",
    confirmed: None,
    margin: 0.15,
    reserved_margin: 0.15,
};

pub const UNCHECKED_OPS: Rule = Rule {
    name: "unchecked-ops",
    covers: "ops of a recorded module whose CUDA kernels are not the CPU's (separate kernels that are not \
             structured, or a reduction's staging buffer; scripts/reference/aten_ops.py classifies them): \
             their recorded allocations stand in for CUDA's",
    confirmed: None,
    // The activations' margin: such an op's outputs are the CPU's, and what CUDA takes besides is
    // a transient of the order of its input, within a phase's activations.
    margin: 0.15,
    reserved_margin: 0.15,
};

pub const TORCHSCRIPT: Rule = Rule {
    name: "torchscript",
    covers: "a TorchScript module's step recorded on the CPU and replayed on CUDA's allocator: the host's \
             tensors told from the device's by the code that makes them, ops whose CUDA allocations are the \
             CPU's (held to the built-in MLP's CUDA replay block for block), libtorch loading the file's \
             parameters onto the device as on the CPU",
    confirmed: None,
    // An H200 ran one module (experiments/own_model, a hand-written ViT at batch 1024:
    // tests/fixtures/h200/own_model): after two kernels were found that CUDA runs otherwise
    // (softmax's backward, layer norm's past 64 Ki rows), every phase to the byte, allocated and
    // reserved, at f631eed. The rule stays unconfirmed: the ops on `recorded::CUDA_SAME` that no
    // GPU has run are held by the source alone, and one of them was wrong.
    margin: 0.05,
    reserved_margin: 0.05,
};

/// A prediction's evidence: the rules it used, and the bound their margins give.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bound {
    /// The highest `max_memory_allocated` the unconfirmed rules allow, workspaces included.
    pub allocated: u64,
    /// The same for `max_memory_reserved`.
    pub reserved: u64,
    /// The widest margin among the unconfirmed rules used (0 when all are confirmed).
    pub margin: f64,
    /// The rules used, confirmed or not (none on the CPU, whose replay is exact).
    pub rules: Vec<Rule>,
}

impl Bound {
    /// The rules used that no GPU has confirmed.
    pub fn unconfirmed(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(|r| r.confirmed.is_none())
    }

    /// "activations, autocast": the unconfirmed rules' names.
    pub fn unconfirmed_names(&self) -> String {
        self.unconfirmed().map(|r| r.name).collect::<Vec<_>>().join(", ")
    }
}

/// The rules a CUDA replay of `config` relies on, given what was live at each phase's peak.
pub fn rules(config: &Config, phases: &[PhasePrediction], target: Target, gpu: GpuArch) -> Vec<Rule> {
    if target == Target::Cpu {
        return Vec::new();
    }
    let tech = config.training.techniques;
    let mut rules = vec![WORKSPACES, ALLOCATOR];
    match config.training.optimizer {
        OptimizerSpec::Adam { .. } => rules.push(ADAM),
        OptimizerSpec::Sgd { momentum: 0.0, .. } => rules.push(SGD),
        _ => rules.push(OTHER_OPTIMIZERS),
    }
    if phases
        .iter()
        .any(|p| activation_share(&p.end_by_category, p.allocated_end) > CONFIRMED_ACTIVATION_SHARE)
    {
        rules.push(ACTIVATIONS);
    }
    if tech.amp != Amp::Off {
        rules.push(match config.model {
            ModelSpec::Mlp(_) => AUTOCAST_MLP,
            ModelSpec::Transformer(_) => AUTOCAST_TRANSFORMER,
            _ => AUTOCAST,
        });
    }
    match &config.model {
        ModelSpec::Mlp(_) => {}
        ModelSpec::Cnn(_) => rules.push(CONVOLUTIONS),
        ModelSpec::Transformer(t) => rules.push(attention(config, t, gpu)),
        // Recorded on the CPU and replayed on CUDA's allocator (`estimate::recorded`).
        ModelSpec::Torchscript(_) => rules.push(TORCHSCRIPT),
    }
    rules
}

/// The rule of the attention backend the CUDA replay runs a Transformer's attention through on
/// `gpu`: the one PyTorch 2.11 picks where it is modelled (cuDNN for half types on Hopper,
/// memory-efficient for float32 heads of 32 to 64), else the math path's.
pub fn attention(config: &Config, t: &TransformerSpec, gpu: GpuArch) -> Rule {
    let kind = config.training.techniques.amp.autocast().unwrap_or(config.training.dtype.kind());
    let head = (t.d_model / t.nhead.max(1)) as i64;
    let seq = match config.data {
        DataSpec::Tokens { seq_len, .. } => seq_len as i64,
        _ => 0,
    };
    let shape = [1, 1, seq, head];
    if super::graph::cudnn_attention::chosen(gpu, kind, &shape, &shape, &shape, t.dropout) {
        // Confirmed where the H200 measured it (amp_models, attention_half): fp16 and bf16,
        // heads of 32, 64 and 128 over 64 to 512 tokens, with and without dropout. The
        // workspaces are cuDNN's choice per plan.
        if [32, 64, 128].contains(&head) && (64..=512).contains(&seq) {
            CUDNN_ATTENTION
        } else {
            CUDNN_ATTENTION_SHAPES
        }
    } else if super::graph::efficient::modelled(kind, head) {
        EFFICIENT_ATTENTION
    } else {
        ATTENTION
    }
}

/// Activations (saved and in flight) and autocast's copies, as a share of a phase's peak.
fn activation_share(c: &Categories, held: u64) -> f64 {
    if held == 0 {
        return 0.0;
    }
    (c.activations + c.amp_copies + c.batch) as f64 / held as f64
}

/// The bound over a replay's phases: each phase's peak (allocated, and reserved) widened by the
/// widest unconfirmed margin times that phase's own bytes, plus the baseline.
pub fn bound(rules: Vec<Rule>, phases: &[PhasePrediction], baseline: (u64, u64)) -> Bound {
    let margin = rules.iter().filter(|r| r.confirmed.is_none()).map(|r| r.margin).fold(0.0, f64::max);
    let reserved_margin = rules.iter().map(|r| r.reserved_margin).fold(margin, f64::max);
    let extra = |peak: u64, m: f64| (peak as f64 * m).ceil() as u64;
    let allocated = phases.iter().map(|p| p.peak.saturating_add(extra(p.peak, margin))).max().unwrap_or(0);
    let reserved = phases
        .iter()
        .map(|p| p.reserved_peak.saturating_add(extra(p.peak, reserved_margin)))
        .max()
        .unwrap_or(0);
    Bound {
        allocated: baseline.0.saturating_add(allocated),
        reserved: baseline.1.saturating_add(reserved),
        margin,
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Phase;

    fn phase(peak: u64, activations: u64) -> PhasePrediction {
        let by_category = Categories { activations, params: peak - activations, ..Categories::default() };
        PhasePrediction {
            step: 1,
            micro: 0,
            phase: Phase::Forward,
            allocated_end: peak,
            peak,
            reserved_end: peak,
            reserved_peak: peak + 100,
            by_category,
            end_by_category: by_category,
        }
    }

    #[test]
    fn confirmed_rules_leave_the_prediction_as_it_is() {
        let b = bound(vec![WORKSPACES, ALLOCATOR, ADAM], &[phase(1000, 1)], (10, 20));
        assert_eq!((b.allocated, b.reserved, b.margin), (1010, 1120, 0.0));
        assert_eq!(b.unconfirmed_names(), "");
    }

    #[test]
    fn the_widest_unconfirmed_margin_widens_each_phase_by_its_own_bytes() {
        let b = bound(vec![WORKSPACES, ATTENTION, AUTOCAST], &[phase(900, 400), phase(600, 0)], (10, 20));
        assert_eq!(b.margin, 1.0 / 3.0);
        assert_eq!(b.allocated, 10 + 900 + 300);
        assert_eq!(b.reserved, 20 + 1000 + 300);
        assert_eq!(b.unconfirmed_names(), "attention, autocast");
    }

    /// A rule confirmed for allocated memory whose cache a GPU saw grow more than the replay's
    /// widens reserved memory only.
    #[test]
    fn a_reserved_margin_widens_reserved_memory_alone() {
        let b = bound(vec![WORKSPACES, ACTIVATIONS], &[phase(1000, 1)], (10, 20));
        assert_eq!(b.unconfirmed_names(), "");
        assert_eq!((b.allocated, b.margin), (1010, 0.0));
        assert_eq!(b.reserved, 20 + 1100 + 20);
    }

    fn cuda(c: &Config) -> crate::estimate::Prediction {
        let shape = crate::estimate::data_shape(&c.data).unwrap();
        let options = crate::estimate::Options::cuda(crate::estimate::GpuArch::Hopper, [c]);
        crate::estimate::predict_with(c, shape, &options).unwrap()
    }

    fn adam() -> OptimizerSpec {
        OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 }
    }

    /// The lesson's regime (weights dominate at batch 32) is the one the H100 confirmed; the
    /// same MLP at a batch whose activations count, in fp32 or under autocast, is the one an
    /// H200 confirmed (allocated; its reserved memory keeps a margin); a Transformer under
    /// autocast on Hopper (cuDNN attention) too, but not on another GPU (flash, not modelled).
    #[test]
    fn the_regime_decides_which_rules_are_unconfirmed() {
        use crate::spec::examples::mlp as config;
        let mut lesson = config(8, 5000, 32, adam());
        lesson.data = crate::spec::DataSpec::Synthetic { samples: 1024, features: 20, classes: 2, seed: 0 };
        let p = cuda(&lesson);
        assert_eq!(p.bound.unconfirmed_names(), "");
        assert_eq!(p.bound.allocated, p.peak_allocated());
        assert_eq!(p.bound.reserved, p.peak_reserved());
        assert!(!p.is_bounded_above());

        let mut wide = lesson.clone();
        wide.training.batch_size = 1024;
        let p = cuda(&wide);
        assert_eq!(p.bound.unconfirmed_names(), "");
        assert!(p.bound.rules.contains(&ACTIVATIONS));
        assert!(p.bound.allocated == p.peak_allocated() && p.bound.reserved > p.peak_reserved());

        wide.training.techniques.amp = Amp::Bf16;
        let p = cuda(&wide);
        assert_eq!(p.bound.unconfirmed_names(), "");
        assert!(p.bound.rules.contains(&AUTOCAST_MLP));

        // Heads of 32 in float32: the efficient kernel (k32, the k64's blocks), as an H200
        // measured it; heads of 16, a kernel not modelled, so the math path's rule.
        let mut encoder = crate::estimate::tests::transformer_config();
        let p = cuda(&encoder);
        assert!(p.bound.rules.contains(&EFFICIENT_ATTENTION) && !p.bound.rules.contains(&ATTENTION));
        let mut narrow = encoder.clone();
        if let crate::spec::ModelSpec::Transformer(t) = &mut narrow.model {
            t.nhead = t.d_model / 16;
        }
        let p = cuda(&narrow);
        assert!(p.bound.rules.contains(&ATTENTION) && !p.bound.rules.contains(&EFFICIENT_ATTENTION));
        // Under bf16 on Hopper the same heads go through cuDNN, at a shape the H200 measured
        // (heads of 32 over 64 tokens; attention_half had heads of 32, 64 and 128 over 64 to 512
        // tokens, bf16 and fp16, with dropout and without).
        encoder.training.techniques.amp = Amp::Bf16;
        let p = cuda(&encoder);
        assert!(p.bound.rules.contains(&CUDNN_ATTENTION) && p.bound.rules.contains(&AUTOCAST_TRANSFORMER));
        assert_eq!(p.bound.unconfirmed_names(), "");
        let mut fp16 = encoder.clone();
        fp16.training.techniques.amp = Amp::Fp16 { scaler: crate::spec::ScalerSpec::default() };
        assert!(cuda(&fp16).bound.rules.contains(&CUDNN_ATTENTION));
        // Heads of 16, or 1024 tokens: no GPU has measured cuDNN's plan there, so its
        // workspaces keep a margin.
        let mut heads16 = encoder.clone();
        if let crate::spec::ModelSpec::Transformer(t) = &mut heads16.model {
            t.nhead = t.d_model / 16;
        }
        let p = cuda(&heads16);
        assert!(p.bound.rules.contains(&CUDNN_ATTENTION_SHAPES), "{:?}", p.bound.rules);
        assert_eq!(p.bound.unconfirmed_names(), "attention-cudnn-shape");
        let mut long = encoder.clone();
        long.data =
            crate::spec::DataSpec::Tokens { samples: 16, seq_len: 1024, vocab: 100, classes: 4, seed: 0 };
        assert!(cuda(&long).bound.rules.contains(&CUDNN_ATTENTION_SHAPES));
        // Elsewhere (flash attention, not modelled) the math path's rule, unconfirmed.
        let shape = crate::estimate::data_shape(&encoder.data).unwrap();
        let other = crate::estimate::Options::cuda(crate::estimate::GpuArch::Other, [&encoder]);
        let p = crate::estimate::predict_with(&encoder, shape, &other).unwrap();
        assert!(p.bound.unconfirmed_names().contains("attention"), "{}", p.bound.unconfirmed_names());
        assert_eq!(p.bound.margin, ATTENTION.margin);

        // The CPU's replay is exact: no rule, no margin.
        let cpu = crate::estimate::predict_with(
            &wide,
            crate::estimate::data_shape(&wide.data).unwrap(),
            &crate::estimate::Options::default(),
        )
        .unwrap();
        assert!(cpu.bound.rules.is_empty());
        assert_eq!(cpu.bound.allocated, cpu.peak_allocated());
    }

    /// A budget between the prediction and its bound: fits as predicted, not surely.
    #[test]
    fn fits_surely_asks_the_bound() {
        use crate::spec::examples::mlp as config;
        let mut c = config(4, 1024, 1024, adam());
        c.data = crate::spec::DataSpec::Synthetic { samples: 1024, features: 256, classes: 4, seed: 0 };
        let p = cuda(&c);
        let between = (p.peak_reserved() + p.bound.reserved) / 2;
        assert!(p.fits(between) && !p.fits_surely(between));
        assert!(p.fits_surely(p.bound.reserved));
    }

    /// The margins cover the gaps they stand for: a prediction `under` below the truth needs
    /// `under / (1 - under)` more.
    #[test]
    fn margins_cover_the_measured_gaps() {
        let needed = |under: f64| under / (1.0 - under);
        assert!(ACTIVATIONS.margin >= needed(0.12), "fp32: up to 12% under");
        assert!(AUTOCAST.margin >= needed(0.25), "autocast: about a fifth under");
    }
}
