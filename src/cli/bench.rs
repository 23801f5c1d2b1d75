//! `oomlab bench` (time oomlab at each trace level against PyTorch's loop; writes BENCH.md,
//! bench.csv and the chart) and the hidden `oomlab bench-worker`, which runs one contender in a
//! process of its own for it.
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::bench::{self, report, runner, Contender, Header, Plan, BENCH_CSV, BENCH_MD, BENCH_PARTIAL_CSV};
use crate::chart;
use crate::device::{self, DeviceChoice};
use crate::results::manifest;
use crate::schema::TraceLevel;

pub const BENCH_EXAMPLES: &str = "\
Examples:
  scripts/bench
      The whole bench on the device oomlab picks (a GPU if there is one), with the PyTorch 2.11 that
      scripts/setup-libtorch installs on a CPU machine: runs/<device>/BENCH.md and bench.png.
  oomlab bench --device cpu --out /tmp/bench
      The same, by hand, written under /tmp/bench/<device>/ (Python's torch must be importable:
      PYTHONPATH=$(dirname $(scripts/setup-libtorch))).
  oomlab bench --quick --out /tmp/b
      A test of the bench itself in about a minute: tiny models, 3 timed steps, one round.
  oomlab bench --config 3x256-fused --config 8x5000 --rounds 5
      Only two configurations, five rounds.

What it measures: for each configuration, oomlab at each --trace level (off, steps, phases, sync)
and PyTorch's loop (untraced, and synchronised at every phase's end), each in a process of its
own, in rounds with the order rotated. Step time is the host's clock between step ends with the
device waited for, the same on both sides. BENCH.md gives medians, spreads and every ratio against
its target (oomlab phases <= 1.03x off; off <= 0.9x PyTorch for the lesson's model and <= 0.5x for
3 x 256 on a GPU; not slower than PyTorch on the CPU), and for a missed target by how much and
where the time goes. BENCH files already there are replaced only with --force; nothing else in
the folder is touched.";

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Device: auto (a GPU if libtorch sees one, else the CPU), cpu, cuda or cuda:N.
    #[arg(long, value_parser = super::parse_device, default_value = "auto")]
    pub device: DeviceChoice,
    /// Results root: the bench writes OUT/<device>/BENCH.md, bench.csv, bench.png and bench.svg.
    #[arg(long, default_value = crate::results::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Replace BENCH.md, bench.csv and the chart if the device's folder has them.
    #[arg(long)]
    pub force: bool,
    /// Tiny models, 1 warm-up and 3 timed steps, one round, and the small model in its for-loop
    /// implementation only (the others by --config): checks the bench in about a minute,
    /// measures nothing.
    #[arg(long)]
    pub quick: bool,
    /// Only these configurations (repeat the flag); default: all. `--config list` lists them.
    #[arg(long = "config", value_name = "NAME")]
    pub configs: Vec<String>,
    /// Only these contenders (repeat the flag): oomlab-off, oomlab-steps, oomlab-phases,
    /// oomlab-sync, pytorch, pytorch-sync; default: all. A ratio needs both of its contenders.
    #[arg(long = "contender", value_name = "NAME", value_parser = parse_contender)]
    pub contenders: Vec<Contender>,
    /// Rounds: each launches every contender of every configuration once (default 5; 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: Option<u64>,
    /// Timed steps per process, for every configuration (default: per configuration and device).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub steps: Option<u64>,
    /// Warm-up steps per process before the timed ones (default: per configuration and device).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub warmup: Option<u64>,
    /// Intra-op threads for both sides (default: libtorch's, one per core).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub threads: Option<i32>,
    /// The Python whose torch runs PyTorch's loop (its PYTHONPATH is passed on).
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The trace level to train at; the request (JSON) comes on stdin.
    #[arg(long, value_enum, required_unless_present = "describe")]
    pub level: Option<TraceLevel>,
    /// Print the device's name and exit.
    #[arg(long, requires = "device")]
    pub describe: bool,
    /// With --describe: the device to name.
    #[arg(long, value_parser = super::parse_device)]
    pub device: Option<DeviceChoice>,
}

