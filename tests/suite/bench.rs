//! `oomlab bench --quick` end to end on the CPU, against the PyTorch 2.11 wheel that
//! `scripts/setup-libtorch` installs (found as tests/suite/pytorch_oracle.rs finds it): every
//! contender's process runs, the files are written where they belong, both sides trained the
//! same model (the parameters the configuration has, and equal final losses: the same seeds and
//! kernels give the same bits), and BENCH files are replaced only with --force, nothing else in
//! the device's folder touched. No timing is asserted: timings are the bench's, not the tests'.
//!
//! Without python3, or a torch it can import, this test fails and says so: it does not skip.
use std::path::{Path, PathBuf};
use std::process::Command;

use oomlab::bench::{Contender, Plan};

use crate::common;
use common::{torch_site, Sandbox};

/// `oomlab bench --quick --device cpu --out OUT --threads 1` and `extra`.
fn bench(out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .args(["bench", "--quick", "--device", "cpu", "--threads", "1", "--out"])
        .arg(out)
        .args(extra)
        .env("PYTHONPATH", torch_site())
        .output()
        .expect("oomlab runs")
}

/// The one device folder under `out`.
fn device_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(dirs.len(), 1, "one device folder: {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// From "Same model: N parameters on both sides; final loss A (oomlab) and B (PyTorch), ...".
fn same_model(line: &str) -> (u64, f64, f64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w).unwrap_or_else(|| panic!("{w:?} in {line}"));
    let params = words[2].parse().unwrap();
    let oomlab = words[at("(oomlab)") - 1].parse().unwrap();
    let pytorch = words[at("(PyTorch),") - 1].parse().unwrap();
    (params, oomlab, pytorch)
}

#[test]
fn quick_bench_runs_both_sides_on_the_same_model_and_writes_its_files() {
    let sb = Sandbox::new();
    let out = sb.out();
    let ran = bench(&out, &[]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "oomlab bench --quick failed:\n{stderr}");
    let dir = device_dir(&out);
    for f in ["BENCH.md", "bench.csv", "bench.png", "bench.svg"] {
        let len = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{f} written in {}", dir.display());
    }
    assert!(!dir.join("bench.partial.csv").exists(), "a complete bench leaves no partial samples");

    // What --quick runs without --config: each role once.
    let plan = Plan::new(false, true).unwrap().only(&[]).unwrap();
    assert_eq!(plan.configs.len(), 4);
    let md = std::fs::read_to_string(dir.join("BENCH.md")).unwrap();
    let sections: Vec<&str> = md.split("\n## ").collect();
    for c in &plan.configs {
        let section = sections
            .iter()
            .find(|s| s.starts_with(&format!("{}: ", c.name)))
            .unwrap_or_else(|| panic!("no section for {} in BENCH.md:\n{md}", c.name));
        for k in Contender::ALL {
            assert!(section.contains(&format!("| {k} | ")), "{k} in {}:\n{section}", c.name);
        }
        let line = section.lines().find(|l| l.starts_with("Same model: ")).expect("a same-model line");
        let (params, oomlab, pytorch) = same_model(line);
        assert_eq!(params, c.param_count(), "{}: the configuration's parameters on both sides", c.name);
        assert!(oomlab.is_finite() && oomlab > 0.0, "{}: {line}", c.name);
        assert!(
            ((oomlab - pytorch) / pytorch).abs() < 1e-6,
            "{}: oomlab and PyTorch trained to different losses, so not the same model the same way: {line}",
            c.name
        );
    }
    assert!(md.contains("| tch / libtorch | 0.24.0 / 2.11.0 |"), "{md}");
    assert!(md.contains("| Python / torch | 3.") && md.contains(" / 2.11.0"), "the wheel's torch: {md}");
    assert!(md.contains("## Targets") && md.contains("oomlab-off / pytorch"), "{md}");
    // The estimate's own speed: the lesson's spec, cold and warm, judged against 2 s.
    let est = md.split("## estimate\n").nth(1).unwrap_or_else(|| panic!("an estimate section: {md}"));
    let row = est.lines().find(|l| l.starts_with("| depth_sweep | ")).expect("depth_sweep timed");
    assert!(row.ends_with("| met |") || row.contains("| missed by "), "{row}");

    // bench.csv: every configuration x contender x timed step, and the synchronised phases.
    let csv = std::fs::read_to_string(dir.join("bench.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    for c in &plan.configs {
        for k in Contender::ALL {
            let steps =
                rows.iter().filter(|r| r[0] == c.name && r[1] == k.as_str() && r[4] == "step").count();
            assert_eq!(steps, c.steps, "{} {k}: one row per timed step", c.name);
        }
        for k in [Contender::OomlabSync, Contender::PytorchSync] {
            let backward = rows.iter().filter(|r| r[0] == c.name && r[1] == k.as_str() && r[4] == "backward");
            assert_eq!(backward.count(), c.steps, "{} {k}: its backward per step", c.name);
        }
    }
    assert!(rows.iter().all(|r| r[5].parse::<f64>().is_ok_and(|s| s >= 0.0)), "seconds are numbers");

    // Again: refused without --force, before running anything; with --force only the BENCH
    // files are replaced, and another experiment's folder beside them stays.
    let keep = dir.join("depth_sweep/summary.csv");
    std::fs::create_dir_all(keep.parent().unwrap()).unwrap();
    std::fs::write(&keep, "another experiment's").unwrap();
    let refused = bench(&out, &["--config", "3x16-fused"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--force") && err.contains("BENCH.md"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("BENCH.md")).unwrap(), md, "refusing leaves BENCH.md");
    let forced = bench(&out, &["--config", "3x16-fused", "--force"]);
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    let again = std::fs::read_to_string(dir.join("BENCH.md")).unwrap();
    assert!(again.contains("## 3x16-fused: ") && !again.contains("## 4x32: "), "replaced by the new run");
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "another experiment's");
}

/// Ctrl-C during the rounds keeps what was measured: every sample is in bench.partial.csv before
/// the next process starts, and the error says where, in a bench's words (not a run's trials);
/// exit 130, and no BENCH.md is written from rounds that did not all run.
#[test]
fn a_bench_stopped_by_ctrl_c_keeps_its_samples_and_says_where() {
    let sb = Sandbox::new();
    let out = sb.out();
    let mut child = Command::new(common::bin())
        .args(["bench", "--quick", "--device", "cpu", "--threads", "1", "--out"])
        .arg(&out)
        .env("PYTHONPATH", torch_site())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("oomlab runs");
    let started = std::time::Instant::now();
    let partial = loop {
        let found = std::fs::read_dir(&out)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bench.partial.csv"))
            .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.lines().count() >= 2));
        if let Some(p) = found {
            break p;
        }
        assert!(child.try_wait().unwrap().is_none(), "the bench ended before its first sample was saved");
        assert!(started.elapsed() < std::time::Duration::from_secs(300), "no sample within 5 minutes");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let ok = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("the samples measured so far are in"), "{stderr}");
    assert!(!stderr.contains("trial in progress"), "a bench has no trials: {stderr}");
    let rows = std::fs::read_to_string(&partial).unwrap().lines().count();
    assert!(rows >= 2, "header and at least one sample");
    let dir = partial.parent().unwrap();
    assert!(
        !dir.join("BENCH.md").exists() && !dir.join("bench.csv").exists(),
        "no report from a partial bench"
    );
}
