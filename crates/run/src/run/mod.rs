//! Running a spec: open the probe for the device, prepare the results folder, run the trials
//! in the order the sweep asks, export each as it finishes, and work out the answer.
pub mod expected;
pub mod launch;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod ranks;
pub mod resume;
pub mod shard;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytesize::ByteSize;

use crate::device::{self, DeviceChoice};
use crate::estimate;
use crate::ffi;
use crate::interrupt::{self, Interrupted};
use crate::probe::{CpuProbe, CudaProbe, MemoryProbe};
use crate::results::manifest::{self, DeviceInfo, HostInfo, Manifest, RunStatus, Versions, WorkspaceInfo};
use crate::results::timings::{self, RunTimings};
use crate::results::{self, experiment, Exporter, PerfettoTrace, SummaryCsv, TraceCsv};
use crate::schema::{Status, SummaryRow, TraceLevel};
use crate::spec::{Config, DataLocation, Field, OptimizerImpl, Spec, Sweep, SweepMode};
use crate::sweep::{self, Fit};
use crate::train::{self, Workspace};
use plan::Plan;
use progress::Progress;
use resume::Done;
use shard::{Selection, Shard, SHARDS};

/// Where and how a run writes; what it runs is the [`Plan`].
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Results root: the run writes to `<out>/<device-slug>/<experiment>/`.
    pub out: PathBuf,
    pub force: bool,
    /// Continue a killed or interrupted run in the folder from its completed trials.
    pub resume: bool,
    /// No progress bar or per-trial lines.
    pub quiet: bool,
    /// How much each trial measures (`--trace`).
    pub trace: TraceLevel,
    /// Run only this shard of the spec's independent trials, into `<experiment>/shards/I-of-N/`.
    pub shard: Option<Shard>,
    /// This process leads a world torchrun or srun started: a `[parallel]` trial's ranks are
    /// that world's processes (each starts its own), not processes this one starts.
    pub launched: Option<std::sync::Arc<launch::Agent>>,
}

pub struct RunReport {
    pub dir: PathBuf,
    pub rows: Vec<SummaryRow>,
    pub manifest: Manifest,
    /// The folder stays this run's until the report (and the charts drawn from it) is done.
    pub lock: results::DirLock,
}

impl RunReport {
    /// Records the charts' drawing time and the process's total in the manifest.
    pub fn charts_drawn(&mut self, seconds: f64) -> Result<()> {
        if let Some(t) = &mut self.manifest.timings {
            t.charts = Some(seconds);
            t.close();
        }
        self.manifest.write(&self.dir)
    }
}

/// The run's expected duration, from what this machine measured before; a warning past ten
/// minutes even when quiet. It asks nothing: Ctrl-C stops after the phase under way.
fn say_expected(expected: Option<&expected::Expected>, quiet: bool) {
    match expected {
        Some(e) if e.is_long() => note!(
            "warning: this run is expected to take {}: over 10 minutes (Ctrl-C stops it after the phase \
             under way; --resume goes on from there)",
            e.describe()
        ),
        Some(e) if !quiet => note!("expected: {}", e.describe()),
        None if !quiet => note!(
            "expected: not known here (no earlier run of this spec on this device, no calibration in its \
             advice/: `oomlab advise SPEC` measures step times)"
        ),
        _ => {}
    }
}

/// Opens the probe for a device, with the budget in force.
pub fn open_probe(device: tch::Device, budget: Option<u64>) -> Result<Box<dyn MemoryProbe>> {
    Ok(match device {
        tch::Device::Cuda(i) => Box::new(CudaProbe::new(i, budget)?),
        _ => Box::new(CpuProbe::new(budget)?),
    })
}

/// The probe of the device a plan asks for, with its budget in force.
pub fn plan_probe(plan: &Plan) -> Result<Box<dyn MemoryProbe>> {
    let device = plan.device.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
    open_probe(device, plan.budget)
}

/// Runs a plan on the device it asks for, with its budget in force.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<RunReport> {
    run_on(plan, opts, &*plan_probe(plan)?)
}

