//! Upper bounds on what a spec may ask for, checked once at parse time ([`Config::check`], which
//! also checks every swept value), so that no value can make oomlab itself overflow an integer,
//! allocate without bound or run for days before the first trial.
//!
//! Each bound is far beyond real use of a tool that measures the memory of one training step of
//! an MLP, yet small enough that everything oomlab computes from it fits comfortably in 64 bits:
//!
//! - `model.depth` <= 10,000: real MLPs have a handful to a few hundred layers. libtorch keeps
//!   about 2.5 KB of host bookkeeping per layer whatever its width, which no budget sees: 10,000
//!   layers are 25 MB of it (10^7 were 25 GB), and the estimate replays every layer every phase.
//! - `model.hidden`, `data.features`, `data.classes` <= 1,000,000: a 10^6 x 10^6 fp32 weight is
//!   4 TB, beyond any device; the widest real layers are around 10^5.
//! - `data.samples` <= 10^9 rows, `training.batch_size` <= 10^8 rows: a synthetic data set of
//!   10^9 rows is made on the device whole; 10^8 rows a step is beyond any real batch.
//! - `training.steps` <= 1,000,000 and `training.accumulation` <= 10,000: memory reaches its
//!   steady state within two or three steps; a million steps is days of training on a GPU, and
//!   the trace keeps a few rows per step.
//! - at most 2,000,000 phases a trial (steps x (3 x accumulation + 2)): a trial's trace rows
//!   (about 150 bytes each in memory) are held until it ends so that `trace.csv` has whole
//!   trials only: 300 MB at most.
//! - names <= 64 characters: a name is a folder name, a file name and a chart label.
//! - CNNs: `model.channels` and `data.channels` <= 65,536 (the widest real convolutions have a
//!   few thousand), `model.kernel` <= 63, `data.size` <= 65,536 pixels a side.
//! - Transformers: `data.seq_len` <= 10^6 tokens (the attention scores are `seq_len^2` per head),
//!   `data.vocab` <= 10^7 (real vocabularies are 10^4 to 10^6).
//!
//! - TorchScript data (`kind = "tensors"`): at most 16 inputs, each sample of at most 8
//!   dimensions and 10^9 elements (4 GB in float32; a video clip of 3 x 64 x 512 x 512 is
//!   5 x 10^7), which the preflight makes two rows of on the host before anything runs.
//!
//! - `sweep.values`: at most 1,000 values, each once: a list sweep runs every value as a trial,
//!   and a thousand trials is already hours; a repeated value measures the same thing twice.
//!
//! Numbers that are not sizes have ranges that keep them meaningful: `training.lr` in
//! (0, 10] (a step of more than ten times the gradient sends any model to infinity, and libtorch
//! takes the rate as a float32: 1e308 fails in every step), `training.weight_decay` in [0, 1],
//! `training.momentum` in [0, 1), `run.skip_predicted_oom` in [0, 10] (a margin of 1000%).
//!
//! With them, the largest tensor a spec can describe is 10^9 x 10^6 elements of 8 bytes,
//! 8 * 10^15 bytes: far below 2^63. [`largest_tensor_bytes`] checks that product anyway, so that
//! raising a bound cannot quietly make a size wrap.
use super::{CnnSpec, Config, DataSpec, ModelSpec};

pub const MAX_DEPTH: usize = 10_000;
pub const MAX_CHANNELS: usize = 65_536;
pub const MAX_KERNEL: usize = 63;
pub const MAX_IMAGE_SIZE: usize = 65_536;
pub const MAX_SEQ_LEN: usize = 1_000_000;
pub const MAX_VOCAB: usize = 10_000_000;
pub const MAX_HIDDEN: usize = 1_000_000;
pub const MAX_FEATURES: usize = 1_000_000;
pub const MAX_CLASSES: usize = 1_000_000;
pub const MAX_SAMPLES: usize = 1_000_000_000;
/// `data.inputs` of `kind = "tensors"`: the arguments of a module's forward.
pub const MAX_INPUTS: usize = 16;
/// Dimensions of one sample of an input or a target, and each dimension's size.
pub const MAX_RANK: usize = 8;
pub const MAX_DIM: usize = 1_000_000_000;
/// Elements of one sample of an input or a target (`data.inputs[i].shape`, `data.target`): a
/// video clip of 3 x 64 x 512 x 512 is 5 x 10^7.
pub const MAX_SAMPLE_ELEMENTS: usize = 1_000_000_000;
pub const MAX_BATCH_SIZE: usize = 100_000_000;
pub const MAX_STEPS: usize = 1_000_000;
pub const MAX_ACCUMULATION: usize = 10_000;
/// Ranks of a `[parallel]` world: the estimate answers up to 1024 GPUs; a run on one machine
/// is refused sooner, at what the machine can host.
pub const MAX_WORLD_SIZE: usize = 1024;
/// `parallel.bucket_cap_mb`: DDP's default is 25; a bucket of a gibibyte is already one
/// bucket for most models.
pub const MAX_BUCKET_CAP_MB: f64 = 1024.0 * 1024.0;
/// Phases of one trial (to_device, forward and backward per micro-batch, then optimizer_step and
/// zero_grad, every step).
pub const MAX_PHASES: usize = 2_000_000;
/// Characters of `experiment.name` and a variant's `name`.
pub const MAX_NAME: usize = 64;
/// `[[variant]]` tables: each is drawn and compared with every other; a spec compares a
/// handful.
pub const MAX_VARIANTS: usize = 256;
/// Values of a list sweep.
pub const MAX_SWEEP_VALUES: usize = 1_000;
/// `run.rounds`: a spec's trials repeated, for step times taken across the same stretch of time.
pub const MAX_ROUNDS: usize = 20;
/// `training.lr`, `training.weight_decay` and `run.skip_predicted_oom` at most.
pub const MAX_LR: f64 = 10.0;
pub const MAX_WEIGHT_DECAY: f64 = 1.0;
pub const MAX_SKIP_MARGIN: f64 = 10.0;

