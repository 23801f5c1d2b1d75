//! The binary as a user meets it: help, bad input, a full run, overwriting, and a run killed
//! mid-sweep.
use crate::common::{self, oomlab};

use common::{tiny_spec, Sandbox};
use predicates::prelude::*;

#[test]
fn help_teaches_with_examples() {
    oomlab().arg("--help").assert().success().stdout(predicate::str::contains("Examples:"));
    oomlab()
        .args(["run", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--budget").and(predicate::str::contains("15.90GiB")));
    // --device is declared once for run, estimate and advise; estimate's help still says what
    // each device's model is.
    oomlab().args(["estimate", "--help"]).assert().success().stdout(
        predicate::str::contains("counting allocator, exact")
            .and(predicate::str::contains("caching allocator replayed")),
    );
}

/// Every spec and committed result an example names is in the repository, so a newcomer can
/// paste any of them: an example pointing at a folder nobody committed fails here.
#[test]
fn help_examples_name_files_the_repository_has() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut named = 0;
    for sub in ["", "run", "estimate", "advise", "plot", "compare", "merge", "slurm", "bench", "claims"] {
        let mut cmd = oomlab();
        if !sub.is_empty() {
            cmd.arg(sub);
        }
        let out = cmd.arg("--help").output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        let examples = help.split_once("Examples:").map_or("", |(_, e)| e);
        let commands = examples.lines().filter(|l| l.starts_with("  oomlab ") || l.starts_with("  scripts/"));
        for word in commands.flat_map(str::split_whitespace) {
            if word.starts_with("experiments/")
                || word.starts_with("results/")
                || word.starts_with("scripts/")
            {
                named += 1;
                assert!(
                    root.join(word).exists(),
                    "`oomlab {sub} --help` names {word}, which the repository lacks"
                );
            }
        }
    }
    assert!(named > 10, "the examples name {named} files: the help lost its examples?");
}

/// A list runs only its own values: its answer is the largest of them predicted to fit, as its
/// rows say, not a value between them that a bisection would find.
#[test]
fn a_list_sweep_is_answered_from_its_own_values() {
    let sb = Sandbox::new();
    let text = tiny_spec(
        "list",
        "hidden = 256\ndepth = 2",
        Some(4 << 20),
        "on_oom = \"continue\"\n[sweep]\nfield = \"training.batch_size\"\nvalues = [1024, 16, 256]\n",
    )
    .replace("samples = 32", "samples = 1024")
    .replace("optimizer = \"sgd\"", "optimizer = \"adam\"");
    let spec = sb.spec("list.toml", &text);
    let out = oomlab().args(["estimate", spec.to_str().unwrap(), "--brief"]).assert().success();
    let out = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let fits: Vec<u64> = out
        .lines()
        .filter(|l| l.starts_with("batch_size ") && l.ends_with(" fits"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    let largest = fits.iter().max().unwrap_or_else(|| panic!("some value fits: {out}"));
    assert!(fits.len() < 3, "the budget should leave one value out: {out}");
    assert!(
        out.contains(&format!(
            "largest of the listed batch_size values predicted to fit in 4.00 MiB: {largest} "
        )),
        "{out}"
    );
    assert!(!out.contains("the sweep's own trials would find"), "{out}");
}

/// A peak that rounds like the budget is given to the byte with how far under or over it is,
/// and that remark closes its clause: never "…, 3,749,244 B under the 2.05 GiB budget
/// allocated, against 2.05 GiB". At 2.055 GiB the lesson's depths 6 and 7 (for-loop Adam) end
/// within a few MiB of the budget.
#[test]
fn a_peak_at_the_budget_reads_as_a_sentence() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("experiments/depth_sweep.toml");
    let out = oomlab()
        .args(["estimate", spec.to_str().unwrap(), "--budget", "2.055GiB", "--brief"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let near: Vec<&str> = text.lines().filter(|l| l.contains(" under the 2.05 GiB budget")).collect();
    assert!(near.iter().any(|l| l.contains("OOM predicted")), "no OOM near the budget: {text}");
    assert!(near.iter().any(|l| l.contains("  fits, ")), "no fit near the budget: {text}");
    for line in near {
        assert!(!line.contains("budget allocated") && !line.contains("budget reserved"), "{line}");
        assert!(!line.contains("against 2.05 GiB"), "the budget named twice: {line}");
    }
}

/// On CUDA the budget is the caching allocator's memory fraction, which libtorch's own cuBLAS
/// workspaces (65 MiB on a Hopper GPU, made before the first trial) must fit under too: a
/// budget below them is out of memory whatever the model, never "fits". On the CPU a budget
/// past the host's memory is said to be.
#[test]
fn budgets_the_device_cannot_meet_are_not_taken_at_their_word() {
    let sb = Sandbox::new();
    let spec = sb.spec("ws.toml", &tiny_spec("ws", "hidden = 8\ndepth = 1", None, ""));
    let estimate = |budget: &str| -> serde_json::Value {
        let out = oomlab()
            .args(["estimate", spec.to_str().unwrap(), "--device", "cuda", "--gpu", "h100", "--json"])
            .args(["--budget", budget])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let fits = |v: &serde_json::Value| v[0]["points"][0]["fits"].as_bool().unwrap();
    assert!(!fits(&estimate("60MiB")), "60 MiB is under the H100's 65 MiB of workspaces");
    assert!(fits(&estimate("80MiB")), "a tiny MLP fits beside the workspaces");
    // A CPU estimate under a budget past this host's memory says so (the prediction is the
    // budget's, the machine's own limit comes first).
    let cpu = |budget: &str| {
        oomlab()
            .args(["estimate", spec.to_str().unwrap(), "--device", "cpu", "--brief", "--budget", budget])
            .assert()
    };
    cpu("64TiB").success().stderr(predicate::str::contains("more than this host's memory"));
    cpu("1MiB").success().stderr(predicate::str::contains("host's memory").not());
    // Past what any CPU process can address: refused, as `run` refuses a budget past the host's.
    for budget in ["1PiB", "15000PiB"] {
        cpu(budget)
            .failure()
            .stderr(predicate::str::contains("more memory than a process on a CPU can address"));
    }
    // A CUDA budget past every card of the named GPU is told; one a card has is not.
    let cuda = |gpu: &str, budget: &str| {
        oomlab()
            .args([
                "estimate",
                spec.to_str().unwrap(),
                "--device",
                "cuda",
                "--brief",
                "--gpu",
                gpu,
                "--budget",
                budget,
            ])
            .assert()
    };
    cuda("t4", "40GiB").success().stderr(predicate::str::contains("more than any T4 has (16 GB)"));
    cuda("h200", "40GiB").success().stderr(predicate::str::contains("more than any").not());
    // --gpu says which GPU a CUDA estimate is for: with the CPU's it would be ignored.
    oomlab()
        .args(["estimate", spec.to_str().unwrap(), "--device", "cpu", "--gpu", "h100"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("add --device cuda"));
}

#[test]
fn unknown_key_is_named_and_nothing_is_written() {
    let sb = Sandbox::new();
    let text = tiny_spec("bad", "hidden = 8\ndepth = 1\nwidht = 3", None, "");
    let spec = sb.spec("bad.toml", &text);
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("widht").and(predicate::str::contains("bad.toml")));
    assert!(!sb.out().exists(), "a bad spec writes nothing");
}

#[test]
fn negative_depth_is_named() {
    let sb = Sandbox::new();
    let spec = sb.spec("neg.toml", &tiny_spec("neg", "hidden = 8\ndepth = -3", None, ""));
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("model.depth"));
}

#[test]
fn bad_budget_flag_is_named() {
    let sb = Sandbox::new();
    let spec = sb.spec("ok.toml", &tiny_spec("ok", "hidden = 8\ndepth = 1", None, ""));
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--budget", "lots"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--budget"));
    // The spec's rules: more than 0 bytes, never negative; for estimate as for run.
    for (command, budget, why) in [
        ("run", "0B", "more than 0 bytes"),
        // A number without a unit is a typo more often than a cap in bytes.
        ("run", "2", "write \"2GiB\""),
        ("estimate", "1.5", "has no unit"),
        ("estimate", "0GiB", "more than 0 bytes"),
        ("run", "-1GiB", "cannot be negative"),
        ("estimate", "-5", "cannot be negative"),
    ] {
        oomlab()
            .args([command, spec.to_str().unwrap(), "--budget", budget])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--budget").and(predicate::str::contains(why)));
    }
}

#[test]
fn a_run_writes_results_and_refuses_to_overwrite_without_force() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n";
    let spec = sb.spec("two.toml", &tiny_spec("two", "hidden = 16", None, sweep));
    let out = sb.out();
    let args = ["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()];
    oomlab().args(args).assert().success().stdout(predicate::str::contains("largest depth that fits: 2"));
    let dirs: Vec<_> = std::fs::read_dir(sb.out()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "one device folder");
    let dir = dirs[0].join("two");
    for f in ["manifest.json", "trace.csv", "summary.csv", "peak_vs_depth.png", "peak_vs_depth.svg"] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let before = std::fs::read(dir.join("summary.csv")).unwrap();
    oomlab().args(args).assert().failure().stderr(predicate::str::contains("--force"));
    assert_eq!(std::fs::read(dir.join("summary.csv")).unwrap(), before, "untouched without --force");
    oomlab().args(args).arg("--force").assert().success();
}

#[test]
fn devices_lists_libtorch_and_the_hosts_memory() {
    let out = oomlab().arg("devices").assert().success().get_output().stdout.clone();
    let said = String::from_utf8_lossy(&out);
    assert!(said.contains("libtorch 2.11.0"), "{said}");
    // The total as /proc/meminfo has it, in the tool's units.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let total = bytesize::ByteSize::b(kib * 1024).display().iec().to_string();
    assert!(said.contains(&format!("memory: {total} total, ")), "{said}");
}

#[test]
fn a_killed_run_keeps_every_completed_trial() {
    let sb = Sandbox::new();
    let dir = common::killed_after_first_trial(&sb);
    let exp = oomlab::results::ExperimentDir::read(&dir).expect("the folder reads");
    assert_eq!(exp.rows.len(), 1, "trial 1 complete, trial 2 was cut");
    assert_eq!(exp.rows[0].status, oomlab::schema::Status::Ok);
    assert_eq!(exp.manifest.status, oomlab::results::RunStatus::Running, "a killed run is recognisable");
    assert!(!exp.trace.is_empty() && exp.trace.iter().all(|t| t.trial == 1), "whole trials only");
}

/// `OOMLAB_ALLOC_LOG` prints the counting allocator's events ("+bytes live" and "-bytes live")
/// to stderr, and nothing without it.
#[test]
fn the_allocation_log_is_printed_when_asked() {
    let sb = Sandbox::new();
    let spec = sb.spec("log.toml", &tiny_spec("log", "hidden = 8\ndepth = 1", None, ""));
    let run = |log: bool| {
        let mut cmd = oomlab();
        cmd.args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--force", "--quiet"]);
        if log {
            cmd.env("OOMLAB_ALLOC_LOG", "1");
        } else {
            cmd.env_remove("OOMLAB_ALLOC_LOG");
        }
        String::from_utf8(cmd.assert().success().get_output().stderr.clone()).unwrap()
    };
    let logged = run(true);
    let allocs = logged.lines().filter(|l| l.starts_with("oomlab-alloc +")).count();
    let frees = logged.lines().filter(|l| l.starts_with("oomlab-alloc -")).count();
    assert!(allocs > 10 && frees > 10, "{allocs} allocations, {frees} frees logged");
    assert!(!run(false).contains("oomlab-alloc"), "no log unless asked");
}

/// A trial whose loss turns to infinity or NaN is not `ok`: float16 parameters over features of
/// tens of thousands overflow in the first Linear. It fit in memory all the same, and says so.
#[test]
fn a_diverged_loss_marks_the_trial_diverged() {
    let sb = Sandbox::new();
    let rows: String =
        (0..32).map(|i| format!("{}.5,{}.25,{}\n", 30_000 + 911 * i, 60_000 - 707 * i, i % 2)).collect();
    std::fs::write(sb.path().join("big.csv"), format!("a,b,y\n{rows}")).unwrap();
    let text = "[experiment]\nname = \"diverge\"\n[model]\nhidden = 16\ndepth = 2\n[data]\nkind = \"csv\"\n\
                path = \"big.csv\"\nlabel = \"y\"\n[training]\noptimizer = \"sgd\"\nlr = 0.1\nbatch_size = 8\n\
                steps = 2\ndtype = \"float16\"\n[run]\ndevice = \"cpu\"\n";
    let spec = sb.spec("diverge.toml", text);
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("diverged").and(predicate::str::contains("training diverged")));
    let dir = sb.out().read_dir().unwrap().next().unwrap().unwrap().path().join("diverge");
    let exp = oomlab::results::ExperimentDir::read(&dir).unwrap();
    assert_eq!(exp.rows[0].status, oomlab::schema::Status::Diverged);
    assert!(exp.rows[0].final_loss.is_some_and(|l| !l.is_finite()));
    assert!(exp.rows[0].status.fitted() && exp.rows[0].max_memory_allocated > 0);
}

/// `run.rounds` runs every variant once a round, interleaved, each trial marked with its round;
/// the rounds are one process's, so `--shard` refuses them.
#[test]
fn rounds_interleave_the_variants() {
    let sb = Sandbox::new();
    let extra = "rounds = 2\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\ntraining.batch_size = 8\n";
    let spec = sb.spec("rounds.toml", &tiny_spec("rounds", "hidden = 8\ndepth = 1", None, extra));
    oomlab().args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()]).assert().success();
    let dir = sb.out().read_dir().unwrap().next().unwrap().unwrap().path().join("rounds");
    let exp = oomlab::results::ExperimentDir::read(&dir).unwrap();
    let order: Vec<(String, Option<usize>)> = exp.rows.iter().map(|r| (r.variant.clone(), r.round)).collect();
    let want = [("a", 1), ("b", 1), ("a", 2), ("b", 2)].map(|(v, r)| (v.to_string(), Some(r)));
    assert_eq!(order, want);
    assert_eq!(
        exp.rows[0].max_memory_allocated, exp.rows[2].max_memory_allocated,
        "the same memory each round"
    );
    oomlab()
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            sb.path().join("s").to_str().unwrap(),
            "--shard",
            "1/2",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("2 rounds"));
}

