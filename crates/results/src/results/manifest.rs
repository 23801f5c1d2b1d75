//! `manifest.json`: what ran, where, with which versions and code. Written when a run starts
//! (status "running") and rewritten when it ends, atomically, so a killed run is recognisable.
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::device::{DeviceChoice, RunDevice};
use crate::revision::GitInfo;
use crate::schema::rules::not_a_time;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub experiment: String,
    /// The spec's path as the command gave it (relative to where it ran).
    pub spec_path: String,
    /// The same file's absolute path when the run started: a resume, merge or chart made from
    /// another folder (a SLURM job's working directory is not the merger's) still finds it.
    /// Absent from manifests written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_file: Option<String>,
    /// The spec file's text as run.
    pub spec_source: String,
    /// The validated spec, after command-line overrides.
    pub spec: serde_json::Value,
    pub device: DeviceInfo,
    pub versions: Versions,
    pub git: GitInfo,
    pub host: HostInfo,
    pub command: Vec<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// How the run stands: `running` until it ends (so a killed run is recognisable).
    pub status: RunStatus,
    pub trials: usize,
    /// The sweep's answer for each variant (one, unnamed, without variants).
    pub answers: Vec<Answer>,
    /// The allocator's own counts over the run: allocations refused after a cache flush, and
    /// device allocations that only a cache flush satisfied (CUDA; always 0 on CPU).
    #[serde(default)]
    pub num_ooms: Option<u64>,
    #[serde(default)]
    pub num_alloc_retries: Option<u64>,
    /// What libtorch kept for the process before the first trial (see `train::warmup`).
    #[serde(default)]
    pub workspace: Option<WorkspaceInfo>,
    /// Where the data set lived (`data.location`), and what that means on this device.
    #[serde(default)]
    pub data_location: Option<String>,
    /// How much each trial measured (`run --trace`); empty in runs made before the choice,
    /// which synchronised at every phase (`sync`).
    #[serde(default)]
    pub trace: Option<crate::schema::TraceLevel>,
    /// Where this process's time went (a resumed run: the resuming process's).
    #[serde(default)]
    pub timings: Option<super::timings::RunTimings>,
    /// When the run was resumed (`run --resume`), oldest first; `started_at` is when it began.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<String>,
    /// A shard's run (`run --shard I/N`): which shard and what it ran. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// A merged folder (`oomlab merge`): every shard's host, device and times, in shard order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardRun>,
    /// Variants this machine did not run, and why (`skip_on_cpu_without` on a CPU that lacks
    /// those instructions). Absent when it ran them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<NotRun>,
    /// The files the spec reads besides itself (a TorchScript module, a CSV data set), with
    /// their sizes and SHA-256: a resume or merge refuses them changed. Absent when it reads none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<super::inputs::InputFile>,
    /// The files oomlab wrote in this folder, by name, each listed before it is made: all that
    /// `--force`, `--resume` and `merge` ever remove here (see [`super::outputs`]). Absent from
    /// manifests written before the list was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<String>>,
}

/// A variant left out on this machine (defined below, where the estimate's report names it too).
pub use crate::schema::NotRun;

/// Which shard of a spec's trials a run was, and what it ran (see `run::shard`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
    /// Its units in words ("adam, model.depth 4", "adam: its whole search"); empty when the
    /// spec has fewer units than shards and none was left for this one.
    pub units: Vec<String>,
    /// How many units the spec has, over all shards.
    pub of_units: usize,
    /// The Slurm job it ran as ("1234_2": array job 1234, task 2), when under Slurm.
    pub slurm_job: Option<String>,
}

/// One shard of a merged folder, as its own manifest recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRun {
    /// "2/4".
    pub shard: String,
    pub host: String,
    /// The device's name and as used ("cpu", "cuda:0").
    pub device: String,
    pub resolved: String,
    pub torch_threads: i32,
    pub slurm_job: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub trials: usize,
    /// The shard process's time from its start to its manifest's last write, in seconds.
    pub seconds: Option<f64>,
}

/// Why `memory_allocated` starts above zero: what stayed after the warm-up, part of every
/// trial's `baseline_allocated`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkspaceInfo {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// What it is, in words.
    pub what: String,
}

impl WorkspaceInfo {
    pub fn new(w: crate::train::Workspace, device: tch::Device) -> Self {
        WorkspaceInfo {
            allocated_bytes: w.allocated,
            reserved_bytes: w.reserved,
            what: Self::what(w, device),
        }
    }

