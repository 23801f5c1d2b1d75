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
//! Every model kind too (an MLP of given widths, plain CNNs with standard and depthwise-separable
//! convolutions, torchvision's ResNet-18, post- and pre-norm Transformer encoders with and
//! without dropout), under checkpointing (dropout drawn again alike in the recompute; PyTorch's
//! own `checkpoint_sequential` for `{ sequential = S }`), accumulation and mixed precision:
//! `scripts/reference/train.py` builds them as torch.nn and torchvision do, so equal parameters
//! mean the same initialisation, the same forward and backward, and the same update.
//!
//! Each test runs PyTorch's side of all its configs in one Python process, started first, so that
//! it trains while oomlab's side does (here, under the suite's lock for libtorch work in this
//! process).
//!
//! Without python3, or a torch it can import, these tests fail and say so: they do not skip.
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use oomlab::probe::CpuProbe;
use oomlab::spec::{
    Amp, Checkpoint, CnnSpec, Config, ConvKind, DataLocation, DataSpec, Dtype, MlpSpec, ModelSpec, Named,
    OptimizerImpl, OptimizerSpec, ResNet, ScalerSpec, Techniques, TrainingSpec, TransformerSpec,
};
use oomlab::train;

use crate::common::{self, torch_site};

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
        model: ModelSpec::mlp(24, 3),
        data: DataSpec::Synthetic { samples: 96, features: 10, classes: 4, seed: 7 },
        location: DataLocation::Host,
        parallel: Default::default(),
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

/// `params.py`'s `main()` on each config of a JSON list on stdin, in one Python process
/// (importing torch takes seconds, training these models less): each config's parameters are
/// written as params.py writes them, after their length in bytes (8 bytes, little-endian).
/// params.py's `_bytes` (a list of every byte, slow for ResNet-18's 11 M parameters) is
/// replaced by a copy of the same float64 memory.
const DRIVER: &str = r#"
import ctypes, io, json, struct, sys, types
sys.path.insert(0, sys.argv[1])
import params

def _bytes(flat):
    flat = flat.contiguous()
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())

params._bytes = _bytes
out = sys.stdout.buffer
for i, cfg in enumerate(json.load(sys.stdin)):
    print(f"config {i}:", file=sys.stderr, flush=True)
    mine = types.SimpleNamespace(buffer=io.BytesIO())
    sys.argv, sys.stdin, sys.stdout = ["params.py"], io.StringIO(json.dumps(cfg)), mine
    params.main()
    data = mine.buffer.getvalue()
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()
"#;

/// PyTorch's side of a test: `scripts/reference/params.py` on every config, in one Python process
/// started before oomlab trains, so that the two train at once; read back config by config.
struct Pytorch {
    child: Child,
    stdout: BufReader<ChildStdout>,
    stderr: tempfile::NamedTempFile,
}

impl Pytorch {
    fn start<'a>(configs: impl IntoIterator<Item = &'a Config>) -> Pytorch {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let spawned = Command::new("python3")
            .args(["-c", DRIVER])
            .arg(root.join("scripts/reference"))
            .env("PYTHONPATH", torch_site())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().unwrap())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => panic!("python3 is needed for PyTorch's side of this test and could not start: {e}"),
        };
        let json = serde_json::to_vec(&configs.into_iter().collect::<Vec<_>>()).unwrap();
        child.stdin.take().unwrap().write_all(&json).unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Pytorch { child, stdout, stderr }
    }

    /// PyTorch's parameters for the next config, flattened in the model's order.
    fn next(&mut self, what: &str) -> Vec<f64> {
        let mut len = [0u8; 8];
        if self.stdout.read_exact(&mut len).is_err() {
            let _ = self.child.wait();
            panic!(
                "{what}: scripts/reference/params.py failed (is torch importable from the setup-libtorch \
                 folder?):\n{}",
                std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
            );
        }
        let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
        self.stdout.read_exact(&mut bytes).unwrap();
        bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
    }
}