/// `bench` with a Python that cannot import torch stops before any contender runs (it used to
/// run oomlab's four first, then end in a traceback), and says how to mend it.
#[test]
fn bench_checks_its_python_before_it_starts() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let python = sb.path().join("python-without-torch");
    std::fs::write(&python, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
        .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    oomlab()
        .args(["bench", "--device", "cpu", "--quick", "--python", python.to_str().unwrap()])
        .args(["--out", sb.out().to_str().unwrap()])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("cannot import torch")
                .and(predicate::str::contains("No module named 'torch'"))
                .and(predicate::str::contains("scripts/bench")),
        );
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
    assert!(common::walk(&sb.out()).is_empty(), "nothing written");
}

/// Each subcommand's `--help` shows its own examples, not the top level's.
#[test]
fn each_command_teaches_with_its_own_examples() {
    for (command, own, not) in [
        ("run", "--resume", "oomlab compare"),
        ("plot", "oomlab plot results/cpu-amd-epyc\n", "oomlab run"),
        ("compare", "oomlab compare runs/", "oomlab run"),
        ("claims", "not judged here", "oomlab run"),
    ] {
        oomlab()
            .args([command, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains(own).and(predicate::str::contains(not).not()));
    }
}

/// Without a terminal (a log, a SLURM job), long work still says where it is: a `progress:` line
/// every `OOMLAB_PROGRESS_EVERY` seconds, naming the trial and its step.
#[test]
fn a_log_gets_a_progress_line_while_a_long_trial_trains() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"training.steps\"\nvalues = [100000]\n";
    let spec = sb.spec("slow.toml", &tiny_spec("slow", "hidden = 64\ndepth = 2", None, sweep));
    let mut child = std::process::Command::new(common::bin())
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap()])
        .env("OOMLAB_PROGRESS_EVERY", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut seen = Vec::new();
    let found = loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) if line.starts_with("progress: ") && line.contains(" of 100000") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) if started.elapsed() > Duration::from_secs(120) => break None,
            Err(_) => {}
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let line = found.unwrap_or_else(|| panic!("no progress line in 120 s; stderr:\n{}", seen.join("\n")));
    assert!(line.contains("trial 1") && line.contains("(0 of 1 done, "), "{line}");
}

