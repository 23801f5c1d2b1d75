//! `oomlab merge DIR`: the shards in `DIR/shards/I-of-N/` merged into DIR's `summary.csv`,
//! `trace.csv`, `trace.json` and `manifest.json`, as one process running the spec would have
//! written them.
//!
//! Refused, with the shard named: a shard missing (its manifest absent), one that did not finish,
//! shards of different spec text, revision, build, device, budget or trace level, and on the CPU
//! different libtorch thread counts (a reduction keeps a buffer per thread, so their memory would
//! not be one measurement). Each shard's rows are matched to the units the spec deals it (see
//! `shard`), then all are put in the single process's order and numbered 1, 2, ...: the memory
//! columns come out as that process's, byte for byte, through the same writers; the times are
//! the shards' own. The merged manifest names every shard's host, device and times.
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::device::DeviceChoice;
use crate::results::manifest::{Answer, Manifest, RunStatus, ShardRun};
use crate::results::outputs::Listed;
use crate::results::timings::RunTimings;
use crate::results::{
    experiment, DirLock, ExperimentDir, Exporter, PerfettoTrace, SummaryCsv, TraceCsv, MANIFEST, SUMMARY,
    TRACE,
};
use crate::run::shard::{self, Shard, Unit, SHARDS};
use crate::run::RunReport;
use crate::schema::{PhaseRecord, SummaryRow};
use crate::spec::{self, Spec};

/// Merges the shards of `dir` into it; `force` replaces a merge already there. Returns the spec
/// and the merged folder as a run's report (its lock held), for the charts and the summary.
pub fn merge(dir: &Path, force: bool) -> Result<(Spec, RunReport)> {
    let shards = read_shards(dir)?;
    check(dir, &shards)?;
    let first = &shards[0].1.manifest;
    let spec = spec::parse(&first.spec_source, &first.spec_here())
        .with_context(|| format!("the spec recorded in {}'s shards no longer parses", dir.display()))?;
    let parts: Vec<Part> = shards
        .iter()
        .map(|(s, e)| Part {
            shard: *s,
            rows: &e.rows,
            not_run: e.manifest.not_run.iter().map(|n| n.variant.as_str()).collect(),
        })
        .collect();
    let order = order(&spec, &parts)?;

    let lock = DirLock::acquire(dir)?;
    clear(dir, force)?;
    let rows: Vec<SummaryRow> = order
        .iter()
        .enumerate()
        .map(|(i, &(s, r))| SummaryRow { trial: i + 1, ..shards[s].1.rows[r].clone() })
        .collect();
    let mut manifest = merged_manifest(&spec, &shards, &rows);
    manifest.status = RunStatus::Merging;
    manifest.write(dir)?;
    {
        // The run's own writers, in the run's order: a trial's phases, then its row.
        let mut exporters: Vec<Box<dyn Exporter>> = vec![
            Box::new(TraceCsv::create(dir)?),
            Box::new(SummaryCsv::create(dir)?),
            Box::new(PerfettoTrace::create(dir)?),
        ];
        for (row, &(s, r)) in rows.iter().zip(&order) {
            let local = shards[s].1.rows[r].trial;
            for rec in shards[s].1.trace.iter().filter(|t| t.trial == local) {
                let rec = PhaseRecord { trial: row.trial, ..rec.clone() };
                exporters.iter_mut().try_for_each(|e| e.phase(&rec))?;
            }
            crate::results::write_trial(&mut exporters, row)?;
        }
    }
    manifest.status = RunStatus::Complete;
    manifest.write(dir)?;
    Ok((spec, RunReport { dir: dir.to_path_buf(), rows, manifest, lock }))
}

