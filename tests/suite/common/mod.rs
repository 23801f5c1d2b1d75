//! Helpers for integration tests: the binary, the lock for libtorch work in this process,
//! fixtures made once per process, isolated temp folders and spec files.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use oomlab::estimate::{relative_error, Prediction};
use oomlab::probe::CpuProbe;
use oomlab::schema::{Phase, PhaseRecord, Status};
use oomlab::spec::Config;
use tempfile::TempDir;

pub mod advise;
pub mod rng;

/// The `oomlab` binary this build made.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_oomlab")
}

/// `oomlab`, to be given its arguments.
pub fn oomlab() -> assert_cmd::Command {
    with_wait_policy(assert_cmd::Command::new(bin()))
}

/// Held by a test for as long as it runs libtorch work in this process (see `main.rs`): one such
/// test at a time, since the counting allocator, its event log and libtorch's thread count are
/// the process's. Dropped, it sets libtorch's thread count back to what it found (a test may
/// change it, as `pytorch_oracle`'s do). A test that panicked while holding it does not poison
/// it for the others.
pub struct InProcess {
    threads: i32,
    _lock: MutexGuard<'static, ()>,
}

pub fn in_process() -> InProcess {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD.with(|h| h.set(true));
    InProcess { threads: tch::get_num_threads(), _lock: lock }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if tch::get_num_threads() != self.threads {
            tch::set_num_threads(self.threads);
        }
        HELD.with(|h| h.set(false));
    }
}

thread_local! {
    /// Whether this thread holds [`in_process`].
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Fails the test unless its thread holds [`in_process`]: the helpers below that run libtorch
/// here call it, so that a test which forgets the lock fails rather than measures another's
/// bytes now and then.
#[track_caller]
pub fn assert_in_process() {
    assert!(HELD.with(|h| h.get()), "libtorch work in the test process without common::in_process()");
}

/// Runs `body`, the whole of the calling test, in a process of its own: this test binary,
/// asked for that one test. For the longest tests that run libtorch work here: in a process of
/// their own they hold [`in_process`] without keeping the others waiting, and run beside them.
/// The test fails if the process does (its output said), or if it ran no test of that name.
/// Where each test already has a process of its own (nextest), or libtest names no test on this
/// thread (one thread: the main one), `body` runs here.
pub fn in_own_process(body: impl FnOnce()) {
    const VAR: &str = "OOMLAB_TEST_IN_OWN_PROCESS";
    let name = std::thread::current().name().map(str::to_string);
    let here = std::env::var_os(VAR).is_some()
        || std::env::var("NEXTEST_EXECUTION_MODE").is_ok_and(|m| m == "process-per-test");
    let Some(name) = name.filter(|n| !here && n != "main") else {
        return body();
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--test-threads", "1", "--nocapture"])
        .env(VAR, &name)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the test binary runs");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name}, in a process of its own, failed:\n{said}");
    assert!(said.contains("test result: ok. 1 passed"), "{name}: no test of that name ran:\n{said}");
    print!("{said}");
}

/// Held by a test of `tests/quiet` for all of its run: one at a time there.
pub fn alone() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Set once a test of `tests/quiet` runs: the processes it starts time steps as a user's would.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `oomlab` for a test: in `tests/quiet`, with OpenMP's own wait policy. `scripts/test` makes
/// waiting threads sleep (`OMP_WAIT_POLICY=passive`), which two tests sharing two cores need; a
/// quiet machine's calibration is to measure what a user's run takes, and a tiny model's passes,
/// woken from sleep op by op, vary past the calibration's rules.
fn with_wait_policy(mut c: assert_cmd::Command) -> assert_cmd::Command {
    if QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        c.env_remove("OMP_WAIT_POLICY");
    }
    c
}