    pub fn what(w: crate::train::Workspace, device: tch::Device) -> String {
        match (device.is_cuda(), w.allocated) {
            (false, 0) => "the CPU keeps nothing for the process (no cuBLAS; data and model share host memory)".into(),
            (false, _) => "allocated on the CPU before the first trial and still held (not libtorch's: something \
                           else in this process)"
                .into(),
            (true, _) => "libtorch's cuBLAS and cuBLASLt workspaces (one per thread that ran matrix products: \
                          the main thread and the autograd engine's), made at the first products and kept for \
                          the life of the process; every trial's baseline includes them"
                .into(),
        }
    }
}

/// How a run stands, as `manifest.json` spells it: `"running"`, `"complete"`, `"interrupted"`,
/// `"merging"` or `"failed: <why>"`. Any other word is refused when a folder is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// Written when a run starts; left by a run that was killed.
    Running,
    /// Every trial written (and, for a run, its charts drawn).
    Complete,
    /// Stopped by Ctrl-C or SIGTERM after the phase under way: `--resume` continues it.
    Interrupted,
    /// `oomlab merge` writing the shards' trials as one folder.
    Merging,
    /// Stopped by an error, in words.
    Failed(String),
}

impl RunStatus {
    const FAILED: &'static str = "failed: ";

    /// Whether every trial was written.
    pub fn is_complete(&self) -> bool {
        *self == RunStatus::Complete
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunStatus::Running => f.write_str("running"),
            RunStatus::Complete => f.write_str("complete"),
            RunStatus::Interrupted => f.write_str("interrupted"),
            RunStatus::Merging => f.write_str("merging"),
            RunStatus::Failed(why) => write!(f, "{}{why}", RunStatus::FAILED),
        }
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "running" => RunStatus::Running,
            "complete" => RunStatus::Complete,
            "interrupted" => RunStatus::Interrupted,
            "merging" => RunStatus::Merging,
            _ => match s.strip_prefix(RunStatus::FAILED) {
                Some(why) => RunStatus::Failed(why.to_string()),
                None => {
                    return Err(format!(
                        "status {s:?} is not one oomlab writes (running, complete, interrupted, merging, \
                         failed: <why>)"
                    ))
                }
            },
        })
    }
}

impl Serialize for RunStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// As asked: "auto", "cpu", "cuda:0".
    pub requested: DeviceChoice,
    /// As used: "cpu", "cuda:0" (nothing else reads back).
    pub resolved: RunDevice,
    pub name: String,
    pub slug: String,
    pub capacity_bytes: u64,
    pub budget_bytes: Option<u64>,
    /// How the budget is enforced on this device.
    pub budget_mechanism: Option<String>,
}