/// Every shard of `dir`, read, in shard order; refused when the folder has none, shards of
/// different counts, or one is missing (each missing one named).
fn read_shards(dir: &Path) -> Result<Vec<(Shard, ExperimentDir)>> {
    let folder = dir.join(SHARDS);
    if !dir.exists() {
        bail!(
            "{}: no such folder: give the experiment folder that `oomlab run SPEC --shard I/N` wrote its shards under \
             (<out>/<device>/<experiment>)",
            dir.display()
        );
    }
    if !folder.is_dir() {
        bail!(
            "{} holds no shards (no {}/ folder): give the experiment folder that `oomlab run SPEC --shard I/N` \
             wrote into, e.g. results/<device>/<experiment>",
            dir.display(),
            SHARDS
        );
    }
    let entries = std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?;
    let mut found: Vec<Shard> = Vec::new();
    for e in entries {
        let name = e.with_context(|| format!("reading {}", folder.display()))?.file_name();
        match name.to_str().and_then(Shard::from_folder) {
            Some(shard) => found.push(shard),
            // Not a shard's: said, so that a shard folder misnamed by hand is not merged away
            // in silence.
            None => note!(
                "note: {} skipped: {}",
                folder.join(&name).display(),
                not_a_shard(&name.to_string_lossy())
            ),
        }
    }
    found.sort_by_key(|s| (s.count, s.index));
    let mut counts: Vec<usize> = found.iter().map(|s| s.count).collect();
    counts.dedup();
    let count = match counts[..] {
        [] => bail!("{} holds no shard folders (I-of-N); nothing to merge", folder.display()),
        [n] => n,
        _ => {
            let names: Vec<String> = found.iter().map(Shard::folder).collect();
            let others: Vec<String> = counts
                .iter()
                .map(|n| format!("`rm -r {}/*-of-{n}`", crate::shell::quote(&folder.to_string_lossy())))
                .collect();
            bail!(
                "{} holds shards of {} different runs ({}): a merge takes the N shards of one run; keep one run's \
                 and remove the others' folders ({}; --force replaces only a shard of the same N)",
                folder.display(),
                counts.len(),
                abbreviate(&names),
                others.join(" or ")
            )
        }
    };
    let mut absent = Vec::new();
    let mut shards = Vec::new();
    for index in 1..=count {
        let shard = Shard { index, count };
        let path = folder.join(shard.folder());
        // A shard is a folder of this experiment's, not a link to one elsewhere: what is merged
        // is what the run wrote here.
        if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "{} is a link, not a shard's folder: merge reads only what the shards wrote under {}; copy the \
                 shard's folder there instead",
                path.display(),
                folder.display()
            );
        }
        if !path.join(MANIFEST).exists() {
            absent.push(shard);
            continue;
        }
        let exp = ExperimentDir::read(&path).with_context(|| format!("reading shard {shard}"))?;
        shards.push((shard, exp));
    }
    // What these shards ran on, as their manifests say; the folder's name where none is here.
    let here_cpu = match shards.first() {
        Some((_, exp)) => !exp.manifest.device.is_cuda(),
        None => {
            dir.parent().and_then(Path::file_name).is_some_and(|n| n.to_string_lossy().starts_with("cpu"))
        }
    };
    let mut missing: Vec<String> = absent
        .into_iter()
        .map(|shard| {
            format!(
                "shard {} of {count} is missing: no {}{}",
                shard.index,
                folder.join(shard.folder()).join(MANIFEST).display(),
                elsewhere(dir, shard, here_cpu).map(|w| format!(" ({w})")).unwrap_or_default()
            )
        })
        .collect();
    if !missing.is_empty() {
        let many = missing.len();
        missing.truncate(5);
        if many > missing.len() {
            missing.push(format!("and {} more shards of {count} are missing", many - missing.len()));
        }
        bail!(
            "{}; run the missing shards (`oomlab run SPEC --shard I/{count}`, or resubmit their array tasks), \
             then merge again",
            missing.join("; ")
        );
    }
    Ok(shards)
}

