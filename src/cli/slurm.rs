//! `oomlab slurm SPEC...`: job arrays of shards and their merges, as sbatch scripts
//! (`cluster::slurm`), submitted with `--submit`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cluster::slurm;
use crate::device::DeviceChoice;
use crate::run::shard;
use crate::schema::TraceLevel;
use crate::spec;

pub const SLURM_EXAMPLES: &str = "\
Examples:
  oomlab slurm experiments/batch_size_sweep.toml --shards 4 --partition gpu --gpu-kind a100 \\
      --time 1:00:00 --out /shared/results
      Writes /shared/results/slurm/batch_size_sweep.sbatch (a job array of 4 tasks, task I running
      `oomlab run SPEC --shard I/4`), batch_size_sweep-merge.sbatch and submit.sh, and prints the
      sbatch commands.
  oomlab slurm experiments/depth_sweep.toml experiments/amp.toml --per-gpu-kind a100,h100 \\
      --partition gpu --out /shared/results --submit
      One array per spec and GPU kind, each into /shared/results/<kind>/, submitted with a merge
      after each.
  oomlab run experiments/batch_size_sweep.toml --shard 2/4
      One shard by hand, into runs/<device>/batch_size_sweep/shards/2-of-4/.
  oomlab merge runs/cpu-amd-epyc/batch_size_sweep
      Its shards merged into summary.csv, trace.csv, trace.json, manifest.json and charts.
  oomlab compare /shared/results/a100/*/batch_size_sweep /shared/results/h100/*/batch_size_sweep
      The GPU kinds side by side.

Each value of a list sweep, per variant, is a shard's trial of its own; a search, halving or a
list with on_oom = \"stop\" goes whole to one shard per variant. The binary, the specs and --out
must be on storage every node sees.";

#[derive(Debug, clap::Args)]
pub struct SlurmArgs {
    /// One or more specs; each gets its own job array and merge.
    #[arg(required = true, value_name = "SPEC")]
    pub specs: Vec<PathBuf>,
    /// Shards (array tasks) per spec; default: one per independent unit of the spec (a list
    /// value per variant, or a variant's whole search).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=crate::run::shard::MAX_SHARDS as i64))]
    pub shards: Option<u32>,
    /// Results root, on storage every node sees: the tasks write
    /// OUT/<device>/<experiment>/shards/I-of-N/, the merge OUT/<device>/<experiment>/.
    #[arg(long, default_value = crate::results::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Where the scripts and the tasks' logs (logs/) go; default OUT/slurm.
    #[arg(long, value_name = "DIR")]
    pub scripts: Option<PathBuf>,
    /// The partition to run in (sbatch --partition).
    #[arg(long)]
    pub partition: Option<String>,
    /// Each job's time limit, as sbatch takes it: 30 (minutes), 1:00:00, 1-0.
    #[arg(long)]
    pub time: Option<String>,
    /// The account to charge (sbatch --account).
    #[arg(long)]
    pub account: Option<String>,
    /// Generic resources for each task, as sbatch's --gres: gpu:1, gpu:a100:1.
    #[arg(long, conflicts_with_all = ["gpu_kind", "per_gpu_kind"])]
    pub gres: Option<String>,
    /// One GPU of this kind per task (--gres=gpu:KIND:1).
    #[arg(long, value_name = "KIND", conflicts_with = "per_gpu_kind")]
    pub gpu_kind: Option<String>,
    /// One array per GPU kind, each task with --gres=gpu:KIND:1, writing under OUT/KIND/, so that
    /// `oomlab compare` puts the kinds side by side.
    #[arg(long, value_name = "KIND,...", value_delimiter = ',')]
    pub per_gpu_kind: Vec<String>,
    /// CPUs per task (sbatch --cpus-per-task). On the CPU, memory depends on libtorch's thread
    /// count (a buffer per thread in reductions): a merge refuses shards that differ in it.
    #[arg(long)]
    pub cpus_per_task: Option<u32>,
    /// Another sbatch option for the array and the merge, as written: --qos=short,
    /// --constraint=a100. Repeatable.
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// Passed to each task's `oomlab run`: the device (auto, cpu, cuda, cuda:N).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceChoice>,
    /// Passed to each task's `oomlab run`: the memory budget, e.g. 15.90GiB.
    #[arg(long, value_parser = parse_budget, allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// Passed to each task's `oomlab run`: what each trial measures.
    #[arg(long, value_enum)]
    pub trace: Option<TraceLevel>,
    /// Replace results already in the shards' folders and an earlier merge (--force to each
    /// `oomlab run` and `oomlab merge`).
    #[arg(long)]
    pub force: bool,
    /// The oomlab binary the tasks run; default: this one.
    #[arg(long, value_name = "PATH")]
    pub oomlab: Option<PathBuf>,
    /// Submit with sbatch: each array, then its merge with --dependency=afterany:<array>.
    #[arg(long)]
    pub submit: bool,
}

