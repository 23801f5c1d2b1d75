//! `oomlab plot` and `oomlab compare` as a user meets them, on result folders made by hand in a
//! temp folder (no training), and `trace.json` from a real run, whole and killed.
use crate::common::{self, oomlab};

use std::path::{Path, PathBuf};

use common::{tiny_spec, Sandbox};
use oomlab::results::{Exporter, SummaryCsv, TraceCsv};
use oomlab::schema::{Phase, PhaseRecord, Status, SummaryRow};
use predicates::prelude::*;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// A manifest as a run writes it, by hand.
fn manifest(experiment: &str, device: &str, budget: u64, source: &str, answers: Value) -> Value {
    json!({
        "experiment": experiment,
        "spec_path": format!("experiments/{experiment}.toml"),
        "spec_source": source,
        "spec": {"name": experiment, "description": "How deep before out of memory?", "sweep": {"field": "model.depth"}},
        "device": {"requested": "auto", "resolved": "cuda:0", "name": device, "slug": "dev",
                   "capacity_bytes": 16u64 << 30, "budget_bytes": budget, "budget_mechanism": null},
        "versions": {"oomlab": "0.1.0", "tch": "0.24.0", "libtorch": "2.11.0", "libtorch_path": null,
                     "cuda_runtime": null, "nvidia_driver": null},
        "git": {"revision": "0123456789abcdef", "dirty": false},
        "host": {"hostname": "h", "os": "linux x86_64", "cpu": "cpu", "torch_threads": 1},
        "command": ["oomlab", "run"],
        "started_at": "2025-01-01T00:00:00Z",
        "finished_at": "2025-01-01T00:01:00Z",
        "status": "complete",
        "trials": 0,
        "answers": answers,
    })
}

/// One trial's trace: data, model, then two steps of the five phases; `per_layer` bytes a layer.
/// An OOM trial stops in step 1's backward.
fn trial_trace(trial: usize, depth: u64, per_layer: u64, oom: bool) -> Vec<PhaseRecord> {
    let params = depth * per_layer;
    let mut out = Vec::new();
    let mut t = 0.0;
    let mut push = |step, phase, allocated: u64| {
        t += 0.01;
        out.push(PhaseRecord {
            trial,
            variant: String::new(),
            value: None,
            step,
            micro: 0,
            phase,
            memory_allocated: allocated,
            memory_reserved: allocated + MIB,
            max_memory_allocated: allocated + allocated / 10,
            max_memory_reserved: allocated + allocated / 10 + MIB,
            device_used: Some(allocated + 300 * MIB),
            phase_seconds: 0.01,
            elapsed_seconds: t,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        });
    };
    push(0, Phase::Data, MIB);
    push(0, Phase::Model, MIB + params);
    for step in 1..=2 {
        push(step, Phase::ToDevice, MIB + params);
        push(step, Phase::Forward, MIB + 2 * params);
        push(step, Phase::Backward, MIB + 2 * params);
        if oom {
            break;
        }
        push(step, Phase::OptimizerStep, MIB + 4 * params);
        push(step, Phase::ZeroGrad, MIB + 3 * params);
    }
    out
}

/// A results folder of a depth sweep by hand: depths 1, 2, 4 fit, 8 and 6 OOM, 5 fits, on a
/// device with `budget` and `per_layer` bytes a layer.
fn sweep_folder(dir: &Path, device: &str, budget: u64, per_layer: u64, source: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let plan = [(1, false), (2, false), (4, false), (8, true), (6, true), (5, false)];
    let mut trace = TraceCsv::create(dir).unwrap();
    let mut summary = SummaryCsv::create(dir).unwrap();
    for (i, &(depth, oom)) in plan.iter().enumerate() {
        let trial = i + 1;
        let records = trial_trace(trial, depth, per_layer, oom);
        for r in &records {
            trace.phase(r).unwrap();
        }
        let peak = records.iter().map(|r| r.max_memory_allocated).max().unwrap();
        let row = SummaryRow {
            trial,
            field: Some(oomlab::spec::Field::Depth),
            value: Some(depth as f64),
            status: if oom { Status::Oom } else { Status::Ok },
            phase: oom.then_some(Phase::Backward),
            step: oom.then_some(1),
            depth: depth as usize,
            max_memory_allocated: peak,
            max_memory_reserved: peak + MIB,
            oom_allocated: oom.then_some(peak),
            oom_requested: oom.then_some(per_layer),
            message: if oom { "CUDA out of memory. Tried to allocate ...".into() } else { String::new() },
            ..SummaryRow::default()
        };
        trace.trial(&row).unwrap();
        summary.trial(&row).unwrap();
    }
    let answers = json!([{"variant": "", "field": "model.depth", "largest_fit": 5, "first_oom": 6}]);
    let mut m = manifest("depth_sweep", device, budget, source, answers);
    m["trials"] = json!(plan.len());
    let text = serde_json::to_string_pretty(&m).unwrap();
    std::fs::write(dir.join("manifest.json"), text).unwrap();
    dir.to_path_buf()
}

