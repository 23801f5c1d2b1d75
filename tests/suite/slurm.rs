//! Sweeps on a real Slurm: `scripts/slurm-localhost` installs Debian's slurm-wlm and munge where
//! missing and starts munged, slurmctld and slurmd for this one machine (plain processes, state in
//! a temp folder); `oomlab slurm --submit` submits a CPU job array of 4 shards of a small spec
//! and its merge, and the per-GPU-kind arrays (the local node's fake kinds alpha and beta). The
//! merged folders must equal the same spec run in one process, trial for trial and byte for byte
//! in every column but the times; a DDP trial's two ranks run as one `srun -n 2` step's tasks
//! equal the ranks oomlab starts itself. The daemons are stopped however the test ends (a guard's
//! Drop). Without a Slurm it can start, the test fails and says why: it never skips.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Sandbox;
use oomlab::results::ExperimentDir;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/slurm-localhost");

/// A one-node Slurm on this machine, stopped when dropped.
struct LocalSlurm {
    conf: PathBuf,
    dir: tempfile::TempDir,
}

impl LocalSlurm {
    fn start() -> LocalSlurm {
        let dir = tempfile::Builder::new().prefix("oomlab-slurm-").tempdir().expect("a temp folder");
        // The guard first, so that whatever the script started is stopped if it then fails.
        let slurm = LocalSlurm { conf: dir.path().join("slurm.conf"), dir };
        let out = Command::new(SCRIPT).arg("start").arg(slurm.dir.path()).output();
        let out = out.unwrap_or_else(|e| panic!("cannot run {SCRIPT}: {e}"));
        assert!(
            out.status.success(),
            "this test needs a Slurm on this machine, and `scripts/slurm-localhost start` could not start one \
             (it needs root with apt-get to install slurm-wlm and munge, or both installed):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        slurm
    }

    /// A Slurm command (sbatch, squeue, scontrol) or oomlab, talking to this Slurm.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        // One libtorch thread everywhere: on the CPU memory depends on the thread count, and the
        // tasks share the machine's two cores.
        cmd.env("SLURM_CONF", &self.conf).env("OMP_NUM_THREADS", "1");
        cmd
    }

