//! A run as an unlucky or careless user meets it: stopped by a signal, a second run into the
//! same folder, output to a closed pipe, a results root that is a device, trials that all
//! error, and `--quiet`. Each through the real binary on the CPU.
use crate::common::{self, oomlab};

use std::path::PathBuf;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use common::{long_run, tiny_spec, Sandbox};
use oomlab::results::{ExperimentDir, LOCK};
use predicates::prelude::*;

fn signal(child: &std::process::Child, name: &str) {
    let ok = Process::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(ok.success(), "kill -{name}");
}

/// Waits for the child to exit, at most a minute; its exit code.
fn exit_code(mut child: std::process::Child) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("the run did not stop within a minute of the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first SIGINT or SIGTERM ends the trial under way at a phase boundary: exit 128 + the
/// signal, the manifest says `interrupted`, trial 1 is whole in both CSVs, trial 2 in neither,
/// and the folder is free again.
#[test]
fn a_signal_ends_the_run_cleanly_with_its_exit_code() {
    for (name, code) in [("INT", 130), ("TERM", 143)] {
        let sb = Sandbox::new();
        let (child, dir) = long_run(&sb);
        signal(&child, name);
        assert_eq!(exit_code(child), Some(code), "SIG{name}");
        let exp = ExperimentDir::read(&dir).unwrap();
        assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Interrupted, "SIG{name}");
        assert_eq!(exp.manifest.trials, 1);
        assert_eq!(exp.rows.len(), 1, "trial 1 complete, trial 2 dropped");
        assert!(exp.trace.iter().all(|t| t.trial == 1), "no row of the dropped trial");
        let trace = std::fs::read_to_string(dir.join("trace.csv")).unwrap();
        assert!(trace.ends_with('\n'), "no torn row");
        assert!(!dir.join(LOCK).exists(), "the folder is released");
        let json = std::fs::read_to_string(dir.join("trace.json")).unwrap();
        assert!(
            json.contains("trial 1") && !json.contains("trial 2"),
            "trace.json leaves the dropped trial out"
        );
    }
}

/// Ctrl-C in a phase that takes many seconds (a 4096-wide MLP at batch 16384: a forward of 3.3
/// TFLOP, 15-30 s on 2 cores, so that it cannot end between the two signals) is answered at
/// once with what will happen; a second abandons the trial without waiting for the phase: exit
/// 130 within a second or two, the manifest `interrupted`, the folder released, the `--resume`
/// command printed.
#[test]
fn ctrl_c_is_answered_at_once_and_a_second_abandons_the_trial() {
    let sb = Sandbox::new();
    let text = tiny_spec("slow", "hidden = 4096\ndepth = 6", None, "")
        .replace("samples = 32\nfeatures = 32", "samples = 16384\nfeatures = 4096")
        .replace("batch_size = 4", "batch_size = 16384")
        .replace("steps = 1", "steps = 50");
    let spec = sb.spec("slow.toml", &text);
    let err_path = sb.path().join("stderr.txt");
    let child = Process::new(common::bin())
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let started = Instant::now();
    // Into the trial: the workspace line comes just before it.
    while !stderr().contains("workspace") {
        assert!(started.elapsed() < Duration::from_secs(120), "the run never started: {}", stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past the set-up (the data and the model, a second or two each) into step 1's forward.
    std::thread::sleep(Duration::from_millis(5000));
    signal(&child, "INT");
    let asked = Instant::now();
    while !stderr().contains("Ctrl-C again") {
        assert!(asked.elapsed() < Duration::from_secs(1), "the first Ctrl-C went unanswered: {}", stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&child, "INT");
    let abandoned = Instant::now();
    assert_eq!(exit_code(child), Some(130));
    let waited = abandoned.elapsed();
    assert!(waited < Duration::from_secs(3), "the second Ctrl-C waited {waited:?}");
    let err = stderr();
    assert!(err.contains("abandoned the trial") && err.contains("--resume"), "{err}");
    let dir = common::walk(&sb.out()).into_iter().find(|p| p.ends_with("manifest.json")).unwrap();
    let dir = dir.parent().unwrap();
    let manifest = oomlab::results::manifest::Manifest::read(dir).unwrap();
    assert_eq!(manifest.status, oomlab::results::RunStatus::Interrupted);
    assert_eq!(manifest.trials, 0);
    assert!(!dir.join(LOCK).exists(), "the folder is released");
}

/// While a run writes a folder, a second run into it is refused, with `--force` too, and the
/// first run's results are untouched.
#[test]
fn a_folder_belongs_to_one_run() {
    let sb = Sandbox::new();
    let (mut child, dir) = long_run(&sb);
    let spec = sb.path().join("long.toml");
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    for force in [false, true] {
        let mut cmd = oomlab();
        cmd.args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()]);
        if force {
            cmd.arg("--force");
        }
        cmd.assert().failure().stderr(
            predicate::str::contains("another oomlab run")
                .and(predicate::str::contains(child.id().to_string())),
        );
    }
    assert_eq!(std::fs::read_to_string(dir.join("summary.csv")).unwrap(), summary);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `oomlab run … | head -1`: a closed stdout ends the output, not the run.
#[test]
fn a_closed_pipe_does_not_stop_the_run() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3]\n";
    let spec = sb.spec("p.toml", &tiny_spec("p", "hidden = 8\ndepth = 1", None, sweep));
    let mut child = Process::new(common::bin())
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    assert!(child.wait().unwrap().success());
    let exp = ExperimentDir::read(&sb.out().join("cpu").join("p")).or_else(|_| {
        let dir = common::walk(&sb.out()).into_iter().find(|p| p.ends_with("manifest.json")).unwrap();
        ExperimentDir::read(dir.parent().unwrap())
    });
    let exp = exp.unwrap();
    assert_eq!((exp.manifest.status, exp.rows.len()), (oomlab::results::RunStatus::Complete, 3));
}

