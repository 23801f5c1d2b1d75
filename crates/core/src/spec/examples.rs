//! Small specs, typed, for tests across the layers: what a test of the estimate, of training or
//! of advice builds on, written once here (the ground floor) so that every layer's tests can.
use super::{Config, DataLocation, DataSpec, Dtype, ModelSpec, OptimizerSpec, Techniques, TrainingSpec};

/// An MLP of `depth` hidden layers of `hidden` on 32 synthetic samples of 32 features and 4
/// classes, two steps of `batch` in float32 with `optimizer`, no technique.
pub fn mlp(depth: usize, hidden: usize, batch: usize, optimizer: OptimizerSpec) -> Config {
    Config {
        model: ModelSpec::mlp(hidden, depth),
        data: DataSpec::Synthetic { samples: 32, features: 32, classes: 4, seed: 0 },
        location: DataLocation::Host,
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer,
            batch_size: batch,
            steps: 2,
            dtype: Dtype::Float32,
            seed: 0,
            techniques: Techniques::default(),
        },
    }
}