impl DeviceInfo {
    /// Whether the run was on a GPU (`cuda:N`); anything else a checked manifest holds is `cpu`.
    pub fn is_cuda(&self) -> bool {
        self.resolved.is_cuda()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Versions {
    pub oomlab: String,
    pub tch: String,
    /// The libtorch headers the binary was built against.
    pub libtorch: String,
    /// The libc10 file loaded at run time.
    pub libtorch_path: Option<String>,
    /// The CUDA runtime libtorch was built with.
    pub cuda_runtime: Option<String>,
    pub nvidia_driver: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub os: String,
    pub cpu: String,
    /// The CPU's vector and matrix extensions that oneDNN picks kernels by
    /// ([`crate::device::cpu_isa`]): one model name can hide two generations. Absent from
    /// runs made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_isa: Option<String>,
    pub torch_threads: i32,
    /// Whether CPU tensors could be huge pages ([`crate::hugepages::describe`]): it changes a CPU
    /// step's time (page faults), never its memory. Absent from runs made before it was recorded,
    /// which ran without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub huge_pages: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Answer {
    /// The variant it is for; empty without variants.
    pub variant: String,
    /// The swept key.
    pub field: crate::spec::Field,
    pub largest_fit: Option<u64>,
    pub first_oom: Option<u64>,
    /// The trials the sweep ran for this variant (a search's probes). Absent from manifests
    /// written before it was recorded, as are the fields below.
    #[serde(default)]
    pub probes: Option<usize>,
    /// Their wall-clock time, each from making its data to its clean-up, in seconds. A resumed
    /// run counts the trials its own process ran (the killed one's times were not kept).
    #[serde(default)]
    pub probe_seconds: Option<f64>,
    /// A search guided by the estimate: the largest value it predicted to fit (0: none), the
    /// first probe.
    #[serde(default)]
    pub guess: Option<u64>,
    /// How a search chose its probes: "guided by the estimate (predicted 19215)" or
    /// "unguided: <why>".
    #[serde(default)]
    pub strategy: Option<String>,
    /// A guided search's curve: the estimate's predicted peak, the baseline included, at values
    /// from 1 to past the largest tried, as the run predicted them on its machine (the sweep
    /// chart draws it through the probes). Empty where none was made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<(u64, u64)>,
}

impl Answer {
    /// An answer with nothing found yet: no fit, no OOM, no probes.
    pub fn new(variant: &str, field: crate::spec::Field) -> Answer {
        Answer {
            variant: variant.to_string(),
            field,
            largest_fit: None,
            first_oom: None,
            probes: None,
            probe_seconds: None,
            guess: None,
            strategy: None,
            curve: Vec::new(),
        }
    }
}

impl Manifest {
    /// The spec's path from the current folder: as the run was given it where that still names
    /// the same file (short, as the user typed it), its absolute path where it does not (the run
    /// was started in another folder), and as given where the absolute path is gone or was not
    /// recorded.
    pub fn spec_here(&self) -> std::path::PathBuf {
        let given = Path::new(&self.spec_path);
        match &self.spec_file {
            Some(abs) if !given.is_absolute() => {
                let (here, there) = (given.canonicalize(), Path::new(abs).canonicalize());
                match (here, there) {
                    (Ok(a), Ok(b)) if a == b => given.to_path_buf(),
                    (_, Ok(_)) => abs.into(),
                    // The file that ran is gone (the checkout moved, the results were copied to
                    // another machine): the path as given, from here, is the better guess.
                    (_, Err(_)) => given.to_path_buf(),
                }
            }
            _ => given.to_path_buf(),
        }
    }

    /// The command that resumes this run in `dir`, as its manifest records it: the spec, the
    /// results root `dir` lies under, the device, budget and trace level, and the shard.
    pub fn resume_command(&self, dir: &Path) -> String {
        use crate::schema::TraceLevel;
        // out/<device>/<experiment>, and a shard's /shards/I-of-N below that.
        let up = if self.shard.is_some() { 4 } else { 2 };
        let out = dir.ancestors().nth(up).filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let spec = self.spec_here();
        ResumeCommand {
            program: &crate::shell::program(),
            spec: &spec,
            out,
            device: (self.device.requested != DeviceChoice::Auto).then(|| self.device.requested.to_string()),
            budget: self.device.budget_bytes,
            // Runs from before --trace synchronised at every phase.
            trace: self.trace.unwrap_or(TraceLevel::Sync),
            shard: self.shard.as_ref().map(|s| (s.index, s.count)),
        }
        .to_string()
    }

    /// Writes to a temporary file and renames it over the old one: never half a manifest. The
    /// outputs listed by the manifest there now are kept in the list (a chart claimed while
    /// this copy was held is still oomlab's).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let mut this = std::borrow::Cow::Borrowed(self);
        if let Some(listed) = super::outputs::listed_on_disk(dir) {
            let mine = this.to_mut().outputs.get_or_insert_with(Vec::new);
            for name in listed {
                if !mine.contains(&name) {
                    mine.push(name);
                }
            }
        }
        let text = serde_json::to_string_pretty(&*this)? + "\n";
        crate::fsio::write_atomic(&dir.join(super::MANIFEST), text.as_bytes())
    }

    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(super::MANIFEST);
        let text = crate::fsio::read_text(&path, crate::fsio::MANIFEST_LIMIT)?;
        // Where a value is of the wrong type, the key it is under ("device.capacity_bytes").
        let mut json = serde_json::Deserializer::from_str(&text);
        let manifest: Manifest = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let key = e.path().to_string();
            anyhow::anyhow!(
                "parsing {}: {}{}; the file is damaged or not oomlab's",
                path.display(),
                if key == "." || !e.inner().is_data() { String::new() } else { format!("key `{key}`: ") },
                e.inner()
            )
        })?;
        manifest.check().map_err(|(key, why)| {
            anyhow::anyhow!("{}: key `{key}`: {why}; the file is damaged or not oomlab's", path.display())
        })?;
        Ok(manifest)
    }

    /// What a run never writes, refused before anything is drawn, judged or written from it:
    /// names that become folder and file names (an experiment named `../x` would put a
    /// comparison's output outside its folder), a budget or capacity of nothing, and times that
    /// are not a clock's (a negative time would flip the suite's time verdict).
    fn check(&self) -> std::result::Result<(), (String, String)> {
        if !crate::spec::limits::is_name(&self.experiment) {
            let why = format!(
                "{:?} is not an experiment name (lowercase letters, digits, _ and -)",
                self.experiment
            );
            return Err(("experiment".into(), why));
        }
        if !crate::spec::limits::name_chars_ok(&self.device.slug) {
            let why = format!(
                "{:?} is not a device folder name (lowercase letters, digits, _ and -)",
                self.device.slug
            );
            return Err(("device.slug".into(), why));
        }
        if self.device.budget_bytes == Some(0) {
            return Err(("device.budget_bytes".into(), "a budget of 0 bytes, which no run accepts".into()));
        }
        for a in &self.answers {
            if !a.variant.is_empty() && !crate::spec::limits::is_name(&a.variant) {
                return Err(("answers.variant".into(), format!("{:?} is not a variant name", a.variant)));
            }
            if let Some((_, s)) = not_a_time(&[((), a.probe_seconds)]) {
                return Err(("answers.probe_seconds".into(), format!("{s} is not a time a run measures")));
            }
        }
        if let Some(t) = &self.timings {
            let times = [
                ("process_start", t.process_start),
                ("libtorch_init", Some(t.libtorch_init)),
                ("data", Some(t.data)),
                ("model", Some(t.model)),
                ("steps", Some(t.steps)),
                ("trials", Some(t.trials)),
                ("charts", t.charts),
                ("total", Some(t.total)),
            ];
            if let Some((key, s)) = not_a_time(&times) {
                return Err((format!("timings.{key}"), format!("{s} is not a time a run measures")));
            }
        }
        Ok(())
    }
}

