//! A model of the user's own, as TorchScript: torchvision's ResNet-18 scripted, and a copy of
//! oomlab's own MLP scripted and traced, exported by PyTorch (Python) into the sandbox and
//! trained by oomlab (`model.kind = "torchscript"`) beside the built-in kinds they copy.
//!
//! Two oracles hold it:
//! - oomlab's own built-in kind, phase by phase: the module trains through the same step, so
//!   every phase from the model on allocates the built-in's bytes plus what libtorch keeps of the
//!   file (its `.debug_pkl` records, the source ranges it reads into CPU memory and holds), and
//!   nothing else (the model phase's peak also holds the file's other records while it loads);
//! - plain PyTorch (`scripts/reference/train.py --cpu-memory`, `torch.jit.load` of the same
//!   file): the same bytes over each trial's baseline, phase by phase, and the same final loss.
//!
//! Then what a bad file gets: a clear error naming it, and no results folder.
//!
//! Without python3 and a torch (with torchvision) it can import, this test fails and says so.
use std::collections::BTreeMap;
use std::process::Command;

use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common::{self, phases, torch_site, Sandbox};

/// Writes the modules: `mlp_scripted.pt` and `mlp_traced.pt` (oomlab's MLP over 8 features,
/// widths 32 and 16, 4 classes, as `nn.Sequential`), `resnet18.pt` (torchvision's, 4 classes),
/// `no_params.pt`, `wrong_output.pt` (5 logits for 4 classes), `detached.pt`, `integer.pt` (an
/// output cut from the parameters, an integer one), `not_torchscript.pt` and `short_storage.pt`
/// and `empty_storage.pt` (the scripted MLP with its largest tensor's record cut to 16 bytes, and
/// to none), and `zip_bomb.pt` (that record 64 MiB of zeros, deflated). Prints
/// each file's `.debug_pkl` bytes as `name bytes`.
const EXPORT: &str = r#"
import sys, zipfile, torch, torch.nn as nn, torchvision
out = sys.argv[1]
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
torch.jit.save(torch.jit.script(mlp), f"{out}/mlp_scripted.pt")
torch.jit.save(torch.jit.trace(mlp, torch.randn(2, 8)), f"{out}/mlp_traced.pt")
torch.jit.save(torch.jit.script(torchvision.models.resnet18(num_classes=4)), f"{out}/resnet18.pt")
torch.jit.save(torch.jit.script(nn.ReLU()), f"{out}/no_params.pt")
torch.jit.save(torch.jit.script(nn.Linear(8, 5)), f"{out}/wrong_output.pt")
class Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).detach()
class Integer(Detached):
    def forward(self, x):
        return self.fc(x).argmax(1, keepdim=True).expand(-1, 4)
torch.jit.save(torch.jit.trace(Detached(), torch.randn(2, 8)), f"{out}/detached.pt")
torch.jit.save(torch.jit.trace(Integer(), torch.randn(2, 8)), f"{out}/integer.pt")
open(f"{out}/not_torchscript.pt", "w").write("not a zip archive")
# A record cut short: its tensor's shape reaches past the bytes the file holds for it.
src = zipfile.ZipFile(f"{out}/mlp_scripted.pt")
big = max((i for i in src.infolist() if "/data/" in i.filename), key=lambda i: i.file_size).filename
for name, keep in [("short_storage", 16), ("empty_storage", 0)]:
    with zipfile.ZipFile(f"{out}/{name}.pt", "w") as cut:
        for i in src.infolist():
            data = src.read(i.filename)
            cut.writestr(zipfile.ZipInfo(i.filename), data[:keep] if i.filename == big else data)
# A zip bomb: the same module with that record replaced by 64 MiB of zeros, deflated to a few
# dozen kilobytes, which a loader that trusts the archive inflates whole.
with zipfile.ZipFile(f"{out}/zip_bomb.pt", "w") as bomb:
    for i in src.infolist():
        data = bytes(64 << 20) if i.filename == big else src.read(i.filename)
        bomb.writestr(zipfile.ZipInfo(i.filename), data, compress_type=zipfile.ZIP_DEFLATED)
for name in ["mlp_scripted", "mlp_traced", "resnet18"]:
    z = zipfile.ZipFile(f"{out}/{name}.pt")
    print(name, sum(i.file_size for i in z.infolist() if i.filename.endswith(".debug_pkl")))