/// The letters a name may use (lowercase letters, digits, `_` and `-`): folder- and file-safe.
pub fn name_chars_ok(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A name a spec allows (an experiment's or a variant's): [`name_chars_ok`], at most
/// [`MAX_NAME`] long.
pub fn is_name(name: &str) -> bool {
    name_chars_ok(name) && name.len() <= MAX_NAME
}
/// The bytes of one tensor: `nbytes` is an `int64_t` in libtorch.
pub const MAX_TENSOR_BYTES: u128 = 1 << 63;
/// The most memory a process on an x86-64 CPU can address (128 TiB, four-level paging): a CPU
/// budget past it is no machine's, refused by `estimate` as `run` refuses one past the host's.
pub const MAX_CPU_BUDGET: u64 = 1 << 47;
/// A spec file's bytes: a spec is a page of TOML; this is thousands of variants.
pub const MAX_SPEC_BYTES: u64 = 1 << 20;
/// A CSV data set's bytes, checked before it is read: the values are held in host memory as
/// f32 (at most about twice the file's size) before they become a tensor.
pub const MAX_CSV_BYTES: u64 = 1 << 30;

/// What a limit's message ends with.
pub const FIX: &str =
    "lower it (oomlab's limits keep its own memory and time bounded; the README's Specs section lists them)";

/// The bytes of the largest tensor `config` makes (element size 8, the largest dtype or int64):
/// the data set, the synthetic teacher and its logits, a weight, a batch's activations (for a
/// Transformer, the attention scores). `None` when the product does not even fit in 128 bits (it
/// cannot with `usize` sizes, but it costs nothing).
pub fn largest_tensor_bytes(config: &Config) -> Option<u128> {
    let n = |v: usize| v as u128;
    let b = n(config.training.batch_size);
    let mut sizes = vec![];
    // (rows of the data set, elements of a sample, classes): the data set, the teacher, its logits.
    let data = match config.data {
        DataSpec::Synthetic { samples, features, classes, .. } => Some((n(samples), n(features), n(classes))),
        DataSpec::Images { samples, channels, size, classes, .. } => {
            Some((n(samples), n(channels).checked_mul(n(size))?.checked_mul(n(size))?, n(classes)))
        }
        DataSpec::Tokens { samples, seq_len, classes, .. } => Some((n(samples), n(seq_len), n(classes))),
        DataSpec::Csv { .. } => None,
        DataSpec::Tensors { samples, ref inputs, ref target, classes, .. } => {
            let mut largest = n(1);
            for shape in inputs.iter().map(|i| &i.shape).chain([target]) {
                largest = largest.max(shape.iter().try_fold(n(1), |acc, &d| acc.checked_mul(n(d)))?);
            }
            Some((n(samples), largest, n(classes.unwrap_or(1))))
        }
    };
    let (features, classes) = match data {
        Some((s, f, k)) => {
            sizes.extend([s.checked_mul(f)?, s.checked_mul(k)?, f.checked_mul(k)?]);
            (f, k)
        }
        None => (1, 1),
    };
    match &config.model {
        ModelSpec::Mlp(m) => {
            let mut widths = vec![features];
            widths.extend(m.widths().into_iter().map(n));
            widths.push(classes);
            for w in widths.windows(2) {
                sizes.push(w[0].checked_mul(w[1])?);
            }
            sizes.push(b.checked_mul(widths.into_iter().max()?)?);
        }
        ModelSpec::Cnn(c) => {
            let (channels, kernel) = match *c {
                CnnSpec::Plain { channels, kernel, .. } => (n(channels), n(kernel)),
                // A bottleneck's widest activation is 256 channels at a quarter of the side: under
                // 64 channels at the full side; its widest weight is 2048 x 512 x 1 x 1.
                CnnSpec::Resnet(_) => (2048, 1),
            };
            sizes.push(channels.checked_mul(channels)?.checked_mul(kernel)?.checked_mul(kernel)?);
            sizes.push(b.checked_mul(channels.max(64))?.checked_mul(features)?);
            sizes.push(channels.checked_mul(classes)?);
        }
        ModelSpec::Transformer(t) => {
            let (d, ff, h) = (n(t.d_model), n(t.dim_feedforward), n(t.nhead));
            let vocab = match config.data {
                DataSpec::Tokens { vocab, .. } => n(vocab),
                _ => 1,
            };
            sizes.push(vocab.checked_mul(d)?);
            sizes.push(d.checked_mul(ff.max(d.checked_mul(3)?))?);
            sizes.push(b.checked_mul(features)?.checked_mul(ff.max(d.checked_mul(3)?))?);
            sizes.push(b.checked_mul(h)?.checked_mul(features)?.checked_mul(features)?);
            sizes.push(d.checked_mul(classes)?);
        }
        // The module's own tensors are in its file; the batch and its logits are the spec's.
        ModelSpec::Torchscript(_) => sizes.push(b.checked_mul(features.max(classes))?),
    }
    sizes.into_iter().max()?.checked_mul(8)
}