pub fn now() -> String {
    jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default()
}

/// The `oomlab run ... --resume` that carries on a run as it was started, every word quoted for
/// the shell: built from the arguments while a run starts, and from its manifest afterwards.
pub struct ResumeCommand<'a> {
    /// How this binary is run here (`shell::program`).
    pub program: &'a str,
    pub spec: &'a Path,
    pub out: &'a Path,
    /// As given, where not `auto`.
    pub device: Option<String>,
    pub budget: Option<u64>,
    pub trace: crate::schema::TraceLevel,
    /// (index, count).
    pub shard: Option<(usize, usize)>,
}

impl std::fmt::Display for ResumeCommand<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::shell::quote;
        let path = |p: &Path| quote(&p.to_string_lossy());
        write!(f, "{} run {} --out {}", self.program, path(self.spec), path(self.out))?;
        if let Some(d) = &self.device {
            write!(f, " --device {}", quote(d))?;
        }
        if let Some(b) = self.budget {
            write!(f, " --budget {}", crate::spec::typed_size(b))?;
        }
        if self.trace != crate::schema::TraceLevel::Phases {
            write!(f, " --trace {}", self.trace.as_str())?;
        }
        if let Some((i, n)) = self.shard {
            write!(f, " --shard {i}/{n}")?;
        }
        write!(f, " --resume")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint is pasted into a shell as printed: a path with a space or a quote stays one word.
    #[test]
    fn a_resume_command_quotes_what_the_shell_would_split() {
        let cmd = ResumeCommand {
            program: "oomlab",
            spec: Path::new("my specs/it's.toml"),
            out: Path::new("runs"),
            device: Some("cpu".into()),
            budget: Some(1024),
            trace: crate::schema::TraceLevel::Phases,
            shard: Some((2, 3)),
        }
        .to_string();
        assert_eq!(
            cmd,
            r"oomlab run 'my specs/it'\''s.toml' --out runs --device cpu --budget 1KiB --shard 2/3 --resume"
        );
    }

    /// A shard started by SLURM in another folder is resumed, from here, at its absolute path;
    /// one started here keeps the short path it was given. (Tests run in the package's root.)
    #[test]
    fn the_spec_is_named_from_here_even_when_the_run_started_elsewhere() {
        let mut m = crate::results::fixtures::manifest("depth_sweep", "cpu", None, 1);
        let elsewhere = tempfile::tempdir().unwrap();
        let abs = elsewhere.path().join("experiments/depth_sweep.toml");
        std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
        std::fs::write(&abs, "").unwrap();
        m.spec_path = "experiments/depth_sweep.toml".into();
        m.spec_file = Some(abs.display().to_string());
        // experiments/depth_sweep.toml here is this repository's, not the file that ran.
        assert_eq!(m.spec_here(), abs);
        let dir = Path::new("out/cpu/depth_sweep");
        let program = crate::shell::program();
        assert!(m.resume_command(dir).starts_with(&format!("{program} run {} --out out", abs.display())));
        // Started here (a unit test runs in its crate's folder): the path as typed.
        let here = Path::new("Cargo.toml");
        m.spec_path = here.display().to_string();
        m.spec_file = Some(here.canonicalize().unwrap().display().to_string());
        assert_eq!(m.spec_here(), here);
        // The file that ran is gone: as given.
        m.spec_file = Some(elsewhere.path().join("moved.toml").display().to_string());
        assert_eq!(m.spec_here(), here);
        // A manifest from before the absolute path was recorded: as given.
        m.spec_file = None;
        m.spec_path = "gone/x.toml".into();
        assert_eq!(m.spec_here(), Path::new("gone/x.toml"));
    }
}