/// `estimate` says which variants a run on this machine leaves out (`skip_on_cpu_without`), as
/// the run would, and prints no probes for them; whichever this CPU has, the two agree.
#[test]
fn estimate_names_the_variants_a_run_here_leaves_out() {
    let sb = Sandbox::new();
    let text = tiny_spec(
        "skips",
        "hidden = 8\ndepth = 1",
        None,
        "[sweep]\nfield = \"training.batch_size\"\nsearch = { start = 1, max = 8 }\n\
         [[variant]]\nname = \"fp32\"\n\
         [[variant]]\nname = \"bf16\"\nskip_on_cpu_without = \"bf16\"\ntraining = { amp = \"bf16\" }\n\
         [[variant]]\nname = \"fp16\"\nskip_on_cpu_without = \"fp16\"\ntraining = { amp = \"fp16\" }\n",
    )
    .replace("batch_size = 4\n", "");
    let spec = sb.spec("skips.toml", &text);
    let plan = oomlab::run::plan::Plan::here(oomlab::spec::load(&spec).unwrap(), Default::default());
    let skipped: Vec<String> =
        plan.not_run(oomlab::device::CpuCaps::here()).into_iter().map(|n| n.variant).collect();
    let out = oomlab().args(["estimate", spec.to_str().unwrap(), "--brief"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for variant in ["fp32", "bf16", "fp16"] {
        let section = text.split(&format!("[{variant}]\n")).nth(1).unwrap().split("\n[").next().unwrap();
        let left_out = skipped.iter().any(|s| s == variant);
        assert_eq!(section.contains("not run here:"), left_out, "{variant}: {section}");
        assert_eq!(section.contains("probes ("), !left_out, "{variant}: {section}");
    }
}

/// The README's spec reference names every key a sweep takes, so that none is found only in
/// an error message.
#[test]
fn the_readme_names_every_sweepable_key() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let specs = readme.split("\n## Specs\n").nth(1).expect("a Specs section");
    for field in oomlab::spec::Field::ALL {
        assert!(specs.contains(field.key()), "the Specs section never names {}", field.key());
    }
}
