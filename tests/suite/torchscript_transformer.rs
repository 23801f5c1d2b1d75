//! A scripted copy of oomlab's own Transformer encoder (token embedding, `nn.TransformerEncoder`
//! post-norm with dropout, mean over the sequence, Linear), exported by PyTorch into the sandbox
//! and trained by oomlab beside the built-in kind it copies, on the CPU. Three oracles:
//! - the recorded estimate of the scripted module, against its training: to the byte, every
//!   phase's end and peak, at batches inside and past the recorded ones;
//! - PyTorch (`torch.jit.load` of the same file): the same bytes phase by phase, and loss;
//! - the built-in kind: the same bytes plus the file's debug records (held from the model on),
//!   and one difference of TorchScript's interpreter, measured here: through each encoder
//!   layer's feed-forward it keeps the layer's input alive, where eager Python has let it go, so
//!   the forward peaks one activation (`batch x seq x d_model` floats) higher.
//!
//! Without python3 and a torch it can import, this test fails and says so.
use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common;
use common::{phases, Sandbox};

/// `encoder.pt`: the copy (vocabulary 100, d_model 32, 4 heads, 2 layers, feed-forward 64,
/// dropout 0.1, 5 classes). Prints its debug records' bytes.
const EXPORT: &str = r#"
import sys, zipfile, torch, torch.nn as nn
out = sys.argv[1]

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head_fc = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head_fc(self.encoder(self.embed(x)).mean(dim=1))

torch.manual_seed(0)
torch.jit.save(torch.jit.script(Encoder()), f"{out}/encoder.pt")
z = zipfile.ZipFile(f"{out}/encoder.pt")
print(sum(i.file_size for i in z.infolist() if i.filename.endswith(".debug_pkl")))
"#;

const SPEC: &str = "[experiment]\nname = \"encoder\"\n[model]\nkind = \"transformer\"\nd_model = 32\nnhead = 4\n\
    num_layers = 2\ndim_feedforward = 64\ndropout = 0.1\n[data]\nkind = \"tokens\"\nsamples = 64\nseq_len = 16\n\
    vocab = 100\nclasses = 5\nseed = 0\n[training]\noptimizer = \"adam\"\nbatch_size = 8\nsteps = 2\n[run]\n\
    device = \"cpu\"\n[[variant]]\nname = \"built_in\"\n[[variant]]\nname = \"scripted\"\n\
    model = { kind = \"torchscript\", path = \"encoder.pt\" }\n";

#[test]
fn a_scripted_encoder_allocates_what_the_built_in_does_but_one_activation_of_the_interpreter() {
    let sb = Sandbox::new();
    let script = sb.path().join("export.py");
    std::fs::write(&script, EXPORT).unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(sb.path())
        .env("PYTHONPATH", common::torch_site())
        .output()
        .expect("python3 runs (PyTorch exports the module)");
    assert!(out.status.success(), "export failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let kept: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("debug records' bytes");
    assert!(kept > 0);

    let spec = oomlab::spec::load(&sb.spec("encoder.toml", SPEC)).unwrap();
    let scripted = spec.variants.iter().find(|v| v.name == "scripted").unwrap().clone();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec, Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    let row = |variant: &str| ours.rows.iter().find(|r| r.variant == variant).unwrap();
    let (mine, theirs) = (row("scripted"), row("built_in"));
    assert!(mine.status.fitted() && theirs.status.fitted(), "both trained");

    // Against the built-in kind.
    let activation = 8 * 16 * 32 * 4;
    let a = phases(&ours.trace, mine.trial, mine.baseline_allocated);
    let b = phases(&ours.trace, theirs.trial, theirs.baseline_allocated);
    let differ = common::parted_from_built_in(&a, &b, kept, activation);
    assert!(
        differ.is_empty(),
        "+{kept} B of debug records, +{activation} B in the forward:\n{}",
        differ.join("\n")
    );
    assert_eq!(mine.param_count, theirs.param_count, "the same parameters");

    // Against PyTorch, loading the same file.
    let (py_summary, py_trace) =
        common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &sb.path().join("pytorch.csv"));
    let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
    assert_eq!(py.status, "ok", "PyTorch trained it");
    assert_eq!(
        phases(&ours.trace, mine.trial, mine.baseline_allocated),
        phases(&py_trace, py.trial, py.baseline_allocated),
        "oomlab and PyTorch, phase by phase (allocated, peak) over the baseline"
    );
    assert_eq!(mine.final_loss, Some(py.final_loss), "final loss");

    // The recorded estimate, against training, inside the recorded batches and past them.
    let _in_process = common::in_process();
    let failures = common::estimate_failures(&[scripted], &[6, 24]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
