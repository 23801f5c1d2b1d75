//! Checkpointing inside a module of the user's own: with `model.units = "children"`, a
//! TorchScript module whose forward runs its top-level children in turn (a scripted
//! `nn.Sequential`) is cut between them, as `checkpoint_sequential` cuts a Sequential. Exported by
//! PyTorch (Python) into the sandbox and held:
//! - to the same module trained whole: the same loss (the recompute is the same math), less
//!   kept after the forward;
//! - to PyTorch (`scripts/reference/train.py`, `torch.utils.checkpoint` over the same children):
//!   the same final loss;
//! - to the recorded estimate, to the byte;
//! - and what a module that is not such a chain gets: the run refuses it, naming the file.
//!
//! Without python3 and a torch it can import, this test fails and says so.
use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};
use oomlab::schema::Phase;

use crate::common;
use common::Sandbox;

/// `deep.pt`: nn.Sequential of 25 children (13 Linears of width 64, a ReLU after each but the
/// last) over 8 features, 4 classes.
/// `flat.pt`: a conv then a Linear, with a flatten between them in its forward: not a chain.
/// `dropout.pt`: a 7-child chain with two dropouts, which a recompute must draw alike.
const EXPORT: &str = r#"
import sys, torch, torch.nn as nn
out = sys.argv[1]

class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).flatten(1))

torch.manual_seed(0)
layers = [nn.Linear(8, 64), nn.ReLU()]
for _ in range(11):
    layers += [nn.Linear(64, 64), nn.ReLU()]
deep = nn.Sequential(*layers, nn.Linear(64, 4))
torch.jit.save(torch.jit.script(deep), f"{out}/deep.pt")
torch.jit.save(torch.jit.script(Flat()), f"{out}/flat.pt")
drop = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.5),
                     nn.Linear(64, 4))
torch.jit.save(torch.jit.script(drop), f"{out}/dropout.pt")
"#;

fn spec() -> String {
    let mut s = String::from(
        "[experiment]\nname = \"children\"\n[model]\nkind = \"torchscript\"\npath = \"deep.pt\"\n[data]\nsamples = 64\n\
         features = 8\nclasses = 4\n[training]\noptimizer = \"adam\"\nbatch_size = 16\nsteps = 2\n[run]\n\
         device = \"cpu\"\n",
    );
    for (name, variant) in [
        ("whole", ""),
        ("every1", "model = { units = \"children\" }\ntraining = { checkpoint = 1 }"),
        ("sqrt", "model = { units = \"children\" }\ntraining = { checkpoint = \"sqrt\" }"),
        ("sequential3", "model = { units = \"children\" }\ntraining = { checkpoint = { sequential = 3 } }"),
        ("dropout_whole", "model = { path = \"dropout.pt\" }"),
        (
            "dropout_sqrt",
            "model = { path = \"dropout.pt\", units = \"children\" }\ntraining = { checkpoint = \"sqrt\" }",
        ),
    ] {
        s += &format!("[[variant]]\nname = \"{name}\"\n{variant}\n");
    }
    s
}

