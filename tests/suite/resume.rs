//! `run --resume`: a sweep killed at several points and resumed ends with the results of an
//! uninterrupted run (memory to the byte, same trials, same answer), and a resume that does not
//! match what ran is refused with the difference named.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::{Duration, Instant};

use common::{tiny_spec, Sandbox};
use oomlab::results::manifest::Answer;
use oomlab::results::ExperimentDir;
use oomlab::schema::{PhaseRecord, SummaryRow};
use predicates::prelude::*;

/// A search over depth under a budget, unguided so that it takes many probes (start, max, then
/// bisecting, out of memory on the way: 1, 64, 32, 16, 8, 4, 6, 5); a trial long enough (many
/// steps) that a kill lands inside one. Under 5.5 MiB the last probe, depth 5, trains all its
/// steps (a last probe out of memory would end before a kill after the one before could land).
fn search_spec(sb: &Sandbox) -> PathBuf {
    let sweep =
        "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, factor = 2, max = 64, guided = false }\n";
    let text = tiny_spec("resumable", "hidden = 256\ndepth = 1", Some(11 << 19), sweep)
        .replace("steps = 1", "steps = 40")
        .replace("optimizer = \"sgd\"", "optimizer = \"adam\"");
    sb.spec("resumable.toml", &text)
}

fn oomlab(args: &[&str]) -> std::process::Output {
    Process::new(common::bin()).args(args).output().unwrap()
}

fn folder(out: &Path) -> PathBuf {
    out.join(std::fs::read_dir(out).unwrap().next().unwrap().unwrap().file_name()).join("resumable")
}

/// What must not depend on being killed: every column but the times.
fn memory(rows: &[SummaryRow]) -> Vec<SummaryRow> {
    rows.iter().map(SummaryRow::untimed).collect()
}

/// The answers but for the probes' times (measured again where trials ran again).
fn answers(e: &ExperimentDir) -> Vec<Answer> {
    e.manifest.answers.iter().map(|a| Answer { probe_seconds: None, ..a.clone() }).collect()
}

fn trace_memory(trace: &[PhaseRecord]) -> Vec<PhaseRecord> {
    trace.iter().map(PhaseRecord::untimed).collect()
}

/// Starts the run, waits until `trials` trials are in summary.csv, and SIGKILLs it.
fn kill_after(spec: &Path, out: &Path, trials: usize) {
    let mut child = Process::new(common::bin())
        .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let summary = common::walk(out).into_iter().find(|p| p.ends_with("summary.csv"));
        let rows = summary.map_or(0, |p| std::fs::read_to_string(p).unwrap_or_default().lines().count());
        if rows > trials || child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the run never reached trial {trials}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    child.wait().unwrap();
}

