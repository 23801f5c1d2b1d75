//! What libtorch keeps for the life of the process, made before the first trial.
//!
//! On CUDA, libtorch allocates its cuBLAS and cuBLASLt workspaces through the caching allocator
//! at the first matrix products of each thread (the main thread's forward, the autograd engine's
//! device thread in backward) and keeps them until the process exits: `memory_allocated` counts
//! them, `empty_cache` does not free them (on an H100 with PyTorch 2.11: 65 MiB after a training
//! step, 33 MiB after a forward only). Measured inside a trial they look like a leak, and the
//! first trial's peak would carry them while the others' baselines did.
//!
//! So before the first trial the run trains a tiny copy of every configuration it will run, with
//! the same code, dtype and techniques (so every thread, every kernel family and the grad
//! scaler have been through once), drops it, empties the cache and reads what stays: that is
//! the process's workspace, and part of every trial's baseline. A trial that leaves more than
//! its baseline still leaks, and still stops the run.
use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::run_trial;
use crate::probe::MemoryProbe;
use crate::schema::TraceLevel;
use crate::spec::{Checkpoint, CnnSpec, Config, DataSpec, ModelSpec, ResNet, TransformerSpec};

/// What stays allocated once the warm-up has run and the cache is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Workspace {
    /// `memory_allocated`: on CUDA the cuBLAS/cuBLASLt workspaces; 0 on the CPU.
    pub allocated: u64,
    /// `memory_reserved`: the segments holding them (a small workspace sits in a 2 MiB segment).
    pub reserved: u64,
}

/// Trains a tiny copy of each configuration once, so that what libtorch makes for the process
/// exists before the first trial, and returns what stays. Measured at the run's trace level, so
/// that what measuring makes for the process (CUDA events) is made here too.
pub fn warm_up<'a>(
    configs: impl IntoIterator<Item = &'a Config>,
    probe: &dyn MemoryProbe,
    level: TraceLevel,
) -> Result<Workspace> {
    for (i, config) in configs.into_iter().enumerate() {
        // The outcome is not looked at: a tiny trial that fails (an OOM in a few KiB) says
        // nothing the trials will not record themselves when they meet the same error.
        run_trial(&tiny(config), probe, i + 1, level, &mut |_| Ok(()))?;
    }
    probe.empty_cache()?;
    let s = probe.snapshot()?;
    Ok(Workspace { allocated: s.memory_allocated, reserved: s.memory_reserved })
}

/// The same code paths, small: the same kind of model with the same kinds of layers (an MLP of
/// at most two hidden layers of 8; a plain CNN of 4 channels and at most one block; ResNet-18,
/// the smallest torchvision builds, for every ResNet; a Transformer of 2 dimensions a head and
/// at most one layer) on 8 rows of tiny data, a batch of 4, two steps (the second, with a kept
/// history or an optimizer's state, differs), at most two micro-batches.
fn tiny(config: &Config) -> Config {
    let mut c = config.clone();
    let classes = match &config.data {
        DataSpec::Synthetic { classes, .. }
        | DataSpec::Images { classes, .. }
        | DataSpec::Tokens { classes, .. } => (*classes).min(4),
        DataSpec::Csv { .. } | DataSpec::Tensors { .. } => 2,
    };
    let (samples, seed) = (8, 0);
    (c.model, c.data) = match &config.model {
        ModelSpec::Mlp(m) => {
            let model = ModelSpec::mlp(8, m.depth().min(2));
            (model, DataSpec::Synthetic { samples, features: 4, classes, seed })
        }
        ModelSpec::Cnn(cnn) => {
            let channels = match config.data {
                DataSpec::Images { channels, .. } => channels.min(4),
                _ => 3,
            };
            let model = match *cnn {
                CnnSpec::Plain { depth, conv, kernel, .. } => {
                    ModelSpec::Cnn(CnnSpec::Plain { channels: 4, depth: depth.min(1), conv, kernel })
                }
                CnnSpec::Resnet(_) => ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)),
            };
            (model, DataSpec::Images { samples, channels, size: 8, classes, seed })
        }
        ModelSpec::Transformer(t) => {
            let model = ModelSpec::Transformer(TransformerSpec {
                d_model: 2 * t.nhead,
                num_layers: t.num_layers.min(1),
                dim_feedforward: 8,
                ..*t
            });
            (model, DataSpec::Tokens { samples, seq_len: 4, vocab: 16, classes, seed })
        }
        // A module of the user's reads the shapes it was made for: the spec's data, fewer rows.
        ModelSpec::Torchscript(_) => (config.model.clone(), config.data.with_samples_at_most(samples)),
    };
    let t = &mut c.training;
    t.batch_size = 4;
    t.techniques.accumulation = t.techniques.accumulation.min(2);
    t.steps = 2;
    // A checkpointed step (its recompute) warmed up as one, whatever the cut; `{ sequential =
    // 1 }` checkpoints nothing, and warms up as the plain step it is.
    t.techniques.checkpoint = match config.training.techniques.checkpoint.segments(config.model.units()) {
        Some(_) => Checkpoint::Every(1),
        None => Checkpoint::None,
    };
    // One process warms up its own kernels: the ranks of a distributed trial are processes of
    // their own, each warmed as it starts.
    c.parallel = crate::spec::Parallel::default();
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Amp, DataLocation, Dtype, OptimizerSpec, Techniques, TrainingSpec};

    fn config(amp: Amp, checkpoint: Checkpoint) -> Config {
        Config {
            model: ModelSpec::mlp(64, 5),
            data: DataSpec::Synthetic { samples: 256, features: 16, classes: 3, seed: 1 },
            location: DataLocation::Host,
            parallel: Default::default(),
            training: TrainingSpec {
                optimizer: OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 },
                batch_size: 64,
                steps: 3,
                dtype: Dtype::Float32,
                seed: 0,
                techniques: Techniques { amp, checkpoint, accumulation: 3, ..Techniques::default() },
            },
        }
    }

    #[test]
    fn tiny_keeps_the_techniques_and_shrinks_the_sizes() {
        let _alone = crate::probe::cpu_alone();
        let c = config(Amp::Bf16, Checkpoint::Sqrt);
        let t = tiny(&c);
        assert_eq!(t.model, ModelSpec::mlp(8, 2));
        assert_eq!(t.training.techniques.amp, Amp::Bf16);
        assert_eq!(t.training.techniques.checkpoint, Checkpoint::Every(1));
        assert_eq!(t.training.techniques.accumulation, 2);
        assert_eq!((t.training.batch_size, t.training.optimizer), (4, c.training.optimizer));
    }

    /// checkpoint_sequential's cut needs as many units as segments, which the tiny model may
    /// lack: it warms up a recompute as any checkpointed step, and one segment (no
    /// checkpointing) as the plain step.
    #[test]
    fn tiny_warms_a_sequential_cut_up_as_what_it_runs() {
        let _alone = crate::probe::cpu_alone();
        let t = tiny(&config(Amp::Off, Checkpoint::Sequential(5)));
        assert_eq!(t.training.techniques.checkpoint, Checkpoint::Every(1));
        let t = tiny(&config(Amp::Off, Checkpoint::Sequential(1)));
        assert_eq!(t.training.techniques.checkpoint, Checkpoint::None);
    }
}
