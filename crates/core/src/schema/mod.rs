//! What a run measures: memory snapshots per phase, and the outcome of each trial. These are the
//! rows of `trace.csv` and `summary.csv`, and what charts and reports read back.
pub mod rules;

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::spec::{
    AmpKind, CnnSpec, DataSpec, Dtype, History, Mode, ModelKind, ModelSpec, Named, OptimizerImpl,
    OptimizerKind,
};

/// A phase of a trial. `Data` and `Model` happen once per trial (step 0); the others once per
/// training step, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The synthetic or loaded data set is made on the device.
    Data,
    /// Parameters are made and the optimizer is built (its state comes at the first step).
    Model,
    /// `DistributedDataParallel(model)` (`[parallel]` DDP): rank 0's parameters broadcast to
    /// every rank, the reducer's gradient buckets made.
    Wrap,
    /// The step's batch is gathered from the data set into tensors of its own.
    ToDevice,
    /// Forward pass and loss.
    Forward,
    /// `backward()`: gradients are made, the graph's saved activations are freed.
    Backward,
    /// The optimizer step (Adam and momentum allocate their state at the first one).
    OptimizerStep,
    /// `zero_grad()`, which sets gradients to none and so frees them.
    ZeroGrad,
    /// A whole step (`--trace steps`): its peak and the memory at its end; step 0 is the set-up
    /// (data and model).
    Step,
}

impl Phase {
    pub const TRAINING: [Phase; 5] =
        [Phase::ToDevice, Phase::Forward, Phase::Backward, Phase::OptimizerStep, Phase::ZeroGrad];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Data => "data",
            Phase::Model => "model",
            Phase::Wrap => "wrap",
            Phase::ToDevice => "to_device",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::OptimizerStep => "optimizer_step",
            Phase::ZeroGrad => "zero_grad",
            Phase::Step => "step",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a run measures as it trains (`run --trace`), from most to least.
///
/// The allocator's counters are kept on the host, so reading them per phase costs no device
/// synchronisation; only durations do, and CUDA events give those without stopping the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TraceLevel {
    /// A trace row per phase, memory read without synchronising; durations from CUDA events
    /// read once the step is over (host clock on the CPU, whose work is done when a call returns).
    #[default]
    Phases,
    /// A trace row per phase, the device synchronised at every phase's end: durations include the
    /// phase's queued device work, at the cost of stalling the host (how runs made before `--trace` existed measured).
    Sync,
    /// A trace row per step: its peak and the memory at its end, one event per step.
    Steps,
    /// No trace rows: only the trial's peaks and step times (one event per step) in summary.csv.
    Off,
}

impl TraceLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceLevel::Phases => "phases",
            TraceLevel::Sync => "sync",
            TraceLevel::Steps => "steps",
            TraceLevel::Off => "off",
        }
    }

    /// Every level, most measured first.
    pub const ALL: [TraceLevel; 4] =
        [TraceLevel::Phases, TraceLevel::Sync, TraceLevel::Steps, TraceLevel::Off];
}

/// The allocator's counters at one moment, in bytes, named as PyTorch names them. The peaks are
/// since the last peak reset (the start of the phase, in a trace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemSnapshot {
    pub memory_allocated: u64,
    pub memory_reserved: u64,
    pub max_memory_allocated: u64,
    pub max_memory_reserved: u64,
}