#[test]
fn a_device_or_a_file_is_not_a_results_folder() {
    let sb = Sandbox::new();
    let spec = sb.spec("d.toml", &tiny_spec("d", "hidden = 8\ndepth = 1", None, ""));
    let file = sb.spec("not-a-folder", "");
    for out in ["/dev/null", file.to_str().unwrap()] {
        oomlab()
            .args(["run", spec.to_str().unwrap(), "--out", out])
            .assert()
            .failure()
            .stderr(predicate::str::contains("is not a folder"));
    }
}

/// A bad value in a CSV data set is refused before anything is written, by row and column
/// (every trial would fail on it, and their folder would stand in the way of the mended run). A
/// run none of whose trials completed for a reason other than memory (a module that raises at
/// a batch larger than the preflight's two rows) exits non-zero and says why; `--quiet` prints
/// nothing when all is well.
#[test]
fn a_run_that_measured_nothing_fails_and_quiet_is_quiet() {
    let sb = Sandbox::new();
    let data = sb.spec("bad.csv", "a,label\n1.5,0\nx,1\n");
    let text = tiny_spec("bad", "hidden = 8\ndepth = 1", None, "")
        .replace(
            "samples = 32\nfeatures = 32\nclasses = 4\n",
            &format!("kind = \"csv\"\npath = {:?}\nlabel = \"label\"\n", data),
        )
        .replace("batch_size = 4", "batch_size = 1");
    let spec = sb.spec("bad.toml", &text);
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("row 3, column 1: not a number"));
    assert!(common::walk(&sb.out()).is_empty(), "nothing written: {:?}", common::walk(&sb.out()));

    let module = sb.path().join("picky.pt");
    let export = "import sys, torch, torch.nn as nn\n\
                  class Picky(nn.Module):\n    def __init__(self):\n        super().__init__()\n        \
                  self.fc = nn.Linear(32, 4)\n    def forward(self, x):\n        if x.shape[0] > 2:\n            \
                  raise RuntimeError('picky: batches of at most 2')\n        return self.fc(x)\n\
                  torch.jit.save(torch.jit.script(Picky()), sys.argv[1])\n";
    // A file, not `-c`: scripting reads the class's source.
    let script = sb.spec("export.py", export);
    let out = Process::new("python3")
        .arg(&script)
        .arg(&module)
        .env("PYTHONPATH", common::torch_site())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = tiny_spec("picky", &format!("kind = \"torchscript\"\npath = {:?}", module), None, "");
    let spec = sb.spec("picky.toml", &text);
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no trial completed").and(predicate::str::contains("picky")));

    let spec = sb.spec("q.toml", &tiny_spec("q", "hidden = 8\ndepth = 1", None, ""));
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .assert()
        .success()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::is_empty());
}