const SPEC: &str = "[experiment]\nname = \"depth_sweep\"\n";

fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().unwrap());
    (be(16..20), be(20..24))
}

fn trace_json(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("trace.json")).expect("trace.json");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("trace.json is not JSON: {e}"))
}

/// The names of the tracks of `trace.json`, in order.
fn track_names(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn plot_redraws_the_charts_and_the_trace_from_the_csvs() {
    let sb = Sandbox::new();
    let dir = sweep_folder(&sb.path().join("t4/depth_sweep"), "Tesla T4", 600 * MIB, 40 * MIB, SPEC);
    oomlab().args(["plot", dir.to_str().unwrap()]).assert().success().stdout(
        predicate::str::contains("peak_vs_depth")
            .and(predicate::str::contains("timeline_trial6")) // depth 5: the highest that fit
            .and(predicate::str::contains("timeline_trial5")) // depth 6: the first OOM
            .and(predicate::str::contains("trace.json")),
    );
    for stem in ["peak_vs_depth", "timeline_trial6", "timeline_trial5"] {
        assert_eq!(png_size(&dir.join(format!("{stem}.png"))), (1280, 800));
        let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("How deep before out of memory?") || svg.contains("Memory per phase"), "{stem}");
    }
    let svg = std::fs::read_to_string(dir.join("timeline_trial5.svg")).unwrap();
    assert!(svg.contains("Memory per phase, trial 5: depth 6, the first out of memory"));
    assert!(svg.contains("OOM in backward, step 1: tried to allocate 40.00 MiB"));
    assert!(!dir.join("timeline_trial1.png").exists(), "only the trials chosen");

    let events = trace_json(&dir);
    assert_eq!(
        track_names(&events),
        [
            "trial 1 · depth 1 · ok",
            "trial 2 · depth 2 · ok",
            "trial 3 · depth 4 · ok",
            "trial 4 · depth 8 · OOM in backward",
            "trial 5 · depth 6 · OOM in backward",
            "trial 6 · depth 5 · ok",
        ]
    );
    assert!(events.iter().any(|e| e["ph"] == "C" && e["name"] == "device_used"));

    // --trial adds a timeline; a trial that is not there is named.
    oomlab()
        .args(["plot", dir.to_str().unwrap(), "--trial", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("timeline_trial1"));
    assert_eq!(png_size(&dir.join("timeline_trial1.png")), (1280, 800));
    oomlab()
        .args(["plot", dir.to_str().unwrap(), "--trial", "99"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--trial 99").and(predicate::str::contains("1, 2, 3, 4, 5, 6")));
    oomlab()
        .args(["plot", sb.path().join("nowhere").to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("is not a folder"));
}

#[test]
fn compare_writes_the_table_and_overlaid_charts() {
    let sb = Sandbox::new();
    let a = sweep_folder(&sb.path().join("results/t4/depth_sweep"), "Tesla T4", 600 * MIB, 40 * MIB, SPEC);
    let b = sweep_folder(&sb.path().join("results/h100/depth_sweep"), "H100", 1200 * MIB, 40 * MIB, SPEC);
    // The H100 fits twice as deep: its trials at twice the depths (2, 4, 8 fit, 16 and 12 OOM,
    // 10 fits), in summary.csv and in trace.csv's rows, which name their trial's value too; and
    // its answer so.
    for file in ["summary.csv", "trace.csv"] {
        let mut reader = csv::Reader::from_path(b.join(file)).unwrap();
        let header = reader.headers().unwrap().clone();
        let doubled: Vec<csv::StringRecord> = reader
            .records()
            .map(|r| {
                let r = r.unwrap();
                let twice = |c: &str| (c.parse::<f64>().unwrap() * 2.0).to_string();
                r.iter()
                    .zip(&header)
                    .map(|(c, h)| if h == "value" || h == "depth" { twice(c) } else { c.into() })
                    .collect()
            })
            .collect();
        let mut writer = csv::Writer::from_path(b.join(file)).unwrap();
        writer.write_record(&header).unwrap();
        doubled.iter().for_each(|r| writer.write_record(r).unwrap());
        writer.flush().unwrap();
    }
    let mut m: Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("manifest.json")).unwrap()).unwrap();
    m["answers"][0]["largest_fit"] = json!(10);
    m["answers"][0]["first_oom"] = json!(12);
    std::fs::write(b.join("manifest.json"), m.to_string()).unwrap();

    oomlab()
        .current_dir(sb.path())
        .args(["compare", a.to_str().unwrap(), b.to_str().unwrap()])
        .assert()
        .success()
        .stderr(predicate::str::contains("warning").not())
        .stdout(predicate::str::contains("A: Tesla T4, budget 600.00 MiB"));
    let out = sb.path().join("runs/compare/depth_sweep");
    let md = std::fs::read_to_string(out.join("COMPARE.md")).expect("COMPARE.md under runs/compare");
    let md = oomlab::markdown::squeezed(&md);
    let lines: Vec<&str> = md.lines().collect();
    let a_line = format!("| A | Tesla T4 | 600.00 MiB | 16.00 GiB | complete | `{}` |", a.display());
    for line in [
        "# depth_sweep: 2 results compared",
        a_line.as_str(),
        "## model.depth",
        "| figure | A | B | B / A |",
        "| largest depth that fit | 5 | 10 | 2.00 |",
        "| first depth out of memory | 6 | 12 | 2.00 |",
        "![compare_peak_vs_depth.png](compare_peak_vs_depth.png)",
    ] {
        assert!(lines.contains(&line), "{line:?} not in\n{md}");
    }
    assert!(!md.contains("Warning"));
    assert_eq!(png_size(&out.join("compare_peak_vs_depth.png")), (1280, 800));
    let svg = std::fs::read_to_string(out.join("compare_peak_vs_depth.svg")).unwrap();
    for text in ["A: Tesla T4, budget 600.00 MiB", "B: H100, budget 1.17 GiB", "peak reserved (% of budget)"]
    {
        assert!(svg.contains(text), "{text:?} not in the SVG");
    }

    // --out elsewhere; a spec that runs something else (a batch size) is warned about, on
    // stderr and in the table.
    let c = sweep_folder(
        &sb.path().join("c/depth_sweep"),
        "CPU",
        600 * MIB,
        40 * MIB,
        &format!("{SPEC}# edited\n"),
    );
    let manifest = c.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["spec"]["base"] = json!({"training": {"batch_size": 64}});
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let elsewhere = sb.path().join("cmp");
    oomlab()
        .args(["compare", a.to_str().unwrap(), c.to_str().unwrap(), "--out", elsewhere.to_str().unwrap()])
        .assert()
        .success()
        .stderr(predicate::str::contains("warning: the spec file of B differs from A's"));
    let md = std::fs::read_to_string(elsewhere.join("COMPARE.md")).unwrap();
    assert!(md.contains("> **Warning:** the spec file of B differs from A's"), "{md}");
    assert!(md.contains("B differs in base: absent in A, {\"training\":{\"batch_size\":64}} in B."), "{md}");

    // A folder given twice, by two paths, is refused before anything is written.
    let again = a.join("../depth_sweep");
    let nothing = sb.path().join("twice");
    oomlab()
        .args(["compare", a.to_str().unwrap(), again.to_str().unwrap(), "--out", nothing.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("the same folder is given as A (")
                .and(predicate::str::contains("compared with itself")),
        );
    assert!(!nothing.exists(), "nothing written for a refused comparison");
}

#[test]
fn compare_refuses_different_experiments_and_a_single_folder() {
    let sb = Sandbox::new();
    let a = sweep_folder(&sb.path().join("a/depth_sweep"), "Tesla T4", 600 * MIB, 40 * MIB, SPEC);
    let width = SPEC.replace("depth_sweep", "width_sweep");
    let b = sweep_folder(&sb.path().join("b/width_sweep"), "Tesla T4", 600 * MIB, 40 * MIB, &width);
    let mut m: Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("manifest.json")).unwrap()).unwrap();
    m["experiment"] = json!("width_sweep");
    std::fs::write(b.join("manifest.json"), m.to_string()).unwrap();
    let out = sb.path().join("out");
    oomlab()
        .args(["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("different experiments")
                .and(predicate::str::contains("\"depth_sweep\""))
                .and(predicate::str::contains("\"width_sweep\"")),
        );
    assert!(!out.exists(), "nothing written");
    oomlab().args(["compare", a.to_str().unwrap()]).assert().failure();
}

#[test]
fn a_run_writes_trace_json_and_plot_redraws_what_run_drew() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n";
    let spec = sb.spec("two.toml", &tiny_spec("two", "hidden = 16", None, sweep));
    let run = oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .assert()
        .success();
    // "N charts (.png, .svg) in DIR:" and the names on the lines below, indented deeper.
    let charts = |out: &[u8]| -> (PathBuf, Vec<String>) {
        let text = String::from_utf8_lossy(out).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.iter().position(|l| l.contains(" charts (.png, .svg) in ")).expect("a chart list");
        let indent = |l: &str| l.len() - l.trim_start().len();
        let dir = lines[at].split_once(" in ").unwrap().1.trim_end_matches(':').to_string();
        let mut names: Vec<String> = lines[at + 1..]
            .iter()
            .take_while(|l| indent(l) > indent(lines[at]))
            .flat_map(|l| l.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()))
            .collect();
        names.sort();
        (PathBuf::from(dir), names)
    };
    let (dir, drawn) = charts(&run.get_output().stdout);
    assert!(drawn.iter().any(|c| c == "timeline_trial2"), "{drawn:?}");
    assert!(dir.join("timeline_trial2.png").is_file() && dir.join("timeline_trial2.svg").is_file());
    let events = trace_json(&dir);
    assert_eq!(track_names(&events), ["trial 1 · depth 1 · ok", "trial 2 · depth 2 · ok"]);
    let live = std::fs::read_to_string(dir.join("trace.json")).unwrap();

    let plot = oomlab().args(["plot", dir.to_str().unwrap()]).assert().success();
    assert_eq!(charts(&plot.get_output().stdout).1, drawn, "run and plot draw the same charts");
    // A device's folder: each experiment in it.
    let device = oomlab().args(["plot", dir.parent().unwrap().to_str().unwrap()]).assert().success();
    assert_eq!(charts(&device.get_output().stdout).1, drawn, "the device folder's one experiment");
    assert_eq!(std::fs::read_to_string(dir.join("trace.json")).unwrap(), live, "the same trace.json");
}