/// A folder made once per process by `make` (given the empty folder) and kept to the process's
/// end, for fixtures that take long to make: modules PyTorch exports, shared by every test that
/// trains them. A test copies what it needs into its own sandbox ([`Sandbox::copy_from`]) and
/// never writes here. Removed when the process exits; `make` failing fails every test that asks.
pub fn shared(name: &str, make: impl FnOnce(&Path)) -> &'static Path {
    type Cell = OnceLock<PathBuf>;
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    static CELLS: Mutex<Vec<(String, &'static Cell)>> = Mutex::new(Vec::new());
    let root = ROOT.get_or_init(|| {
        let root = tempfile::Builder::new().prefix("oomlab-fixtures-").tempdir().unwrap().keep();
        static PATH: OnceLock<PathBuf> = OnceLock::new();
        PATH.set(root.clone()).unwrap();
        extern "C" fn remove() {
            if let Some(p) = PATH.get() {
                let _ = std::fs::remove_dir_all(p);
            }
        }
        // SAFETY: `remove` is a plain function, fit to run at exit.
        unsafe { libc::atexit(remove) };
        root
    });
    let cell: &'static Cell = {
        let mut cells = CELLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match cells.iter().find(|(n, _)| n == name) {
            Some((_, cell)) => cell,
            None => {
                let cell: &'static Cell = Box::leak(Box::default());
                cells.push((name.to_string(), cell));
                cell
            }
        }
    };
    // Made by the first test to ask; another asking meanwhile waits for it. A `make` that
    // panics leaves it unmade, for the next to try (and fail on its own).
    cell.get_or_init(|| {
        let dir = root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir);
        dir
    })
}

/// A temp folder that lives as long as the value; results and specs go inside it.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a spec file and returns its path.
    pub fn spec(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write spec");
        p
    }

    /// The results root.
    pub fn out(&self) -> PathBuf {
        self.path().join("results")
    }

    /// Puts each file of `files` from the folder `from` (a [`shared`] fixture) into the sandbox,
    /// under the same name: a hard link where the two are on one file system (the tests only
    /// read them), else a copy.
    pub fn copy_from(&self, from: &Path, files: &[&str]) {
        for f in files {
            let (src, dst) = (from.join(f), self.path().join(f));
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            }
        }
    }
}

/// A tiny synthetic MLP spec trained on CPU; `extra` is appended (e.g. a [sweep] table).
pub fn tiny_spec(name: &str, model: &str, budget: Option<u64>, extra: &str) -> String {
    let budget = budget.map(|b| format!("budget = \"{b}B\"\n")).unwrap_or_default();
    format!(
        r#"[experiment]
name = "{name}"

[model]
{model}

[data]
samples = 32
features = 32
classes = 4

[training]
optimizer = "sgd"
lr = 0.01
batch_size = 4
steps = 1

[run]
device = "cpu"
{budget}{extra}
"#
    )
}

