//! `run --shard I/N` and `oomlab merge` as processes on this machine (Slurm's arrays are
//! `tests/suite/slurm.rs`): sharded searches, whole per variant, merged equal a single process's run
//! byte for byte in the memory columns; a missing, unfinished or different shard is named; an
//! unfinished shard resumes; a merge is replaced only with --force.
use crate::common::{self, oomlab};

use std::path::{Path, PathBuf};

use common::{assert_same_trials, tiny_spec, Sandbox};
use oomlab::results::ExperimentDir;
use predicates::prelude::*;

/// The one experiment folder under a results root (`<out>/<device>/<name>`).
fn folder(out: &Path, name: &str) -> PathBuf {
    let device = std::fs::read_dir(out).unwrap().next().expect("a device folder").unwrap().path();
    device.join(name)
}

fn run(spec: &Path, out: &Path, extra: &[&str]) -> String {
    let mut cmd = oomlab();
    cmd.args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()]).args(extra);
    String::from_utf8(cmd.assert().success().get_output().stdout.clone()).unwrap()
}

/// Two variants, each a guided search (its probes depend on each other, so it goes whole to
/// one shard), over three shards: the third has nothing to run.
#[test]
fn sharded_searches_merge_into_the_single_process_run() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, max = 64 }\n\n\
                 [[variant]]\nname = \"sgd\"\n\n[[variant]]\nname = \"adam\"\ntraining = { optimizer = \"adam\" }\n";
    let text = tiny_spec("searches", "hidden = 64\ndepth = 1", Some(256 << 10), sweep)
        .replace("steps = 1", "steps = 2");
    let spec = sb.spec("searches.toml", &text);
    let single = sb.path().join("single");
    run(&spec, &single, &["--quiet"]);
    let sharded = sb.path().join("sharded");
    for i in 1..=3 {
        let said = run(&spec, &sharded, &["--shard", &format!("{i}/3")]);
        assert!(said.contains("when all 3 shards are done: oomlab merge"), "{said}");
        assert!(
            said.contains(&format!("shard {i} of 3: the answers below are this shard's trials only")),
            "{said}"
        );
        assert_eq!(said.contains("had nothing to run"), i == 3, "shard {i}: {said}");
    }
    let dir = folder(&sharded, "searches");
    let third = ExperimentDir::read(&dir.join("shards/3-of-3")).unwrap();
    assert_eq!((third.rows.len(), third.manifest.status), (0, oomlab::results::RunStatus::Complete));
    let info = third.manifest.shard.as_ref().expect("a shard's manifest says which");
    assert_eq!((info.index, info.count, info.units.len(), info.of_units), (3, 3, 0, 2));
    let first = ExperimentDir::read(&dir.join("shards/1-of-3")).unwrap();
    assert_eq!(first.manifest.shard.unwrap().units, ["sgd: its whole search"]);
    assert!(!dir.join("shards/1-of-3/peak_vs_depth-sgd.png").exists(), "a shard draws no charts");

    // Folders under shards/ that are no shard's are named, each with why, never passed over.
    let strays = ["abc", "4-of-3", "0-of-0", "18446744073709551616-of-2", "02-of-3"];
    for stray in strays {
        std::fs::create_dir_all(dir.join("shards").join(stray)).unwrap();
    }
    let merged = oomlab().args(["merge", dir.to_str().unwrap()]).assert().success().stdout(
        predicate::str::contains("merged 3 shards").and(predicate::str::contains("largest depth that fits")),
    );
    let said = String::from_utf8_lossy(&merged.get_output().stderr).to_string();
    for stray in strays {
        assert!(said.contains(&format!("{stray} skipped: not a shard's folder")), "{stray}: {said}");
    }
    assert_same_trials(&folder(&single, "searches"), &dir);
    let merged = ExperimentDir::read(&dir).unwrap();
    assert_eq!(merged.manifest.status, oomlab::results::RunStatus::Complete);
    assert_eq!(merged.manifest.shards.iter().map(|s| s.trials).collect::<Vec<_>>(), [2, 2, 0]);
    for chart in ["peak_vs_depth-sgd.png", "peak_vs_depth-adam.svg", "categories.png", "trace.json"] {
        assert!(dir.join(chart).exists(), "{chart} drawn by the merge");
    }

    // A merge is replaced only when asked, and the shards stay.
    let before = std::fs::read(dir.join("summary.csv")).unwrap();
    oomlab().args(["merge", dir.to_str().unwrap()]).assert().failure().stderr(
        predicate::str::contains("already holds merged results").and(predicate::str::contains("--force")),
    );
    assert_eq!(std::fs::read(dir.join("summary.csv")).unwrap(), before);
    std::fs::write(dir.join("NOTES.md"), "mine").unwrap();
    std::fs::write(dir.join("figure.png"), "mine too").unwrap();
    oomlab().args(["merge", dir.to_str().unwrap(), "--force", "--quiet"]).assert().success();
    assert!(dir.join("shards/2-of-3/summary.csv").exists());
    assert!(dir.join("NOTES.md").exists(), "--force replaces the merge's files, not the user's");
    assert_eq!(std::fs::read_to_string(dir.join("figure.png")).unwrap(), "mine too", "nor a user's chart");
    assert_same_trials(&folder(&single, "searches"), &dir);

    // A merge killed while writing (a job's time limit) left `merging`: nothing there is an
    // answer, so merging again needs no --force.
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        manifest.replace("\"status\": \"complete\"", "\"status\": \"merging\""),
    )
    .unwrap();
    std::fs::write(dir.join("summary.csv"), "trial\n").unwrap();
    oomlab()
        .args(["merge", dir.to_str().unwrap(), "--quiet"])
        .assert()
        .success()
        .stderr(predicate::str::contains("did not finish"));
    assert_same_trials(&folder(&single, "searches"), &dir);
}