/// Runs a plan on an open probe: warms up, then runs and exports every trial.
pub fn run_on(plan: &Plan, opts: &RunOptions, probe: &dyn MemoryProbe) -> Result<RunReport> {
    let (spec, requested) = (&plan.spec, plan.device);
    // A [parallel] trial this machine cannot run is refused before anything is written.
    ranks::refuse(spec, probe.device(), probe.budget(), opts.launched.as_deref().map(launch::Agent::launch))?;
    // So is a search that would grow until the host runs out of memory.
    if let Some(why) = plan.unbounded_search(probe.device() != tch::Device::Cpu) {
        bail!("{why}");
    }
    let slug = device::slug(&probe.name());
    let mut dir = opts.out.join(&slug).join(&spec.name);
    if let Some(s) = opts.shard {
        if spec.run.rounds > 1 {
            bail!(
                "--shard {s}: {} runs its trials in {} rounds so that their step times are taken across the \
                 same stretch of time on one machine; shards would take them on several: run it whole",
                spec.name,
                spec.run.rounds
            );
        }
        // A folder of its own: no two shards write one file.
        dir = dir.join(SHARDS).join(s.folder());
    }
    // Before the folder is prepared (`--force` clears it): the last run's times are in it.
    if opts.shard.is_none() {
        let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
        let options = plan.estimate_options(gpu_arch(probe), threads);
        say_expected(expected::expect(plan, &probe.name(), &dir, &options).as_ref(), opts.quiet);
    }
    // What the spec reads besides itself, as it is now: a resume must find it unchanged.
    let inputs = results::inputs::of_spec(spec)?;
    // A signal before anything is written ends the run with nothing to resume.
    interrupt::check()?;
    // Declared before the lock, so dropped after it: a run refused here leaves no folder.
    let _made =
        if opts.resume { crate::fsio::NewDirs::default() } else { crate::fsio::NewDirs::create(&dir)? };
    // The files of the folder that are the run's own when its manifest predates their list.
    let mut legacy = None;
    let (lock, done) = if opts.resume {
        if !dir.is_dir() {
            bail!("--resume: nothing to resume in {} (no such folder); run without --resume", dir.display());
        }
        let lock = results::DirLock::acquire(&dir)?;
        let done = resume::load(&dir, spec, &inputs, probe, opts.trace)?;
        if let (Some(stopped), false) = (lock.stopped_run(&dir), opts.quiet) {
            note!("--resume: {stopped}");
        }
        if let (Some(lost), false) = (&done.lost, opts.quiet) {
            note!("--resume: {lost}: trial {} and those after it are measured again", lost.trial);
        }
        if results::outputs::read(&dir) == results::outputs::Listed::Unlisted {
            legacy = Some(crate::figures::drawn_by(&dir));
        }
        (lock, done)
    } else {
        let lock = results::prepare_dir(&dir, opts.force, &crate::figures::drawn_by)?;
        if opts.force && opts.shard.is_none() && dir.join(SHARDS).is_dir() && !opts.quiet {
            note!(
                "note: {} kept: the shard runs' results, which `oomlab merge` would put together again in place \
                 of this run's",
                dir.join(SHARDS).display()
            );
        }
        (lock, Done::default())
    };

    let mut spec_as_run = spec.clone();
    spec_as_run.run.device = requested;
    spec_as_run.run.set_budget(probe.budget());
    let mut manifest = start_manifest(&spec_as_run, requested, probe, slug);
    // Listed before any of them is made.
    manifest.outputs = Some(legacy.unwrap_or_else(results::outputs::data_files));
    manifest.trace = Some(opts.trace);
    manifest.inputs = inputs;
    manifest.shard = opts.shard.map(|s| shard::info(spec, s));
    manifest.trials = done.rows.len();
    manifest.not_run = plan.not_run(crate::device::CpuCaps::here());
    if let Some(was) = &done.manifest {
        manifest.resumed_at = was.resumed_at.iter().cloned().chain([manifest.started_at.clone()]).collect();
        manifest.started_at = was.started_at.clone();
    }
    manifest.write(&dir)?;
    mark_on_abandon(&dir);

    // Before the first trial, so that every trial's baseline holds what libtorch keeps for the
    // process (cuBLAS workspaces) and none of them counts it as its own or as a leak.
    let workspace = train::warm_up(spec.configs().into_iter().map(|(_, c)| c), probe, opts.trace);
    match &workspace {
        Ok(w) => {
            manifest.workspace = Some(WorkspaceInfo::new(*w, probe.device()));
            if !opts.quiet {
                note!("{}", workspace_line(*w, probe.device()));
            }
        }
        Err(e) if e.is::<Interrupted>() => manifest.status = RunStatus::Interrupted,
        Err(e) => manifest.status = RunStatus::Failed(format!("warming up: {e:#}")),
    }
    let mut timings = RunTimings::new(timings::since_main());
    manifest.timings = Some(timings.clone());
    manifest.write(&dir)?;
    workspace.context("warming up before the first trial")?;

    if opts.resume {
        resume::set_aside(&dir)?;
    }
    let mut exporters: Vec<Box<dyn Exporter>> = vec![
        Box::new(TraceCsv::create(&dir)?),
        Box::new(SummaryCsv::create(&dir)?),
        Box::new(PerfettoTrace::create(&dir)?),
    ];
    resume::replay(&dir, &done, &mut exporters)?;
    let before = probe.counters()?;
    let trials_started = std::time::Instant::now();
    let mut probed = Vec::new();
    let folder = Folder { done: &done, not_run: &manifest.not_run, lock: &lock };
    let result = run_trials(plan, probe, &mut exporters, opts, &folder, &mut probed);
    manifest.finished_at = Some(manifest::now());
    if let Ok(rows) = &result {
        // Only this process's trials: a resumed run's earlier ones were timed by theirs.
        let ran: Vec<SummaryRow> = rows.iter().skip(done.rows.len()).cloned().collect();
        timings.add_trials(&ran, trials_started.elapsed().as_secs_f64());
    }
    timings.close();
    manifest.timings = Some(timings);
    if let Ok(after) = probe.counters() {
        // A resumed run's counts include the trials its first process ran.
        let was = |f: fn(&Manifest) -> Option<u64>| done.manifest.as_ref().and_then(f).unwrap_or(0);
        manifest.num_ooms = Some(was(|m| m.num_ooms) + after.num_ooms - before.num_ooms);
        manifest.num_alloc_retries =
            Some(was(|m| m.num_alloc_retries) + after.num_alloc_retries - before.num_alloc_retries);
    }
    match &result {
        Ok(rows) => {
            manifest.status = RunStatus::Complete;
            manifest.trials = rows.len();
            manifest.answers = match &spec.sweep {
                Some(s) => spec
                    .configs()
                    .iter()
                    // A shard answers for the variants it ran; no machine for those it left out.
                    .filter(|(v, _)| {
                        opts.shard.is_none() || rows.iter().any(|r| r.variant == v.unwrap_or_default())
                    })
                    .filter(|(v, _)| !manifest.not_run.iter().any(|n| Some(n.variant.as_str()) == *v))
                    .map(|(v, _)| {
                        let v = v.unwrap_or_default();
                        let answer = experiment::answer(v, s.field, rows);
                        match probed.iter().find(|p| p.variant == v) {
                            Some(p) => p.fill(answer),
                            None => answer,
                        }
                    })
                    .collect(),
                None => Vec::new(),
            };
        }
        Err(e) if e.is::<Interrupted>() => {
            manifest.status = RunStatus::Interrupted;
            manifest.trials = rows_written(&dir);
        }
        Err(e) => {
            manifest.status = RunStatus::Failed(format!("{e:#}"));
            manifest.trials = rows_written(&dir);
        }
    }
    manifest.write(&dir)?;
    interrupt::clear_abandon();
    let rows = result?;
    Ok(RunReport { dir, rows, manifest, lock })
}