/// Starts a three-trial run whose first trial is quick and whose second trains for minutes
/// (`--out` under the sandbox), and waits until trial 1 is in summary.csv. Returns the child and
/// the experiment's results folder.
pub fn long_run(sb: &Sandbox) -> (std::process::Child, PathBuf) {
    use std::time::{Duration, Instant};
    let sweep = "[sweep]\nfield = \"training.steps\"\nvalues = [1, 100000, 100001]\n";
    let spec = sb.spec("long.toml", &tiny_spec("long", "hidden = 64\ndepth = 2", None, sweep));
    let child = std::process::Command::new(bin())
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet"])
        .spawn()
        .unwrap();
    let started = Instant::now();
    let dir = loop {
        let found = walk(&sb.out()).into_iter().find(|p| p.ends_with("summary.csv"));
        if let Some(p) = found.filter(|p| std::fs::read_to_string(p).unwrap().lines().count() >= 2) {
            break p.parent().unwrap().to_path_buf();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "trial 1 never reached summary.csv");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Into trial 2.
    std::thread::sleep(Duration::from_millis(300));
    (child, dir)
}

/// [`long_run`], SIGKILLed in trial 2 (no destructor runs). Returns the results folder.
pub fn killed_after_first_trial(sb: &Sandbox) -> PathBuf {
    let (mut child, dir) = long_run(sb);
    child.kill().unwrap();
    child.wait().unwrap();
    dir
}

/// Every file under `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return vec![] };
    rd.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

/// The columns of a results folder's CSV that are not times, as written (the bytes of each field,
/// not parsed numbers), one line per row with the header first: what two runs of the same trials
/// must agree on, byte for byte.
pub fn untimed_csv(dir: &Path, file: &str) -> Vec<String> {
    const TIMES: [&str; 8] = [
        "page_faults",
        "step_seconds",
        "data_seconds",
        "model_seconds",
        "steps_total_seconds",
        "trial_seconds",
        "phase_seconds",
        "elapsed_seconds",
    ];
    let path = dir.join(file);
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_path(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let records: Vec<csv::StringRecord> = rd.records().map(|r| r.expect("a CSV row")).collect();
    let Some(header) = records.first() else { return Vec::new() };
    let keep: Vec<usize> =
        header.iter().enumerate().filter(|(_, h)| !TIMES.contains(h)).map(|(i, _)| i).collect();
    records
        .iter()
        .map(|r| keep.iter().map(|&i| r.get(i).unwrap_or("")).collect::<Vec<_>>().join(","))
        .collect()
}

/// A results folder's answers, their probe times (which differ from run to run) left out.
pub fn answers(dir: &Path) -> Vec<oomlab::results::manifest::Answer> {
    let m = oomlab::results::ExperimentDir::read(dir).unwrap().manifest;
    m.answers.into_iter().map(|a| oomlab::results::manifest::Answer { probe_seconds: None, ..a }).collect()
}

/// A merged folder holds the single run's trials: every column but the times, byte for byte, and
/// the same answers.
pub fn assert_same_trials(single: &Path, merged: &Path) {
    for file in ["summary.csv", "trace.csv"] {
        let (a, b) = (untimed_csv(single, file), untimed_csv(merged, file));
        assert!(a.len() > 1, "{file} has trials");
        assert_eq!(a, b, "{file} of {} against one process", merged.display());
    }
    assert_eq!(answers(single), answers(merged));
}

/// The folder holding the `torch` package that `scripts/setup-libtorch` installs (the parent of
/// the path it prints, through the clone's `.libtorch` link), for `PYTHONPATH`: the oracle the
/// tests hold oomlab to. Found once per test binary.
pub fn torch_site() -> &'static Path {
    static SITE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SITE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new(root.join("scripts/setup-libtorch"))
            .output()
            .expect("scripts/setup-libtorch runs (it installs the PyTorch wheel the tests import)");
        assert!(
            out.status.success(),
            "scripts/setup-libtorch failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let torch = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).canonicalize().unwrap();
        torch.parent().expect("the torch folder has a parent").to_path_buf()
    })
}

/// Runs a real trial of `config` on the CPU (the counting allocator); returns its records with
/// the baseline taken off, and its peak; they are the phases of the trial's plan
/// ([`oomlab::step::phases`]). The caller holds [`in_process`].
pub fn measure(config: &Config) -> (Vec<PhaseRecord>, u64) {
    assert_in_process();
    let probe = CpuProbe::new(None).expect("CPU probe");
    let mut records = Vec::new();
    let outcome = oomlab::train::run_trial(config, &probe, 0, oomlab::schema::TraceLevel::Phases, &mut |r| {
        records.push(r.clone());
        Ok(())
    })
    .expect("trial runs");
    // A float16 model (not autocast: no scaler) may overflow to a NaN loss; its steps still run
    // and allocate as any other's.
    let half = config.training.dtype == oomlab::spec::Dtype::Float16;
    let ran = outcome.status == Status::Ok || (half && outcome.status == Status::Diverged);
    assert!(ran, "{:?}: {}", outcome.status, outcome.message);
    // The trainer and the estimate's replay execute one description of the trial
    // (`oomlab::step`): what was measured is its phases ([`compare`] holds a prediction's to them).
    let measured: Vec<_> = records.iter().map(|r| (r.step, r.micro, r.phase)).collect();
    let planned: Vec<_> = oomlab::step::phases(config).collect();
    assert_eq!(measured, planned, "the measured phases are the plan's");
    let base = outcome.baseline_allocated;
    (over_baseline(&records, base), outcome.max_memory_allocated - base)
}