/// What cannot be one run's is refused: budgets that print alike but differ; shards of two
/// different counts, with the folders to remove named. A sweep of the learning rate (not a
/// whole number) shards and merges like any list.
#[test]
fn shards_of_two_runs_are_told_apart_and_a_learning_rate_sweep_merges() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"training.lr\"\nvalues = [0.01, 0.1]\n";
    let spec = sb.spec("lr.toml", &tiny_spec("lr", "hidden = 16\ndepth = 1", None, sweep));
    let out = sb.path().join("runs");
    run(&spec, &out, &["--shard", "1/2", "--quiet", "--budget", "15.9GiB"]);
    run(&spec, &out, &["--shard", "2/2", "--quiet", "--budget", "16280MiB"]);
    let dir = folder(&out, "lr");
    let merge = |dir: &Path| {
        let mut cmd = oomlab();
        cmd.args(["merge", dir.to_str().unwrap(), "--quiet"]);
        cmd.assert()
    };
    merge(&dir).failure().stderr(predicate::str::contains("differ in budget"));
    run(&spec, &out, &["--shard", "2/2", "--quiet", "--budget", "15.9GiB", "--force"]);
    merge(&dir).success();
    let merged = ExperimentDir::read(&dir).unwrap();
    assert_eq!(merged.rows.iter().map(|r| r.value.unwrap()).collect::<Vec<_>>(), [0.01, 0.1]);
    let single = sb.path().join("single");
    run(&spec, &single, &["--quiet", "--budget", "15.9GiB"]);
    assert_same_trials(&folder(&single, "lr"), &dir);

    run(&spec, &out, &["--shard", "1/3", "--quiet", "--budget", "15.9GiB"]);
    merge(&dir).failure().stderr(
        predicate::str::contains("shards of 2 different runs").and(predicate::str::contains("/*-of-3`")),
    );
}

