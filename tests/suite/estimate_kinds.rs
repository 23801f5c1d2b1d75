//! The estimate of every model kind against the real thing: real libtorch trials on the CPU
//! (the counting allocator counts every byte), compared phase by phase with `estimate::predict`,
//! which replays the model's own code (`nn`) over symbolic tensors.
//!
//! To the byte, every phase's end and peak: plain CNNs with standard and depthwise-separable
//! convolutions, torchvision's ResNet-18 and ResNet-50 (basic and bottleneck blocks, batch norm,
//! in-place ReLUs and residual adds), and Transformer encoders post- and pre-norm, with dropout
//! (attention's math kernel, float masks) and without (the CPU flash kernel); under
//! checkpointing (PyTorch's checkpoint_sequential cut too, its last segment plain),
//! accumulation, the forward-only modes, a kept loss history, each optimizer implementation and
//! mixed precision (bf16; fp16 with the grad scaler; with checkpointing, accumulation and under
//! no_grad): autocast's casts, its cache, the fp32 residual stream of a
//! Transformer, batch and layer norm over low-precision inputs. Where oneDNN runs the
//! low-precision matrix products (bf16; fp16 on CPUs with AVX512-FP16) a forward's or
//! backward's peak may fall short by its scratch buffer, which the estimate leaves out (it says
//! so): at most the largest such buffer, measured here.
//!
//! oneDNN's convolution buffers and batch norm's are measured by the estimate on this CPU
//! (`estimate::graph::kernels`); batches past 17 are extrapolated from two measurements (or, where
//! those fit no line, as bf16's weight-gradient scratch, measured at the batch), which the batch
//! of 20 here checks.
//!
//! A test per family of kinds, each in a process of its own (`common::in_own_process`), holding
//! the lock for libtorch work there: a test beside it in its process would allocate through the
//! same counting allocator and move the measurements.
use crate::common::{self, compare_within, measure};
use oomlab::estimate;
use oomlab::spec::{
    Amp, Checkpoint, CnnSpec, Config, ConvKind, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec,
    OptimizerImpl, OptimizerSpec, ResNet, ScalerSpec, Techniques, TrainingSpec, TransformerSpec,
};

fn config(
    model: ModelSpec,
    data: DataSpec,
    batch: usize,
    optimizer: OptimizerSpec,
    techniques: Techniques,
) -> Config {
    Config {
        model,
        data,
        location: DataLocation::Host,
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer,
            batch_size: batch,
            steps: 2,
            dtype: Dtype::Float32,
            seed: 1,
            techniques,
        },
    }
}

fn images(channels: usize, size: usize) -> DataSpec {
    DataSpec::Images { samples: 48, channels, size, classes: 5, seed: 1 }
}

fn encoder(dropout: f64, norm_first: bool) -> ModelSpec {
    ModelSpec::Transformer(TransformerSpec {
        d_model: 32,
        nhead: 4,
        num_layers: 2,
        dim_feedforward: 64,
        dropout,
        norm_first,
    })
}

const TOKENS: DataSpec = DataSpec::Tokens { samples: 48, seq_len: 12, vocab: 50, classes: 5, seed: 1 };

/// Every kind, at the batch of the real thing's tests and, for the larger ones, past the
/// measured batches.
fn kinds() -> Vec<(&'static str, ModelSpec, DataSpec, Vec<usize>)> {
    let plain = |conv, kernel, channels| ModelSpec::Cnn(CnnSpec::Plain { channels, depth: 2, conv, kernel });
    vec![
        ("cnn standard 3x3", plain(ConvKind::Standard, 3, 16), images(3, 16), vec![4, 20]),
        ("cnn depthwise separable 5x5", plain(ConvKind::DepthwiseSeparable, 5, 8), images(2, 12), vec![4]),
        ("resnet18", ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)), images(3, 32), vec![4, 20]),
        ("resnet50", ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R50)), images(3, 32), vec![4]),
        // On 64 x 64 images layer2's bf16 weight gradient doubles its scratch from batch 17 to 18:
        // a line through the two would put batch 24's 3.7 MB too high.
        ("resnet18 64x64", ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)), images(3, 64), vec![24]),
        ("transformer post-norm, dropout", encoder(0.1, false), TOKENS, vec![4, 20]),
        ("transformer pre-norm, no dropout", encoder(0.0, true), TOKENS, vec![4]),
    ]
}