"#;

const MLP: &str = "model = { widths = [32, 16] }";
const RESNET: &str = r#"model = { kind = "cnn", arch = "resnet18" }
data = { kind = "images", samples = 16, channels = 3, size = 8, classes = 4, seed = 0 }"#;
const IMAGES: &str =
    r#"data = { kind = "images", samples = 16, channels = 3, size = 8, classes = 4, seed = 0 }"#;

/// (variant, its model and data, its training keys, the built-in variant it copies).
const VARIANTS: [(&str, &str, &str, &str); 7] = [
    ("mlp", MLP, "", ""),
    ("mlp_scripted", "model = { kind = \"torchscript\", path = \"mlp_scripted.pt\" }", "", "mlp"),
    ("mlp_traced", "model = { kind = \"torchscript\", path = \"mlp_traced.pt\" }", "", "mlp"),
    ("mlp_acc_bf16", MLP, "accumulation = 2, amp = \"bf16\", optimizer_impl = \"foreach\"", ""),
    (
        "mlp_scripted_acc_bf16",
        "model = { kind = \"torchscript\", path = \"mlp_scripted.pt\" }",
        "accumulation = 2, amp = \"bf16\", optimizer_impl = \"foreach\"",
        "mlp_acc_bf16",
    ),
    ("resnet18", RESNET, "", ""),
    ("resnet18_scripted", "", "", "resnet18"),
];

fn spec() -> String {
    let mut s = String::from(
        "[experiment]\nname = \"torchscript\"\n[model]\nwidths = [32, 16]\n[data]\nsamples = 32\nfeatures = 8\n\
         classes = 4\n[training]\noptimizer = \"adam\"\nbatch_size = 4\nsteps = 2\n[run]\ndevice = \"cpu\"\n",
    );
    for (name, model, training, _) in VARIANTS {
        s += &format!("[[variant]]\nname = \"{name}\"\n");
        let model = if name == "resnet18_scripted" {
            format!("model = {{ kind = \"torchscript\", path = \"resnet18.pt\" }}\n{IMAGES}")
        } else {
            model.to_string()
        };
        if !model.is_empty() {
            s += &format!("{model}\n");
        }
        if !training.is_empty() {
            s += &format!("training = {{ {training} }}\n");
        }
    }
    s
}

/// Exports the modules (once per process, into a shared folder) and puts them into the sandbox;
/// returns each file's `.debug_pkl` bytes.
fn export(sb: &Sandbox) -> BTreeMap<String, i64> {
    let dir = common::shared("torchscript EXPORT", |dir| {
        let out = Command::new("python3")
            .args(["-c", EXPORT])
            .arg(dir)
            .env("PYTHONPATH", torch_site())
            .output()
            .expect("python3 runs (PyTorch exports the modules)");
        assert!(out.status.success(), "export failed:\n{}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(dir.join("debug_pkl.txt"), &out.stdout).unwrap();
    });
    let modules: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".pt"))
        .collect();
    sb.copy_from(dir, &modules.iter().map(String::as_str).collect::<Vec<_>>());
    std::fs::read_to_string(dir.join("debug_pkl.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let (name, bytes) = l.split_once(' ').expect("name bytes");
            (name.to_string(), bytes.parse().expect("bytes"))
        })
        .collect()
}