/// One row of `trace.csv`: the memory at the end of one phase of one step of one trial. The
/// peaks are since the start of the phase. (Flat, because CSV has no nesting.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub trial: usize,
    /// The trial's `[[variant]]` and swept value, as its summary.csv row names them, so that a
    /// trace plots without a join: written when the trial's rows are (the recorder leaves them
    /// empty), empty where the spec has none and in runs made before they were written.
    #[serde(default)]
    pub variant: String,
    #[serde(default, serialize_with = "whole_as_integer")]
    pub value: Option<f64>,
    /// 0 for the set-up phases, then 1, 2, ...
    pub step: usize,
    /// The micro-batch within the step (gradient accumulation), from 0.
    pub micro: usize,
    pub phase: Phase,
    pub memory_allocated: u64,
    pub memory_reserved: u64,
    pub max_memory_allocated: u64,
    pub max_memory_reserved: u64,
    /// Bytes the device itself reports as used (nvidia-smi's number); empty on CPU.
    pub device_used: Option<u64>,
    /// Duration of this phase, in seconds: the device's (CUDA events) under `--trace phases`,
    /// synchronised wall time under `sync` (see `TraceLevel`).
    pub phase_seconds: f64,
    /// Wall time since the trial started, in seconds.
    pub elapsed_seconds: f64,
    /// The estimate's peak for this phase (a step's, under `--trace steps`), baseline included,
    /// as the run predicted it on its machine before the trial: what the timeline draws beside
    /// the measurement. Empty where there was no prediction, and in runs made before it was
    /// recorded (charts of those draw none: a prediction made again on another machine would
    /// be that machine's).
    #[serde(default)]
    pub predicted_peak: Option<u64>,
    /// The process's minor page faults during the phase (every thread's): the first touches of
    /// fresh host memory, which a CPU's step time includes and a GPU's caching allocator avoids.
    /// Empty in runs made before it was recorded.
    #[serde(default)]
    pub page_faults: Option<u64>,
    /// The rank whose phase this is, in a `[parallel]` trial (every rank records its own);
    /// empty for one process.
    #[serde(default)]
    pub rank: Option<usize>,
}

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    #[default]
    Ok,
    Oom,
    Error,
    /// Not run: the estimate put it over the budget by more than the spec's margin.
    PredictedOom,
    /// Trained within memory, but its loss ended as infinity or NaN (without a grad scaler to
    /// explain it): the memory is measured, the training is not to be trusted.
    Diverged,
}

impl Status {
    /// Whether the trial ran within its memory: it fits, whatever became of its loss.
    pub fn fitted(self) -> bool {
        matches!(self, Status::Ok | Status::Diverged)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Oom => "oom",
            Status::Error => "error",
            Status::PredictedOom => "predicted_oom",
            Status::Diverged => "diverged",
        })
    }
}

impl PhaseRecord {
    pub fn mem(&self) -> MemSnapshot {
        MemSnapshot {
            memory_allocated: self.memory_allocated,
            memory_reserved: self.memory_reserved,
            max_memory_allocated: self.max_memory_allocated,
            max_memory_reserved: self.max_memory_reserved,
        }
    }
}

