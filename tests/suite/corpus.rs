//! The models people train, as a user brings them: every entry of `tests/fixtures/corpus.toml`
//! (torchvision classifiers by name; Hugging Face `transformers` GPT-2, Llama, BERT, DistilBERT,
//! ViT and T5 built from small configs), exported with README's arguments by the Python behind
//! `scripts/export-model <export>` (all in one interpreter), then each
//! - trained by oomlab and by plain PyTorch (`scripts/reference/train.py --cpu-memory` loading
//!   the same file; all of them in one interpreter too): the same bytes over the trial's baseline, phase by phase, the same final
//!   loss, and the parameter count the exporter reports (GPT-2's tied embedding and head counted
//!   and trained once);
//! - estimated on the CPU to the byte, at the batch it trained at, past the recorded ones;
//! - estimated for CUDA without a GPU, its exported search included: an answer, the search
//!   guided by it (from the search's start where the model cannot train on one row), or the
//!   refusal its entry names (a refusal that is gone fails too, so that the entry is updated);
//!   its step recorded on the meta device, the answer the same as a recording on this CPU gives.
//!   For the Transformers, attention is replayed as CUDA's memory-efficient kernel. What a GPU
//!   measures waits for one;
//! - estimated for CUDA under bf16 autocast, CUDA's op lists run on the meta device: an answer,
//!   or the refusal its entry names (`amp_cuda_refused`).
//!
//! Without python3, torch, torchvision and transformers (scripts/setup-libtorch installs them),
//! this test fails and says so.
use std::path::{Path, PathBuf};

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
    /// Its attention takes a mask that needs a gradient: the CUDA recording runs CUDA's
    /// memory-efficient kernel on the meta device (and says so), which no CPU recording can
    /// stand for (it takes the math path, and is refused naming it).
    #[serde(default)]
    attention_bias: bool,
    /// Words of the refusal CUDA's estimate under autocast gives it, where it is refused.
    amp_cuda_refused: Option<String>,
    /// Its `training.checkpoint` (a model exported `--blocks`, whose units are its blocks): it
    /// trains checkpointed, as PyTorch's `checkpoint_sequential` over the same children does
    /// (`{ sequential = S }`).
    checkpoint: Option<toml::Value>,
}

/// The batch every model trains at here.
const BATCH: usize = 12;

fn corpus() -> Vec<Entry> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus.toml");
    let corpus: Corpus = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut names: Vec<&str> = corpus.model.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), corpus.model.len(), "each name once in {}", path.display());
    corpus.model
}

/// Every model exported once per process by `scripts/export-model`'s Python with the entry's
/// arguments, with the spec it writes beside each: all in one interpreter, which imports torch,
/// torchvision and transformers once (seconds) rather than once a model.
fn exported() -> &'static Path {
    common::shared("corpus", |dir| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let argvs: Vec<Vec<String>> = corpus()
            .iter()
            .map(|m| {
                let out = dir.join(format!("{}.pt", m.name)).display().to_string();
                m.export.split_whitespace().map(str::to_string).chain(["--out".into(), out]).collect()
            })
            .collect();
        common::python_main_each(&root.join("scripts/reference/export_model.py"), &argvs);
    })
}