/// A signal while the charts are drawn (256 variants: seconds of charts after a fraction of a
/// second of trials) stops the drawing between two charts with the signal's exit code, the
/// manifest `interrupted` with every trial kept; `--resume` then draws the charts and finishes.
/// Two signals: the second exits at once, the folder marked interrupted and released.
#[test]
fn a_signal_while_charts_are_drawn_stops_them_and_resume_draws_them() {
    for signals in [1, 2] {
        let sb = Sandbox::new();
        let variants: String = (0..256).map(|i| format!("[[variant]]\nname = \"v{i}\"\n")).collect();
        let text = tiny_spec("many", "hidden = 8\ndepth = 1", None, "")
            + &format!("[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n{variants}");
        let spec = sb.spec("many.toml", &text);
        let run = |resume: bool| {
            let mut cmd = Process::new(common::bin());
            cmd.args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"]);
            if resume {
                cmd.arg("--resume");
            }
            cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
        };
        let child = run(false);
        let dir = sb.out().join(oomlab::device::slug(&oomlab::device::cpu_name())).join("many");
        let started = Instant::now();
        let rows = || std::fs::read_to_string(dir.join("summary.csv")).map_or(0, |t| t.lines().count());
        while rows() < 513 {
            assert!(started.elapsed() < Duration::from_secs(120), "the trials never ended: {} rows", rows());
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&child, "INT");
        if signals == 2 {
            std::thread::sleep(Duration::from_millis(100));
            signal(&child, "INT");
        }
        assert_eq!(exit_code(child), Some(130), "{signals} signal(s): the signal's exit code, not 0");
        let exp = ExperimentDir::read(&dir).unwrap();
        assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Interrupted, "{signals} signal(s)");
        assert_eq!(exp.rows.len(), 512, "every trial kept");
        assert!(!dir.join(LOCK).exists(), "the folder is released");
        let charts =
            || common::walk(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "png")).count();
        let drawn = charts();
        assert!(drawn < 256, "the drawing went on to {drawn} charts");
        let child = run(true);
        assert_eq!(exit_code(child), Some(0));
        let exp = ExperimentDir::read(&dir).unwrap();
        assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Complete);
        assert_eq!(exp.rows.len(), 512);
        assert!(charts() >= 256, "--resume drew every variant's chart: {}", charts());
    }
}

/// SIGHUP (the terminal closed, an ssh session dropped) stops a run as SIGTERM does: exit 129,
/// the folder `interrupted` with trial 1 whole, released, and the `--resume` command printed,
/// which a shell runs as pasted: this binary by the path it has from here (it is not on PATH), the
/// budget as it was typed.
#[test]
fn sighup_stops_a_run_as_sigterm_does() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"training.steps\"\nvalues = [1, 100000, 100001]\n";
    let spec = sb.spec("long.toml", &tiny_spec("long", "hidden = 64\ndepth = 2", None, sweep));
    let err_path = sb.path().join("stderr.txt");
    let child = Process::new(common::bin())
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .args(["--device", "cpu", "--budget", "1GiB"])
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let dir = loop {
        let found = common::walk(&sb.out()).into_iter().find(|p| p.ends_with("summary.csv"));
        if let Some(p) = found.filter(|p| std::fs::read_to_string(p).unwrap().lines().count() >= 2) {
            break p.parent().unwrap().to_path_buf();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "trial 1 never reached summary.csv");
        std::thread::sleep(Duration::from_millis(100));
    };
    signal(&child, "HUP");
    assert_eq!(exit_code(child), Some(129), "SIGHUP's code, from the process, not a death by the signal");
    let exp = ExperimentDir::read(&dir).unwrap();
    assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Interrupted);
    assert_eq!(exp.rows.len(), 1);
    assert!(!dir.join(LOCK).exists(), "the folder is released");
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(err.contains("SIGHUP") && err.contains("--resume"), "{err}");

    // The hint, pasted into a shell here, resumes the run: it takes the folder's lock.
    let hint =
        err.lines().skip_while(|l| !l.starts_with("resume with")).nth(1).unwrap_or_else(|| panic!("{err}"));
    assert!(hint.contains(" --budget 1GiB ") && !hint.starts_with("  oomlab "), "{hint}");
    let mut pasted = Process::new("sh")
        .args(["-c", &format!("exec {}", hint.trim())])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !dir.join(LOCK).exists() {
        if let Some(status) = pasted.try_wait().unwrap() {
            let mut said = String::new();
            std::io::Read::read_to_string(pasted.stderr.as_mut().unwrap(), &mut said).unwrap();
            panic!("`{}` ended ({status}) without resuming:\n{said}", hint.trim());
        }
        assert!(started.elapsed() < Duration::from_secs(120), "`{}` never took the folder", hint.trim());
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&pasted, "TERM");
    assert_eq!(exit_code(pasted), Some(143), "the resumed run stops as any run does");
}

