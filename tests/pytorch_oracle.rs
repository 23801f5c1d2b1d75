//! PyTorch itself as the oracle: each optimizer in each implementation, trained a few steps by
//! oomlab (through libtorch from Rust) and by `scripts/reference/params.py` (Python's
//! `torch.optim`, the PyTorch 2.11 wheel that `scripts/setup-libtorch` installs), must end with
//! the same parameters. Also with the fp16 grad scaler, accumulation and checkpointing, where the
//! fused step unscales in its own kernel.
//!
//! The bound is 1e-9 relative, not the 1e-6 the issue asked for: on the CPU PyTorch's fused
//! Adam and its for-loop one already differ by about 1e-7, so 1e-6 could not tell a step run in
//! the wrong implementation from the right one. Both sides run the same wheel's kernels on one
//! thread, and agree to the bit so far.
//!
//! Without python3, or a torch it can import, these tests fail and say so: they do not skip.
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use oomlab::probe::CpuProbe;
use oomlab::spec::{
    Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, ModelSpec, Named, OptimizerImpl, OptimizerSpec,
    ScalerSpec, Techniques, TrainingSpec,
};
use oomlab::train;

mod common;
use common::torch_site;

const IMPLS: [OptimizerImpl; 3] = [OptimizerImpl::ForLoop, OptimizerImpl::Foreach, OptimizerImpl::Fused];

fn optimizers() -> [(&'static str, OptimizerSpec); 5] {
    [
        ("sgd", OptimizerSpec::Sgd { lr: 0.05, momentum: 0.0, weight_decay: 0.0 }),
        ("sgd momentum + wd", OptimizerSpec::Sgd { lr: 0.05, momentum: 0.9, weight_decay: 1e-3 }),
        ("adam", OptimizerSpec::Adam { lr: 1e-2, weight_decay: 0.0 }),
        ("adam + wd", OptimizerSpec::Adam { lr: 1e-2, weight_decay: 1e-2 }),
        ("adamw", OptimizerSpec::AdamW { lr: 1e-2, weight_decay: 1e-2 }),
    ]
}

fn config(optimizer: OptimizerSpec, implementation: OptimizerImpl, techniques: Techniques) -> Config {
    Config {
        model: ModelSpec { hidden: 24, depth: 3 },
        data: DataSpec::Synthetic { samples: 96, features: 10, classes: 4, seed: 7 },
        location: DataLocation::Host,
        training: TrainingSpec {
            optimizer,
            batch_size: 16,
            steps: 4,
            dtype: Dtype::Float32,
            seed: 3,
            techniques: Techniques { optimizer_impl: Some(implementation), ..techniques },
        },
    }
}

/// PyTorch's parameters for `config`, flattened in the model's order.
fn pytorch(config: &Config) -> Vec<f64> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spawned = Command::new("python3")
        .arg(root.join("scripts/reference/params.py"))
        .env("PYTHONPATH", torch_site())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => panic!("python3 is needed for PyTorch's side of this test and could not start: {e}"),
    };
    let json = serde_json::to_vec(config).unwrap();
    child.stdin.take().unwrap().write_all(&json).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "scripts/reference/params.py failed (is torch importable from the setup-libtorch folder?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
}

/// oomlab's parameters for `config`, flattened the same way.
fn oomlab(config: &Config) -> Vec<f64> {
    let probe = CpuProbe::new(None).unwrap();
    let params = train::trained_parameters(config, &probe).unwrap();
    let mut flat = vec![];
    for p in params {
        let p = p.to_kind(tch::Kind::Double).reshape([-1]);
        flat.extend(Vec::<f64>::try_from(&p).unwrap());
    }
    flat
}

/// The largest difference over the largest magnitude.
fn relative_difference(ours: &[f64], theirs: &[f64]) -> f64 {
    assert_eq!(ours.len(), theirs.len(), "parameter counts differ");
    let scale = theirs.iter().fold(0f64, |m, x| m.max(x.abs()));
    let diff = ours.iter().zip(theirs).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

fn check(what: &str, config: &Config) {
    // One intra-op thread on both sides, so split sums add up in the same order.
    tch::set_num_threads(1);
    let initial = {
        let mut c = config.clone();
        c.training.steps = 0;
        oomlab(&c)
    };
    let (ours, theirs) = (oomlab(config), pytorch(config));
    let moved = relative_difference(&initial, &theirs);
    assert!(
        moved > 1e-4,
        "{what}: PyTorch's parameters hardly moved ({moved:e}); the test would prove nothing"
    );
    let rel = relative_difference(&ours, &theirs);
    eprintln!("{what}: moved {moved:.2e}, differs {rel:.2e}");
    assert!(rel <= 1e-9, "{what}: oomlab's parameters differ from PyTorch's by {rel:e} (relative)");
}

#[test]
fn every_optimizer_in_every_implementation_equals_pytorch() {
    for (name, optimizer) in optimizers() {
        for implementation in IMPLS {
            let c = config(optimizer, implementation, Techniques::default());
            check(&format!("{name}, {}", implementation.as_str()), &c);
        }
    }
}

#[test]
fn with_the_fp16_grad_scaler_accumulation_and_checkpointing_too() {
    let fp16 = Amp::Fp16 { scaler: ScalerSpec { init_scale: 1024.0, ..ScalerSpec::default() } };
    let techniques = [
        ("fp16 + scaler", Techniques { amp: fp16, ..Techniques::default() }),
        ("accumulation 3", Techniques { accumulation: 3, ..Techniques::default() }),
        ("checkpoint every 2", Techniques { checkpoint: Checkpoint::Every(2), ..Techniques::default() }),
    ];
    let adam = OptimizerSpec::Adam { lr: 1e-2, weight_decay: 1e-2 };
    let momentum = OptimizerSpec::Sgd { lr: 0.05, momentum: 0.9, weight_decay: 0.0 };
    for (what, t) in techniques {
        for (name, optimizer) in [("adam", adam), ("sgd momentum", momentum)] {
            for implementation in IMPLS {
                let c = config(optimizer, implementation, t);
                check(&format!("{what}, {name}, {}", implementation.as_str()), &c);
            }
        }
    }
}
