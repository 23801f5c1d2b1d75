//! Tests of validation as a user meets it: spec text in, a typed spec or one error line out,
//! compared in full where the wording matters. The helpers here edit one small valid spec.
use std::path::{Path, PathBuf};

use super::{parse, SpecError};
use crate::device::DeviceChoice;
use crate::spec::{
    Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, Field, History, Mode, ModelSpec, OnOom,
    OptimizerImpl, OptimizerSpec, RunSpec, ScalerSpec, Spec, Sweep, SweepMode, Techniques, TrainingSpec,
    Variant,
};

mod checks;
mod limits;
mod parallel;
mod sweeps;
mod tables;
mod techniques;
mod variants;

const FILE: &str = "experiments/x.toml";

/// The smallest valid spec. Lines: 1 [experiment], 2 name, 4 [model], 5 hidden, 6 depth,
/// 8 [data], 9 samples, 10 features, 11 classes, 13 [training], 14 optimizer, 15 batch_size.
const MINIMAL: &str = r#"[experiment]
name = "x"

[model]
hidden = 64
depth = 2

[data]
samples = 128
features = 4
classes = 3

[training]
optimizer = "adam"
batch_size = 32
"#;

fn parse_at(text: &str) -> Result<Spec, SpecError> {
    parse(text, Path::new(FILE))
}

/// The error for `text`, failing the test if it parses.
fn err(text: &str) -> String {
    match parse_at(text) {
        Ok(spec) => panic!("expected an error, got {spec:?}"),
        Err(e) => e.0,
    }
}

/// MINIMAL with `from` replaced by `to` (which must be there).
fn edit(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from:?} not in MINIMAL");
    MINIMAL.replacen(from, to, 1)
}

/// MINIMAL's config, to compare variants with.
fn minimal_config() -> Config {
    Config {
        model: ModelSpec::mlp(64, 2),
        data: DataSpec::Synthetic { samples: 128, features: 4, classes: 3, seed: 0 },
        location: DataLocation::Host,
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer: OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 },
            batch_size: 32,
            steps: 2,
            dtype: Dtype::Float32,
            seed: 0,
            techniques: Techniques {
                accumulation: 1,
                amp: Amp::Off,
                checkpoint: Checkpoint::None,
                mode: Mode::Train,
                history: History::None,
                optimizer_impl: None,
            },
        },
    }
}

#[test]
fn full_spec_round_trips_to_typed_values() {
    let text = r#"[experiment]
name = "depth_sweep"
description = "activation memory against depth"

[model]
hidden = 5000
depth = 1

[data]
kind = "synthetic"
samples = 1024
features = 20
classes = 10
seed = 7

[training]
optimizer = "sgd"
lr = 0.01
momentum = 0.9
weight_decay = 0.0001
batch_size = 32
steps = 3
dtype = "bfloat16"
seed = 5

[run]
device = "cuda:1"
budget = "15.90GiB"
on_oom = "stop"

[sweep]
field = "model.depth"
values = [1, 2, 4]
"#;
    let spec = parse_at(text).unwrap();
    assert_eq!(spec.path, PathBuf::from(FILE));
    assert_eq!(spec.source, text);
    assert_eq!(spec.name, "depth_sweep");
    assert_eq!(spec.description, "activation memory against depth");
    let expected = Config {
        model: ModelSpec::mlp(5000, 1),
        data: DataSpec::Synthetic { samples: 1024, features: 20, classes: 10, seed: 7 },
        location: DataLocation::Host,
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer: OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0001 },
            batch_size: 32,
            steps: 3,
            dtype: Dtype::Bfloat16,
            seed: 5,
            techniques: Techniques::default(),
        },
    };
    assert_eq!(spec.base, expected);
    assert_eq!(
        spec.run,
        RunSpec {
            device: DeviceChoice::Cuda(1),
            budget: Some((15.90 * (1u64 << 30) as f64).round() as u64),
            cuda_budget: Some((15.90 * (1u64 << 30) as f64).round() as u64),
            on_oom: OnOom::Stop,
            skip_predicted_oom: None,
            rounds: 1,
        }
    );
    assert_eq!(spec.sweep, Some(Sweep { field: Field::Depth, mode: SweepMode::List(vec![1.0, 2.0, 4.0]) }));
}

#[test]
fn optional_keys_take_their_defaults() {
    let spec = parse_at(MINIMAL).unwrap();
    assert_eq!(spec.description, "");
    assert_eq!(spec.base.training.optimizer, OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 });
    assert_eq!(spec.base.training.steps, 2);
    assert_eq!(spec.base.training.dtype, Dtype::Float32);
    assert_eq!(spec.base.training.seed, 0);
    assert_eq!(spec.base.data, DataSpec::Synthetic { samples: 128, features: 4, classes: 3, seed: 0 });
    assert_eq!(
        spec.run,
        RunSpec {
            device: DeviceChoice::Auto,
            budget: None,
            cuda_budget: None,
            on_oom: OnOom::Continue,
            skip_predicted_oom: None,
            rounds: 1,
        }
    );
    assert_eq!(spec.sweep, None);
}

#[test]
fn odd_input_gives_errors_not_panics() {
    for text in [
        "",
        "[",
        "]",
        "=",
        "\"",
        "[model",
        "[[model]]\n[[model]]",
        "model = 3",
        "x = 1",
        "[sweep]\nvalues = [[1], {a = 1}]",
        "[sweep]\nsearch = { start = { x = 1 } }",
        "[experiment]\nname = \"é\"",
        "\u{0}",
        "é = 1",
        "[é]",
        "[model]\nhidden = 9223372036854775808",
        "[run]\nbudget = 1.5",
        "[run]\nbudget = \"\u{1F600}\"",
        "a.b.c.d = 1",
        "[\"model\"]\nwidht = 1",
    ] {
        let _ = parse_at(text).unwrap_err();
    }
}

#[test]
fn load_names_an_unreadable_file() {
    let e = crate::spec::load(Path::new("/nonexistent/spec.toml")).unwrap_err().0;
    assert!(e.starts_with("/nonexistent/spec.toml: cannot read the spec: "), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.toml");
    std::fs::write(&path, MINIMAL).unwrap();
    assert_eq!(crate::spec::load(&path).unwrap().path, path);
}