fn parse_contender(s: &str) -> Result<Contender, String> {
    Contender::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Contender::ALL.iter().map(|c| c.as_str()).collect();
        format!("`{s}` is not a contender: use one of {}", names.join(", "))
    })
}

/// The loop script, from the source tree this binary was built from.
fn loop_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference/bench_loop.py")
}

pub fn run(args: BenchArgs) -> Result<()> {
    let device = args.device.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
    let cuda = device.is_cuda();
    let mut plan = Plan::new(cuda, args.quick)?;
    if args.configs.iter().any(|c| c == "list") {
        for c in &plan.configs {
            say!("{:<16} {}", c.name, c.title);
        }
        return Ok(());
    }
    plan = plan.only(&args.configs)?;
    if !args.contenders.is_empty() {
        plan.contenders.retain(|c| args.contenders.contains(c));
    }
    if let Some(r) = args.rounds {
        plan.rounds = r as usize;
    }
    for c in &mut plan.configs {
        c.steps = args.steps.map_or(c.steps, |s| s as usize);
        c.warmup = args.warmup.map_or(c.warmup, |w| w as usize);
    }
    let script = loop_script();
    if !script.is_file() {
        bail!("{} is missing: the bench needs the source tree it was built from", script.display());
    }
    let launcher = runner::Launcher {
        oomlab: std::env::current_exe().context("finding this oomlab binary")?,
        python: args.python.clone(),
        loop_script: script,
        device: match device {
            tch::Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".into(),
        },
        threads: args.threads.unwrap_or_else(tch::get_num_threads),
        timeout: runner::WORKER_TIMEOUT,
    };
    let device_name = launcher.device_name()?;
    let _out = crate::run::check_out(&args.out)?;
    let dir = args.out.join(device::slug(&device_name));
    let ours = [
        BENCH_MD.to_string(),
        BENCH_CSV.into(),
        BENCH_PARTIAL_CSV.into(),
        format!("{}.png", bench::BENCH_CHART),
        format!("{}.svg", bench::BENCH_CHART),
    ];
    let existing: Vec<&String> = ours.iter().filter(|f| dir.join(f).exists()).collect();
    if !existing.is_empty() && !args.force {
        bail!(
            "{} already holds {}; pass --force to replace the bench's files (nothing else there is touched), or \
             --out DIR to write elsewhere",
            dir.display(),
            existing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    if plan.contenders.iter().any(|c| c.level().is_none()) {
        check_python(&launcher.python)?;
    }
    crate::interrupt::install()?;
    crate::interrupt::arm();

    let started = std::time::Instant::now();
    // Before the rounds: the code that ran, not what the tree holds when they end.
    let git = crate::revision::git_info();
    let load_before = load_average();
    let total: usize = plan.configs.len() * plan.contenders.len() * plan.rounds;
    note!(
        "bench: {total} processes on {device_name} ({} threads each), results to {}",
        launcher.threads,
        dir.display()
    );
    // Each sample is on disk before the next process starts; a stop keeps them, and says so.
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = dir.join(BENCH_PARTIAL_CSV);
    crate::interrupt::set_wording(
        "stopping after the process under way (the samples measured are kept); Ctrl-C again to stop at once"
            .into(),
        format!(
            "after the process under way: the samples measured so far are in {} (a bench's verdicts need \
             every round: run it again with --force)",
            partial.display()
        ),
    );
    let mut save =
        |samples: &[runner::Sample]| crate::fsio::write_atomic(&partial, report::csv(samples).as_bytes());
    let samples = runner::run_rounds(&plan, &launcher, &mut |line| note!("{line}"), &mut save)?;
    let analysis = bench::analyse(&plan, &samples)?;
    for c in analysis.configs.iter().filter(|c| c.same_model.loss_difference > report::LOSS_TOLERANCE) {
        note!(
            "warning: {}: the processes' final losses differ by {:.1e} (relative): see BENCH.md",
            c.name,
            c.same_model.loss_difference
        );
    }
    // The estimate's own speed, every committed spec (the lesson's alone with --quick).
    let estimate_device = if cuda { "cuda" } else { "cpu" };
    let specs = bench::estimate_times::committed_specs(plan.quick)?;
    let times =
        bench::estimate_times::time_all(&launcher.oomlab, &specs, estimate_device, &mut |l| note!("{l}"))?;
    let header = header(&plan, &launcher, &device_name, &samples, git, load_before, started);

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let csv_path = dir.join(BENCH_CSV);
    crate::fsio::write_atomic(&csv_path, report::csv(&samples).as_bytes())?;
    let rendered = chart::render(&crate::bench::chart::chart(&analysis, &device_name), &dir)?;
    let md = dir.join(BENCH_MD);
    let text =
        report::markdown(&header, &analysis) + &bench::estimate_times::markdown(&times, estimate_device);
    crate::fsio::write_atomic(&md, text.as_bytes())?;
    // Complete: bench.csv holds every sample.
    let _ = std::fs::remove_file(&partial);

    for c in &analysis.configs {
        for v in &c.verdicts {
            say!(
                "{:<16} {:<28} {:.3} (target <= {})  {}",
                c.name,
                v.target.kind.label(),
                v.ratio,
                v.target.limit,
                v.word()
            );
        }
    }
    say!("report: {}", md.display());
    say!("samples: {}", csv_path.display());
    say!("chart: {} and {}", rendered.png.display(), rendered.svg.display());
    Ok(())
}

/// Before any contender runs: PyTorch's side needs a Python that imports torch, and finding out
/// after oomlab's contenders have run costs minutes.
fn check_python(python: &std::path::Path) -> Result<()> {
    let out = std::process::Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .output()
        .with_context(|| format!("--python {}: cannot start it", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        bail!(
            "--python {} cannot import torch ({last}): run scripts/bench, which puts the torch \
             scripts/setup-libtorch installed on PYTHONPATH; or pass --python PATH to one that has it; or leave \
             PyTorch's side out with --contender for each of oomlab's",
            python.display()
        );
    }
    Ok(())
}

fn header(
    plan: &Plan,
    launcher: &runner::Launcher,
    device_name: &str,
    samples: &[runner::Sample],
    git: crate::revision::GitInfo,
    load_before: Option<f64>,
    started: std::time::Instant,
) -> Header {
    let python =
        samples.iter().find(|s| s.contender == Contender::Pytorch || s.contender == Contender::PytorchSync);
    let here = crate::results::provenance::Provenance::here();
    Header {
        machine: here.hostname,
        os: here.os,
        cpu: here.cpu,
        device: device_name.to_string(),
        threads: launcher.threads,
        oomlab: here.oomlab.into(),
        tch: here.tch.into(),
        libtorch: here.libtorch,
        python_torch: python.map_or("not run".into(), |s| s.report.torch.clone()),
        python: python.map_or("not run".into(), |s| s.report.python.clone()),
        revision: git.revision,
        dirty: git.dirty,
        date: manifest::now(),
        command: here.command.join(" "),
        load_before,
        load_after: load_average(),
        minutes: started.elapsed().as_secs_f64() / 60.0,
        rounds: plan.rounds,
        quick: plan.quick,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
    }
}

/// The 1-minute load average (Linux), to tell a busy machine's numbers from a quiet one's.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// `oomlab bench-worker`: one contender, one process (see `bench::protocol`).
pub fn worker(args: WorkerArgs) -> Result<()> {
    if args.describe {
        let device = args
            .device
            .unwrap_or_default()
            .resolve(crate::libtorch::cuda::devices())
            .map_err(anyhow::Error::msg)?;
        let probe = crate::run::open_probe(device, None)?;
        say!("{}", probe.name());
        return Ok(());
    }
    let level = args.level.context("--level is needed")?;
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).context("reading the request from stdin")?;
    let request: bench::Request =
        serde_json::from_str(&text).context("the request on stdin is not bench JSON")?;
    let report = bench::worker::run(level, &request)?;
    say!("{}", serde_json::to_string(&report)?);
    Ok(())
}