/// What a second Ctrl-C does to the folder before the process exits without waiting for the
/// trial: the manifest marked `interrupted` with the trials whose rows are whole, and the folder
/// released. (The rows are on disk already: each trial's are written whole or not at all.)
pub fn mark_on_abandon(dir: &std::path::Path) {
    let dir = dir.to_path_buf();
    interrupt::on_abandon(move || {
        if let Ok(mut m) = Manifest::read(&dir) {
            m.status = RunStatus::Interrupted;
            m.trials = rows_written(&dir);
            m.finished_at = Some(manifest::now());
            let _ = m.write(&dir);
        }
        let _ = std::fs::remove_file(dir.join(results::LOCK));
    });
}

/// What a trial's status tells the sweep.
/// The probe's GPU generation, as the estimate tells them apart (a CPU's, or a GPU whose
/// capability NVML cannot read: the default).
fn gpu_arch(probe: &dyn MemoryProbe) -> estimate::GpuArch {
    probe
        .compute_capability()
        .map(|(major, minor)| estimate::GpuArch::from_capability(major, minor))
        .unwrap_or_default()
}

fn fit(status: Status) -> Fit {
    match status {
        Status::Ok | Status::Diverged => Fit::Fits,
        Status::Oom | Status::PredictedOom => Fit::Oom,
        Status::Error => Fit::Error,
    }
}

/// Trials in the folder's summary.csv: what an interrupted run completed.
fn rows_written(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join(results::SUMMARY)).map_or(0, |s| s.lines().count().saturating_sub(1))
}

/// "workspace  65.0 MiB allocated, 66.0 MiB reserved by libtorch for the process (...)".
pub fn workspace_line(w: Workspace, device: tch::Device) -> String {
    let size = |b: u64| ByteSize::b(b).display().iec().to_string();
    format!(
        "workspace  {} allocated, {} reserved before the first trial: {}",
        size(w.allocated),
        size(w.reserved),
        WorkspaceInfo::what(w, device)
    )
}

/// How a variant's sweep went: its trials, their time and a search's guide, for its answer.
struct Probed {
    variant: String,
    probes: usize,
    seconds: f64,
    guide: Option<estimate::Guide>,
    /// A guided search's predicted curve ([`curve`]).
    curve: Vec<(u64, u64)>,
}

