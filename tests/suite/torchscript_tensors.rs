//! A module of the user's own that takes more than one batch tensor, or is not a classifier of
//! one label a sample: `data.kind = "tensors"` (named inputs of their own shapes and dtypes) with
//! `model.loss = "mse"` or cross_entropy over the output's last dimension. Exported by PyTorch
//! (Python) into the sandbox, trained by oomlab, and held:
//! - to plain PyTorch (`scripts/reference/train.py --cpu-memory`, `torch.jit.load` of the same
//!   file, the same data from the same seed): the same bytes over each trial's baseline, phase by
//!   phase, and the same final loss;
//! - to the recorded estimate, to the byte, at batches past the recorded ones;
//! - and what a module whose output does not fit the loss gets: the file, the shapes, the fix.
//!
//! Without python3 and a torch it can import, this test fails and says so.
use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common;
use common::{phases, Sandbox};

/// `mixed.pt`: forward(x [B, 6] float, ids [B, 5] int64, mask [B, 5] bool) -> [B, 3], values
/// (a regression head over features and a masked mean of token embeddings). `per_token.pt`:
/// forward(ids [B, 7]) -> [B, 7, 4], a class per token. `two_outputs.pt`: as mixed, [B, 2].
const EXPORT: &str = r#"
import sys, torch, torch.nn as nn
out = sys.argv[1]

class Mixed(nn.Module):
    def __init__(self, outputs: int):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.features = nn.Linear(6, 8)
        self.head = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, outputs))

    def forward(self, x: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        tokens = (self.embed(ids) * mask.unsqueeze(-1).to(x.dtype)).mean(1)
        return self.head(torch.cat([self.features(x), tokens], 1))

class PerToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(ids))

torch.manual_seed(0)
torch.jit.save(torch.jit.script(Mixed(3)), f"{out}/mixed.pt")
torch.jit.save(torch.jit.script(PerToken()), f"{out}/per_token.pt")
torch.jit.save(torch.jit.script(Mixed(2)), f"{out}/two_outputs.pt")
"#;

const MIXED: &str = r#"model = { kind = "torchscript", path = "mixed.pt", loss = "mse" }
data = { kind = "tensors", samples = 64, seed = 3, target = [3], inputs = [{ name = "x", shape = [6] }, { name = "ids", shape = [5], dtype = "int64", high = 50 }, { name = "mask", shape = [5], dtype = "bool" }] }"#;
const PER_TOKEN: &str = r#"model = { kind = "torchscript", path = "per_token.pt", loss = "cross_entropy" }
data = { kind = "tensors", samples = 64, classes = 4, target = [7], inputs = [{ name = "ids", shape = [7], dtype = "int64", high = 30 }] }"#;

fn spec() -> String {
    // A variant's keys are laid over the base's: the per-token ones set their loss and classes.
    let base = format!(
        "{MIXED}\n[experiment]\nname = \"tensors\"\n[training]\noptimizer = \"adam\"\nbatch_size = 4\nsteps = 2\n\
         [run]\ndevice = \"cpu\"\n"
    );
    let variants = [
        ("mixed_mse", MIXED, ""),
        (
            "mixed_mse_acc_momentum",
            MIXED,
            "training = { optimizer = \"sgd\", momentum = 0.9, accumulation = 2 }",
        ),
        ("per_token", PER_TOKEN, ""),
        ("per_token_host_history", PER_TOKEN, "training = { history = \"loss_tensor\" }"),
    ];
    let mut s = base;
    for (name, model_data, training) in variants {
        s += &format!("[[variant]]\nname = \"{name}\"\n{model_data}\n{training}\n");
    }
    s
}

#[test]
fn a_module_of_several_inputs_or_a_per_token_loss_trains_as_pytorch_does_and_is_estimated_to_the_byte() {
    let sb = Sandbox::new();
    sb.copy_from(
        common::exported("torchscript_tensors EXPORT", EXPORT),
        &["mixed.pt", "per_token.pt", "two_outputs.pt"],
    );
    let spec = oomlab::spec::load(&sb.spec("tensors.toml", &spec())).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    assert_eq!(ours.rows.len(), 4);
    for r in &ours.rows {
        assert!(r.status.fitted(), "{}: {:?} {}", r.variant, r.status, r.message);
        assert!(r.final_loss.is_some_and(f64::is_finite), "{}: a finite loss", r.variant);
    }

    // Against PyTorch, loading the same files and making the same data.
    let (py_summary, py_trace) =
        common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &sb.path().join("pytorch.csv"));
    for mine in &ours.rows {
        let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
        assert_eq!(py.status, "ok", "{}: PyTorch trained it", mine.variant);
        assert_eq!(
            phases(&ours.trace, mine.trial, mine.baseline_allocated),
            phases(&py_trace, py.trial, py.baseline_allocated),
            "{}: oomlab and PyTorch, phase by phase (allocated, peak) over the baseline",
            mine.variant
        );
        assert_eq!(mine.final_loss, Some(py.final_loss), "{}: final loss", mine.variant);
    }

    // The recorded estimate, at batches inside and past the recorded ones.
    let variants = spec.variants.clone();
    let _in_process = common::in_process();
    let failures = common::estimate_failures(&variants, &[5, 48]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_output_the_loss_cannot_read_or_a_wrong_input_count_is_refused_naming_the_file() {
    let sb = Sandbox::new();
    sb.copy_from(
        common::exported("torchscript_tensors EXPORT", EXPORT),
        &["mixed.pt", "per_token.pt", "two_outputs.pt"],
    );
    let mixed_data = MIXED.lines().nth(1).unwrap();
    for (model, data, says) in [
        // Two outputs where the target has three.
        (
            r#"model = { kind = "torchscript", path = "two_outputs.pt", loss = "mse" }"#,
            mixed_data,
            "the module's output is [2, 2]; mse needs the target's shape [2, 3]",
        ),
        // Three inputs where the data gives one.
        (
            r#"model = { kind = "torchscript", path = "mixed.pt", loss = "mse" }"#,
            r#"data = { kind = "tensors", samples = 8, target = [3], inputs = [{ shape = [6] }] }"#,
            "its forward on two rows of the data (tensors data, 1 input) failed",
        ),
        // Per-token logits against one label a sample.
        (
            r#"model = { kind = "torchscript", path = "per_token.pt" }"#,
            r#"data = { kind = "tensors", samples = 8, classes = 4, inputs = [{ shape = [7], dtype = "int64", high = 30 }] }"#,
            "the module's output is [2, 7, 4]; cross_entropy against the target [2] needs [2, 4]",
        ),
    ] {
        let text = format!(
            "{model}\n{data}\n[experiment]\nname = \"bad\"\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n\
             [run]\ndevice = \"cpu\"\n"
        );
        let file = model.split("path = \"").nth(1).and_then(|p| p.split('"').next()).unwrap();
        common::refused_naming(&sb.spec("bad.toml", &text), &sb.out(), says, file);
    }
}