/// The parameter count the exporter wrote into `name.toml`'s header (each tensor once).
fn exported_params(dir: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
    let line = text.lines().find(|l| l.contains(" parameters.")).expect("the header names the parameters");
    let count = line.split(": ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
    count.replace(',', "").parse().unwrap()
}

/// The spec the exporter wrote for `entry`, with its checkpoint where it has one.
fn exported_spec(dir: &Path, entry: &Entry) -> toml::Table {
    let text = std::fs::read_to_string(dir.join(format!("{}.toml", entry.name))).unwrap();
    let mut table: toml::Table = text.parse().unwrap();
    if let Some(checkpoint) = &entry.checkpoint {
        let training = table["training"].as_table_mut().unwrap();
        training.insert("checkpoint".into(), checkpoint.clone());
    }
    table
}

/// The exported spec, made small: 64 samples, batch 12 (past the batches the CPU estimate
/// records at, 4, 6 and 8), two steps, Adam, on the CPU, without its search.
fn small_spec(dir: &Path, entry: &Entry) -> String {
    let mut table = exported_spec(dir, entry);
    table.remove("sweep");
    let data = table["data"].as_table_mut().unwrap();
    data.insert("samples".into(), toml::Value::Integer(64));
    let training = table["training"].as_table_mut().unwrap();
    training.insert("batch_size".into(), toml::Value::Integer(BATCH as i64));
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
    // oomlab trains each; then PyTorch trains them all, in one Python process.
    let mut trained = Vec::new();
    for entry in corpus() {
        let name = entry.name.clone();
        let sb = Sandbox::new();
        sb.copy_from(dir, &[&format!("{name}.pt")]);
        let path = sb.spec(&format!("{name}.toml"), &small_spec(dir, &entry));
        let spec = oomlab::spec::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
        let report = {
            let _in_process = common::in_process();
            run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).unwrap()
        };
        trained.push((entry, sb, spec, report.dir));
    }
    let runs: Vec<(PathBuf, PathBuf)> = trained
        .iter()
        .map(|(_, sb, _, dir)| (dir.join("summary.csv"), sb.path().join("pytorch.csv")))
        .collect();
    let runs: Vec<(&Path, &Path)> = runs.iter().map(|(a, b)| (a.as_path(), b.as_path())).collect();
    let pytorch = common::pytorch_cpu_memory_each(&runs);

    for ((entry, sb, spec, report), (py_summary, py_trace)) in trained.iter().zip(pytorch) {
        let name = entry.name.as_str();
        let ours = ExperimentDir::read(report).unwrap();
        let mine = &ours.rows[0];
        assert!(mine.status.fitted(), "{name}: {:?} {}", mine.status, mine.message);
        if mine.param_count != exported_params(dir, name) {
            failures.push(format!(
                "{name}: {} parameters, the exporter counted {}",
                mine.param_count,
                exported_params(dir, name)
            ));
        }

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

        // The CPU estimate, recorded at smaller batches, against this run at BATCH.
        let predicted = {
            let _in_process = common::in_process();
            oomlab::estimate::predict(&spec.base)
        };
        // Recorded on meta (`--record-on meta`), the CPU estimate leaves out the CPU libraries'
        // scratch alone, and says so: at most what the CPU recording predicts.
        let on_meta = oomlab()
            .current_dir(sb.path())
            .args(["estimate", &format!("{name}.toml"), "--device", "cpu", "--record-on", "meta", "--json"])
            .output()
            .unwrap();
        let on_meta: serde_json::Value = serde_json::from_slice(&on_meta.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&on_meta.stderr)));
        let meta = &on_meta[0]["points"][0]["prediction"];
        if !meta["notes"][0].as_str().unwrap_or_default().contains("recorded on the meta device") {
            failures.push(format!("{name}: its CPU estimate was not recorded on meta: {}", meta["notes"]));
        }
        if let (Ok(p), Some(m)) = (&predicted, meta["peak"].as_u64()) {
            if m > p.peak {
                failures
                    .push(format!("{name}: recorded on meta, its CPU estimate's peak {m} is over the CPU's"));
            }
        }
        match predicted {
            Err(e) => failures.push(format!("{name}: no CPU estimate: {e:#}")),
            Ok(predicted) => {
                let base = mine.baseline_allocated;
                let records =
                    common::over_baseline(ours.trace.iter().filter(|r| r.trial == mine.trial), base);
                let what = format!("{name}'s CPU estimate at batch {BATCH}");
                failures.extend(
                    common::compare(&what, &predicted, &records, mine.max_memory_allocated - base, 0).0,
                );
            }
        }

        // The spec as exported, its search included: the estimate guides it (a search from 2, for
        // a model that cannot train on one row, is guided from there).
        sb.spec(&format!("{name}-search.toml"), &toml::to_string(&exported_spec(dir, entry)).unwrap());
        let estimate = |on: &str| {
            let spec = format!("{name}-search.toml");
            let args = ["estimate", &spec, "--device", "cuda", "--gpu", "h100", "--record-on", on];
            oomlab().current_dir(sb.path()).args(args).output().unwrap()
        };
        let cuda = estimate("meta");
        let (out, err) = (String::from_utf8_lossy(&cuda.stdout), String::from_utf8_lossy(&cuda.stderr));
        // Recorded on the meta device, its answer is the one a recording on this CPU gives, phase by
        // phase (the notes aside, which say where each was recorded).
        if cuda.status.success() && entry.attention_bias {
            let on_cpu = estimate("cpu");
            let cpu_err = String::from_utf8_lossy(&on_cpu.stderr);
            if !out.contains("mask that needs a gradient recorded on the meta device") {
                failures
                    .push(format!("{name}: its attention bias was not recorded as CUDA's kernel:\n{out}"));
            }
            if on_cpu.status.success() || !cpu_err.contains("math path") {
                failures
                    .push(format!("{name}: recorded on this CPU, the math path was not refused:\n{cpu_err}"));
            }
        } else if cuda.status.success() {
            let on_cpu = estimate("cpu");
            let without_notes = |o: &[u8]| {
                String::from_utf8_lossy(o)
                    .lines()
                    .filter(|l| !l.contains("recorded on "))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if !out.contains("recorded on the meta device") {
                failures
                    .push(format!("{name}: its CUDA estimate was not recorded on the meta device:\n{out}"));
            }
            if without_notes(&cuda.stdout) != without_notes(&on_cpu.stdout) {
                failures.push(format!(
                    "{name}: recorded on the meta device, its CUDA estimate is not the CPU recording's:\n{out}\n\
                     recorded on this CPU:\n{}",
                    String::from_utf8_lossy(&on_cpu.stdout)
                ));
            }
        }
        // Under autocast, the step recorded on the meta device runs CUDA's op lists: an answer at
        // the batch, or the refusal the entry names.
        let amp_spec = small_spec(dir, entry).replace("[training]\n", "[training]\namp = \"bf16\"\n");
        sb.spec(&format!("{name}-amp.toml"), &amp_spec);
        let amp = oomlab()
            .current_dir(sb.path())
            .args(["estimate", &format!("{name}-amp.toml"), "--device", "cuda", "--gpu", "h100", "--brief"])
            .output()
            .unwrap();
        let (amp_out, amp_err) = (String::from_utf8_lossy(&amp.stdout), String::from_utf8_lossy(&amp.stderr));
        match &entry.amp_cuda_refused {
            None if !amp.status.success() || !amp_out.contains("its step recorded on the meta device (") => {
                failures.push(format!("{name}: no CUDA estimate under autocast:\n{amp_out}{amp_err}"))
            }
            Some(words) if amp.status.success() || !amp_err.contains(words.as_str()) => failures.push(format!(
                "{name}: the CUDA estimate under autocast was to be refused for \"{words}\" (update the corpus \
                 entry if it is no longer):\n{amp_out}{amp_err}"
            )),
            _ => {}
        }
        match &entry.cuda_refused {
            None if !cuda.status.success() || !out.contains("largest batch_size predicted to fit in ") => {
                failures.push(format!("{name}: no CUDA estimate:\n{out}{err}"))
            }
            None if !out.contains("search guided by the estimate") => {
                failures.push(format!("{name}: the search is not guided by the CUDA estimate:\n{out}{err}"))
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