/// One row of `summary.csv`: one trial, whatever its outcome. Columns missing from an older
/// file read as their defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SummaryRow {
    pub trial: usize,
    /// The `[[variant]]` name, empty when the spec has none.
    pub variant: String,
    /// The swept key (`model.depth`); written empty, and read as `None`, when the spec has no
    /// sweep. A key oomlab does not sweep is an error when read.
    pub field: Option<crate::spec::Field>,
    /// The swept value (written as an integer when it is one: `311`, not `311.0`).
    #[serde(serialize_with = "whole_as_integer")]
    pub value: Option<f64>,
    pub status: Status,
    /// Where an OOM or error struck (a predicted OOM: where the estimate put it): the phase, and
    /// the step (0 for the set-up phases). Written `oom_phase` and `oom_step`, as the other OOM
    /// columns are; files from before 2026-11-26 call them `phase` and `step`, which read the
    /// same (the Rust names stay, so that code reading them needs no change).
    #[serde(rename = "oom_phase", alias = "phase")]
    pub phase: Option<Phase>,
    #[serde(rename = "oom_step", alias = "step")]
    pub step: Option<usize>,
    // The configuration, so that a row reads on its own whatever was swept.
    /// The model in short (`ModelSpec::describe`: `mlp 4x5000`, `resnet50`, ...); empty in
    /// results from before model kinds.
    pub model: String,
    /// `mlp`, `cnn` or `transformer` (`model.kind`); empty in older results.
    #[serde(deserialize_with = "word")]
    pub model_kind: Option<ModelKind>,
    /// The model's depth and width in its own terms (`ModelSpec::depth`, `ModelSpec::width`):
    /// an MLP's hidden layers and their (widest) width; for the other kinds, as they have always
    /// been written, a plain CNN's blocks and channels, a ResNet's number and 64, a Transformer's
    /// layers and `d_model`. Kept so for every kind, so that a column means one thing in old
    /// files and new; the kind's own columns below name its sizes without that reading.
    pub depth: usize,
    pub hidden: usize,
    /// A CNN's `model.arch`: `resnet18` .. `resnet152` or `plain`; empty for other kinds.
    pub arch: String,
    /// A plain CNN's `model.channels` (its blocks' width); empty for other kinds.
    pub channels: Option<usize>,
    /// A Transformer's `model.d_model`, `model.nhead`, `model.num_layers` and
    /// `model.dim_feedforward`; empty for other kinds.
    pub d_model: Option<usize>,
    pub nhead: Option<usize>,
    pub num_layers: Option<usize>,
    pub dim_feedforward: Option<usize>,
    pub batch_size: usize,
    pub samples: usize,
    /// The numbers per sample the model takes in: a synthetic or CSV set's features, an image's
    /// channels x height x width, a token sequence's length.
    pub features: usize,
    /// The classes the loss reads; 0 for an mse target (values, not class indices).
    pub classes: usize,
    /// An image data set's `data.channels` and `data.size` (height = width); empty for others.
    pub image_channels: Option<usize>,
    pub image_size: Option<usize>,
    /// A token data set's `data.seq_len` and `data.vocab`; empty for others.
    pub seq_len: Option<usize>,
    pub vocab: Option<usize>,
    // The spec's closed sets, written as the spec writes them and read back as the same types
    // ([`word`]); `None` (an empty cell) in results from before the column.
    /// sgd, sgd_momentum, adam, adamw.
    #[serde(deserialize_with = "word")]
    pub optimizer: Option<OptimizerKind>,
    /// How torch.optim ran it: for_loop, foreach or fused (empty in results from before the
    /// choice, made with libtorch's C++ optimizers).
    #[serde(deserialize_with = "word")]
    pub optimizer_impl: Option<OptimizerImpl>,
    #[serde(deserialize_with = "word")]
    pub dtype: Option<Dtype>,
    pub accumulation: usize,
    /// off, fp16, bf16.
    #[serde(deserialize_with = "word")]
    pub amp: Option<AmpKind>,
    /// none, sqrt, the units per segment, or `sequential:S` (`Checkpoint::name`).
    pub checkpoint: String,
    /// train, forward, forward_no_grad.
    #[serde(deserialize_with = "word")]
    pub mode: Option<Mode>,
    /// none, loss_tensor, loss_value.
    #[serde(deserialize_with = "word")]
    pub history: Option<History>,
    /// Peaks over the whole trial, in bytes.
    pub max_memory_allocated: u64,
    pub max_memory_reserved: u64,
    /// `oomlab estimate`'s predicted peak allocated bytes for this configuration.
    pub predicted_peak: Option<u64>,
    /// (predicted - measured) / measured peak, for trials that ran.
    pub predicted_error: Option<f64>,
    /// Allocated bytes before the trial and after its clean-up: equal unless something leaked.
    pub baseline_allocated: u64,
    pub after_allocated: u64,
    /// Reserved bytes once the trial's tensors are all dropped (Python's `del`), and after
    /// `empty_cache` then: the caching allocator keeps freed blocks for reuse until
    /// `empty_cache` hands its wholly free segments back (the CPU caches nothing: both equal
    /// allocated). Empty in results from before 2026-11-25.
    pub released_reserved: Option<u64>,
    pub emptied_reserved: Option<u64>,
    pub param_count: u64,
    pub param_bytes: u64,
    /// Mean time of a training step, the first excluded when there are several (the device's
    /// time under `--trace phases`, steps or off on CUDA; synchronised wall time under `sync`).
    pub step_seconds: Option<f64>,
    /// Time spent making the data set and the model (with its optimizer).
    pub data_seconds: Option<f64>,
    pub model_seconds: Option<f64>,
    /// Time of all the training steps together.
    pub steps_total_seconds: Option<f64>,
    /// Wall time of the whole trial, from its first allocation to its clean-up checked.
    pub trial_seconds: Option<f64>,
    /// The last step's loss: with accumulation, the mean of its micro-batches' losses (the
    /// effective batch's loss; results from before 2026-11-25 hold the last micro-batch's); in a
    /// `[parallel]` trial, the mean of the ranks' (the global batch's loss).
    pub final_loss: Option<f64>,
    /// Optimizer steps the grad scaler skipped (inf/NaN gradients); empty without fp16.
    pub skipped_steps: Option<usize>,
    /// The grad scaler's scale at the end; empty without fp16.
    pub final_scale: Option<f64>,
    /// Fields of the OOM message, in bytes (rounded as the message rounds them).
    pub oom_requested: Option<u64>,
    pub oom_total_capacity: Option<u64>,
    pub oom_free: Option<u64>,
    pub oom_allocated: Option<u64>,
    pub oom_reserved: Option<u64>,
    /// The error's first line, empty when the trial ran.
    pub message: String,
    /// Which round of the spec's trials this one belongs to (`run.rounds`); empty with one round.
    pub round: Option<usize>,
    /// How many rows of `trace.csv` are this trial's: what a reader checks that file against
    /// (a run cut short on a full disk, or a file edited, loses rows silently otherwise). Empty in
    /// results from before 2026-11-26.
    pub trace_rows: Option<usize>,
    /// The ranks of a `[parallel]` trial (`parallel.world_size`); empty for one process.
    pub world_size: Option<usize>,
    /// In a `[parallel]` trial, the rank this row's measurements are: the rank that ran out of
    /// memory (or failed) first, else the rank with the highest peak. Every rank's phases are in
    /// trace.csv.
    pub rank: Option<usize>,
}