#[test]
fn a_killed_search_resumed_equals_an_uninterrupted_one() {
    let sb = Sandbox::new();
    let spec = search_spec(&sb);
    let whole_out = sb.path().join("whole");
    let out = oomlab(&["run", spec.to_str().unwrap(), "--out", whole_out.to_str().unwrap(), "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let whole = ExperimentDir::read(&folder(&whole_out)).unwrap();
    assert!(whole.rows.len() >= 6, "a search with a bisection: {} trials", whole.rows.len());
    assert!(whole.rows.iter().any(|r| r.status == oomlab::schema::Status::Oom));

    // Killed at three points drawn by a seeded generator (the first trial, one at random in
    // between, the last but one: the edges always, the middle anywhere): each resumed, twice
    // where the first resume is itself killed.
    let n = whole.rows.len();
    let mut rng = common::rng::Rng(0x5eed_0013);
    let middle = 2 + rng.below(n - 3);
    for (k, at) in [1, middle, n - 1].into_iter().enumerate() {
        let cut_out = sb.path().join(format!("cut{k}"));
        kill_after(&spec, &cut_out, at);
        let cut = ExperimentDir::read(&folder(&cut_out)).unwrap();
        assert!(cut.rows.len() < n, "killed before the end ({} of {n})", cut.rows.len());
        if k == 1 {
            // Resume, and kill the resume too, one trial further.
            let args =
                ["run", spec.to_str().unwrap(), "--out", cut_out.to_str().unwrap(), "--quiet", "--resume"];
            let mut child = Process::new(common::bin()).args(args).spawn().unwrap();
            let dir = folder(&cut_out);
            let started = Instant::now();
            while std::fs::read_to_string(dir.join("summary.csv")).unwrap_or_default().lines().count()
                <= cut.rows.len() + 1
                && child.try_wait().unwrap().is_none()
            {
                assert!(started.elapsed() < Duration::from_secs(120));
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            child.wait().unwrap();
        }
        let out = oomlab(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            cut_out.to_str().unwrap(),
            "--quiet",
            "--resume",
        ]);
        assert!(out.status.success(), "resume after {at}: {}", String::from_utf8_lossy(&out.stderr));
        let resumed = ExperimentDir::read(&folder(&cut_out)).unwrap();
        assert_eq!(resumed.manifest.status, oomlab::results::RunStatus::Complete);
        assert_eq!(answers(&resumed), answers(&whole), "killed after {at}");
        assert_eq!(memory(&resumed.rows), memory(&whole.rows), "killed after {at}: summary");
        assert_eq!(trace_memory(&resumed.trace), trace_memory(&whole.trace), "killed after {at}: trace");
        assert!(!resumed.manifest.resumed_at.is_empty());
        // The sweep's time is every trial's, those measured before the kill too.
        let trials: f64 = resumed.rows.iter().filter_map(|r| r.trial_seconds).sum();
        let swept: f64 = resumed.manifest.answers.iter().filter_map(|a| a.probe_seconds).sum();
        assert!(
            swept >= trials * 0.999,
            "killed after {at}: the sweep took {swept} s, its trials {trials} s"
        );
        assert!(!folder(&cut_out).join("summary.csv.resuming").exists());
    }
}

#[test]
fn a_resume_that_does_not_match_is_refused() {
    let sb = Sandbox::new();
    let spec = search_spec(&sb);
    let out = sb.out();
    let run = |extra: &[&str]| {
        let mut cmd = common::oomlab();
        cmd.args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]).args(extra);
        cmd.assert()
    };
    run(&["--resume"]).failure().stderr(predicate::str::contains("nothing to resume"));
    kill_after(&spec, &out, 1);
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, text.replace("steps = 40", "steps = 41")).unwrap();
    run(&["--resume"]).failure().stderr(
        predicate::str::contains("the spec changed")
            .and(predicate::str::contains("`steps = 40` became `steps = 41`")),
    );
    std::fs::write(&spec, &text).unwrap();
    run(&["--resume", "--budget", "7MiB"]).failure().stderr(predicate::str::contains("same budget"));
    // Traced at the default level: another level's rows would not mix with its own.
    run(&["--resume", "--trace", "sync"])
        .failure()
        .stderr(predicate::str::contains("was traced with --trace phases, this one asks for --trace sync"));
    // Made by another build: refused rather than mixed.
    let manifest = folder(&out).join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let other =
        text.replace(&format!("\"oomlab\": \"{}\"", env!("CARGO_PKG_VERSION")), "\"oomlab\": \"0.0.1\"");
    assert_ne!(other, text, "the manifest names oomlab's version");
    std::fs::write(&manifest, other).unwrap();
    run(&["--resume"]).failure().stderr(predicate::str::contains("do not mix"));
    std::fs::write(&manifest, text).unwrap();
    run(&["--resume"]).success();
    run(&["--resume"]).failure().stderr(predicate::str::contains("holds a complete run"));
    run(&["--resume", "--force"]).failure().stderr(predicate::str::contains("cannot be used with"));
}