/// Whether process `pid` holds SIGTERM blocked or handled: from the first thing it runs (its
/// `.preinit_array`, before libtorch's initialisers), the earliest a signal can be answered.
fn holds_signals(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    let term = 1u64 << (15 - 1);
    mask("SigBlk:").unwrap_or(0) & term != 0 || mask("SigCgt:").unwrap_or(0) & term != 0
}

/// A signal while the process is still starting (libtorch's initialisers run for half a second
/// before `main`) or preparing the run is answered, not left to the signal's default action: the
/// process exits on its own with the signal's code, says so, and leaves no folder behind. Sent
/// the moment the process holds the signals (its first instruction of its own), then later.
#[test]
fn a_signal_before_the_run_writes_anything_leaves_nothing() {
    let sb = Sandbox::new();
    // Trains long enough (seconds) that the last signal still finds it running on a fast machine:
    // with one step the run once ended before SIGHUP came, 300 ms after it held its signals.
    let text =
        tiny_spec("early", "hidden = 8\ndepth = 1", None, "").replace("steps = 1\n", "steps = 20000\n");
    assert!(text.contains("steps = 20000"));
    let spec = sb.spec("early.toml", &text);
    for (after_ms, name, code) in [(0, "TERM", 143), (150, "INT", 130), (300, "HUP", 129)] {
        let out = sb.path().join(format!("out-{after_ms}"));
        let child = Process::new(common::bin())
            .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !holds_signals(child.id()) {
            assert!(started.elapsed() < Duration::from_secs(30), "the process never held its signals");
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_millis(after_ms));
        signal(&child, name);
        let done = child.wait_with_output().unwrap();
        // `code()` is None for a process the signal itself killed.
        assert_eq!(done.status.code(), Some(code), "SIG{name} after {after_ms} ms");
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.contains("SIG"), "SIG{name} after {after_ms} ms: said nothing: {err}");
        let left = common::walk(&out);
        assert!(left.is_empty() || !err.contains("stopped before"), "{left:?}");
        if err.contains("stopped before anything was written") {
            assert!(!out.exists(), "SIG{name} after {after_ms} ms: {} left behind", out.display());
        }
    }
}

/// A run killed without a chance to speak (kill -9, as the kernel's OOM killer does) leaves its
/// folder `running` and its lock file; the next run into it says what is known: killed, in which
/// trial and phase, and how much memory the host had left then.
#[test]
fn a_run_killed_without_a_word_is_recognised_by_the_next_command() {
    let sb = Sandbox::new();
    let dir = common::killed_after_first_trial(&sb);
    assert_eq!(ExperimentDir::read(&dir).unwrap().manifest.status, oomlab::results::RunStatus::Running);
    let spec = sb.path().join("long.toml");
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("stopped without finishing")
                .and(predicate::str::contains("killed"))
                .and(predicate::str::contains("trial 2"))
                .and(predicate::str::contains("host memory was"))
                .and(predicate::str::contains("--resume continues it")),
        );
}

