//! Models nobody here wrote, as a user brings them: Hugging Face `transformers` GPT-2 (a tied
//! embedding and head) and BERT, built from small configs and exported exactly as README says
//! (`scripts/export-model hf:<Class> --config ...`), then
//! - trained by oomlab and by plain PyTorch (`scripts/reference/train.py --cpu-memory` loading
//!   the same file): the same bytes over each trial's baseline, phase by phase, the same final
//!   loss, and the parameter count the exporter reports (a tied weight counted and trained once);
//! - estimated on the CPU to the byte, at batches inside and past the recorded ones;
//! - estimated for CUDA without a GPU: an answer for each, whose attention is replayed as CUDA's
//!   memory-efficient kernel (what an H200 would measure waits for one).
//!
//! Without python3, torch and transformers (scripts/setup-libtorch installs them), this test
//! fails and says so.
use std::path::Path;

use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common::{self, oomlab, phases, Sandbox};

/// The two models: (file stem, class, config, input).
const MODELS: [(&str, &str, &str, &str); 2] = [
    (
        "gpt2",
        "hf:GPT2LMHeadModel",
        "n_layer=2,n_head=2,n_embd=64,vocab_size=1000,n_positions=64",
        "int64:32:1000",
    ),
    (
        "bert",
        "hf:BertForSequenceClassification",
        "num_hidden_layers=2,num_attention_heads=2,hidden_size=64,intermediate_size=128,vocab_size=1000,\
         max_position_embeddings=64,num_labels=4",
        "int64:32:1000",
    ),
];

/// The models exported once per process by `scripts/export-model`, with the specs it wrote.
fn exported() -> &'static Path {
    common::shared("hf_models", |dir| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (stem, class, config, input) in MODELS {
            let out = std::process::Command::new(root.join("scripts/export-model"))
                .args([class, "--config", config, "--input", input, "--out"])
                .arg(dir.join(format!("{stem}.pt")))
                .output()
                .expect("scripts/export-model runs");
            assert!(
                out.status.success(),
                "export-model {class} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    })
}

/// The parameter count the exporter wrote into `stem.toml`'s header (each tensor once).
fn exported_params(dir: &Path, stem: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(format!("{stem}.toml"))).unwrap();
    let line = text.lines().find(|l| l.contains(" parameters.")).expect("the header names the parameters");
    let count = line.split(": ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
    count.replace(',', "").parse().unwrap()
}

/// A spec training both models at batch 4 on the CPU, each with its data as its exported spec
/// has it: GPT-2 as the base, BERT as a variant.
fn spec(dir: &Path) -> String {
    let data = |stem: &str| {
        let exported = std::fs::read_to_string(dir.join(format!("{stem}.toml"))).unwrap();
        let table: toml::Table = exported.parse().unwrap();
        let mut data = table["data"].as_table().unwrap().clone();
        data.insert("samples".into(), toml::Value::Integer(64));
        toml::Value::Table(data)
    };
    format!(
        "data = {}\n[experiment]\nname = \"hf\"\n[model]\nkind = \"torchscript\"\npath = \"gpt2.pt\"\n[training]\n\
         optimizer = \"adam\"\nbatch_size = 4\nsteps = 2\n[run]\ndevice = \"cpu\"\n\
         [[variant]]\nname = \"gpt2\"\n\
         [[variant]]\nname = \"bert\"\nmodel = {{ kind = \"torchscript\", path = \"bert.pt\" }}\ndata = {}\n",
        data("gpt2"),
        data("bert")
    )
}

#[test]
fn hugging_face_models_train_as_pytorch_trains_them_and_are_estimated() {
    let sb = Sandbox::new();
    let dir = exported();
    sb.copy_from(dir, &["gpt2.pt", "bert.pt"]);
    let path = sb.spec("hf.toml", &spec(dir));
    let spec = oomlab::spec::load(&path).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).unwrap()
    };
    let ours = ExperimentDir::read(&report.dir).unwrap();
    assert_eq!(ours.rows.len(), 2);
    for r in &ours.rows {
        assert!(r.status.fitted(), "{}: {:?} {}", r.variant, r.status, r.message);
        assert_eq!(r.param_count, exported_params(dir, &r.variant), "{}: each tensor once", r.variant);
    }

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

    {
        let _in_process = common::in_process();
        let failures = common::estimate_failures(&spec.variants, &[5, 12]);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    // For CUDA, without a GPU: an answer for each, its attention replayed as CUDA's kernel.
    let cuda = oomlab()
        .current_dir(sb.path())
        .args(["estimate", "hf.toml", "--device", "cuda", "--gpu", "h100"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cuda.stdout);
    assert!(cuda.status.success(), "{said}\n{}", String::from_utf8_lossy(&cuda.stderr));
    for (stem, ..) in MODELS {
        let block =
            said.split(&format!("[{stem}]\n")).nth(1).unwrap_or_else(|| panic!("no [{stem}] in:\n{said}"));
        assert!(block.starts_with("trial          peak "), "{stem}: {block}");
    }
    // Said once, for both (a note repeated for the next variant is not printed again).
    assert!(said.contains("replayed as CUDA's memory-efficient kernel"), "{said}");
}