/// `records` with the trial's baseline `base` taken off their bytes, as [`compare`] takes them.
pub fn over_baseline<'a>(records: impl IntoIterator<Item = &'a PhaseRecord>, base: u64) -> Vec<PhaseRecord> {
    records
        .into_iter()
        .map(|r| PhaseRecord {
            memory_allocated: r.memory_allocated - base,
            max_memory_allocated: r.max_memory_allocated - base,
            ..r.clone()
        })
        .collect()
}

/// Compares a prediction with a trial: every phase's end and peak, and the trial's peak, to
/// the byte, except that a peak where a matmul ran (forward, backward, the trial's) may fall
/// short by up to `workspace`. Returns the failures (empty: all match) and the largest relative
/// error seen.
pub fn compare(
    name: &str,
    predicted: &Prediction,
    records: &[PhaseRecord],
    peak: u64,
    workspace: u64,
) -> (Vec<String>, f64) {
    compare_within(name, predicted, records, peak, workspace, 0)
}

/// [`compare`], where a backward's peak (and so the trial's) may also be up to `racy` bytes
/// below the prediction: buffers that parallel chunks make at once on a quiet machine and may
/// make one after another on a busy one (`estimate::flash_backward_racy`).
pub fn compare_within(
    name: &str,
    predicted: &Prediction,
    records: &[PhaseRecord],
    peak: u64,
    workspace: u64,
    racy: u64,
) -> (Vec<String>, f64) {
    let mut failures = Vec::new();
    let mut worst = 0f64;
    let mut check = |what: String, p: u64, m: u64, short: u64, over: u64| {
        worst = worst.max(relative_error(p, m).abs());
        if p > m.saturating_add(over) || m.saturating_sub(p) > short {
            failures
                .push(format!("{name}: {what}: predicted {p}, measured {m} ({:+} B)", p as i64 - m as i64));
        }
    };
    assert_eq!(predicted.phases.len(), records.len(), "{name}: phases {:?}", predicted.phases);
    for (p, r) in predicted.phases.iter().zip(records) {
        assert_eq!((p.step, p.micro, p.phase), (r.step, r.micro, r.phase), "{name}: phase order");
        // The data phase too: a half-precision data set's labels come from a matrix product.
        let short =
            if matches!(r.phase, Phase::Data | Phase::Forward | Phase::Backward) { workspace } else { 0 };
        let over = if r.phase == Phase::Backward { racy } else { 0 };
        check(format!("step {} {} end", r.step, r.phase), p.allocated_end, r.memory_allocated, 0, 0);
        check(format!("step {} {} peak", r.step, r.phase), p.peak, r.max_memory_allocated, short, over);
    }
    check("trial peak".into(), predicted.peak, peak, workspace, racy);
    (failures, worst)
}

/// The largest scratch buffer oneDNN takes for the low-precision matrix products of `Linear`s of
/// `(rows, in, out)` under `amp` (the forward's addmm, the input's gradient and the weight's, as
/// autograd computes them), measured on real tensors; 0 where they do not run in oneDNN
/// (`estimate::onednn`). The estimate leaves that buffer out (it depends on the CPU and oneDNN's
/// blocking), so a forward's or backward's peak may fall short of the measurement by at most this.
pub fn onednn_linear_scratch(amp: oomlab::spec::Amp, linears: &[(i64, i64, i64)]) -> u64 {
    use oomlab::probe::MemoryProbe;
    use oomlab::spec::Amp;
    use tch::{Device, Kind, Tensor};
    assert_in_process();
    let kind = match amp {
        amp if !oomlab::estimate::onednn::lowp_matmul(&amp) => return 0,
        Amp::Fp16 { .. } => Kind::Half,
        _ => Kind::BFloat16,
    };
    let probe = CpuProbe::new(None).expect("CPU probe");
    let opts = (kind, Device::Cpu);
    let mut worst = 0;
    for &(m, k, n) in linears {
        let (x, weight, bias, grad) = (
            Tensor::ones([m, k], opts),
            Tensor::ones([n, k], opts),
            Tensor::ones([n], opts),
            Tensor::ones([m, n], opts),
        );
        let products: [(&dyn Fn() -> Tensor, i64); 3] = [
            (&|| bias.addmm(&x, &weight.tr()), m * n),
            (&|| grad.mm(&weight), m * k),
            (&|| grad.tr().mm(&x), n * k),
        ];
        for (product, numel) in products {
            let before = probe.snapshot().unwrap().memory_allocated;
            probe.reset_peak().unwrap();
            drop(product());
            let peak = probe.snapshot().unwrap().max_memory_allocated;
            worst = worst.max(peak - before - 2 * numel as u64);
        }
    }
    worst
}