fn techniques() -> Vec<(&'static str, OptimizerSpec, Techniques)> {
    let adam = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 };
    let momentum = OptimizerSpec::Sgd { lr: 1e-2, momentum: 0.9, weight_decay: 1e-4 };
    let adamw = OptimizerSpec::AdamW { lr: 1e-3, weight_decay: 1e-2 };
    let sgd = OptimizerSpec::Sgd { lr: 1e-2, momentum: 0.0, weight_decay: 0.0 };
    let fp16 = Amp::Fp16 { scaler: ScalerSpec::default() };
    let t = Techniques::default();
    vec![
        ("adam", adam, t),
        ("checkpoint 1", adam, Techniques { checkpoint: Checkpoint::Every(1), ..t }),
        ("checkpoint sqrt", adam, Techniques { checkpoint: Checkpoint::Sqrt, ..t }),
        ("accumulation 2", adam, Techniques { accumulation: 2, ..t }),
        ("momentum, foreach", momentum, Techniques { optimizer_impl: Some(OptimizerImpl::Foreach), ..t }),
        ("adamw, fused", adamw, Techniques { optimizer_impl: Some(OptimizerImpl::Fused), ..t }),
        ("forward", adam, Techniques { mode: Mode::Forward, history: History::LossTensor, ..t }),
        ("forward_no_grad", adam, Techniques { mode: Mode::ForwardNoGrad, ..t }),
        ("kept losses", adam, Techniques { history: History::LossTensor, ..t }),
        ("bf16", adam, Techniques { amp: Amp::Bf16, ..t }),
        // Plain SGD keeps no state: a step the scaler skips (fp16's first steps may overflow,
        // ResNets' do) would delay Adam's, which the estimate cannot foresee (it says so).
        ("fp16 + scaler", sgd, Techniques { amp: fp16, ..t }),
        ("bf16, checkpoint sqrt", adam, Techniques { amp: Amp::Bf16, checkpoint: Checkpoint::Sqrt, ..t }),
        ("bf16, accumulation 2", adam, Techniques { amp: Amp::Bf16, accumulation: 2, ..t }),
        ("bf16, forward_no_grad", adam, Techniques { amp: Amp::Bf16, mode: Mode::ForwardNoGrad, ..t }),
    ]
}

/// The largest scratch buffer oneDNN takes for the model's low-precision matrix products (its
/// `Linear`s, [`common::onednn_linear_scratch`]): what a forward's or backward's peak may fall
/// short by, as the estimate leaves it out (it says so).
fn onednn_scratch(model: &ModelSpec, data: &DataSpec, batch: usize, amp: Amp) -> u64 {
    let b = batch as i64;
    let classes = 5;
    // (rows, in, out) of each Linear.
    let linears: Vec<(i64, i64, i64)> = match (model, data) {
        (ModelSpec::Transformer(t), DataSpec::Tokens { seq_len, .. }) => {
            let (rows, d, ff) = (b * *seq_len as i64, t.d_model as i64, t.dim_feedforward as i64);
            vec![(rows, d, 3 * d), (rows, d, d), (rows, d, ff), (rows, ff, d), (b, d, classes)]
        }
        (ModelSpec::Cnn(CnnSpec::Plain { channels, .. }), _) => vec![(b, *channels as i64, classes)],
        (ModelSpec::Cnn(CnnSpec::Resnet(r)), _) => {
            let width = if matches!(r, ResNet::R18 | ResNet::R34) { 512 } else { 2048 };
            vec![(b, width, classes)]
        }
        _ => vec![],
    };
    common::onednn_linear_scratch(amp, &linears)
}