/// What a user keeps beside and inside a run's folder, of any name, nested or linked, stays byte
/// for byte through `--force`, `--resume`, a refused run and a run stopped by a signal: only the
/// files the run's manifest lists as its own are ever removed.
#[test]
fn only_what_oomlab_wrote_is_ever_removed() {
    use std::os::unix::fs::symlink;
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n";
    let spec = sb.spec("keep.toml", &tiny_spec("keep", "hidden = 8\ndepth = 1", None, sweep));
    let out = sb.out();
    let run = |extra: &[&str]| {
        let mut c = oomlab();
        c.args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]).args(extra);
        c.assert()
    };
    run(&[]).success();
    let dir = common::walk(&out).into_iter().find(|p| p.ends_with("manifest.json")).unwrap();
    let dir = dir.parent().unwrap().to_path_buf();
    assert!(dir.join("peak_vs_depth.png").exists(), "the run drew its chart");
    // The user's files: every extension a run writes, names close to a run's own (its temporary
    // and set-aside names), a folder named like a chart, nested folders, links in and out.
    let outside = sb.path().join("thesis");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("figure.png"), "the thesis figure").unwrap();
    let mine: Vec<(PathBuf, &str)> = vec![
        (dir.join("figure.png"), "a figure"),
        (dir.join("figure.svg"), "a figure"),
        (dir.join("notes.md"), "notes"),
        (dir.join("data.csv"), "a,b\n"),
        (dir.join("trace.json.mine"), "{}"),
        (dir.join(".summary.csv.tmp"), "near our temporary name"),
        (dir.join(".peak_vs_depth.png.backup.tmp"), "near our temporary name"),
        (dir.join("summary.csv.resuming.bak"), "near our set-aside name"),
        (dir.join("old.resuming"), "set aside by the user"),
        (dir.join("plots.png/inside.png"), "in a folder named like a chart"),
        (dir.join("mine/deep/fig.svg"), "nested"),
        (dir.parent().unwrap().join("beside.png"), "beside the run"),
        (out.join("root.png"), "at the results root"),
    ];
    for (path, text) in &mine {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    symlink(outside.join("figure.png"), dir.join("linked.png")).unwrap();
    symlink(&outside, dir.join("linked-folder.svg")).unwrap();
    let snapshot = || -> Vec<(PathBuf, String)> {
        let mut all: Vec<(PathBuf, String)> = mine
            .iter()
            .map(|(p, _)| {
                (p.clone(), std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            })
            .collect();
        for link in ["linked.png", "linked-folder.svg"] {
            let target = std::fs::read_link(dir.join(link)).unwrap_or_else(|e| panic!("{link}: {e}"));
            all.push((dir.join(link), target.display().to_string()));
        }
        all.push((outside.join("figure.png"), std::fs::read_to_string(outside.join("figure.png")).unwrap()));
        all
    };
    let before = snapshot();
    // Refused: results there and no --force.
    run(&[]).failure().stderr(predicate::str::contains("--force"));
    assert_eq!(snapshot(), before, "a refused run");
    run(&["--force"]).success();
    assert_eq!(snapshot(), before, "--force");
    assert!(dir.join("peak_vs_depth.png").exists());
    // Resumed: the run marked interrupted, as a signal leaves it.
    let mut m = oomlab::results::Manifest::read(&dir).unwrap();
    m.status = oomlab::results::RunStatus::Interrupted;
    m.write(&dir).unwrap();
    run(&["--resume"]).success();
    assert_eq!(snapshot(), before, "--resume");
    // A chart's name taken by a file the run did not write: refused, the file kept.
    std::fs::remove_file(dir.join("peak_vs_depth.png")).unwrap();
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["outputs"].as_array_mut().unwrap().retain(|n| n != "peak_vs_depth.png");
    m["status"] = "interrupted".into();
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m).unwrap()).unwrap();
    std::fs::write(dir.join("peak_vs_depth.png"), "the user's, under a chart's name").unwrap();
    run(&["--resume"]).failure().stderr(predicate::str::contains("is not oomlab's"));
    assert_eq!(
        std::fs::read_to_string(dir.join("peak_vs_depth.png")).unwrap(),
        "the user's, under a chart's name"
    );
    run(&["--force"]).failure().stderr(predicate::str::contains("is not oomlab's"));
    assert_eq!(
        std::fs::read_to_string(dir.join("peak_vs_depth.png")).unwrap(),
        "the user's, under a chart's name"
    );
    // Moved away, as the message says: the run draws its chart again.
    std::fs::rename(dir.join("peak_vs_depth.png"), sb.path().join("kept.png")).unwrap();
    run(&["--force"]).success();
    assert!(dir.join("peak_vs_depth.png").exists());
    assert_eq!(snapshot(), before, "--force after a refused chart");
}

/// A run refused before it writes anything (a bad budget, a folder another run holds, results
/// there without --force) leaves no folder of its own behind: not the results root, not the
/// device's, not the experiment's.
#[test]
fn a_refused_run_leaves_no_folder_behind() {
    let sb = Sandbox::new();
    let spec = sb.spec("r.toml", &tiny_spec("r", "hidden = 8\ndepth = 1", None, ""));
    let out = sb.path().join("fresh/root");
    // More than this machine has: refused when the probe opens.
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--budget", "100PiB"])
        .assert()
        .failure();
    assert!(!sb.path().join("fresh").exists(), "a refused run left {:?}", common::walk(sb.path()));
    // Refused by --resume of nothing.
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--resume"])
        .assert()
        .failure();
    assert!(!sb.path().join("fresh").exists());
    // The root exists (the user's): the device and experiment folders go again.
    std::fs::create_dir_all(&out).unwrap();
    let spec_bad =
        sb.spec("m.toml", &tiny_spec("m", "kind = \"torchscript\"\npath = \"missing.pt\"", None, ""));
    oomlab().args(["run", spec_bad.to_str().unwrap(), "--out", out.to_str().unwrap()]).assert().failure();
    assert!(out.is_dir() && common::walk(&out).is_empty(), "{:?}", common::walk(&out));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "no empty folder inside the root");
}