/// Why a name under `shards/` is not a shard's folder, in words.
fn not_a_shard(name: &str) -> String {
    match name.split_once("-of-") {
        Some((i, n)) => match format!("{i}/{n}").parse::<Shard>() {
            Err(why) => format!("not a shard's folder ({why})"),
            Ok(s) => format!("not a shard's folder: shard {s}'s is spelled {}", s.folder()),
        },
        None => "not a shard's folder (`oomlab run --shard I/N` writes I-of-N)".into(),
    }
}

/// At most the first ten names, and how many more.
fn abbreviate(names: &[String]) -> String {
    match names.len() {
        n if n <= 10 => names.join(", "),
        n => format!("{}, and {} more", names[..10].join(", "), n - 10),
    }
}

/// Where else a missing shard is: the same experiment under another device folder of the
/// results root, when the array's tasks ran on different kinds of device, with the fix for how
/// they differ (a task on the CPU is a node without a GPU, or one `--device auto` found none on;
/// two GPUs are two kinds in one array). `here_cpu`: whether this folder's shards ran on a CPU.
fn elsewhere(dir: &Path, shard: Shard, here_cpu: bool) -> Option<String> {
    let experiment = dir.file_name()?;
    let device = dir.parent()?;
    let root = device.parent()?;
    let on_cpu = |d: &crate::results::manifest::DeviceInfo| !d.is_cuda();
    for e in std::fs::read_dir(root).ok()?.flatten() {
        let other = e.path().join(experiment).join(SHARDS).join(shard.folder());
        if e.path() == device || !other.join(MANIFEST).exists() {
            continue;
        }
        let there = Manifest::read(&other).ok().map(|m| m.device);
        let fix = match there {
            // Two CPUs: memory on a CPU follows its instruction set (which kernels libtorch picks).
            Some(d) if on_cpu(&d) && here_cpu => format!(
                "that task ran on another kind of CPU ({}): the array's nodes differ, and a CPU's memory \
                 depends on its instruction set; pin one kind of node (`oomlab slurm --sbatch \
                 --constraint=KIND`), then run that shard again",
                d.name
            ),
            Some(d) if on_cpu(&d) => format!(
                "that task ran on the CPU ({}): its node had no GPU{}; give every task a GPU and make it use \
                 one (`oomlab slurm --gres gpu:1 --device cuda`: a task without a GPU then fails instead of \
                 running on the CPU), then run that shard again",
                d.name,
                if d.requested == DeviceChoice::Auto { ", or `--device auto` found none" } else { "" }
            ),
            Some(d) if here_cpu => format!(
                "that task ran on {}, these on the CPU: some nodes had no GPU{}; give every task a GPU and \
                 make it use one (`oomlab slurm --gres gpu:1 --device cuda`), then run the CPU's shards again",
                d.name,
                if d.requested == DeviceChoice::Auto { ", or `--device auto` found none there" } else { "" }
            ),
            _ => "the tasks ran on more than one kind of GPU; give the array one with `oomlab slurm --gres \
                  gpu:KIND:1`, or one array per kind with --per-gpu-kind"
                .to_string(),
        };
        return Some(format!("it is in {}: {fix}", other.display()));
    }
    None
}