impl Drop for Pytorch {
    fn drop(&mut self) {
        // A test that failed early leaves no Python behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// oomlab's parameters for `config`, flattened the same way. The caller holds the in-process
/// lock.
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

/// Each config trained by oomlab and by PyTorch must end with the same parameters.
fn check(cases: &[(String, Config)]) {
    let mut pytorch = Pytorch::start(cases.iter().map(|(_, c)| c));
    for (what, config) in cases {
        let (initial, ours) = {
            let _in_process = common::in_process();
            // One intra-op thread on both sides, so split sums add up in the same order (the
            // lock sets the count back).
            tch::set_num_threads(1);
            let mut c = config.clone();
            c.training.steps = 0;
            (oomlab(&c), oomlab(config))
        };
        let theirs = pytorch.next(what);
        let moved = relative_difference(&initial, &theirs);
        assert!(
            moved > 1e-4,
            "{what}: PyTorch's parameters hardly moved ({moved:e}); the test would prove nothing"
        );
        let rel = relative_difference(&ours, &theirs);
        eprintln!("{what}: moved {moved:.2e}, differs {rel:.2e}");
        assert!(rel <= 1e-9, "{what}: oomlab's parameters differ from PyTorch's by {rel:e} (relative)");
    }
}

#[test]
fn every_optimizer_in_every_implementation_equals_pytorch() {
    let mut cases = vec![];
    for (name, optimizer) in optimizers() {
        for implementation in IMPLS {
            let c = config(optimizer, implementation, Techniques::default());
            cases.push((format!("{name}, {}", implementation.as_str()), c));
        }
    }
    check(&cases);
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
    let mut cases = vec![];
    for (what, t) in techniques {
        for (name, optimizer) in [("adam", adam), ("sgd momentum", momentum)] {
            for implementation in IMPLS {
                let c = config(optimizer, implementation, t);
                cases.push((format!("{what}, {name}, {}", implementation.as_str()), c));
            }
        }
    }
    check(&cases);
}

/// The model kinds beyond the lesson's MLP, each on data of its kind, small enough for the CPU.
fn kinds() -> Vec<(&'static str, ModelSpec, DataSpec)> {
    let images = |channels| DataSpec::Images { samples: 24, channels, size: 32, classes: 5, seed: 4 };
    let plain = |conv| ModelSpec::Cnn(CnnSpec::Plain { channels: 8, depth: 2, conv, kernel: 3 });
    let encoder = |dropout, norm_first| {
        ModelSpec::Transformer(TransformerSpec {
            d_model: 16,
            nhead: 2,
            num_layers: 2,
            dim_feedforward: 32,
            dropout,
            norm_first,
        })
    };
    let tokens = DataSpec::Tokens { samples: 48, seq_len: 6, vocab: 50, classes: 3, seed: 4 };
    let features = DataSpec::Synthetic { samples: 96, features: 10, classes: 4, seed: 7 };
    vec![
        ("mlp widths 12-7", ModelSpec::Mlp(MlpSpec::Widths { widths: vec![12, 7] }), features),
        ("cnn standard", plain(ConvKind::Standard), images(3)),
        ("cnn depthwise separable", plain(ConvKind::DepthwiseSeparable), images(2)),
        ("resnet18", ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18)), images(3)),
        ("transformer post-norm, dropout", encoder(0.1, false), tokens.clone()),
        ("transformer pre-norm, no dropout", encoder(0.0, true), tokens),
    ]
}

#[test]
fn every_model_kind_trains_as_pytorch_trains_it() {
    let adam = OptimizerSpec::Adam { lr: 1e-2, weight_decay: 1e-2 };
    let fp16 = Amp::Fp16 { scaler: ScalerSpec { init_scale: 1024.0, ..ScalerSpec::default() } };
    let techniques = [
        ("plain", Techniques::default()),
        ("checkpoint every 1", Techniques { checkpoint: Checkpoint::Every(1), ..Techniques::default() }),
        ("checkpoint sqrt", Techniques { checkpoint: Checkpoint::Sqrt, ..Techniques::default() }),
        ("accumulation 2", Techniques { accumulation: 2, ..Techniques::default() }),
        ("bf16", Techniques { amp: Amp::Bf16, ..Techniques::default() }),
        ("fp16 + scaler", Techniques { amp: fp16, ..Techniques::default() }),
    ];
    let mut cases = vec![];
    for (kind, model, data) in kinds() {
        for (what, t) in techniques {
            let mut c = config(adam, OptimizerImpl::ForLoop, t);
            (c.model, c.data) = (model.clone(), data.clone());
            c.training.batch_size = 4;
            c.training.steps = 3;
            cases.push((format!("{kind}, {what}"), c));
        }
    }
    check(&cases);
}

/// `{ sequential = S }` against the real `torch.utils.checkpoint.checkpoint_sequential(
/// nn.Sequential(*units), S, x, use_reentrant=False)` then the head (`train.py`'s
/// `forward_loss`): the same cut (S - 1 checkpointed segments of units / S, the rest plain, or
/// nothing checkpointed for S = 1) must train to the same parameters, on every kind, the
/// Transformer's dropout drawn again alike in the recompute.
#[test]
fn checkpoint_sequential_trains_as_pytorchs_own() {
    let adam = OptimizerSpec::Adam { lr: 1e-2, weight_decay: 1e-2 };
    let mut cases = vec![];
    for (kind, model, data) in kinds() {
        let mut cuts = vec![1, 2, model.units()];
        cuts.dedup();
        for s in cuts {
            let t = Techniques { checkpoint: Checkpoint::Sequential(s), ..Techniques::default() };
            let mut c = config(adam, OptimizerImpl::ForLoop, t);
            (c.model, c.data) = (model.clone(), data.clone());
            c.training.batch_size = 4;
            c.training.steps = 3;
            cases.push((format!("{kind}, checkpoint {}", t.checkpoint.name()), c));
        }
    }
    check(&cases);
}