/// One trial of PyTorch's run, from its `.summary.csv`.
#[derive(serde::Deserialize)]
pub struct PySummary {
    pub trial: usize,
    pub status: String,
    pub baseline_allocated: u64,
    pub final_loss: f64,
}

/// Runs plain PyTorch on the trials of an oomlab run (`scripts/reference/train.py --cpu-memory`:
/// the same configurations, its counting allocator installed as libtorch's CPU allocator), its
/// trace written to `out` and its summary beside it; returns both, read. Fails the test, with
/// what Python said, if it fails.
pub fn pytorch_cpu_memory(summary: &Path, out: &Path) -> (Vec<PySummary>, Vec<PhaseRecord>) {
    pytorch_cpu_memory_each(&[(summary, out)]).pop().unwrap()
}

/// [`pytorch_cpu_memory`] for several runs, in one Python process: `import torch` alone takes
/// seconds, once instead of once a run.
pub fn pytorch_cpu_memory_each(runs: &[(&Path, &Path)]) -> Vec<(Vec<PySummary>, Vec<PhaseRecord>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let argvs: Vec<Vec<String>> = runs
        .iter()
        .map(|(summary, out)| {
            ["--device", "cpu", "--cpu-memory", "--summary"]
                .iter()
                .map(|s| s.to_string())
                .chain([summary.display().to_string(), "--out".into(), out.display().to_string()])
                .collect()
        })
        .collect();
    python_main_each(&root.join("scripts/reference/train.py"), &argvs);
    runs.iter()
        .map(|(_, out)| (read_csv(Path::new(&format!("{}.summary.csv", out.display()))), read_csv(out)))
        .collect()
}

/// Runs the `main()` of the Python script `script` once for each of `argvs` (its command-line
/// arguments, as `sys.argv[1:]`), all in one interpreter, with the wheel's torch importable:
/// what running the script once per argument list does, but for the seconds each new Python
/// spends importing torch. Fails the test, with what Python said, at the first that fails.
pub fn python_main_each(script: &Path, argvs: &[Vec<String>]) {
    const EACH: &str = r#"
import json, os, runpy, sys
script, argvs = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, os.path.dirname(script))
main = runpy.run_path(script, run_name="each")["main"]
for argv in argvs:
    sys.argv = [script, *argv]
    try:
        main()
    except SystemExit as e:
        if e.code not in (None, 0):
            sys.exit(f"{os.path.basename(script)} {' '.join(argv)}: exit {e.code}")