/// Refuses shards that are not one run's: unfinished, another spec text, revision, build,
/// device, budget, trace level, or (on the CPU) thread count than shard 1.
fn check(dir: &Path, shards: &[(Shard, ExperimentDir)]) -> Result<()> {
    let first = &shards[0].1.manifest;
    for (shard, exp) in shards {
        let m = &exp.manifest;
        let name = format!("shard {} of {}", shard.index, shard.count);
        let recorded = m.shard.as_ref().map(|s| (s.index, s.count));
        if recorded != Some((shard.index, shard.count)) {
            bail!(
                "{} was not written by `oomlab run SPEC --shard {shard}` (its manifest records {}); remove it \
                 or run that shard again with --force",
                exp.dir.display(),
                recorded.map_or("no shard".to_string(), |(i, n)| format!("shard {i}/{n}"))
            );
        }
        if !m.status.is_complete() {
            bail!(
                "{name} did not finish: {} says `{}`; wait for it to end, or finish it with `{}`, then merge again",
                exp.dir.join(MANIFEST).display(),
                m.status,
                m.resume_command(&exp.dir)
            );
        }
        let differs = |what: &str, a: String, b: String, fix: &str| -> Result<()> {
            if a != b {
                bail!(
                    "{name} and shard 1 of {} in {} differ in {what}: {b} against {a}; {fix}",
                    shard.count,
                    dir.display()
                );
            }
            Ok(())
        };
        if m.spec_source != first.spec_source {
            bail!(
                "{name} ran another spec text than shard 1 of {} in {} ({}): a merged folder holds one spec's \
                 trials; run every shard of the same spec (`--force` replaces a shard)",
                shard.count,
                dir.display(),
                crate::run::resume::first_difference(&first.spec_source, &m.spec_source)
            );
        }
        if let Some(change) = crate::results::inputs::changed(&first.inputs, &m.inputs) {
            bail!(
                "{name} read other files than shard 1 of {} in {} ({change}): a merged folder holds one model's \
                 and one data set's trials; run every shard with the same files (`--force` replaces a shard)",
                shard.count,
                dir.display()
            );
        }
        let one_build = "measurements of two builds do not mix: run every shard with one build";
        let revision = |m: &Manifest| m.git.revision.clone().unwrap_or_else(|| "no git revision".into());
        differs("revision", revision(first), revision(m), one_build)?;
        let build =
            |m: &Manifest| format!("oomlab {} with libtorch {}", m.versions.oomlab, m.versions.libtorch);
        differs("build", build(first), build(m), one_build)?;
        let one_device = "merge shards of one device";
        differs("device", first.device.name.clone(), m.device.name.clone(), one_device)?;
        // In bytes: 15.9GiB and 16280MiB print alike and are not one budget.
        let budget = |m: &Manifest| m.device.budget_bytes.map_or("no budget".into(), |b| format!("{b} B"));
        differs("budget", budget(first), budget(m), "run every shard with the same --budget")?;
        let trace = |m: &Manifest| m.trace.map_or("sync".into(), |t| t.as_str().to_string());
        differs("trace level", trace(first), trace(m), "run every shard with the same --trace")?;
        if !first.device.is_cuda() {
            let threads = |m: &Manifest| format!("{} libtorch threads", m.host.torch_threads);
            differs(
                "threads",
                threads(first),
                threads(m),
                "on the CPU a reduction keeps a buffer per thread, so their memory would not be one \
                 measurement: give every task the same CPUs (--cpus-per-task, or OMP_NUM_THREADS)",
            )?;
        }
    }
    Ok(())
}

/// One shard as the merge orders it: its rows, and the variants its machine left out
/// (`skip_on_cpu_without`), whose units it ran none of.
pub struct Part<'a> {
    pub shard: Shard,
    pub rows: &'a [SummaryRow],
    pub not_run: Vec<&'a str>,
}