impl PhaseRecord {
    /// Whether this record is of `row`'s trial and of the rank its numbers are (a `[parallel]`
    /// trial's other ranks record the same phases beside it).
    pub fn measured_by(&self, row: &SummaryRow) -> bool {
        self.trial == row.trial && (row.rank.is_none() || self.rank == row.rank)
    }

    /// The record without its times and page faults, which differ from run to run: what two
    /// runs of one configuration must agree on.
    pub fn untimed(&self) -> PhaseRecord {
        PhaseRecord { phase_seconds: 0.0, elapsed_seconds: 0.0, page_faults: None, ..self.clone() }
    }
}

impl SummaryRow {
    /// The row without its times, which differ from run to run: what two runs of one
    /// configuration must agree on.
    pub fn untimed(&self) -> SummaryRow {
        SummaryRow {
            step_seconds: None,
            data_seconds: None,
            model_seconds: None,
            steps_total_seconds: None,
            trial_seconds: None,
            ..self.clone()
        }
    }

    /// How the trial ended, in a few words: "ok", "OOM in backward", "diverged", ...
    pub fn outcome(&self) -> String {
        match (self.status, self.phase) {
            (Status::Ok, _) => "ok".to_string(),
            (Status::Oom, Some(p)) => format!("OOM in {p}"),
            (Status::Oom, None) => "OOM".to_string(),
            (Status::Error, _) => "error".to_string(),
            (Status::PredictedOom, _) => "predicted OOM (not run)".to_string(),
            (Status::Diverged, _) => "diverged".to_string(),
        }
    }

    /// Fills the columns that describe the model and the data's shape: `model`, `model_kind`,
    /// `depth` and `hidden` for every kind, and the kind's own columns (empty for the others).
    pub fn set_model(&mut self, model: &ModelSpec, data: &DataSpec) {
        self.model = model.describe();
        self.model_kind = Some(model.kind());
        (self.depth, self.hidden) = (model.depth(), model.width());
        (self.arch, self.channels) = match *model {
            ModelSpec::Cnn(CnnSpec::Resnet(r)) => (r.as_str().to_string(), None),
            ModelSpec::Cnn(CnnSpec::Plain { channels, .. }) => ("plain".to_string(), Some(channels)),
            _ => (String::new(), None),
        };
        (self.d_model, self.nhead, self.num_layers, self.dim_feedforward) = match model {
            ModelSpec::Transformer(t) => {
                (Some(t.d_model), Some(t.nhead), Some(t.num_layers), Some(t.dim_feedforward))
            }
            _ => (None, None, None, None),
        };
        (self.image_channels, self.image_size) = match *data {
            DataSpec::Images { channels, size, .. } => (Some(channels), Some(size)),
            _ => (None, None),
        };
        (self.seq_len, self.vocab) = match *data {
            DataSpec::Tokens { seq_len, vocab, .. } => (Some(seq_len), Some(vocab)),
            _ => (None, None),
        };
    }