impl Probed {
    fn fill(&self, answer: manifest::Answer) -> manifest::Answer {
        manifest::Answer {
            probes: Some(self.probes),
            probe_seconds: Some(self.seconds),
            guess: self.guide.as_ref().and_then(estimate::Guide::guess),
            strategy: self.guide.as_ref().map(estimate::Guide::describe),
            curve: self.curve.clone(),
            ..answer
        }
    }
}

/// A search's guide for `base` (`None` for the other sweeps): the estimate's guess under what
/// the budget leaves a trial. On the CPU that is the budget less the allocated baseline (the
/// estimate counts from an empty allocator); on CUDA the budget itself, since the replay starts
/// with the workspaces, which are the baseline, already in place (as `oomlab estimate` does).
fn guide(
    base: &Config,
    sweep: &Sweep,
    probe: &dyn MemoryProbe,
    options: &estimate::Options,
) -> Result<Option<estimate::Guide>> {
    if !matches!(sweep.mode, SweepMode::Search { .. }) {
        return Ok(None);
    }
    let left = match (probe.budget(), probe.device()) {
        (Some(b), tch::Device::Cuda(_)) => Some(b),
        (Some(b), _) => Some(b.saturating_sub(probe.snapshot()?.memory_allocated)),
        (None, _) => None,
    };
    Ok(estimate::search_guide(base, sweep, left, options))
}

/// What the folder a run writes holds for its trials: the trials done before a resume, the
/// variants left out here, and its lock (which carries the run's heartbeat).
struct Folder<'a> {
    done: &'a Done,
    not_run: &'a [manifest::NotRun],
    lock: &'a results::DirLock,
}