/// The merged order: `(shard position, row index)` of every trial, in the order one process
/// runs the spec. Each shard's rows are matched to its units: a list value's row must be that
/// variant and value; a whole unit takes the run of rows of its variant.
pub fn order(spec: &Spec, shards: &[Part]) -> Result<Vec<(usize, usize)>> {
    let units = shard::units(spec);
    let names: Vec<&str> = spec.configs().iter().map(|(v, _)| v.unwrap_or_default()).collect();
    let values = shard::independent_values(spec);
    // (unit, position within the unit) -> (shard, row)
    let mut keyed: Vec<((usize, usize), (usize, usize))> = Vec::new();
    for (s, Part { shard, rows, not_run }) in shards.iter().enumerate() {
        let mut next = 0;
        let wrong = |row: Option<&SummaryRow>, unit: Unit| {
            let found = row.map_or("no more trials".to_string(), |r| {
                format!("trial {}: {:?} {:?}", r.trial, r.variant, r.value.unwrap_or(f64::NAN))
            });
            anyhow::anyhow!(
                "shard {shard}'s trials are not what the spec deals it: it should run {} next, but has {found}; \
                 run the shard again with --force",
                shard::describe(spec, unit)
            )
        };
        for u in shard::dealt(spec, *shard) {
            let unit = units[u];
            let (Unit::Value { variant, .. } | Unit::Whole { variant }) = unit;
            if not_run.contains(&names[variant]) {
                continue;
            }
            match unit {
                Unit::Value { variant, position } => {
                    let row = rows.get(next);
                    let value = values.and_then(|v| v.get(position)).copied();
                    match row {
                        Some(r) if r.variant == names[variant] && r.value == value => {
                            keyed.push(((u, 0), (s, next)));
                            next += 1;
                        }
                        _ => return Err(wrong(row, unit)),
                    }
                }
                Unit::Whole { variant } => {
                    let start = next;
                    while rows.get(next).is_some_and(|r| r.variant == names[variant]) {
                        keyed.push(((u, next - start), (s, next)));
                        next += 1;
                    }
                    if next == start {
                        return Err(wrong(rows.get(next), unit));
                    }
                }
            }
        }
        if let Some(extra) = rows.get(next) {
            bail!(
                "shard {shard} has more trials than the spec deals it (trial {} of {:?} is not its); run the \
                 shard again with --force",
                extra.trial,
                extra.variant
            );
        }
    }
    keyed.sort_by_key(|(key, _)| *key);
    Ok(keyed.into_iter().map(|(_, at)| at).collect())
}

/// Refuses to replace a merge already in `dir` unless `force` or the merge there did not finish
/// (killed while `merging`: nothing in it is an answer); then removes what a merge writes (its
/// CSVs, trace.json, manifest and charts), never the shards nor a file of the user's.
fn clear(dir: &Path, force: bool) -> Result<()> {
    if [TRACE, SUMMARY, MANIFEST].iter().any(|f| dir.join(f).exists()) {
        let unfinished = Manifest::read(dir).is_ok_and(|m| m.status == RunStatus::Merging);
        if unfinished && !force {
            note!(
                "note: {} holds a merge that did not finish (killed while merging): merging again",
                dir.display()
            );
        } else if !force {
            bail!(
                "{} already holds merged results (or a whole run's); pass --force to replace them (the shards \
                 stay)",
                dir.display()
            );
        }
        // What the run or merge there listed as its own, and nothing else.
        let names = match crate::results::outputs::read(dir) {
            Listed::Names(names) => names,
            Listed::Unlisted => crate::figures::drawn_by(dir),
            Listed::NoManifest => bail!(
                "{} holds files named like a run's but no manifest.json that oomlab can read, so nothing there is \
                 known to be oomlab's; move them out of the folder, then merge again",
                dir.display()
            ),
        };
        for kept in crate::results::outputs::remove(dir, &names)? {
            note!("note: {} kept: it is a folder, and oomlab writes no folder of that name", kept.display());
        }
    }
    Ok(())
}