"#;
    let run = std::process::Command::new("python3")
        .args(["-c", EACH])
        .arg(script)
        .arg(serde_json::to_string(argvs).unwrap())
        .env("PYTHONPATH", torch_site())
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "{} failed:\n{}\n{}",
        script.display(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// A trial's phases, (step, micro, phase) -> (allocated, peak), over its baseline `base`: how
/// two runs of one config (oomlab's and PyTorch's, or two kinds) are held phase by phase.
pub type Phases = std::collections::BTreeMap<(usize, usize, String), (i64, i64)>;

pub fn phases(trace: &[PhaseRecord], trial: usize, base: u64) -> Phases {
    let b = base as i64;
    trace
        .iter()
        .filter(|r| r.trial == trial)
        .map(|r| {
            let at = (r.step, r.micro, r.phase.to_string());
            (at, (r.memory_allocated as i64 - b, r.max_memory_allocated as i64 - b))
        })
        .collect()
}

/// Where a TorchScript copy's phases (`mine`) part from those of the built-in kind it copies
/// (`theirs`): the copy holds the file's debug records (`kept` bytes) from the model on, and its
/// forward may peak `forward_extra` higher (what TorchScript's interpreter keeps longer). The
/// data phase is the same; the model phase ends `kept` higher and peaks at least there (loading
/// reads the file's other records too, and the built-in's initialisation has temporaries of its
/// own); every later phase ends and peaks `kept` higher.
pub fn parted_from_built_in(mine: &Phases, theirs: &Phases, kept: i64, forward_extra: i64) -> Vec<String> {
    assert_eq!(mine.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>(), "the same phases");
    mine.iter()
        .filter(|(k, v)| {
            let (allocated, peak) = (v.0 - theirs[*k].0, v.1 - theirs[*k].1);
            match k.2.as_str() {
                "data" => (allocated, peak) != (0, 0),
                "model" => allocated != kept || v.1 < theirs[*k].0 + kept,
                "forward" => (allocated, peak) != (kept, kept + forward_extra),
                _ => (allocated, peak) != (kept, kept),
            }
        })
        .map(|(k, v)| format!("{k:?}: the copy {v:?}, the built-in {:?}", theirs[k]))
        .collect()
}

/// Runs `python`, a PyTorch script that writes modules into the folder it is given (the
/// sandbox), from a file: `torch.jit.script` reads a class's source, which `python3 -c` has none
/// of.
pub fn export_modules(sb: &Sandbox, python: &str) {
    export_into(sb.path(), python);
}

/// [`export_modules`] once per process into a [`shared`] folder named `name` (a script writes
/// the same modules each time: its seeds are fixed); the folder, for [`Sandbox::copy_from`].
pub fn exported(name: &str, python: &str) -> &'static Path {
    shared(name, |dir| export_into(dir, python))
}

fn export_into(dir: &Path, python: &str) {
    let script = dir.join("export_modules.py");
    std::fs::write(&script, python).unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir)
        .env("PYTHONPATH", torch_site())
        .output()
        .expect("python3 runs (PyTorch exports the modules)");
    assert!(out.status.success(), "export failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Where the estimate of each variant's config parts from training it, at each of `batches`.
pub fn estimate_failures(variants: &[oomlab::spec::Variant], batches: &[usize]) -> Vec<String> {
    assert_in_process();
    assert!(!variants.is_empty() && !batches.is_empty(), "nothing to estimate");
    let mut failures = Vec::new();
    for variant in variants {
        for &batch in batches {
            let mut config = variant.config.clone();
            config.training.batch_size = batch;
            let predicted =
                oomlab::estimate::predict(&config).unwrap_or_else(|e| panic!("{}: {e:#}", variant.name));
            let (records, peak) = measure(&config);
            failures.extend(
                compare(&format!("{} at batch {batch}", variant.name), &predicted, &records, peak, 0).0,
            );
        }
    }
    failures
}

/// `oomlab run spec --out out` must fail, saying `says` and naming `file`, and write nothing.
pub fn refused_naming(spec: &Path, out: &Path, says: &str, file: &str) {
    let run = std::process::Command::new(bin()).arg("run").arg(spec).arg("--out").arg(out).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{says}: refused");
    assert!(err.contains(says) && err.contains(file), "{says}: {err}");
    assert!(!err.contains("frame #"), "no C++ backtrace: {err}");
    assert!(!err.contains("invalid file format"), "tch's prefix, not what is wrong: {err}");
    assert!(walk(out).is_empty(), "nothing written: {:?}", walk(out));
}

/// Every row of a CSV file, failing the test with the file's name on any error.
pub fn read_csv<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    csv::Reader::from_path(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .deserialize()
        .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// `scripts/reference/compare.py --blocks BLOCKS --history HISTORY`: the estimate's predicted
/// allocations against an allocation history, aligned; its report.
pub fn compare_blocks_py(blocks: &Path, history: &Path) -> String {
    let out = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference/compare.py"))
        .arg("--blocks")
        .arg(blocks)
        .arg("--history")
        .arg(history)
        .output()
        .expect("python3 runs compare.py");
    assert!(out.status.success(), "compare.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
