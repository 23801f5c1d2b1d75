//! The models people train, as a user brings them: every entry of `tests/fixtures/corpus.toml`
//! (torchvision classifiers by name; Hugging Face `transformers` GPT-2, Llama, BERT, DistilBERT,
//! ViT and T5 built from small configs), exported exactly as README says
//! (`scripts/export-model <export>`), then each
//! - trained by oomlab and by plain PyTorch (`scripts/reference/train.py --cpu-memory` loading
//!   the same file): the same bytes over the trial's baseline, phase by phase, the same final
//!   loss, and the parameter count the exporter reports (GPT-2's tied embedding and head counted
//!   and trained once);
//! - estimated on the CPU to the byte, at a batch past the recorded ones;
//! - estimated for CUDA without a GPU: an answer, or the refusal its entry names (a refusal
//!   that is gone fails too, so that the entry is updated). For the Transformers, attention is
//!   replayed as CUDA's memory-efficient kernel. What a GPU measures waits for one.
//!
//! Without python3, torch, torchvision and transformers (scripts/setup-libtorch installs them),
//! this test fails and says so.
use std::path::Path;

use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common::{self, oomlab, phases, Sandbox};

#[derive(serde::Deserialize)]
struct Corpus {
    model: Vec<Entry>,
}

#[derive(serde::Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    /// `scripts/export-model`'s arguments, as README writes them (split at spaces).
    export: String,
    /// Words of the refusal CUDA's estimate gives it, where it is refused.
    cuda_refused: Option<String>,
    /// Its attention runs through `scaled_dot_product_attention`, which the CUDA estimate must
    /// replay as CUDA's memory-efficient kernel (and say so).
    #[serde(default)]
    attention: bool,
}

fn corpus() -> Vec<Entry> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus.toml");
    let corpus: Corpus = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut names: Vec<&str> = corpus.model.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), corpus.model.len(), "each name once in {}", path.display());
    corpus.model
}

/// Every model exported once per process by `scripts/export-model`, with the spec it writes
/// beside each; two at a time.
fn exported() -> &'static Path {
    common::shared("corpus", |dir| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let models = corpus();
        for pair in models.chunks(2) {
            let children: Vec<_> = pair
                .iter()
                .map(|m| {
                    let child = std::process::Command::new(root.join("scripts/export-model"))
                        .args(m.export.split_whitespace())
                        .arg("--out")
                        .arg(dir.join(format!("{}.pt", m.name)))
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("scripts/export-model runs");
                    (m.name.clone(), child)
                })
                .collect();
            for (name, child) in children {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "export-model {name} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    })
}

/// The parameter count the exporter wrote into `name.toml`'s header (each tensor once).
fn exported_params(dir: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
    let line = text.lines().find(|l| l.contains(" parameters.")).expect("the header names the parameters");
    let count = line.split(": ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
    count.replace(',', "").parse().unwrap()
}

/// The exported spec, made small: 64 samples, batch 4 (or the search's start, if larger), two
/// steps, Adam, on the CPU, without its search.
fn small_spec(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
    let mut table: toml::Table = text.parse().unwrap();
    table.remove("sweep");
    let data = table["data"].as_table_mut().unwrap();
    data.insert("samples".into(), toml::Value::Integer(64));
    let training = table["training"].as_table_mut().unwrap();
    let start = training["batch_size"].as_integer().unwrap();
    training.insert("batch_size".into(), toml::Value::Integer(start.max(4)));
    training.insert("steps".into(), toml::Value::Integer(2));
    let run = table["run"].as_table_mut().unwrap();
    run.insert("device".into(), "cpu".into());
    run.remove("budget");
    toml::to_string(&table).unwrap()
}

#[test]
fn the_models_people_train_train_as_pytorch_trains_them_and_are_estimated() {
    let dir = exported();
    let mut failures = Vec::new();
    for entry in corpus() {
        let name = entry.name.as_str();
        let sb = Sandbox::new();
        sb.copy_from(dir, &[&format!("{name}.pt")]);
        let path = sb.spec(&format!("{name}.toml"), &small_spec(dir, name));
        let spec = oomlab::spec::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
        let report = {
            let _in_process = common::in_process();
            run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).unwrap()
        };
        let ours = ExperimentDir::read(&report.dir).unwrap();
        let mine = &ours.rows[0];
        assert!(mine.status.fitted(), "{name}: {:?} {}", mine.status, mine.message);
        if mine.param_count != exported_params(dir, name) {
            failures.push(format!(
                "{name}: {} parameters, the exporter counted {}",
                mine.param_count,
                exported_params(dir, name)
            ));
        }

        let (py_summary, py_trace) =
            common::pytorch_cpu_memory(&report.dir.join("summary.csv"), &sb.path().join("pytorch.csv"));
        let py = py_summary.iter().find(|p| p.trial == mine.trial).unwrap();
        if py.status != "ok" {
            failures.push(format!("{name}: PyTorch did not train it ({})", py.status));
        } else {
            let (a, b) = (
                phases(&ours.trace, mine.trial, mine.baseline_allocated),
                phases(&py_trace, py.trial, py.baseline_allocated),
            );
            if a != b {
                failures.push(format!("{name}: oomlab and PyTorch part, phase by phase:\n  {a:?}\n  {b:?}"));
            }
            if mine.final_loss != Some(py.final_loss) {
                failures
                    .push(format!("{name}: final loss {:?}, PyTorch's {}", mine.final_loss, py.final_loss));
            }
        }

        {
            let _in_process = common::in_process();
            failures.extend(common::estimate_failures(&spec.variants, &[12]));
        }

        let cuda = oomlab()
            .current_dir(sb.path())
            .args(["estimate", &format!("{name}.toml"), "--device", "cuda", "--gpu", "h100"])
            .output()
            .unwrap();
        let (out, err) = (String::from_utf8_lossy(&cuda.stdout), String::from_utf8_lossy(&cuda.stderr));
        match &entry.cuda_refused {
            None if !cuda.status.success() || !out.contains("trial          peak ") => {
                failures.push(format!("{name}: no CUDA estimate:\n{out}{err}"))
            }
            None => {
                if entry.attention != out.contains("replayed as CUDA's memory-efficient kernel") {
                    failures.push(format!(
                        "{name}: attention {} replayed as CUDA's kernel:\n{out}",
                        if entry.attention { "not" } else { "unexpectedly" }
                    ));
                }
            }
            Some(words) => {
                if cuda.status.success() || !err.contains(words.as_str()) {
                    failures.push(format!(
                        "{name}: the CUDA estimate was to be refused for \"{words}\" (update the corpus entry if \
                         it is no longer):\n{out}{err}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
