//! The estimate of every model kind against the real thing: real libtorch trials on the CPU
//! (the counting allocator counts every byte), compared phase by phase with `estimate::predict`,
//! which replays the model's own code (`nn`) over symbolic tensors.
//!
//! To the byte, every phase's end and peak: plain CNNs with standard and depthwise-separable
//! convolutions, torchvision's ResNet-18 and ResNet-50 (basic and bottleneck blocks, batch norm,
//! in-place ReLUs and residual adds), and Transformer encoders post- and pre-norm, with dropout
//! (attention's math kernel, float masks) and without (the CPU flash kernel); under
//! checkpointing, accumulation, the forward-only modes, a kept loss history and each optimizer
//! implementation. oneDNN's convolution buffers and batch norm's are measured by the estimate on
//! this CPU (`estimate::graph::kernels`); batches past 17 are extrapolated from two measurements,
//! which the batch of 20 here checks.
//!
//! One test: a second, in parallel in this process, would allocate through the same counting
//! allocator and move the measurements.
mod common;

use common::{compare, measure};
use oomlab::estimate;
use oomlab::spec::{
    Checkpoint, CnnSpec, Config, ConvKind, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec,
    OptimizerImpl, OptimizerSpec, ResNet, Techniques, TrainingSpec, TransformerSpec,
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
        ("transformer post-norm, dropout", encoder(0.1, false), TOKENS, vec![4, 20]),
        ("transformer pre-norm, no dropout", encoder(0.0, true), TOKENS, vec![4]),
    ]
}

fn techniques() -> Vec<(&'static str, OptimizerSpec, Techniques)> {
    let adam = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 };
    let momentum = OptimizerSpec::Sgd { lr: 1e-2, momentum: 0.9, weight_decay: 1e-4 };
    let adamw = OptimizerSpec::AdamW { lr: 1e-3, weight_decay: 1e-2 };
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
    ]
}

#[test]
fn every_kind_under_every_technique_is_predicted_to_the_byte() {
    let mut failures = Vec::new();
    let mut cases = 0;
    for (kind, model, data, batches) in kinds() {
        for &batch in &batches {
            for (what, optimizer, t) in techniques() {
                // The larger batch checks the extrapolation; once per kind is enough for that.
                if batch > 4 && what != "adam" && what != "checkpoint sqrt" {
                    continue;
                }
                let c = config(model.clone(), data.clone(), batch, optimizer, t);
                let name = format!("{kind}, batch {batch}, {what}");
                let predicted = estimate::predict(&c).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                let (records, peak) = measure(&c);
                failures.extend(compare(&name, &predicted, &records, peak, 0).0);
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
    assert!(cases >= 50, "only {cases} cases");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