/// A run killed before its first trial ended (a manifest, no CSVs yet) resumes from the start.
#[test]
fn a_run_killed_before_any_trial_resumes_from_the_start() {
    let sb = Sandbox::new();
    let spec = search_spec(&sb);
    let out = sb.out();
    kill_after(&spec, &out, 1);
    let dir = folder(&out);
    let trials = ExperimentDir::read(&dir).unwrap().rows.len();
    for f in ["summary.csv", "trace.csv"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let done =
        oomlab(&["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let exp = ExperimentDir::read(&dir).unwrap();
    assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Complete);
    assert!(exp.rows.len() > trials && exp.rows.iter().enumerate().all(|(i, r)| r.trial == i + 1));
}

/// A folder written before `oom_phase`, `oom_step` and the model kind's columns (its header
/// says `phase` and `step`, and has none of those) resumes: its rows are read through the old
/// names and the whole file is written again in the current header, the kept rows as they were
/// (their new columns empty), the trials run now with theirs filled.
#[test]
fn a_folder_with_the_old_summary_header_resumes_in_the_new_one() {
    let sb = Sandbox::new();
    let spec = search_spec(&sb);
    let out = sb.out();
    kill_after(&spec, &out, 2);
    let dir = folder(&out);
    let path = dir.join("summary.csv");
    // A run writes the new names.
    // Whole rows only (a kill may land while one is written).
    let text = std::fs::read_to_string(&path).unwrap();
    let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let mut rd = csv::Reader::from_reader(whole.as_bytes());
    let header: Vec<String> = rd.headers().unwrap().iter().map(str::to_string).collect();
    assert!(header.iter().any(|c| c == "oom_phase") && header.iter().any(|c| c == "oom_step"), "{header:?}");
    assert!(!header.iter().any(|c| c == "phase" || c == "step"), "{header:?}");
    // The file as oomlab wrote it before 2026-11-26.
    let new_only = [
        "model_kind",
        "arch",
        "channels",
        "d_model",
        "nhead",
        "num_layers",
        "dim_feedforward",
        "image_channels",
        "image_size",
        "seq_len",
        "vocab",
    ];
    let keep: Vec<usize> = (0..header.len()).filter(|&i| !new_only.contains(&header[i].as_str())).collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let old_name = |c: &str| match c {
        "oom_phase" => "phase".to_string(),
        "oom_step" => "step".to_string(),
        c => c.to_string(),
    };
    w.write_record(keep.iter().map(|&i| old_name(&header[i]))).unwrap();
    for record in rd.records() {
        let record = record.unwrap();
        w.write_record(keep.iter().map(|&i| &record[i])).unwrap();
    }
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();

    let before = ExperimentDir::read(&dir).unwrap();
    let k = before.rows.len();
    assert!(k >= 2, "killed after trial 2: {k} trials");
    let oom = &before.rows[1];
    assert_eq!(oom.status, oomlab::schema::Status::Oom, "depth 64 is over the budget");
    assert!(oom.phase.is_some() && oom.step.is_some(), "read through the old names: {oom:?}");
    assert!(before.rows.iter().all(|r| r.model_kind.is_none()));

    let done =
        oomlab(&["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let text = std::fs::read_to_string(&path).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert!(header.contains(&"oom_phase") && header.contains(&"model_kind"), "{header:?}");
    assert!(!header.contains(&"phase") && !header.contains(&"step"), "{header:?}");
    let after = ExperimentDir::read(&dir).unwrap();
    assert_eq!(after.manifest.status, oomlab::results::RunStatus::Complete);
    assert!(after.rows.len() > k, "the search went on: {} trials", after.rows.len());
    assert_eq!(after.rows[..k], before.rows[..], "the kept rows as they were");
    assert!(after.rows[k..]
        .iter()
        .all(|r| r.model_kind == Some(oomlab::spec::ModelKind::Mlp) && r.depth == r.value.unwrap() as usize));
}

/// The spec names its data set's file, not what is in it: a resume after the file was replaced
/// would put two data sets' trials in one folder. Refused, naming the file; with the file as it
/// was, the resume goes on.
#[test]
fn a_resume_after_the_data_file_changed_is_refused() {
    let sb = Sandbox::new();
    let rows: String = (0..64).map(|i| format!("{},{},{}\n", i % 7, (i * 3) % 5, i % 4)).collect();
    let data = sb.spec("data.csv", &format!("a,b,label\n{rows}"));
    let text = std::fs::read_to_string(search_spec(&sb)).unwrap().replace(
        "samples = 32\nfeatures = 32\nclasses = 4\n",
        &format!("kind = \"csv\"\npath = {data:?}\nlabel = \"label\"\n"),
    );
    assert!(text.contains("kind = \"csv\""), "{text}");
    let spec = sb.spec("resumable.toml", &text);
    let out = sb.out();
    kill_after(&spec, &out, 1);
    let resume = || {
        let mut cmd = common::oomlab();
        cmd.args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"]);
        cmd.assert()
    };
    let was = std::fs::read_to_string(&data).unwrap();
    std::fs::write(&data, was.replace("\n1,", "\n2,")).unwrap();
    resume().failure().stderr(
        predicate::str::contains("data.csv changed").and(predicate::str::contains("put the file back")),
    );
    std::fs::write(&data, &was).unwrap();
    resume().success();
    let manifest = ExperimentDir::read(&folder(&out)).unwrap().manifest;
    assert_eq!(manifest.inputs.len(), 1, "the data set is fingerprinted: {:?}", manifest.inputs);
    assert_eq!(manifest.inputs[0].bytes, was.len() as u64);
}