#[test]
fn a_scripted_module_allocates_what_the_kind_it_copies_does_and_what_pytorch_does() {
    let sb = Sandbox::new();
    let debug = export(&sb);
    let spec = oomlab::spec::load(&sb.spec("torchscript.toml", &spec())).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec, Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    assert_eq!(ours.rows.len(), VARIANTS.len());
    assert!(ours.rows.iter().all(|r| r.status.fitted()), "every trial trained");
    let row = |variant: &str| ours.rows.iter().find(|r| r.variant == variant).unwrap();

    // Against the built-in kind it copies: the same bytes at every phase, plus the file's
    // debug records from the model on.
    for (name, _, _, copies) in VARIANTS.iter().filter(|v| !v.3.is_empty()) {
        let (mine, theirs) = (row(name), row(copies));
        let file = if name.starts_with("resnet18") {
            "resnet18"
        } else if name.contains("traced") {
            "mlp_traced"
        } else {
            "mlp_scripted"
        };
        let kept = debug[file];
        assert!(kept > 0, "{file}.pt has debug records");
        let a = phases(&ours.trace, mine.trial, mine.baseline_allocated);
        let b = phases(&ours.trace, theirs.trial, theirs.baseline_allocated);
        let mut differ = common::parted_from_built_in(&a, &b, kept, 0);
        // Here the built-in's initialisation takes no more than its parameters: the copy's
        // loading peaks the records' bytes over the built-in's peak, at least.
        differ.extend(
            a.iter()
                .filter(|(k, v)| k.2 == "model" && v.1 - b[*k].1 < kept)
                .map(|(k, v)| format!("{k:?}: the model phase peaks {}, the built-in {}", v.1, b[k].1)),
        );
        assert!(
            differ.is_empty(),
            "{name} against {copies} (+{kept} B of debug records):\n{}",
            differ.join("\n")
        );
        assert_eq!(mine.param_count, theirs.param_count, "{name}: the same parameters");
    }

    // Against PyTorch, loading the same files.
    let py_trace = sb.path().join("pytorch.csv");
    let (py_summary, py_trace) = common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &py_trace);
    for (name, ..) in VARIANTS.iter().filter(|v| v.0.contains("scripted") || v.0.contains("traced")) {
        let mine = row(name);
        let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
        assert_eq!(py.status, "ok", "{name}: PyTorch trained it");
        let (a, b) = (
            phases(&ours.trace, mine.trial, mine.baseline_allocated),
            phases(&py_trace, py.trial, py.baseline_allocated),
        );
        assert_eq!(a, b, "{name}: oomlab and PyTorch, phase by phase (allocated, peak) over the baseline");
        assert_eq!(mine.final_loss, Some(py.final_loss), "{name}: final loss");
    }
}

/// A spec of a module file `file` over 8 features and 4 classes, on the CPU.
fn sb_spec(file: &str) -> String {
    format!(
        "[experiment]\nname = \"bad\"\n[model]\nkind = \"torchscript\"\npath = \"{file}\"\n[data]\nsamples = 8\n\
         features = 8\nclasses = 4\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n[run]\ndevice = \"cpu\"\n"
    )
}

#[test]
fn a_bad_module_is_refused_before_anything_is_written() {
    let sb = Sandbox::new();
    export(&sb);
    let bin = common::bin();
    std::fs::create_dir_all(sb.path().join("a_folder.pt")).unwrap();
    for (file, says) in [
        ("not_torchscript.pt", "is not a TorchScript module"),
        ("short_storage.pt", "is damaged: tensor 2.weight"),
        ("empty_storage.pt", "is damaged: tensor 2.weight"),
        ("missing.pt", "no such file"),
        ("a_folder.pt", "is not a regular file"),
        ("no_params.pt", "has no parameters"),
        (
            "wrong_output.pt",
            "the module's output is [2, 5]; cross_entropy against the target [2] needs [2, 4]",
        ),
        ("detached.pt", "its output does not depend on any parameter that trains"),
        ("integer.pt", "its forward returns Int64 values; the loss reads floating-point logits"),
        ("zip_bomb.pt", "a zip bomb"),
    ] {
        let text = format!(
            "[experiment]\nname = \"bad\"\n[model]\nkind = \"torchscript\"\npath = \"{file}\"\n[data]\nsamples = 8\n\
             features = 8\nclasses = 4\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n[run]\ndevice = \"cpu\"\n"
        );
        common::refused_naming(&sb.spec("bad.toml", &text), &sb.out(), says, file);
    }
    // A zip bomb is refused by the estimate too, from the archive's directory alone (the words
    // are the directory check's: no record was inflated to say them).
    let bomb = sb.spec("bomb.toml", &sb_spec("zip_bomb.pt"));
    for device in ["cpu", "cuda"] {
        let out = Command::new(bin).arg("estimate").arg(&bomb).args(["--device", device]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("zip_bomb.pt") && said.contains("zip bomb"), "{said}");
    }
    // The estimate records the module's step on the CPU, for the CPU and for CUDA (whose rules
    // `tests/suite/torchscript_cuda.rs` holds).
    let spec = sb.spec(
        "estimate.toml",
        "[experiment]\nname = \"e\"\n[model]\nkind = \"torchscript\"\npath = \"mlp_scripted.pt\"\n[data]\nsamples = 8\n\
         features = 8\nclasses = 4\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n[run]\ndevice = \"cpu\"\n",
    );
    let out = Command::new(bin).arg("estimate").arg(&spec).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("recorded on this CPU"), "{said}");
    let out = Command::new(bin).arg("estimate").arg(&spec).args(["--device", "cuda"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("host's left out"), "{said}");
}