fn parse_device(s: &str) -> Result<DeviceChoice, String> {
    s.parse()
}

/// Checked as `run --budget` checks it, and passed on as written.
fn parse_budget(s: &str) -> Result<String, String> {
    spec::size::parse_budget_arg(s).map(|_| s.to_string())
}

/// `path` made absolute (it must exist): a task runs in another folder, on another node.
fn absolute(path: &Path, what: &str) -> Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| format!("{what} {}", path.display()))
}

/// A path goes into a script's comments as well as its commands: a line break in it would end
/// a comment and make the rest a command.
fn no_control(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.to_string_lossy().chars().any(char::is_control) {
        bail!("{what} {:?} holds a line break or another control character; give a path without one", path);
    }
    Ok(path)
}

pub fn run(args: SlurmArgs) -> Result<()> {
    let r = &args;
    let one_word =
        |flag: &str, v: &Option<String>| v.as_deref().map_or(Ok(()), |v| slurm::check_value(flag, v));
    one_word("--partition", &r.partition)
        .and(one_word("--time", &r.time))
        .and(one_word("--account", &r.account))
        .and(one_word("--gres", &r.gres))
        .and(one_word("--gpu-kind", &r.gpu_kind))
        .map_err(anyhow::Error::msg)?;
    for (i, k) in r.per_gpu_kind.iter().enumerate() {
        slurm::check_value("--per-gpu-kind", k).map_err(anyhow::Error::msg)?;
        if r.per_gpu_kind[..i].contains(k) {
            bail!(
                "--per-gpu-kind names {k:?} twice: its two arrays would run the same shards into one folder"
            );
        }
        if k.contains('/') || k.starts_with('.') {
            bail!("--per-gpu-kind {k:?}: a kind names a folder under --out; give a name such as a100");
        }
    }
    for o in &r.sbatch {
        if !o.starts_with('-') || o.chars().any(char::is_control) {
            bail!("--sbatch {o:?}: give one sbatch option on one line, e.g. --sbatch=--qos=short");
        }
    }

    // The specs first: a bad one is named before anything is written.
    let mut specs = Vec::new();
    for path in &args.specs {
        let spec = spec::load(path)?;
        if let Some((_, other)) = specs.iter().find(|(s, _): &&(spec::Spec, PathBuf)| s.name == spec.name) {
            bail!(
                "{} and {} are both experiment {:?}: their shards would share folders; give each spec its own \
                 [experiment] name",
                other.display(),
                path.display(),
                spec.name
            );
        }
        if spec.run.rounds > 1 {
            bail!(
                "{}: run.rounds = {} takes its trials' step times across the same stretch of time on one \
                 machine, and shards would take them on several: run it whole (`oomlab run {}`), or set \
                 rounds = 1",
                path.display(),
                spec.run.rounds,
                crate::shell::quote(&path.to_string_lossy())
            );
        }
        spec::csv_data::preflight(&spec)?;
        specs.push((spec, no_control(absolute(path, "the spec")?, "the spec's path")?));
    }
    // Checked before anything is made: a refused --scripts leaves no folder behind.
    let out_given = no_control(std::path::absolute(&args.out).context("--out")?, "--out")?;
    let scripts = args.scripts.clone().unwrap_or_else(|| out_given.join("slurm"));
    let logs = std::path::absolute(scripts.join("logs")).context("--scripts")?;
    if logs.to_string_lossy().chars().any(|c| c.is_whitespace() || c == '%' || c.is_control()) {
        bail!(
            "--scripts {}: Slurm's --output line takes no blanks or %; give a folder without them",
            scripts.display()
        );
    }
    let oomlab = match &args.oomlab {
        Some(p) => absolute(p, "--oomlab")?,
        None => std::env::current_exe().context("finding this oomlab binary (give --oomlab PATH)")?,
    };
    let oomlab = no_control(oomlab, "the oomlab binary's path")?;
    let _out = crate::run::check_out(&args.out)?;
    let out = absolute(&args.out, "--out")?;
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let scripts = absolute(&scripts, "--scripts")?;
    let logs = scripts.join("logs");

    let mut run_args = Vec::new();
    if let Some(d) = args.device {
        run_args.extend(["--device".into(), d.to_string()]);
    }
    if let Some(b) = &args.budget {
        run_args.extend(["--budget".into(), b.clone()]);
    }
    if let Some(t) = args.trace {
        run_args.extend(["--trace".into(), t.as_str().into()]);
    }
    let force: Vec<String> = if args.force { vec!["--force".into()] } else { Vec::new() };
    run_args.extend(force.iter().cloned());
    let kinds: Vec<Option<&str>> = match &args.per_gpu_kind[..] {
        [] => vec![None],
        kinds => kinds.iter().map(|k| Some(k.as_str())).collect(),
    };

    let mut written = Vec::new();
    for (spec, path) in &specs {
        let units = shard::units(spec).len();
        let shards = args.shards.map_or(units, |n| n as usize);
        if shards > units {
            note!(
                "note: {} has {units} independent units (a list value per variant, or a variant's whole sweep): \
                 shards {}..{shards} will have nothing to run",
                spec.name,
                units + 1
            );
        }
        for kind in &kinds {
            let gres = match (*kind, args.gpu_kind.as_deref()) {
                (Some(k), _) | (None, Some(k)) => Some(format!("gpu:{k}:1")),
                (None, None) => args.gres.clone(),
            };
            let job = slurm::ArrayJob {
                name: format!("oomlab-{}{}", spec.name, kind.map(|k| format!("-{k}")).unwrap_or_default()),
                experiment: spec.name.clone(),
                spec: path.clone(),
                shards,
                out: kind.map_or(out.clone(), |k| out.join(k)),
                oomlab: oomlab.clone(),
                run_args: run_args.clone(),
                merge_args: force.clone(),
                resources: slurm::Resources {
                    partition: args.partition.clone(),
                    time: args.time.clone(),
                    account: args.account.clone(),
                    gres,
                    cpus_per_task: args.cpus_per_task,
                    extra: args.sbatch.clone(),
                },
                logs: logs.clone(),
            };
            let w = slurm::write(job, &scripts)?;
            say!("wrote {}  (a job array of {shards} shards of {})", w.array.display(), path.display());
            say!("wrote {}  (their merge, after the array)", w.merge.display());
            written.push(w);
        }
    }
    let submit_sh = scripts.join("submit.sh");
    std::fs::write(&submit_sh, slurm::submit_script(&written))
        .with_context(|| format!("writing {}", submit_sh.display()))?;
    say!("wrote {}", submit_sh.display());

    if args.submit {
        for w in &written {
            let ids = slurm::submit(w)?;
            say!(
                "submitted {}: array job {} ({} tasks), merge job {} after it",
                w.job.name,
                ids.array,
                w.job.shards,
                ids.merge
            );
        }
        say!("logs: {}", logs.display());
    } else {
        say!("submit each array, then its merge after it:");
        for w in &written {
            for line in w.submit_lines() {
                say!("  {line}");
            }
        }
        say!("or all of them: bash {}", submit_sh.display());
    }
    let kind_folder = if args.per_gpu_kind.is_empty() { "" } else { "<kind>/" };
    say!("results, when the merges are done: {}/{kind_folder}<device>/<experiment>/", out.display());
    if kinds.len() > 1 {
        for (spec, _) in &specs {
            let dirs: Vec<String> = kinds
                .iter()
                .flatten()
                .map(|k| format!("{}/*/{}", out.join(k).display(), spec.name))
                .collect();
            say!(
                "side by side: oomlab compare {} --out {}",
                dirs.join(" "),
                out.join("compare").join(&spec.name).display()
            );
        }
    }
    Ok(())
}