#[test]
fn a_chain_of_children_is_checkpointed_between_them_to_the_same_loss_and_estimated_to_the_byte() {
    let sb = Sandbox::new();
    sb.copy_from(
        common::exported("torchscript_children EXPORT", EXPORT),
        &["deep.pt", "flat.pt", "dropout.pt"],
    );
    let spec = oomlab::spec::load(&sb.spec("children.toml", &spec())).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    let row = |v: &str| ours.rows.iter().find(|r| r.variant == v).unwrap();
    for r in &ours.rows {
        assert!(r.status.fitted(), "{}: {:?} {}", r.variant, r.status, r.message);
    }
    // What the forward leaves for backward, over the batch: the whole module keeps each Linear's
    // input; cut into about sqrt(25) segments, or S = 3 (the last third plain), only the
    // segments' inputs. (Cut after every child it keeps each child's input, a ReLU's too,
    // which the whole module shares with the next Linear: more, as checkpoint_sequential
    // over so many segments would.)
    let kept = |v: &str| {
        let r = row(v);
        let forward = ours
            .trace
            .iter()
            .find(|t| t.trial == r.trial && t.step == 2 && t.phase == Phase::Forward)
            .unwrap();
        let to_device = ours
            .trace
            .iter()
            .find(|t| t.trial == r.trial && t.step == 2 && t.phase == Phase::ToDevice)
            .unwrap();
        forward.memory_allocated - to_device.memory_allocated
    };
    let whole = row("whole").final_loss.unwrap();
    for v in ["every1", "sqrt", "sequential3"] {
        let loss = row(v).final_loss.unwrap();
        assert!(
            (loss - whole).abs() <= 1e-6 * whole.abs(),
            "{v}: loss {loss} against the whole module's {whole}"
        );
    }
    // A module oomlab cannot read draws alike in its recompute (the generator's state kept per
    // segment, as torch.utils.checkpoint does by default): the same masks, the same loss.
    let (whole, cut) = (row("dropout_whole").final_loss.unwrap(), row("dropout_sqrt").final_loss.unwrap());
    assert!((cut - whole).abs() <= 1e-6 * whole.abs(), "dropout: checkpointed {cut}, whole {whole}");
    for v in ["sqrt", "sequential3"] {
        assert!(
            kept(v) < kept("whole"),
            "{v}: kept {} after forward, the whole module {}",
            kept(v),
            kept("whole")
        );
    }
    assert!(
        kept("every1") > kept("whole"),
        "every child's input: {} against {}",
        kept("every1"),
        kept("whole")
    );

    // PyTorch, torch.utils.checkpoint over the same children: the same loss.
    let (py_summary, _) =
        common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &sb.path().join("pytorch.csv"));
    for mine in &ours.rows {
        let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
        assert_eq!(py.status, "ok", "{}: PyTorch trained it", mine.variant);
        let (a, b) = (mine.final_loss.unwrap(), py.final_loss);
        assert!((a - b).abs() <= 1e-6 * b.abs(), "{}: oomlab {a}, PyTorch {b}", mine.variant);
    }

    // The recorded estimate of the checkpointed step, inside and past the recorded batches.
    let variants: Vec<_> = spec.variants.iter().filter(|v| !v.name.ends_with("whole")).cloned().collect();
    let _in_process = common::in_process();
    let failures = common::estimate_failures(&variants, &[5, 40]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_module_that_is_not_a_chain_of_its_children_or_a_segment_past_them_is_refused() {
    let sb = Sandbox::new();
    sb.copy_from(
        common::exported("torchscript_children EXPORT", EXPORT),
        &["deep.pt", "flat.pt", "dropout.pt"],
    );
    for (model, data, training, says) in [
        (
            "flat.pt",
            "kind = \"images\"\nsamples = 8\nchannels = 3\nsize = 4\nclasses = 4",
            "checkpoint = 1",
            "its forward is not its children run in turn (model.units = \"children\"): child 1 (fc) fails on [2, 4, 4, 4]",
        ),
        (
            "deep.pt",
            "samples = 8\nfeatures = 8\nclasses = 4",
            "checkpoint = 30",
            "training.checkpoint = 30 must be at most its 25 children",
        ),
    ] {
        let text = format!(
            "[experiment]\nname = \"bad\"\n[model]\nkind = \"torchscript\"\npath = \"{model}\"\nunits = \"children\"\n\
             [data]\n{data}\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n{training}\n[run]\n\
             device = \"cpu\"\n"
        );
        let spec = sb.spec("bad.toml", &text);
        common::refused_naming(&spec, &sb.out(), says, model);
        // The estimate checks it too before recording a step of it.
        let out = std::process::Command::new(common::bin())
            .args(["estimate", "--device", "cpu"])
            .arg(&spec)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "estimate of {model}: {err}");
    }
}