/// What a backward's peak may fall short of the estimate by where the CPU flash kernel runs
/// attention (a Transformer without dropout): its parallel chunks' `dsum` buffers, live at once
/// as the estimate has them on a quiet machine, may come one after another on a busy one.
fn flash_racy(c: &Config, batch: usize) -> u64 {
    match (&c.model, &c.data) {
        (ModelSpec::Transformer(t), DataSpec::Tokens { seq_len, .. }) if t.dropout == 0.0 => {
            let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
            let acc_bytes = if c.training.dtype == Dtype::Float64 { 8 } else { 4 };
            estimate::flash_backward_racy(batch as i64, t.nhead as i64, *seq_len as i64, threads, acc_bytes)
        }
        _ => 0,
    }
}

/// The kinds whose dtype is the model's own (not autocast's), under every norm and attention
/// backend: what each norm saves for its backward (half-size statistics in a half-precision
/// model, double in a float64 one), and the flash kernel's logsumexp and buffers in its
/// accumulate type.
fn dtyped() -> Vec<(&'static str, ModelSpec, DataSpec)> {
    vec![
        ("transformer post-norm, dropout", encoder(0.1, false), TOKENS),
        ("transformer post-norm, no dropout", encoder(0.0, false), TOKENS),
        ("transformer pre-norm, no dropout", encoder(0.0, true), TOKENS),
        ("resnet18", ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)), images(3, 32)),
    ]
}

/// Every case of the kinds named `of` (names of [`kinds`] and [`dtyped`]), in a process of its
/// own: each predicted and trained, phase by phase; `expected` cases in all.
fn every_case_of(of: &[&str], expected: usize) {
    common::in_own_process(|| {
        let _in_process = common::in_process();
        let (failures, cases) = cases_of(of);
        assert_eq!(cases, expected, "the cases of {of:?}");
        assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    })
}