#[test]
fn a_killed_run_leaves_a_trace_json_that_parses() {
    let sb = Sandbox::new();
    let dir = common::killed_after_first_trial(&sb);

    let events = trace_json(&dir);
    assert_eq!(track_names(&events), ["trial 1 · steps 1 · ok"], "the finished trial only");

    // plot works on the killed run: trial 1's timeline. trace.csv holds whole trials only, so
    // trial 2, cut by the kill, is in neither file.
    oomlab()
        .args(["plot", dir.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("timeline_trial1"));
    oomlab()
        .args(["plot", dir.to_str().unwrap(), "--trial", "2"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--trial 2: no such trial"));
    let events = trace_json(&dir);
    assert_eq!(track_names(&events), ["trial 1 · steps 1 · ok"]);

    // A kill in the middle of writing a row: plot draws the whole rows and says so.
    let trace = dir.join("trace.csv");
    let text = std::fs::read_to_string(&trace).unwrap();
    std::fs::write(&trace, format!("{text}2,0,0,da")).unwrap();
    oomlab()
        .args(["plot", dir.to_str().unwrap()])
        .assert()
        .success()
        .stderr(predicate::str::contains("the CSVs end in part of a trial"));
}

/// The timeline draws the prediction its run recorded in trace.csv (made on the machine that ran
/// it), never one made again where it is plotted: rows without one draw none.
#[test]
fn the_timeline_draws_the_prediction_its_run_recorded() {
    let sb = Sandbox::new();
    let spec = sb.spec("pred.toml", &tiny_spec("pred", "hidden = 16\ndepth = 2", None, ""));
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .assert()
        .success();
    let dir = common::walk(&sb.out()).into_iter().find(|p| p.ends_with("summary.csv")).unwrap();
    let dir = dir.parent().unwrap().to_path_buf();
    let exp = oomlab::results::ExperimentDir::read(&dir).unwrap();
    let config = oomlab::spec::load(&spec).unwrap().configs()[0].1.clone();
    let predicted = {
        let _in_process = common::in_process();
        oomlab::estimate::predict(&config).unwrap()
    };
    let base = exp.rows[0].baseline_allocated;
    assert!(!exp.trace.is_empty());
    for r in &exp.trace {
        let want = predicted.phase(r.step, r.micro, r.phase).map(|p| base + p.peak);
        assert_eq!(r.predicted_peak, want, "step {} {}", r.step, r.phase);
    }
    let label = oomlab::chart::style::PREDICTED_LABEL;
    let svg = || std::fs::read_to_string(dir.join("timeline_trial1.svg")).unwrap();
    assert!(svg().contains(label), "the recorded prediction is drawn");

    // The same folder without the column (as runs before it was recorded): no prediction drawn.
    let trace = std::fs::read_to_string(dir.join("trace.csv")).unwrap();
    let column = trace.lines().next().unwrap().split(',').position(|c| c == "predicted_peak").unwrap();
    let without: Vec<String> = trace
        .lines()
        .map(|l| {
            l.split(',')
                .enumerate()
                .filter(|(i, _)| *i != column)
                .map(|(_, c)| c)
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    std::fs::write(dir.join("trace.csv"), without.join("\n") + "\n").unwrap();
    oomlab().args(["plot", dir.to_str().unwrap()]).assert().success();
    assert!(!svg().contains(label), "a prediction not recorded is not made up");
}