/// The merged folder's manifest: shard 1's (spec, device, versions, revision), with the merge's
/// command, the earliest start and latest end, the answers worked out from the merged rows, the
/// allocator's counts and the times summed over the shards, and every shard's own record.
fn merged_manifest(spec: &Spec, shards: &[(Shard, ExperimentDir)], rows: &[SummaryRow]) -> Manifest {
    let ms: Vec<&Manifest> = shards.iter().map(|(_, e)| &e.manifest).collect();
    let mut m = ms[0].clone();
    // The merge's own files, listed before it writes them (a shard's list is the shard's).
    m.outputs = Some(crate::results::outputs::data_files());
    m.command = std::env::args().collect();
    m.started_at = ms.iter().map(|m| m.started_at.clone()).min().unwrap_or_default();
    m.finished_at = ms.iter().filter_map(|m| m.finished_at.clone()).max();
    m.trials = rows.len();
    // Each machine leaves out what it lacks the instructions for: a variant is missing from the
    // merge where any shard's machine left it out.
    m.not_run = Vec::new();
    for n in ms.iter().flat_map(|m| &m.not_run) {
        if !m.not_run.iter().any(|k| k.variant == n.variant) {
            m.not_run.push(n.clone());
        }
    }
    m.answers = answers(spec, rows, &ms);
    m.answers.retain(|a| !m.not_run.iter().any(|n| n.variant == a.variant));
    let sum = |f: fn(&Manifest) -> Option<u64>| ms.iter().map(|m| f(m)).sum::<Option<u64>>();
    (m.num_ooms, m.num_alloc_retries) = (sum(|m| m.num_ooms), sum(|m| m.num_alloc_retries));
    m.timings = ms.iter().filter_map(|m| m.timings.as_ref()).cloned().reduce(add_timings);
    let mut hosts: Vec<&str> = ms.iter().map(|m| m.host.hostname.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    m.host.hostname = hosts.join(", ");
    m.resumed_at = Vec::new();
    m.shard = None;
    m.shards = shards.iter().map(|(s, e)| shard_run(*s, &e.manifest)).collect();
    m
}

/// Stage by stage, summed over the shards: the machines' time, not the wall clock's.
fn add_timings(a: RunTimings, b: RunTimings) -> RunTimings {
    let opt = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    };
    RunTimings {
        process_start: opt(a.process_start, b.process_start),
        libtorch_init: a.libtorch_init + b.libtorch_init,
        data: a.data + b.data,
        model: a.model + b.model,
        steps: a.steps + b.steps,
        trials: a.trials + b.trials,
        // The merge's own, once it has drawn them.
        charts: None,
        total: a.total + b.total,
    }
}

fn shard_run(shard: Shard, m: &Manifest) -> ShardRun {
    ShardRun {
        shard: shard.to_string(),
        host: m.host.hostname.clone(),
        device: m.device.name.clone(),
        resolved: m.device.resolved.to_string(),
        torch_threads: m.host.torch_threads,
        slurm_job: m.shard.as_ref().and_then(|s| s.slurm_job.clone()),
        started_at: m.started_at.clone(),
        finished_at: m.finished_at.clone(),
        trials: m.trials,
        seconds: m.timings.as_ref().map(|t| t.total),
    }
}