    /// Bytes still allocated after the trial's clean-up that were not there before: a leak.
    pub fn leaked(&self) -> Option<u64> {
        self.after_allocated.checked_sub(self.baseline_allocated).filter(|&b| b > 0)
    }
}

/// A swept value as people write it: `311` for a depth or a batch, `0.001` for a learning rate.
/// (Read back, both are the same f64.)
fn whole_as_integer<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        // Below 2^53 a whole f64 is exactly an integer.
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => s.serialize_some(&(*x as i64)),
        other => other.serialize(s),
    }
}

/// A variant a run on this machine leaves out (`skip_on_cpu_without`), and why: in a manifest,
/// and said where an estimate gives its prediction (which is for a machine that runs it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRun {
    pub variant: String,
    pub why: String,
}

/// Reads one of summary.csv's closed-set columns: the spec's word for a choice
/// ([`Named::as_str`], which is also what serde writes); an empty cell (a file from before the
/// column) is `None`, and any other word an error that names it and the words it could be.
fn word<'de, D: serde::Deserializer<'de>, T: Named>(d: D) -> Result<Option<T>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    match text.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(w) => T::from_name(w).map(Some).ok_or_else(|| {
            let words: Vec<&str> = T::ALL.iter().map(|c| c.as_str()).collect();
            serde::de::Error::custom(format!("`{w}` is not one of {}", words.join(", ")))
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The header a writer of these rows writes.
    pub(crate) fn header<T: Serialize>(row: &T) -> Vec<String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(row).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        text.lines().next().unwrap().split(',').map(str::to_string).collect()
    }

    /// A trace row, for its header: every column written.
    pub(crate) fn a_record() -> PhaseRecord {
        PhaseRecord {
            trial: 1,
            variant: String::new(),
            value: None,
            step: 1,
            micro: 0,
            phase: Phase::Forward,
            memory_allocated: 0,
            memory_reserved: 0,
            max_memory_allocated: 0,
            max_memory_reserved: 0,
            device_used: None,
            phase_seconds: 0.0,
            elapsed_seconds: 0.0,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        }
    }

    /// The column names of a markdown table's rows (`| \`name\` | unit | meaning |`).
    fn table(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once("` |"))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// docs/results.md's column reference lists every column of both files, in the files' order, and
    /// nothing else: a column added or renamed without its line there fails here.
    #[test]
    fn the_column_reference_lists_every_column_with_its_unit() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results.md")).unwrap();
        let start = readme.find("### Columns of trace.csv and summary.csv").expect("the column reference");
        let section = &readme[start..];
        let section = &section[..section.find("\n## ").unwrap_or(section.len())];
        let (trace, summary) = section.split_once("`summary.csv`, one row per trial:").expect("two tables");
        assert_eq!(table(trace), header(&a_record()), "trace.csv's columns in docs/results.md");
        assert_eq!(
            table(summary),
            header(&SummaryRow::default()),
            "summary.csv's columns in docs/results.md"
        );
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let unit = line.split('|').nth(2).unwrap_or_default().trim();
            assert!(!unit.is_empty(), "no unit: {line}");
        }
    }

    #[test]
    fn every_kind_fills_its_own_columns_and_leaves_the_others_empty() {
        use crate::spec::{ConvKind, ResNet, TransformerSpec};
        let synthetic = DataSpec::Synthetic { samples: 8, features: 4, classes: 2, seed: 0 };
        let images = DataSpec::Images { samples: 8, channels: 3, size: 32, classes: 10, seed: 0 };
        let tokens = DataSpec::Tokens { samples: 8, seq_len: 128, vocab: 1000, classes: 2, seed: 0 };
        let of = |model: &ModelSpec, data: &DataSpec| {
            let mut r = SummaryRow::default();
            r.set_model(model, data);
            r
        };

        let mlp = of(&ModelSpec::mlp(5000, 4), &synthetic);
        assert_eq!(
            (mlp.model.as_str(), mlp.model_kind, mlp.depth, mlp.hidden),
            ("mlp 4x5000", Some(ModelKind::Mlp), 4, 5000)
        );
        assert_eq!((mlp.arch.as_str(), mlp.channels, mlp.d_model, mlp.num_layers), ("", None, None, None));
        assert_eq!((mlp.image_size, mlp.seq_len), (None, None));

        let resnet = of(&ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R50)), &images);
        assert_eq!(
            (resnet.model_kind, resnet.arch.as_str(), resnet.channels),
            (Some(ModelKind::Cnn), "resnet50", None)
        );
        assert_eq!((resnet.depth, resnet.hidden), (50, 64), "as written before the kind's columns");
        assert_eq!((resnet.image_channels, resnet.image_size, resnet.seq_len), (Some(3), Some(32), None));

        let plain =
            ModelSpec::Cnn(CnnSpec::Plain { channels: 256, depth: 4, conv: ConvKind::Standard, kernel: 3 });
        let plain = of(&plain, &images);
        assert_eq!(
            (plain.arch.as_str(), plain.channels, plain.depth, plain.d_model),
            ("plain", Some(256), 4, None)
        );

        let t = TransformerSpec {
            d_model: 512,
            nhead: 8,
            num_layers: 6,
            dim_feedforward: 2048,
            dropout: 0.0,
            norm_first: false,
        };
        let t = of(&ModelSpec::Transformer(t), &tokens);
        assert_eq!(t.model_kind, Some(ModelKind::Transformer));
        assert_eq!(
            (t.d_model, t.nhead, t.num_layers, t.dim_feedforward),
            (Some(512), Some(8), Some(6), Some(2048))
        );
        assert_eq!((t.arch.as_str(), t.channels, t.image_size), ("", None, None));
        assert_eq!((t.seq_len, t.vocab), (Some(128), Some(1000)));
    }

    #[test]
    fn a_whole_swept_value_is_written_as_an_integer_and_reads_back() {
        let mut w = csv::Writer::from_writer(Vec::new());
        for value in [Some(311.0), Some(0.001), None] {
            w.serialize(SummaryRow { value, ..SummaryRow::default() }).unwrap();
        }
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let column = text.lines().next().unwrap().split(',').position(|c| c == "value").unwrap();
        let values: Vec<&str> = text.lines().skip(1).map(|l| l.split(',').nth(column).unwrap()).collect();
        assert_eq!(values, ["311", "0.001", ""]);
        let back: Vec<SummaryRow> =
            csv::Reader::from_reader(text.as_bytes()).deserialize().map(Result::unwrap).collect();
        assert_eq!(back.iter().map(|r| r.value).collect::<Vec<_>>(), [Some(311.0), Some(0.001), None]);
    }

    /// The closed-set columns are written as the spec's words and read back as the same
    /// choices; an empty cell (an older file) reads as none, and a word oomlab never writes is
    /// an error naming it.
    #[test]
    fn closed_set_columns_round_trip_as_words() {
        let row = SummaryRow {
            optimizer: Some(OptimizerKind::AdamW),
            optimizer_impl: Some(OptimizerImpl::Foreach),
            dtype: Some(Dtype::Bfloat16),
            amp: Some(AmpKind::Fp16),
            mode: Some(Mode::ForwardNoGrad),
            history: Some(History::LossTensor),
            ..SummaryRow::default()
        };
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(&row).unwrap();
        w.serialize(SummaryRow::default()).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        let first: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
        let cell = |name: &str| first[header.iter().position(|c| *c == name).unwrap()];
        let words = ["optimizer", "optimizer_impl", "dtype", "amp", "mode", "history"].map(cell);
        assert_eq!(words, ["adamw", "foreach", "bfloat16", "fp16", "forward_no_grad", "loss_tensor"]);
        let back: Vec<SummaryRow> =
            csv::Reader::from_reader(text.as_bytes()).deserialize().map(Result::unwrap).collect();
        assert_eq!(back, [row, SummaryRow::default()]);

        let bad = text.replace("forward_no_grad", "sideways");
        let err =
            csv::Reader::from_reader(bad.as_bytes()).deserialize::<SummaryRow>().next().unwrap().unwrap_err();
        assert!(
            err.to_string().contains("`sideways` is not one of train, forward, forward_no_grad"),
            "{err}"
        );
    }
}