/// The estimate of a module it cannot replay: its step recorded at small batches, fitted and
/// synthesised at the batch asked for, must give what training at that batch measures, phase
/// by phase, to the byte: a scripted MLP (Adam), a traced one (momentum, accumulation) and a
/// scripted ResNet-18, at batches far past the recorded ones; and steps of more micro-batches
/// than the four a step is recorded with (extended, the loss history kept or not).
#[test]
fn the_recorded_estimate_of_a_module_is_exact_on_the_cpu_at_any_batch() {
    let sb = Sandbox::new();
    export(&sb);
    let _in_process = common::in_process();
    let base = |model: &str, data: &str, training: &str| {
        format!(
            "[experiment]\nname = \"e\"\n[model]\nkind = \"torchscript\"\npath = \"{model}\"\n[data]\n{data}\n\
             [training]\n{training}\n[run]\ndevice = \"cpu\"\n"
        )
    };
    let features = "samples = 512\nfeatures = 8\nclasses = 4";
    let images = "kind = \"images\"\nsamples = 64\nchannels = 3\nsize = 16\nclasses = 4";
    let cases = [
        (
            "mlp_adam",
            base("mlp_scripted.pt", features, "optimizer = \"adam\"\nbatch_size = 4\nsteps = 2"),
            &[7, 200][..],
        ),
        (
            "mlp_traced_momentum_acc",
            base(
                "mlp_traced.pt",
                features,
                "optimizer = \"sgd\"\nmomentum = 0.9\nbatch_size = 4\nsteps = 2\naccumulation = 2",
            ),
            &[9, 256][..],
        ),
        ("resnet18", base("resnet18.pt", images, "optimizer = \"adam\"\nbatch_size = 4\nsteps = 2"), &[6, 33][..]),
        // More micro-batches than the four a step is recorded with: the middle ones repeated.
        (
            "mlp_traced_momentum_acc7",
            base(
                "mlp_traced.pt",
                features,
                "optimizer = \"sgd\"\nmomentum = 0.9\nbatch_size = 4\nsteps = 2\naccumulation = 7",
            ),
            &[5, 64][..],
        ),
        // Batch norm's running statistics, updated in place by every micro-batch.
        (
            "resnet18_acc5",
            base("resnet18.pt", images, "optimizer = \"adam\"\nbatch_size = 4\nsteps = 2\naccumulation = 5"),
            &[6][..],
        ),
        // Each micro-batch's loss kept, with its graph: what each makes lives on.
        (
            "mlp_adam_acc6_history",
            base(
                "mlp_scripted.pt",
                features,
                "optimizer = \"adam\"\nbatch_size = 4\nsteps = 2\naccumulation = 6\nhistory = \"loss_tensor\"",
            ),
            &[6, 40][..],
        ),
    ];
    let mut failures = Vec::new();
    for (name, text, batches) in cases {
        let spec = oomlab::spec::load(&sb.spec(&format!("{name}.toml"), &text)).unwrap();
        for batch in batches {
            let mut config = spec.base.clone();
            config.training.batch_size = *batch;
            let predicted = oomlab::estimate::predict(&config).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(predicted.notes.iter().any(|n| n.contains("recorded")), "{:?}", predicted.notes);
            let extended = config.training.techniques.accumulation > 4;
            assert_eq!(
                predicted.notes.iter().any(|n| n.contains("micro-batches from a recording of 4")),
                extended,
                "{name}: {:?}",
                predicted.notes
            );
            let (records, peak) = common::measure(&config);
            failures.extend(
                common::compare(&format!("{name} at batch {batch}"), &predicted, &records, peak, 0).0,
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `thirds.pt`: an MLP whose forward takes one tensor more at a batch divisible by 3, as a CPU
/// library may take a buffer at some batches and not at others (oneDNN's depthwise
/// convolutions, on some CPUs): each set of the ladder (4, 6, 8; 16, 24, 32; ...) has a batch
/// that parts from the others.
const THIRDS: &str = r#"
import sys, torch, torch.nn as nn
torch.manual_seed(0)

class Thirds(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if x.shape[0] % 3 == 0:
            h = h * 2.0
        return self.b(h)

torch.jit.save(torch.jit.script(Thirds()), f"{sys.argv[1]}/thirds.pt")
"#;

/// Where no set of the ladder agrees, the step is recorded at the batch asked, and that is the
/// answer there, exact (it said so); past the data set's rows it is refused, naming why.
#[test]
fn a_step_no_ladder_fits_is_recorded_at_the_batch_itself() {
    let sb = Sandbox::new();
    sb.copy_from(common::exported("torchscript THIRDS", THIRDS), &["thirds.pt"]);
    let _in_process = common::in_process();
    let text = "[experiment]\nname = \"t\"\n[model]\nkind = \"torchscript\"\npath = \"thirds.pt\"\n[data]\n\
                samples = 64\nfeatures = 8\nclasses = 4\n[training]\noptimizer = \"adam\"\nbatch_size = 4\n\
                steps = 2\n[run]\ndevice = \"cpu\"\n";
    let spec = oomlab::spec::load(&sb.spec("thirds.toml", text)).unwrap();
    let mut failures = Vec::new();
    for batch in [10, 12] {
        let mut config = spec.base.clone();
        config.training.batch_size = batch;
        let predicted = oomlab::estimate::predict(&config).unwrap_or_else(|e| panic!("batch {batch}: {e:#}"));
        let note = &predicted.notes[0];
        assert!(
            note.contains(&format!("at batch {batch} itself"))
                && note.contains("at batches [4, 6, 8], its step allocates differently"),
            "{note}"
        );
        let (records, peak) = common::measure(&config);
        failures
            .extend(common::compare(&format!("thirds at batch {batch}"), &predicted, &records, peak, 0).0);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let mut config = spec.base.clone();
    config.training.batch_size = 65;
    let e = format!("{:#}", oomlab::estimate::predict(&config).unwrap_err());
    assert!(e.contains("past the data set's 64 rows") && e.contains("allocates differently"), "{e}");
}

/// A recording names the op of each event, which the estimate's messages quote where two
/// recordings part or a size is not affine in the batch: a scripted MLP's Linears, its loss and
/// its backward's nodes, each by name.
#[test]
fn a_recording_names_the_op_of_each_event() {
    let sb = Sandbox::new();
    export(&sb);
    let _in_process = common::in_process();
    let text = "[experiment]\nname = \"r\"\n[model]\nkind = \"torchscript\"\npath = \"mlp_scripted.pt\"\n[data]\n\
                samples = 8\nfeatures = 8\nclasses = 4\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\nsteps = 1\n";
    let spec = oomlab::spec::load(&sb.spec("r.toml", text)).unwrap();
    let r = oomlab::train::record::record(&spec.base).unwrap();
    assert_eq!(r.ops.len(), r.events.len());
    let allocations_in =
        |name: &str| r.events.iter().zip(&r.ops).filter(|(e, op)| e.0 > 0 && op.contains(name)).count();
    assert!(allocations_in("aten::linear") >= 3, "the three Linears' outputs: {:?}", r.ops);
    assert!(allocations_in("aten::cross_entropy_loss") >= 1, "the loss: {:?}", r.ops);
    assert!(allocations_in("Backward") >= 3, "backward's nodes: {:?}", r.ops);
    let phase_mark =
        |e: &(i64, u64)| *e == (0, oomlab::train::record::END) || *e == (0, oomlab::train::record::START);
    assert!(
        r.events.iter().zip(&r.ops).all(|(e, op)| !phase_mark(e) || op.is_empty()),
        "a phase's mark has no op"
    );
    // The bias gradients' sums over the batch are marked, with their rows and columns.
    assert!(r.reduces.iter().any(|d| (d.rows, d.cols) == (4, 32)), "{:?}", r.reduces);
}

/// Modules whose parameters are not all trained: a frozen first layer (`requires_grad =
/// False`, as a fine-tuned backbone is saved) and a layer the forward never uses. PyTorch's
/// optimizer, given `model.parameters()`, skips a parameter without a gradient and makes it no
/// state; oomlab must allocate what PyTorch does, phase by phase, for each optimizer family and
/// implementation, and its recorded estimate must give what it measures. A module with every
/// parameter frozen trains nothing: refused, naming the file.
const PARTLY_TRAINED: &str = r#"
import sys, torch, torch.nn as nn
out = sys.argv[1]
torch.manual_seed(0)
frozen = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 4))
frozen[0].requires_grad_(False)
torch.jit.save(torch.jit.script(frozen), f"{out}/frozen.pt")
class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 4)
        self.unused = nn.Linear(64, 64)
    def forward(self, x):
        return self.used(x)
torch.jit.save(torch.jit.script(Unused()), f"{out}/unused.pt")
none = nn.Linear(8, 4).requires_grad_(False)
torch.jit.save(torch.jit.script(none), f"{out}/all_frozen.pt")
"#;

#[test]
fn parameters_without_a_gradient_get_no_state_as_in_pytorch() {
    let sb = Sandbox::new();
    common::export_modules(&sb, PARTLY_TRAINED);
    let variants = [
        ("frozen_adam", "frozen.pt", "optimizer = \"adam\", optimizer_impl = \"foreach\""),
        ("frozen_momentum", "frozen.pt", "optimizer = \"sgd\", momentum = 0.9"),
        ("unused_adamw_fused", "unused.pt", "optimizer = \"adamw\", optimizer_impl = \"fused\""),
        ("unused_adam", "unused.pt", "optimizer = \"adam\""),
    ];
    let mut text = String::from(
        "[experiment]\nname = \"partly\"\n[model]\nkind = \"torchscript\"\npath = \"frozen.pt\"\n[data]\nsamples = 32\n\
         features = 8\nclasses = 4\n[training]\noptimizer = \"adam\"\nbatch_size = 4\nsteps = 3\n[run]\ndevice = \"cpu\"\n",
    );
    for (name, file, training) in variants {
        text += &format!(
            "[[variant]]\nname = \"{name}\"\nmodel = {{ kind = \"torchscript\", path = \"{file}\" }}\ntraining = {{ {training} }}\n"
        );
    }
    let spec_path = sb.spec("partly.toml", &text);
    let spec = oomlab::spec::load(&spec_path).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec, Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    assert!(ours.rows.iter().all(|r| r.status.fitted()), "every trial trained: {:?}", ours.rows);
    let py_trace = sb.path().join("pytorch.csv");
    let (py_summary, py_trace) = common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &py_trace);
    for mine in &ours.rows {
        let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
        assert_eq!(py.status, "ok", "{}: PyTorch trained it", mine.variant);
        let (a, b) = (
            phases(&ours.trace, mine.trial, mine.baseline_allocated),
            phases(&py_trace, py.trial, py.baseline_allocated),
        );
        assert_eq!(a, b, "{}: oomlab and PyTorch, phase by phase, over the baseline", mine.variant);
        assert_eq!(mine.final_loss, Some(py.final_loss), "{}: final loss", mine.variant);
    }
    // The recorded estimate (the step recorded through the same optimizers) gives the peak.
    let bin = common::bin();
    let est = Command::new(bin).arg("estimate").arg(&spec_path).arg("--json").output().unwrap();
    assert!(est.status.success(), "{}", String::from_utf8_lossy(&est.stderr));
    let est: serde_json::Value = serde_json::from_slice(&est.stdout).unwrap();
    for (v, mine) in est.as_array().unwrap().iter().zip(&ours.rows) {
        let peak = v["points"][0]["prediction"]["peak"].as_u64();
        assert_eq!(peak, Some(mine.max_memory_allocated), "{}: the estimate's peak", mine.variant);
    }
    let none = sb.spec(
        "none.toml",
        &text
            .replace("[[variant]]", "[[x]]")
            .split("[[x]]")
            .next()
            .unwrap()
            .replace("frozen.pt", "all_frozen.pt"),
    );
    common::refused_naming(&none, &sb.path().join("none-out"), "requires_grad = False", "all_frozen.pt");
}