fn run_trials(
    plan: &Plan,
    probe: &dyn MemoryProbe,
    exporters: &mut [Box<dyn Exporter>],
    opts: &RunOptions,
    folder: &Folder,
    probed: &mut Vec<Probed>,
) -> Result<Vec<SummaryRow>> {
    let Folder { done, not_run, lock } = *folder;
    let spec = &plan.spec;
    let field = spec.sweep.as_ref().map(|s| s.field);
    let configs = spec.configs();
    let mode = spec.sweep.as_ref().map(|s| &s.mode);
    let selection = Selection::new(spec, opts.shard);
    let skipped = |v: Option<&str>| not_run.iter().find(|n| Some(n.variant.as_str()) == v);
    let hint = match opts.shard {
        Some(_) => selection.trials(),
        None => sweep::strategy(mode, spec.run.on_oom, None)
            .len_hint()
            .map(|n| n * (configs.len() - not_run.len()) * spec.run.rounds),
    };
    let progress = Progress::new(hint, opts.quiet);
    for n in not_run {
        progress.say(&format!("[{}] not run here: {}", n.variant, n.why));
    }
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let options = plan.estimate_options(gpu_arch(probe), threads);
    let mut rows = Vec::new();
    let rounds = spec.run.rounds;
    // The reasons the estimate gave no prediction, each said once.
    let mut unpredicted: Vec<String> = Vec::new();
    // Round after round, every variant and value once a round (`run.rounds`; 1 round otherwise).
    for (round, (v, (variant, base))) in
        (1..=rounds).flat_map(|r| configs.iter().copied().enumerate().map(move |c| (r, c)))
    {
        let Some(take) = selection.variant(v) else { continue };
        if skipped(variant).is_some() {
            continue;
        }
        let guide = match &spec.sweep {
            Some(s) => guide(base, s, probe, &options)?,
            None => None,
        };
        if let Some(g) = &guide {
            let name = variant.map(|v| format!("[{v}] ")).unwrap_or_default();
            progress.say(&format!("{name}search {}", g.describe()));
        }
        let guess = guide.as_ref().and_then(estimate::Guide::guess);
        let name = variant.unwrap_or_default();
        if !probed.iter().any(|p| p.variant == name) {
            probed.push(Probed { variant: name.into(), probes: 0, seconds: 0.0, guide, curve: Vec::new() });
        }
        let this = probed.iter_mut().find(|p| p.variant == name).expect("just pushed");
        let mut order = take.restrict(sweep::strategy(mode, spec.run.on_oom, guess));
        while let Some(value) = order.next() {
            interrupt::check()?;
            let trial = rows.len() + 1;
            let config = match field {
                Some(f) => base.with(f, value).map_err(anyhow::Error::msg)?,
                None => base.clone(),
            };
            let mut label = variant.map(|v| format!("{v} ")).unwrap_or_default();
            match field {
                Some(f) => label += &format!("{} {}", f.column(), value),
                None if variant.is_none() => label += &spec.name,
                None => {}
            }
            if rounds > 1 {
                label = format!("{} (round {round} of {rounds})", label.trim_end());
            }
            if let Some(row) = done.trial(trial) {
                // Already in the folder: taken as it was, if the sweep asks for the same point.
                if row.variant != variant.unwrap_or_default() || row.value != field.map(|_| value) {
                    bail!(
                        "--resume: trial {trial} in the folder is {:?} {:?}, but the sweep now asks for {label}; \
                         run with --force",
                        row.variant,
                        row.value
                    );
                }
                progress.done(&format!("trial {trial:>3}  {label:<28} {} (done before)", describe(row)));
                order.record(value, fit(row.status));
                rows.push(row.clone());
                // Its time too: the sweep's time is all its trials', measured before or now.
                this.probes += 1;
                this.seconds += row.trial_seconds.unwrap_or_default();
                continue;
            }
            progress.start(&format!("trial {trial}  {label}"));
            train::position::begin_trial(config.training.steps);
            let on_cpu = probe.device() == tch::Device::Cpu;
            let host = || if on_cpu { crate::device::host_available() } else { None };
            lock.beat(true, || results::lock::beat_line(trial, 0, "start", host()));
            let prediction = match predict(&config, &options) {
                Ok(p) => Some(p),
                Err(why) => {
                    // Said once per variant and reason: the trial's predicted_peak stays empty.
                    let name = variant.map(|v| format!("[{v}] ")).unwrap_or_default();
                    let line = format!("{name}no estimate beside the measurement: {why:#}");
                    if !unpredicted.contains(&line) {
                        progress.say(&line);
                        unpredicted.push(line);
                    }
                    None
                }
            };
            let started = Instant::now();
            let mut traced = 0;
            let mut row = match predicted_oom(spec, prediction.as_ref(), probe)? {
                Some(skipped) => skipped,
                None if config.parallel.is_distributed() => {
                    // The ranks' processes; every rank's phases, then the deciding rank's row.
                    let world = config.parallel.world_size;
                    // Unused in a launched world, whose ranks meet at its own store.
                    let store = tempfile::Builder::new().prefix("oomlab-ranks-").tempdir()?;
                    let job = ranks::RankJob {
                        spec_path: spec.path.clone(),
                        source: spec.source.clone(),
                        variant: variant.unwrap_or_default().to_string(),
                        value: field.map(|_| value),
                        trial,
                        trace: opts.trace,
                        budget: probe.budget(),
                        meet: ranks::Meet::File(store.path().join("store")),
                        world_size: world,
                        timeout_seconds: ranks::COLLECTIVE_TIMEOUT.as_secs_f64(),
                    };
                    let exe =
                        std::env::current_exe().context("finding this oomlab binary to start the ranks")?;
                    let outcomes = match &opts.launched {
                        Some(agent) => agent.run_world(&exe, &job)?,
                        None => ranks::run_world(&exe, &job)?,
                    };
                    let (records, row) = ranks::combine(outcomes)?;
                    // ZeRO's ranks differ (each holds its shard's optimizer state): each rank's
                    // phases beside its own prediction; DDP's are alike.
                    let per_rank: Vec<Option<estimate::Prediction>> =
                        if config.parallel.shards_optimizer() && prediction.is_some() {
                            (0..world).map(|r| predict(&config, &options.at_rank(r)).ok()).collect()
                        } else {
                            Vec::new()
                        };
                    lock.beat(true, || {
                        results::lock::beat_line(trial, config.training.steps, "step", host())
                    });
                    for rec in &records {
                        // The estimate is per rank: every rank's phase beside its prediction.
                        let mut rec = rec.clone();
                        let of_rank = rec.rank.and_then(|r| per_rank.get(r)).map(Option::as_ref);
                        rec.predicted_peak = of_rank
                            .unwrap_or(prediction.as_ref())
                            .and_then(|p| p.row_peak(rec.step, rec.micro, rec.phase))
                            .map(|peak| row.baseline_allocated + peak);
                        traced += 1;
                        exporters.iter_mut().try_for_each(|e| e.phase(&rec))?;
                    }
                    row
                }
                None => {
                    // Each row carries the prediction made here, on this machine, so that a chart
                    // drawn later anywhere draws this run's prediction.
                    let baseline = probe.snapshot()?.memory_allocated;
                    train::run_trial(&config, probe, trial, opts.trace, &mut |rec| {
                        // Where the run is, for the next command if this process is killed.
                        lock.beat(false, || {
                            results::lock::beat_line(trial, rec.step, &rec.phase.to_string(), host())
                        });
                        let mut rec = rec.clone();
                        rec.predicted_peak = prediction
                            .as_ref()
                            .and_then(|p| p.row_peak(rec.step, rec.micro, rec.phase))
                            .map(|peak| baseline + peak);
                        traced += 1;
                        exporters.iter_mut().try_for_each(|e| e.phase(&rec))
                    })?
                }
            };
            train::position::end_trial();
            let cuda = matches!(probe.device(), tch::Device::Cuda(_));
            (this.probes, this.seconds) = (this.probes + 1, this.seconds + started.elapsed().as_secs_f64());
            fill_config(&mut row, trial, variant, field.map(|f| (f, value)), &config, cuda);
            add_prediction(&mut row, prediction.as_ref());
            row.trace_rows = Some(traced);
            row.round = (rounds > 1).then_some(round);
            results::write_trial(exporters, &row)?;
            progress.done(&format!("trial {trial:>3}  {label:<28} {}", describe(&row)));
            // A [parallel] trial's ranks were processes of their own, gone with the trial: what
            // they held at the end stays in the row and cannot reach the next trial.
            if let Some(bytes) = row.leaked().filter(|_| !config.parallel.is_distributed()) {
                bail!(
                    "trial {trial} ({label}) leaked {}: allocated memory was {} before it and {} after its \
                     clean-up, so later trials would be measured wrong; the run stops here (its rows are \
                     in summary.csv)",
                    ByteSize::b(bytes).display().iec(),
                    row.baseline_allocated,
                    row.after_allocated
                );
            }
            order.record(value, fit(row.status));
            rows.push(row);
        }
    }
    progress.finish();
    // Each guided search's curve, for the chart that draws its probes: made after the trials,
    // so that it costs the answer nothing, and only where the estimate guided it (it covers
    // the configuration, and has a budget to be read against).
    if let Some(SweepMode::Search { max, .. }) = mode {
        let field = field.filter(|f| f.is_integer()).expect("a search sweeps an integer field");
        for p in probed.iter_mut().filter(|p| p.guide.as_ref().and_then(estimate::Guide::guess).is_some()) {
            let Some((_, base)) = configs.iter().find(|(v, _)| v.unwrap_or_default() == p.variant) else {
                continue;
            };
            let mine: Vec<&SummaryRow> = rows.iter().filter(|r| r.variant == p.variant).collect();
            p.curve = curve(base, field, &mine, *max, &options)?;
        }
    }
    Ok(rows)
}