/// Each variant's answer from the merged rows, as a single run records it: the trials it ran,
/// their time summed over the shards, and a search's guess, how it was guided and its predicted
/// curve (one shard ran each search whole).
fn answers(spec: &Spec, rows: &[SummaryRow], shards: &[&Manifest]) -> Vec<Answer> {
    let Some(sweep) = &spec.sweep else { return Vec::new() };
    spec.configs()
        .iter()
        .map(|(v, _)| {
            let v = v.unwrap_or_default();
            let theirs: Vec<&Answer> =
                shards.iter().flat_map(|m| m.answers.iter()).filter(|a| a.variant == v).collect();
            Answer {
                probes: Some(rows.iter().filter(|r| r.variant == v).count()),
                probe_seconds: Some(theirs.iter().filter_map(|a| a.probe_seconds).sum()),
                guess: theirs.iter().find_map(|a| a.guess),
                strategy: theirs.iter().find_map(|a| a.strategy.clone()),
                curve: theirs
                    .iter()
                    .find(|a| !a.curve.is_empty())
                    .map(|a| a.curve.clone())
                    .unwrap_or_default(),
                ..experiment::answer(v, sweep.field, rows)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sweep: &str) -> Spec {
        let text = format!(
            "[experiment]\nname = \"x\"\n[model]\nhidden = 4\ndepth = 1\n[data]\nkind = \"synthetic\"\n\
             samples = 8\nfeatures = 2\nclasses = 2\n[training]\noptimizer = \"sgd\"\nlr = 0.1\n\
             batch_size = 4\nsteps = 1\n[run]\ndevice = \"cpu\"\n{sweep}\n[[variant]]\nname = \"a\"\n\
             [[variant]]\nname = \"b\"\n"
        );
        spec::parse(&text, Path::new("x.toml")).unwrap()
    }

    fn row(trial: usize, variant: &str, value: f64) -> SummaryRow {
        SummaryRow { trial, variant: variant.into(), value: Some(value), ..SummaryRow::default() }
    }

    fn part(shard: Shard, rows: &[SummaryRow]) -> Part<'_> {
        Part { shard, rows, not_run: Vec::new() }
    }

    #[test]
    fn a_shard_under_another_device_folder_is_named_with_the_fix_for_that_device() {
        let root = tempfile::tempdir().unwrap();
        let shard = Shard { index: 2, count: 2 };
        let put = |device: &str, name: &str, resolved: &str| {
            let at = root.path().join(device).join("e").join(SHARDS).join(shard.folder());
            std::fs::create_dir_all(&at).unwrap();
            let mut m = crate::results::fixtures::manifest("e", name, None, 1);
            m.device.resolved = resolved.parse().expect("a run's device");
            m.write(&at).unwrap();
        };
        let h100 = root.path().join("nvidia-h100/e");
        let cpu = root.path().join("cpu-amd-epyc/e");
        assert!(elsewhere(&h100, shard, false).is_none(), "nowhere else yet");
        // A task ran on the CPU: not a GPU kind to pin, a node without a GPU.
        put("cpu-amd-epyc", "CPU (AMD EPYC)", "cpu");
        let w = elsewhere(&h100, shard, false).unwrap();
        assert!(
            w.contains("that task ran on the CPU (CPU (AMD EPYC))") && w.contains("--device cuda"),
            "{w}"
        );
        assert!(!w.contains("KIND"), "{w}");
        // Merging the CPU's folder, the missing shard ran on a GPU.
        put("nvidia-h100", "NVIDIA H100 80GB HBM3", "cuda:0");
        std::fs::remove_dir_all(root.path().join("cpu-amd-epyc")).unwrap();
        let w = elsewhere(&cpu, shard, true).unwrap();
        assert!(w.contains("that task ran on NVIDIA H100 80GB HBM3, these on the CPU"), "{w}");
        // Two CPU kinds: one kind of node, not a GPU.
        std::fs::remove_dir_all(root.path().join("nvidia-h100")).unwrap();
        put("cpu-intel-xeon", "CPU (Intel Xeon)", "cpu");
        let w = elsewhere(&cpu, shard, true).unwrap();
        assert!(w.contains("another kind of CPU (CPU (Intel Xeon))") && w.contains("--constraint"), "{w}");
        std::fs::remove_dir_all(root.path().join("cpu-intel-xeon")).unwrap();
        put("nvidia-h100", "NVIDIA H100 80GB HBM3", "cuda:0");
        // Two GPU kinds: one kind per array.
        let a100 = root.path().join("nvidia-a100/e");
        let w = elsewhere(&a100, shard, false).unwrap();
        assert!(w.contains("more than one kind of GPU") && w.contains("--per-gpu-kind"), "{w}");
    }

    /// Whether this folder's shards ran on a CPU is read from their manifests, not from the
    /// folder's name, which `--out` or a user's `mv` may have chosen.
    #[test]
    fn a_missing_shard_is_explained_from_what_the_present_shards_ran_on() {
        let root = tempfile::tempdir().unwrap();
        let put = |device: &str, shard: Shard, resolved: &str| {
            let at = root.path().join(device).join("e").join(SHARDS).join(shard.folder());
            std::fs::create_dir_all(&at).unwrap();
            let mut m = crate::results::fixtures::manifest("e", "some device", None, 1);
            m.device.resolved = resolved.parse().expect("a run's device");
            m.trials = 0;
            m.write(&at).unwrap();
            drop(SummaryCsv::create(&at).unwrap());
        };
        let (one, two) = (Shard { index: 1, count: 2 }, Shard { index: 2, count: 2 });
        put("renamed", one, "cpu");
        put("nvidia-h100", two, "cuda:0");
        let err = read_shards(&root.path().join("renamed/e")).err().unwrap().to_string();
        assert!(err.contains("shard 2 of 2 is missing") && err.contains("these on the CPU"), "{err}");
    }

    #[test]
    fn a_shard_that_is_a_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let shards = root.path().join("cpu/e").join(SHARDS);
        std::fs::create_dir_all(&shards).unwrap();
        std::os::unix::fs::symlink(&elsewhere, shards.join("1-of-1")).unwrap();
        let err = read_shards(&root.path().join("cpu/e")).err().unwrap().to_string();
        assert!(err.contains("1-of-1 is a link, not a shard's folder"), "{err}");
    }

    #[test]
    fn list_shards_merge_into_the_single_process_order() {
        let s = spec("[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3]\n");
        // 6 units over 4 shards: 1 gets a1 and b2, 2 gets a2 and b3, 3 gets a3, 4 gets b1.
        let one = [row(1, "a", 1.0), row(2, "b", 2.0)];
        let two = [row(1, "a", 2.0), row(2, "b", 3.0)];
        let three = [row(1, "a", 3.0)];
        let four = [row(1, "b", 1.0)];
        let shard = |index| Shard { index, count: 4 };
        let parts =
            [part(shard(1), &one), part(shard(2), &two), part(shard(3), &three), part(shard(4), &four)];
        let order = order(&s, &parts).unwrap();
        let merged: Vec<(String, f64)> = order
            .iter()
            .map(|&(p, r)| (parts[p].rows[r].variant.clone(), parts[p].rows[r].value.unwrap()))
            .collect();
        let want: Vec<(String, f64)> =
            ["a", "b"].iter().flat_map(|v| [1.0, 2.0, 3.0].map(|x| (v.to_string(), x))).collect();
        assert_eq!(merged, want);

        // A shard whose rows are not its share is refused, naming what it should have run.
        let wrong = [row(1, "a", 3.0)];
        let parts =
            [part(shard(1), &one), part(shard(2), &wrong), part(shard(3), &three), part(shard(4), &four)];
        let err = super::order(&s, &parts).unwrap_err().to_string();
        assert!(err.contains("shard 2/4") && err.contains("a, model.depth 2"), "{err}");
        let extra = [row(1, "b", 1.0), row(2, "b", 2.0)];
        let parts =
            [part(shard(1), &one), part(shard(2), &two), part(shard(3), &three), part(shard(4), &extra)];
        let err = super::order(&s, &parts).unwrap_err().to_string();
        assert!(err.contains("more trials than the spec deals it"), "{err}");

        // A machine without the instructions a variant needs left it out (`not_run`): its units
        // are not asked of the shards, whose other rows merge as dealt.
        let (one_a, two_a) = ([row(1, "a", 1.0)], [row(1, "a", 2.0)]);
        let skipped = |shard, rows| Part { shard, rows, not_run: vec!["b"] };
        let parts = [
            skipped(shard(1), &one_a[..]),
            skipped(shard(2), &two_a[..]),
            part(shard(3), &three),
            skipped(shard(4), &[]),
        ];
        assert_eq!(super::order(&s, &parts).unwrap(), [(0, 0), (1, 0), (2, 0)]);
    }

    #[test]
    fn whole_searches_keep_their_probe_order_and_an_empty_shard_is_fine() {
        let s = spec("[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, max = 8 }\n");
        let one = [row(1, "a", 4.0), row(2, "a", 5.0), row(3, "a", 2.0)];
        let two = [row(1, "b", 4.0), row(2, "b", 3.0)];
        let shard = |index| Shard { index, count: 3 };
        let parts = [part(shard(1), &one), part(shard(2), &two), part(shard(3), &[])];
        let order = order(&s, &parts).unwrap();
        assert_eq!(order, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
        let err = super::order(&s, &[part(shard(1), &one), part(shard(2), &[]), part(shard(3), &[])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("b: its whole search") && err.contains("no more trials"), "{err}");
    }
}