/// The failures among the cases of the kinds named `of`, and how many cases ran.
fn cases_of(of: &[&str]) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut cases = 0;
    for (kind, model, data, batches) in kinds().into_iter().filter(|k| of.contains(&k.0)) {
        for &batch in &batches {
            for (what, optimizer, t) in techniques() {
                // The larger batch checks the extrapolation; once per kind is enough for that.
                if batch > 4 && !matches!(what, "adam" | "checkpoint sqrt" | "bf16") {
                    continue;
                }
                let c = config(model.clone(), data.clone(), batch, optimizer, t);
                let name = format!("{kind}, batch {batch}, {what}");
                let predicted = estimate::predict(&c).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                let (records, peak) = measure(&c);
                let scratch = onednn_scratch(&c.model, &c.data, batch, t.amp);
                let racy = flash_racy(&c, batch);
                failures.extend(compare_within(&name, &predicted, &records, peak, scratch, racy).0);
                // The model's own constructor, replayed, has the parameters the real one has.
                let params: u64 = oomlab::nn::Model::<tch::Tensor>::new(
                    &c.model,
                    oomlab::nn::Input::of(&c.data, predicted.shape.features, predicted.shape.classes),
                    oomlab::nn::CPU_F32,
                )
                .unwrap()
                .param_bytes();
                assert_eq!(predicted.param_bytes, params, "{name}");
                cases += 1;
            }
        }
    }
    // The model's own dtype (not autocast).
    let adam = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 };
    for dtype in [Dtype::Float64, Dtype::Float16, Dtype::Bfloat16] {
        for (kind, model, data) in dtyped().iter().filter(|k| of.contains(&k.0)) {
            let mut c = config(model.clone(), data.clone(), 5, adam, Techniques::default());
            c.training.dtype = dtype;
            let name = format!("{kind}, {dtype:?} model, batch 5");
            let predicted = estimate::predict(&c).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let (records, peak) = measure(&c);
            // A half-precision model's matrix products go through oneDNN as autocast's do.
            let like = match dtype {
                Dtype::Bfloat16 => Amp::Bf16,
                Dtype::Float16 => Amp::Fp16 { scaler: ScalerSpec::default() },
                _ => Amp::Off,
            };
            // Its data set is made in its dtype too: the labels come from a teacher's matrix
            // product over the whole set, in the data phase.
            let teacher = match c.data {
                DataSpec::Images { samples, channels, size, classes, .. } => {
                    vec![(samples as i64, (channels * size * size) as i64, classes as i64)]
                }
                _ => vec![],
            };
            let scratch =
                onednn_scratch(&c.model, &c.data, 5, like).max(common::onednn_linear_scratch(like, &teacher));
            let racy = flash_racy(&c, 5);
            failures.extend(compare_within(&name, &predicted, &records, peak, scratch, racy).0);
            cases += 1;
        }
    }
    // PyTorch's checkpoint_sequential cut (`{ sequential = S }`): S - 1 checkpointed segments of
    // units / S, the rest plain, its activations kept; 1 is the plain step, and as many as the
    // units checkpoints every unit but the last. fp32 and bf16 (whose plain tail's backward runs
    // under autocast as the head's does); a ResNet-18's 9 units in 4 leave 3 plain.
    let mut sequential = vec![];
    for (kind, model, data, _) in kinds().into_iter().filter(|k| of.contains(&k.0)) {
        let units = model.units();
        let cuts: Vec<usize> = match kind {
            "cnn standard 3x3" | "transformer post-norm, dropout" => vec![1, 2, units],
            "resnet18" => vec![4],
            _ => continue,
        };
        for s in cuts {
            for amp in [Amp::Off, Amp::Bf16] {
                sequential.push((kind, model.clone(), data.clone(), s, amp));
            }
        }
    }
    for (kind, model, data, s, amp) in sequential {
        let t = Techniques { checkpoint: Checkpoint::Sequential(s), amp, ..Techniques::default() };
        let c = config(model, data, 4, OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 }, t);
        let name = format!("{kind}, batch 4, {}, checkpoint {}", amp.as_str(), t.checkpoint.name());
        let predicted = estimate::predict(&c).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let (records, peak) = measure(&c);
        let scratch = onednn_scratch(&c.model, &c.data, 4, amp);
        let racy = flash_racy(&c, 4);
        failures.extend(compare_within(&name, &predicted, &records, peak, scratch, racy).0);
        cases += 1;
    }
    (failures, cases)
}

/// Plain CNNs, standard (at batches 4 and 20, and cut by checkpoint_sequential) and depthwise
/// separable.
#[test]
fn plain_cnns_under_every_technique_are_predicted_to_the_byte() {
    every_case_of(&["cnn standard 3x3", "cnn depthwise separable 5x5"], 17 + 6 + 14);
}

/// ResNet-18 at 32 x 32 (batches 4 and 20, its own dtypes, a checkpoint_sequential cut) and at
/// 64 x 64 past bf16's doubling scratch.
#[test]
fn resnet18_under_every_technique_is_predicted_to_the_byte() {
    every_case_of(&["resnet18", "resnet18 64x64"], 17 + 3 + 2 + 3);
}

/// ResNet-50's bottleneck blocks.
#[test]
fn resnet50_under_every_technique_is_predicted_to_the_byte() {
    every_case_of(&["resnet50"], 14);
}

/// The post-norm encoder with dropout (attention's math kernel; batches 4 and 20, its own
/// dtypes, checkpoint_sequential cuts), and without (the CPU flash kernel; its own dtypes).
#[test]
fn a_post_norm_encoder_under_every_technique_is_predicted_to_the_byte() {
    every_case_of(&["transformer post-norm, dropout", "transformer post-norm, no dropout"], 17 + 3 + 6 + 3);
}

/// The pre-norm encoder without dropout (the CPU flash kernel), and in its own dtypes.
#[test]
fn a_pre_norm_encoder_under_every_technique_is_predicted_to_the_byte() {
    every_case_of(&["transformer pre-norm, no dropout"], 14 + 3);
}