/// The most points of a predicted curve, and the most time it may take to make (a TorchScript
/// module's step is synthesised per value: a curve costing more than the probes is left out).
const CURVE_POINTS: u64 = 64;
const CURVE_SECONDS: f64 = 20.0;

/// The estimate's predicted peak of `base` at values of `field` from 1 to a tenth past the
/// largest `rows` tried (within the search's `max`), the baseline of the first trial with a
/// prediction added as its own was: every value up to 64 of them, else 64 spread as the chart's
/// x axis spreads the trials (geometrically where it is logarithmic), and the values tried among
/// them so that the line meets each ring. Empty where no trial had a prediction, where one fails,
/// or where the next would start past 20 s; and for a TorchScript module, whose step is recorded
/// rather than replayed, each batch past its recordings anew (seconds each: squeezenet at 32 x 32
/// spent the whole 20 s and kept nothing), so its chart draws the line through its trials.
fn curve(
    base: &Config,
    field: Field,
    rows: &[&SummaryRow],
    max: u64,
    options: &estimate::Options,
) -> Result<Vec<(u64, u64)>> {
    use crate::chart::scale::XScale;
    if matches!(base.model, crate::spec::ModelSpec::Torchscript(_)) {
        return Ok(Vec::new());
    }
    let tried: Vec<u64> = rows.iter().filter_map(|r| r.value).map(|v| v as u64).collect();
    let baseline = rows.iter().find(|r| r.predicted_peak.is_some()).map(|r| r.baseline_allocated);
    let (Some(&most), Some(baseline)) = (tried.iter().max(), baseline) else { return Ok(Vec::new()) };
    let top = (most + most / 10 + 1).min(max).max(most);
    let log = XScale::for_values(&tried.iter().map(|&v| v as f64).collect::<Vec<_>>()) == XScale::Log2;
    let mut values: Vec<u64> = if top <= CURVE_POINTS {
        (1..=top).collect()
    } else if log {
        (0..CURVE_POINTS)
            .map(|k| (top as f64).powf(k as f64 / (CURVE_POINTS - 1) as f64).round() as u64)
            .collect()
    } else {
        (0..CURVE_POINTS).map(|k| 1 + (top - 1) * k / (CURVE_POINTS - 1)).collect()
    };
    values.extend(&tried);
    values.sort_unstable();
    values.dedup();
    let started = Instant::now();
    let mut out = Vec::new();
    for v in values {
        interrupt::check()?;
        if started.elapsed().as_secs_f64() > CURVE_SECONDS {
            return Ok(Vec::new());
        }
        let Ok(config) = base.with(field, v as f64) else { continue };
        match predict(&config, options) {
            Ok(p) => out.push((v, baseline + p.peak)),
            Err(_) => return Ok(Vec::new()),
        }
    }
    Ok(out)
}