/// A list of four values over two shards: a shard missing is named; one of another spec text is
/// refused with the line that differs; an unfinished one is refused, then resumed, and the merge
/// equals the single run.
#[test]
fn missing_different_and_unfinished_shards_are_named() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3, 4]\n";
    let text = tiny_spec("listed", "hidden = 32\ndepth = 1", None, sweep);
    let spec = sb.spec("listed.toml", &text);
    let out = sb.path().join("sharded");
    let merge = |dir: &Path| {
        let mut cmd = oomlab();
        cmd.args(["merge", dir.to_str().unwrap(), "--quiet"]);
        cmd.assert()
    };
    run(&spec, &out, &["--shard", "1/2", "--quiet"]);
    let dir = folder(&out, "listed");
    let missing =
        format!("shard 2 of 2 is missing: no {}", dir.join("shards/2-of-2/manifest.json").display());
    merge(&dir).failure().stderr(predicate::str::contains(missing));
    assert!(!dir.join("summary.csv").exists(), "nothing merged");

    let other = sb.spec("listed.toml", &text.replace("lr = 0.01", "lr = 0.02"));
    run(&other, &out, &["--shard", "2/2", "--quiet"]);
    merge(&dir).failure().stderr(
        predicate::str::contains("shard 2 of 2 ran another spec text than shard 1")
            .and(predicate::str::contains("`lr = 0.01` became `lr = 0.02`")),
    );
    let spec = sb.spec("listed.toml", &text);
    run(&spec, &out, &["--shard", "2/2", "--quiet", "--force"]);

    // Shard 1 as a run killed after its first trial leaves it (values 1 and 3: trial 2 cut).
    let one = dir.join("shards/1-of-2");
    let keep_first = |file: &str, keep: &dyn Fn(&str) -> bool| {
        let text = std::fs::read_to_string(one.join(file)).unwrap();
        let kept: Vec<&str> =
            text.lines().enumerate().filter(|(i, l)| *i == 0 || keep(l)).map(|(_, l)| l).collect();
        std::fs::write(one.join(file), kept.join("\n") + "\n").unwrap();
    };
    keep_first("summary.csv", &|l| l.starts_with("1,"));
    keep_first("trace.csv", &|l| l.starts_with("1,"));
    let manifest = one.join("manifest.json");
    let m = std::fs::read_to_string(&manifest).unwrap();
    // As an interrupted run writes it: the trials it wrote.
    let m = m.replace("\"status\": \"complete\"", "\"status\": \"interrupted\"");
    std::fs::write(&manifest, m.replace("\"trials\": 2,", "\"trials\": 1,")).unwrap();
    merge(&dir).failure().stderr(
        predicate::str::contains("shard 1 of 2 did not finish")
            .and(predicate::str::contains("`interrupted`"))
            .and(predicate::str::contains("--shard 1/2 --resume")),
    );
    run(&spec, &out, &["--shard", "1/2", "--quiet", "--resume"]);
    merge(&dir).success();
    let single = sb.path().join("single");
    run(&spec, &single, &["--quiet"]);
    assert_same_trials(&folder(&single, "listed"), &dir);
    let trials: Vec<f64> = ExperimentDir::read(&dir).unwrap().rows.iter().map(|r| r.value.unwrap()).collect();
    assert_eq!(trials, [1.0, 2.0, 3.0, 4.0], "in the list's order");
}

#[test]
fn a_shard_is_checked_on_the_command_line() {
    let sb = Sandbox::new();
    let spec = sb.spec("s.toml", &tiny_spec("s", "hidden = 8\ndepth = 1", None, ""));
    for (shard, why) in [
        ("0/2", "does not exist"),
        ("3/2", "shard 3 of 2 does not exist"),
        ("1/0", "at least one"),
        ("x", "not a shard"),
    ] {
        oomlab()
            .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--shard", shard])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--shard").and(predicate::str::contains(why)));
    }
    assert!(!sb.out().exists(), "nothing written");
    // More shards than a merge could name is refused as `slurm --shards` refuses it.
    oomlab()
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            sb.out().to_str().unwrap(),
            "--shard",
            "1/99999999999",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at most 100000 shards"));
    oomlab()
        .args(["merge", sb.path().to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("holds no shards"));
    let missing = sb.path().join("no-such-run");
    oomlab()
        .args(["merge", missing.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no-such-run: no such folder"));
    assert!(!missing.exists(), "nothing made");
}

/// `oomlab slurm` refuses, before it writes a script, what its tasks could not run: a spec that
/// takes its step times in rounds on one machine, a GPU kind named twice, a path with a line
/// break (it would end the script's comment and run as a command).
#[test]
fn slurm_refuses_what_its_array_could_not_run() {
    let sb = Sandbox::new();
    let out = sb.path().join("cluster");
    let slurm = |spec: &Path, extra: &[&str]| {
        let mut cmd = oomlab();
        cmd.args(["slurm", spec.to_str().unwrap(), "--out", out.to_str().unwrap()]).args(extra);
        cmd.assert()
    };
    let rounds = sb.spec("rounds.toml", &tiny_spec("rounds", "hidden = 8\ndepth = 1", None, "rounds = 3\n"));
    slurm(&rounds, &[])
        .failure()
        .stderr(predicate::str::contains("run.rounds = 3").and(predicate::str::contains("run it whole")));
    let plain = sb.spec("plain.toml", &tiny_spec("plain", "hidden = 8\ndepth = 1", None, ""));
    slurm(&plain, &["--per-gpu-kind", "a100,h100,a100"])
        .failure()
        .stderr(predicate::str::contains("\"a100\" twice"));
    let broken = sb.path().join("line\nbreak");
    let mut cmd = oomlab();
    cmd.args(["slurm", plain.to_str().unwrap(), "--out", broken.to_str().unwrap()]);
    cmd.assert().failure().stderr(predicate::str::contains("line break"));
    assert!(!out.exists() && !broken.exists(), "nothing written");
    // One that can run: the results' place names the kind folder with --per-gpu-kind.
    slurm(&plain, &["--per-gpu-kind", "a100,h100"])
        .success()
        .stdout(predicate::str::contains("/<kind>/<device>/<experiment>/"));
}