    fn output(&self, program: &str, args: &[&str]) -> String {
        let out = self.command(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until every job given has ended; panics with their states and the logs under
    /// `logs` after `limit`.
    fn wait(&self, jobs: &[String], limit: Duration, logs: &Path) {
        let started = Instant::now();
        let ids = jobs.join(",");
        loop {
            let queued = self.output("squeue", &["-h", "-o", "%i %T", "-j", &ids]);
            if queued.trim().is_empty() {
                return;
            }
            if started.elapsed() > limit {
                panic!("jobs {ids} still queued or running after {limit:?}:\n{queued}\n{}", read_logs(logs));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `JobState` of each job (array tasks one by one), once it has ended.
    fn states(&self, job: &str) -> Vec<String> {
        let shown = self.output("scontrol", &["-o", "show", "job", job]);
        shown
            .lines()
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("JobState=")))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for LocalSlurm {
    fn drop(&mut self) {
        match Command::new(SCRIPT).arg("stop").arg(self.dir.path()).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!("scripts/slurm-localhost stop: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => eprintln!("cannot run {SCRIPT} stop: {e}"),
        }
    }
}

/// The Slurm logs (`*.out`) under `dir`, for a failure's message.
fn read_logs(dir: &Path) -> String {
    let mut all = String::new();
    for p in common::walk(dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "out")) {
        all += &format!("--- {}\n{}\n", p.display(), std::fs::read_to_string(&p).unwrap_or_default());
    }
    all
}

/// Two variants x three depths, one of them out of memory: six independent trials.
const SPEC: &str = r#"[experiment]
name = "arrayed"

[model]
hidden = 64
depth = 1

[data]
samples = 64
features = 32
classes = 4

[training]
optimizer = "sgd"
lr = 0.01
batch_size = 8
steps = 2

[run]
device = "cpu"
budget = "200KiB"

[sweep]
field = "model.depth"
values = [1, 2, 4]

[[variant]]
name = "sgd"

[[variant]]
name = "adam"
training = { optimizer = "adam" }
"#;

/// "array job 12 ... merge job 13" for each array `oomlab slurm --submit` reports.
fn submitted(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("submitted "))
        .map(|l| {
            let after = |word: &str| {
                let rest = &l[l.find(word).unwrap_or_else(|| panic!("no {word:?} in {l:?}")) + word.len()..];
                rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().to_string()
            };
            (after("array job "), after("merge job "))
        })
        .collect()
}

/// The merged folder holds the single run's six trials (and a header), as one process wrote them.
fn assert_same_trials(single: &Path, merged: &Path) {
    assert_eq!(common::untimed_csv(single, "summary.csv").len(), 7, "six trials and a header");
    common::assert_same_trials(single, merged);
}

/// The one device folder's experiment under a results root.
fn experiment(root: &Path) -> PathBuf {
    let devices: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("arrayed").is_dir())
        .collect();
    assert_eq!(devices.len(), 1, "one device folder in {}: {devices:?}", root.display());
    devices[0].join("arrayed")
}

#[test]
fn job_arrays_of_shards_merged_equal_one_process() {
    let slurm = LocalSlurm::start();
    let sb = Sandbox::new();
    let spec = sb.spec("arrayed.toml", SPEC);
    let oomlab = common::bin();
    let spec_arg = spec.to_str().unwrap();

    let single = sb.path().join("single");
    slurm.output(oomlab, &["run", spec_arg, "--out", single.to_str().unwrap(), "--quiet"]);
    let single = experiment(&single);

    // One array of 4 shards, and one per GPU kind of 2 shards each, all submitted at once.
    let cluster = sb.path().join("cluster");
    let kinds = sb.path().join("kinds");
    let mut jobs = Vec::new();
    for (out, extra) in
        [(&cluster, &["--shards", "4"][..]), (&kinds, &["--shards", "2", "--per-gpu-kind", "alpha,beta"])]
    {
        let mut args =
            vec!["slurm", spec_arg, "--out", out.to_str().unwrap(), "--partition", "debug", "--time", "10"];
        args.extend(extra);
        args.push("--submit");
        let said = slurm.output(oomlab, &args);
        let ids = submitted(&said);
        assert_eq!(ids.len(), if out == &cluster { 1 } else { 2 }, "{said}");
        jobs.extend(ids);
    }
    let all: Vec<String> = jobs.iter().flat_map(|(a, m)| [a.clone(), m.clone()]).collect();
    slurm.wait(&all, Duration::from_secs(300), sb.path());
    let logs = || read_logs(&cluster.join("slurm/logs")) + &read_logs(&kinds.join("slurm/logs"));
    for job in &all {
        let states = slurm.states(job);
        let done = !states.is_empty() && states.iter().all(|s| s == "COMPLETED");
        assert!(done, "job {job} ended {states:?}:\n{}", logs());
    }
    assert_eq!(slurm.states(&jobs[0].0).len(), 4, "one task per shard");

    // The 4-shard array: merged by its job, equal to one process.
    let merged = experiment(&cluster);
    assert_same_trials(&single, &merged);
    let exp = ExperimentDir::read(&merged).unwrap();
    assert!(exp.rows.iter().any(|r| r.status == oomlab::schema::Status::Oom), "an OOM among the trials");
    let m = exp.manifest;
    assert_eq!(m.status, oomlab::results::RunStatus::Complete);
    let (array, _) = &jobs[0];
    let shards: Vec<(String, Option<String>)> =
        m.shards.iter().map(|s| (s.shard.clone(), s.slurm_job.clone())).collect();
    let want: Vec<(String, Option<String>)> =
        (1..=4).map(|i| (format!("{i}/4"), Some(format!("{array}_{i}")))).collect();
    assert_eq!(shards, want, "each shard's Slurm task in the merged manifest");
    assert_eq!(m.shards.iter().map(|s| s.trials).sum::<usize>(), 6);
    for chart in ["peak_vs_depth-sgd.png", "peak_vs_depth-adam.png", "categories.png", "trace.json"] {
        assert!(merged.join(chart).exists(), "{chart} drawn by the merge job");
    }

    // One array per GPU kind, each into OUT/<kind>/, and compare puts them side by side.
    let a = experiment(&kinds.join("alpha"));
    let b = experiment(&kinds.join("beta"));
    assert_same_trials(&single, &a);
    assert_same_trials(&single, &b);
    let compared = sb.path().join("compared");
    slurm.output(
        oomlab,
        &["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--out", compared.to_str().unwrap()],
    );
    assert!(compared.join("COMPARE.md").exists());

    // A DDP trial's two ranks as one srun step's two tasks: rank 0 writes the one folder, with
    // every rank's bytes those of the ranks oomlab starts itself.
    let ddp = sb.spec("ranks.toml", DDP_SPEC);
    let (own, launched) = (sb.path().join("own"), sb.path().join("srun"));
    slurm.output(oomlab, &["run", ddp.to_str().unwrap(), "--out", own.to_str().unwrap(), "--quiet"]);
    let step = ["-n", "2", "-p", "debug", "-t", "5", oomlab, "run", ddp.to_str().unwrap(), "--out"];
    slurm.output("srun", &[&step[..], &[launched.to_str().unwrap(), "--quiet"]].concat());
    let read = |root: &Path| {
        let dir = std::fs::read_dir(root).unwrap().next().unwrap().unwrap().path().join("ranks");
        let rows: Vec<oomlab::schema::SummaryRow> = common::read_csv(&dir.join("summary.csv"));
        let trace: Vec<oomlab::schema::PhaseRecord> = common::read_csv(&dir.join("trace.csv"));
        (rows, trace)
    };
    let ((own_rows, own_trace), (rows, trace)) = (read(&own), read(&launched));
    assert_eq!(std::fs::read_dir(&launched).unwrap().count(), 1, "one results folder");
    assert_eq!(own_rows.len(), 1);
    let summary = |r: &oomlab::schema::SummaryRow| (r.status, r.world_size, r.final_loss, r.trace_rows);
    assert_eq!(summary(&own_rows[0]), summary(&rows[0]));
    assert_eq!(trace.iter().filter(|t| t.rank == Some(1)).count(), trace.len() / 2, "both ranks' phases");
    for (a, b) in own_trace.iter().zip(&trace) {
        assert_eq!((a.rank, a.step, a.phase), (b.rank, b.step, b.phase));
        // From the third step exactly; before it a gloo thread may still hold a collective's
        // tensors (at most a flat copy of the 712 B of parameters).
        let slack = if a.step < 3 { 712 + 64 } else { 0 };
        assert!(a.memory_allocated.abs_diff(b.memory_allocated) <= slack, "{a:?}\n{b:?}");
        assert!(a.max_memory_allocated.abs_diff(b.max_memory_allocated) <= slack, "{a:?}\n{b:?}");
    }
}

/// One DDP trial of two ranks, parameters of 712 bytes: 8 -> 16 -> 2.
const DDP_SPEC: &str = r#"[experiment]
name = "ranks"

[model]
hidden = 16
depth = 1

[data]
samples = 64
features = 8
classes = 2

[training]
optimizer = "adam"
lr = 0.01
batch_size = 4
steps = 4

[run]
device = "cpu"

[parallel]
strategy = "ddp"
world_size = 2
"#;

/// `oomlab slurm --per-gpu-kind` writes the scripts a user submits, and prints how; no Slurm
/// needed.
#[test]
fn per_gpu_kind_writes_the_scripts_to_submit() {
    let sb = Sandbox::new();
    let spec = sb.spec("arrayed.toml", SPEC);
    let out = sb.path().join("results");
    let run = Command::new(common::bin())
        .args([
            "slurm",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--per-gpu-kind",
            "a100,h100",
        ])
        .args(["--partition", "gpu", "--time", "1:00:00", "--account", "hep", "--budget", "15.90GiB"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{said}{}", String::from_utf8_lossy(&run.stderr));
    let out = out.canonicalize().unwrap();
    let scripts = out.join("slurm");
    for kind in ["a100", "h100"] {
        let array = std::fs::read_to_string(scripts.join(format!("arrayed-{kind}.sbatch"))).unwrap();
        for line in [
            "#SBATCH --array=1-6\n".to_string(),
            format!("#SBATCH --gres=gpu:{kind}:1\n"),
            "#SBATCH --partition=gpu\n".into(),
            "#SBATCH --time=1:00:00\n".into(),
            "#SBATCH --account=hep\n".into(),
            format!(
                " run {} --shard \"${{SLURM_ARRAY_TASK_ID}}/6\" --out {} --budget 15.90GiB\n",
                spec.canonicalize().unwrap().display(),
                out.join(kind).display()
            ),
        ] {
            assert!(array.contains(&line), "no {line:?} in\n{array}");
        }
        let merge = std::fs::read_to_string(scripts.join(format!("arrayed-{kind}-merge.sbatch"))).unwrap();
        assert!(merge.contains(&format!("for dir in {}/*/arrayed; do", out.join(kind).display())), "{merge}");
        assert!(!merge.contains("--gres"), "the merge needs no GPU");
        for script in [format!("arrayed-{kind}.sbatch"), format!("arrayed-{kind}-merge.sbatch")] {
            let syntax = Command::new("bash").arg("-n").arg(scripts.join(&script)).status().unwrap();
            assert!(syntax.success(), "{script} is not valid bash");
        }
        assert!(
            said.contains(&format!(
                "sbatch --dependency=afterany:$jid {}",
                scripts.join(format!("arrayed-{kind}-merge.sbatch")).display()
            )),
            "{said}"
        );
    }
    assert!(said.contains(&format!("bash {}", scripts.join("submit.sh").display())), "{said}");
    assert!(said.contains("side by side: oomlab compare"), "{said}");
    let syntax = Command::new("bash").arg("-n").arg(scripts.join("submit.sh")).status().unwrap();
    assert!(syntax.success());
}