/// The estimate for a trial's configuration; `None` where the model does not reach (a
/// TorchScript module outside the CUDA recording's scope, past the replay's bounds, or a CSV
/// data set it cannot read).
fn predict(config: &Config, options: &estimate::Options) -> Result<estimate::Prediction> {
    estimate::data_shape(&config.data).and_then(|s| estimate::predict_with(config, s, options))
}

/// When the spec asks (`run.skip_predicted_oom`), a trial whose predicted peak is over the budget
/// by more than the margin is not run: its outcome says so, with the phase predicted to fail.
/// Without a prediction the trial runs.
fn predicted_oom(
    spec: &Spec,
    prediction: Option<&estimate::Prediction>,
    probe: &dyn MemoryProbe,
) -> Result<Option<SummaryRow>> {
    let (Some(margin), Some(budget), Some(p)) = (spec.run.skip_predicted_oom, probe.budget(), prediction)
    else {
        return Ok(None);
    };
    let baseline = probe.snapshot()?.memory_allocated;
    let need = baseline.saturating_add(p.peak);
    if (need as f64) <= budget as f64 * (1.0 + margin) {
        return Ok(None);
    }
    let at = p.first_over(budget.saturating_sub(baseline));
    let gib = |b: u64| ByteSize::b(b).display().iec().to_string();
    Ok(Some(SummaryRow {
        status: Status::PredictedOom,
        phase: at.map(|a| a.phase),
        step: at.map(|a| a.step),
        baseline_allocated: baseline,
        after_allocated: baseline,
        param_count: p.param_count,
        param_bytes: p.param_bytes,
        samples: p.shape.samples,
        features: p.shape.features,
        classes: p.shape.classes,
        message: format!(
            "predicted to need {} against a budget of {} (margin {:.0}%): not run",
            gib(need),
            gib(budget),
            100.0 * margin
        ),
        ..SummaryRow::default()
    }))
}

/// Fills the estimate's predicted peak (what the trial adds, on top of the baseline it started
/// from) and its error against the measured peak. Left empty without a prediction.
fn add_prediction(row: &mut SummaryRow, prediction: Option<&estimate::Prediction>) {
    let Some(p) = prediction else {
        return;
    };
    let predicted = row.baseline_allocated + p.peak;
    row.predicted_peak = Some(predicted);
    if row.status.fitted() {
        row.predicted_error = Some(estimate::relative_error(predicted, row.max_memory_allocated));
    }
}

/// One line on a finished trial: "ok, peak 1.20 GiB" or "OOM in backward (step 1): tried to allocate ...".
pub fn describe(row: &SummaryRow) -> String {
    let (outcome, gap) = match row.status {
        Status::Ok => ("ok", "   "),
        Status::Diverged => ("diverged", "   "),
        Status::Oom => ("OOM", "  "),
        Status::Error => ("error:", " "),
        Status::PredictedOom => ("skip", " "),
    };
    format!("{outcome}{gap}{}", details(row))
}

/// What [`describe`] says after the outcome: the peaks and step time of a trial that ran, where
/// an OOM struck, an error's message, why a trial was skipped.
pub fn details(row: &SummaryRow) -> String {
    let gib = |b: u64| ByteSize::b(b).display().iec().to_string();
    match row.status {
        Status::Ok | Status::Diverged => {
            format!(
                "peak {} allocated, {} reserved{}",
                gib(row.max_memory_allocated),
                gib(row.max_memory_reserved),
                row.step_seconds.map(|s| format!(", {s:.3} s/step")).unwrap_or_default()
            ) + &if row.message.is_empty() { String::new() } else { format!("; {}", row.message) }
        }
        Status::Oom => format!(
            "in {} (step {}){}",
            row.phase.map(|p| p.to_string()).unwrap_or_default(),
            row.step.unwrap_or_default(),
            row.oom_requested.map(|b| format!(": tried to allocate {}", gib(b))).unwrap_or_default()
        ),
        Status::Error | Status::PredictedOom => row.message.clone(),
    }
}

/// Fills the row's own columns: which trial, variant and swept value, and the configuration it
/// ran (so that a row reads on its own whatever was swept). What happened is the trainer's.
fn fill_config(
    row: &mut SummaryRow,
    trial: usize,
    variant: Option<&str>,
    swept: Option<(Field, f64)>,
    config: &Config,
    cuda: bool,
) {
    let t = &config.training.techniques;
    row.trial = trial;
    row.variant = variant.unwrap_or_default().to_string();
    row.field = swept.map(|(f, _)| f);
    row.value = swept.map(|(_, v)| v);
    row.set_model(&config.model, &config.data);
    row.batch_size = config.training.batch_size;
    row.optimizer = Some(config.training.optimizer.kind());
    row.optimizer_impl = Some(OptimizerImpl::resolve(t.optimizer_impl, cuda));
    row.dtype = Some(config.training.dtype);
    row.accumulation = t.accumulation;
    (row.amp, row.checkpoint) = (Some(t.amp.kind()), t.checkpoint.name());
    (row.mode, row.history) = (Some(t.mode), Some(t.history));
    if config.parallel.is_distributed() {
        row.world_size = Some(config.parallel.world_size);
    }
}

fn start_manifest(spec: &Spec, requested: DeviceChoice, probe: &dyn MemoryProbe, slug: String) -> Manifest {
    let device = probe.device();
    let budget_mechanism = probe.budget().map(|b| match device {
        tch::Device::Cuda(_) => format!(
            "CUDA caching allocator per_process_memory_fraction {:.6} of {} bytes",
            b as f64 / probe.capacity() as f64,
            probe.capacity()
        ),
        _ => "oomlab's counting CPU allocator refuses allocations past the budget (CPU has no cache: reserved = allocated)".into(),
    });
    let here = crate::results::provenance::Provenance::here();
    Manifest {
        experiment: spec.name.clone(),
        spec_path: spec.path.display().to_string(),
        spec_file: spec
            .path
            .canonicalize()
            .or_else(|_| std::path::absolute(&spec.path))
            .ok()
            .map(|p| p.display().to_string()),
        spec_source: spec.source.clone(),
        spec: serde_json::to_value(spec).unwrap_or_default(),
        device: DeviceInfo {
            requested,
            resolved: device::RunDevice::of(device),
            name: probe.name(),
            slug,
            capacity_bytes: probe.capacity(),
            budget_bytes: probe.budget(),
            budget_mechanism,
        },
        versions: Versions {
            oomlab: here.oomlab.into(),
            tch: here.tch.into(),
            libtorch: here.libtorch,
            libtorch_path: ffi::libtorch_path(),
            cuda_runtime: ffi::cuda_runtime_version(),
            nvidia_driver: probe.driver_version(),
        },
        git: here.git,
        host: HostInfo {
            hostname: here.hostname,
            os: here.os,
            cpu: here.cpu,
            cpu_isa: Some(here.cpu_isa),
            torch_threads: here.torch_threads,
            huge_pages: Some(here.huge_pages),
        },
        command: here.command,
        started_at: manifest::now(),
        finished_at: None,
        status: RunStatus::Running,
        trials: 0,
        answers: Vec::new(),
        num_ooms: None,
        num_alloc_retries: None,
        workspace: None,
        data_location: Some(data_location(spec, device)),
        trace: None,
        timings: None,
        resumed_at: Vec::new(),
        shard: None,
        shards: Vec::new(),
        not_run: Vec::new(),
        inputs: Vec::new(),
        outputs: None,
    }
}

/// "host: ..." for the manifest: where the configurations keep their data set, in words.
fn data_location(spec: &Spec, device: tch::Device) -> String {
    let mut places: Vec<DataLocation> = spec.configs().iter().map(|(_, c)| c.location).collect();
    places.dedup();
    let words: Vec<String> = places
        .into_iter()
        .map(|l| match (l, device) {
            (_, tch::Device::Cpu) => format!(
                "{}: on the CPU the host is the device, so host and device placement are the same memory",
                if l == DataLocation::Host { "host" } else { "device" }
            ),
            (DataLocation::Host, _) => {
                "host: the data set in host memory; each step's batch is moved to the device (to_device)"
                    .into()
            }
            (DataLocation::Device, _) => "device: the whole data set made on the device".into(),
        })
        .collect();
    words.join("; ")
}

/// Refuses a results root that is not a folder (a file, or a device such as /dev/null).
/// Refuses a results root that is not a folder (a file, or a device such as /dev/null), and makes
/// it: removed again when the returned guard drops if the command wrote nothing there.
pub fn check_out(out: &std::path::Path) -> Result<crate::fsio::NewDirs> {
    refuse_out(out)?;
    crate::fsio::NewDirs::create(out)
}

/// Refuses a results root that is not a folder (a file, or a device such as /dev/null), before
/// anything slow is done.
pub fn refuse_out(out: &std::path::Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        bail!(
            "--out {} is not a folder (a file or a device); give a folder to write results under",
            out.display()
        );
    }
    Ok(())
}
