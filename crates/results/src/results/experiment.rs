//! An experiment folder read back: its manifest, `summary.csv` and `trace.csv`, and the
//! questions every reader asks of them (the sweep's answer, the title, a phase's bytes).
//!
//! The one reader of a results folder: `plot`, `compare`, `claims` and the tests all read
//! through [`ExperimentDir::read`], so a folder a killed run left behind reads the same way
//! everywhere.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::manifest::{Answer, Manifest};
use super::strict_csv;
use crate::fsio;
use crate::schema::rules::MAX_BYTES;
use crate::schema::{rules, Phase, PhaseRecord, Status, SummaryRow, TraceLevel};
use crate::spec::limits::{MAX_ACCUMULATION, MAX_STEPS};
use crate::spec::{Field, Spec};

/// The most points a search's predicted curve may have (the run writes at most 64).
pub const MAX_CURVE: usize = 1000;

/// One experiment's results folder, read whole.
#[derive(Debug, Clone)]
pub struct ExperimentDir {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub rows: Vec<SummaryRow>,
    pub trace: Vec<PhaseRecord>,
    /// Whether the files ended in part of a trial (half a row, or trace rows of a trial whose
    /// summary row was never written: a hard kill while they were written), left out.
    pub cut_row: bool,
}

impl ExperimentDir {
    /// Reads `manifest.json`, `summary.csv` and `trace.csv` from `dir`, as untrusted input:
    /// anything that is not what a run writes is refused with the file, row and reason, and so
    /// is a folder whose trace rows of a written trial are not all there.
    pub fn read(dir: &Path) -> Result<ExperimentDir> {
        let (exp, lost) = Self::read_checked(dir)?;
        if let Some(lost) = lost {
            bail!(
                "{}: {lost}; the folder cannot be drawn or judged as it is: `{}` measures trial {} on again",
                dir.display(),
                exp.manifest.resume_command(dir),
                lost.trial
            );
        }
        Ok(exp)
    }

    /// [`read`](Self::read), but a written trial whose trace rows are not all in `trace.csv` (the
    /// file cut, edited or deleted) is reported rather than refused: what `--resume` needs to
    /// measure it again.
    pub fn read_checked(dir: &Path) -> Result<(ExperimentDir, Option<Lost>)> {
        if !dir.is_dir() {
            bail!(
                "{} is not a folder; give an experiment's results folder, e.g. results/<device>/<experiment>",
                dir.display()
            );
        }
        let manifest = Manifest::read(dir)?;
        let spec = recorded_spec(dir, &manifest)?;
        let device = rules::Device { capacity: manifest.device.capacity_bytes };
        let summary_path = dir.join(super::SUMMARY);
        let (rows, summary_cut) = strict_csv::read::<SummaryRow>(
            &summary_path,
            fsio::SUMMARY_LIMIT,
            &SUMMARY_REQUIRED,
            rules::SUMMARY,
            device,
        )?;
        check_rows(&summary_path, &rows, spec.as_ref())?;
        let trace_path = dir.join(super::TRACE);
        let (mut trace, trace_cut) = if trace_path.symlink_metadata().is_ok() {
            strict_csv::read::<PhaseRecord>(
                &trace_path,
                fsio::TRACE_LIMIT,
                &TRACE_REQUIRED,
                rules::TRACE,
                device,
            )?
        } else {
            (Vec::new(), false)
        };
        // Each trial's steps and micro-batches, as its spec makes them: what its trace rows
        // stay within.
        let within: Vec<(usize, usize)> = rows
            .iter()
            .map(|r| {
                spec.as_ref()
                    .and_then(|s| s.trial_config(&r.variant, r.value))
                    .map_or((MAX_STEPS, MAX_ACCUMULATION), |c| {
                        (c.training.steps, c.training.techniques.accumulation)
                    })
            })
            .collect();
        // A trial is complete when its summary row is written: trace rows of the one after the
        // last (a hard kill while they were written) are a part of a trial, left out.
        let last = rows.len();
        let (n, status) = (manifest.trials, &manifest.status);
        if (status.is_complete() && last != n) || last < n {
            bail!(
                "{}: manifest.json says the run ({status}) wrote {n} trial{}, summary.csv holds {last}; the \
                 folder is damaged",
                dir.display(),
                if n == 1 { "" } else { "s" }
            );
        }
        check_against_manifest(&summary_path, &rows, &manifest)?;
        let mut seen = 0;
        for (i, t) in trace.iter().enumerate() {
            if t.trial < seen || t.trial == 0 || t.trial > last + 1 {
                bail!(
                    "{}: row {}: trial {} {}; the file is damaged or not this folder's",
                    trace_path.display(),
                    i + 2,
                    t.trial,
                    if t.trial < seen { "after a later trial's rows" } else { "is not in summary.csv" }
                );
            }
            seen = t.trial;
            // Rows of a run from before they were written name neither; a run's own name both.
            let named = !t.variant.is_empty() || t.value.is_some();
            if let Some(r) =
                rows.get(t.trial - 1).filter(|r| named && (r.variant != t.variant || r.value != t.value))
            {
                bail!(
                    "{}: row {}, columns `variant` and `value`: trial {} is {:?} at {:?} here and {:?} at {:?} in \
                     summary.csv; the file is damaged or not this folder's",
                    trace_path.display(),
                    i + 2,
                    t.trial,
                    t.variant,
                    t.value,
                    r.variant,
                    r.value
                );
            }
            let (steps, micros) = within.get(t.trial - 1).copied().unwrap_or((MAX_STEPS, MAX_ACCUMULATION));
            if t.step > steps || t.micro >= micros.max(1) {
                bail!(
                    "{}: row {}, columns `step` and `micro`: step {} micro-batch {} is past the trial's {steps} \
                     steps of {micros} micro-batches; the file is damaged",
                    trace_path.display(),
                    i + 2,
                    t.step,
                    t.micro
                );
            }
        }
        let before = trace.len();
        trace.retain(|t| t.trial <= last);
        // Summaries from before `trace_rows` say only that a trial which ran its steps wrote
        // rows, at any level but `off`: one with none lost them (trace.csv removed or cut).
        let writes_rows = manifest.trace != Some(TraceLevel::Off);
        let lost = rows.iter().find_map(|r| {
            let have = trace.iter().filter(|t| t.trial == r.trial).count();
            match r.trace_rows {
                Some(want) => (have != want).then_some(Lost { trial: r.trial, have, want: Some(want) }),
                None => (writes_rows && r.status.fitted() && have == 0).then_some(Lost {
                    trial: r.trial,
                    have,
                    want: None,
                }),
            }
        });
        let exp = ExperimentDir {
            dir: dir.to_path_buf(),
            manifest,
            rows,
            cut_row: summary_cut || trace_cut || trace.len() < before,
            trace,
        };
        Ok((exp, lost))
    }

    /// Reads `dir` when a run wrote results there (it has a `summary.csv`), else `None`.
    /// A folder whose manifest says trials were written (or the run finished) and that lacks
    /// `summary.csv` is damaged, not unrun.
    pub fn read_if_run(dir: &Path) -> Result<Option<ExperimentDir>> {
        if dir.join(super::SUMMARY).symlink_metadata().is_err() {
            if dir.join(super::MANIFEST).symlink_metadata().is_ok() {
                let m = Manifest::read(dir)?;
                if m.status.is_complete() || m.trials > 0 {
                    // A resume that died after setting the rows aside, or a merge that died, left
                    // a folder its own command mends.
                    let fix = if dir.join(format!("{}.resuming", super::SUMMARY)).exists() {
                        format!("`{}` restores the rows set aside", m.resume_command(dir))
                    } else {
                        "run its spec again with --force (or `oomlab merge --force` for a merged folder)"
                            .to_string()
                    };
                    bail!(
                        "{}: summary.csv is missing, and manifest.json says the run ({}) wrote {} trial{}; the \
                         folder is damaged: {fix}",
                        dir.display(),
                        m.status,
                        m.trials,
                        if m.trials == 1 { "" } else { "s" }
                    );
                }
            }
            return Ok(None);
        }
        Self::read(dir).map(Some)
    }

    /// The sweep's answer for a variant (`""` without variants): the manifest's, or, where it has
    /// none (a killed run writes none), the same worked out from the rows. `None` when the
    /// variant has no swept rows.
    pub fn answer(&self, variant: &str) -> Option<Answer> {
        if let Some(a) = self.manifest.answers.iter().find(|a| a.variant == variant) {
            return Some(a.clone());
        }
        let field = self.rows.iter().filter(|r| r.variant == variant).find_map(|r| r.field)?;
        Some(answer(variant, field, &self.rows))
    }

    /// The spec's description, or the experiment's name when it has none.
    pub fn title(&self) -> String {
        title(&self.manifest)
    }

    /// The first trial of a variant.
    pub fn variant(&self, name: &str) -> Option<&SummaryRow> {
        self.rows.iter().find(|r| r.variant == name)
    }

    /// A trial's trace rows of the rank its summary row measures (every row, for one process).
    fn trace_of(&self, trial: usize) -> impl Iterator<Item = &PhaseRecord> {
        let rank = self.rows.iter().find(|r| r.trial == trial).and_then(|r| r.rank);
        self.trace.iter().filter(move |t| t.trial == trial && (rank.is_none() || t.rank == rank))
    }

    /// Allocated bytes at the end of a phase of a step (the last micro-batch's, if several).
    pub fn allocated_after(&self, trial: usize, step: usize, phase: Phase) -> Option<u64> {
        self.trace_of(trial).filter(|t| t.step == step && t.phase == phase).last().map(|t| t.memory_allocated)
    }

    /// The highest peak within one phase over a trial's steps.
    pub fn phase_peak(&self, trial: usize, phase: Phase) -> Option<u64> {
        self.trace_of(trial).filter(|t| t.phase == phase).map(|t| t.max_memory_allocated).max()
    }

    /// Allocated bytes at the end of each step (its last phase), in step order.
    pub fn end_of_steps(&self, trial: usize) -> Vec<(usize, u64)> {
        let mut out: Vec<(usize, u64)> = Vec::new();
        for t in self.trace_of(trial).filter(|t| t.step > 0) {
            match out.last_mut() {
                Some(last) if last.0 == t.step => last.1 = t.memory_allocated,
                _ => out.push((t.step, t.memory_allocated)),
            }
        }
        out
    }

    /// Ok rows as (swept value, peak allocated) points, for one variant ("" for none).
    pub fn peaks(&self, variant: &str) -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter(|r| r.status.fitted() && r.variant == variant)
            .filter_map(|r| Some((r.value?, r.max_memory_allocated as f64)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }
}

/// The spec's description in a manifest, or the experiment's name when it has none.
pub fn title(m: &Manifest) -> String {
    m.spec
        .get("description")
        .and_then(|d| d.as_str())
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| m.experiment.clone())
}

/// The largest swept value of `field` that trained and the smallest that ran out of memory,
/// for a variant: what a run records as its answer, and what a reader works out where a killed
/// run recorded none.
///
/// A field that is not a whole number (`training.lr`) has no answer: memory does not grow with
/// it, and an answer is a whole number (a learning rate of 0.1 would read as 0).
pub fn answer(variant: &str, field: Field, rows: &[SummaryRow]) -> Answer {
    let values = |pick: fn(Status) -> bool| {
        rows.iter()
            .filter(move |r| {
                field.is_integer() && pick(r.status) && r.variant == variant && r.field == Some(field)
            })
            .filter_map(|r| r.value)
    };
    Answer {
        largest_fit: values(Status::fitted).map(|v| v as u64).max(),
        first_oom: values(|s| s == Status::Oom).map(|v| v as u64).min(),
        ..Answer::new(variant, field)
    }
}

/// Columns every `summary.csv` has had since the first: without them a row means nothing.
const SUMMARY_REQUIRED: [&str; 6] = ["trial", "variant", "field", "value", "status", "max_memory_allocated"];
/// Columns every `trace.csv` has had since the first.
const TRACE_REQUIRED: [&str; 5] = ["trial", "step", "phase", "memory_allocated", "max_memory_allocated"];

/// A written trial whose trace rows are not all in `trace.csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub trial: usize,
    /// Its rows in `trace.csv`, and how many its summary row says were written.
    pub have: usize,
    /// `None` for a summary from before it kept the count: some rows were written.
    pub want: Option<usize>,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.want {
            Some(want) => write!(
                f,
                "trace.csv holds {} of the {want} rows written for trial {} (the file was cut, edited or removed)",
                self.have, self.trial
            ),
            None => write!(
                f,
                "trace.csv holds none of the rows written for trial {} (the file was cut, edited or removed)",
                self.trial
            ),
        }
    }
}

/// What a run writes of its rows, checked: trials numbered 1, 2, 3... as written (no repeat,
/// no gap, nothing out of range), variant names a spec allows, swept keys oomlab sweeps, finite
/// swept values, times finite and not negative, parameters with their bytes. Names and keys go
/// into file names, so nothing else may come through; numbers are divided and scaled by.
fn check_rows(path: &Path, rows: &[SummaryRow], spec: Option<&Spec>) -> Result<()> {
    for (i, r) in rows.iter().enumerate() {
        let at = || format!("{}: row {}", path.display(), i + 2);
        if r.trial != i + 1 {
            bail!(
                "{}, column `trial`: trial {} where trial {} belongs (trials are numbered 1, 2, 3... as written); the \
                 file is damaged or not oomlab's",
                at(),
                r.trial,
                i + 1
            );
        }
        if !r.variant.is_empty() && !crate::spec::limits::is_name(&r.variant) {
            bail!("{}, column `variant`: {:?} is not a variant name a spec allows", at(), r.variant);
        }
        if r.value.is_some_and(|v| !v.is_finite()) {
            bail!("{}, column `value`: not a finite number", at());
        }
        if let Err((column, why)) = rules::check_summary_row(r, spec) {
            bail!("{}, column `{column}`: {why}; the file is damaged", at());
        }
        if (r.param_count == 0) != (r.param_bytes == 0) {
            bail!(
                "{}, columns `param_count` and `param_bytes`: {} parameters of {} bytes; the file is damaged",
                at(),
                r.param_count,
                r.param_bytes
            );
        }
    }
    Ok(())
}

/// The spec a folder's manifest records (`spec_source`), parsed as a run parses it: what every
/// row's swept value, steps and variant are checked against. Its text must be TOML naming this
/// experiment, else the manifest is refused; a spec that is TOML but no longer validates (an
/// older oomlab's, written before a rule of today's) is `None`, and its rows are held to the
/// rules that need no spec.
fn recorded_spec(dir: &Path, manifest: &Manifest) -> Result<Option<Spec>> {
    let path = dir.join(super::MANIFEST);
    let table: toml::Table = toml::from_str(&manifest.spec_source).map_err(|e| {
        anyhow::anyhow!(
            "{}: key `spec_source`: the spec it records is not TOML ({}); the file is damaged",
            path.display(),
            e.message()
        )
    })?;
    let name = table.get("experiment").and_then(|e| e.get("name")).and_then(|n| n.as_str());
    if name != Some(manifest.experiment.as_str()) {
        bail!(
            "{}: key `spec_source`: the spec it records is experiment {}, the manifest's is {:?}; the file is \
             damaged or not this folder's",
            path.display(),
            name.map_or("of no name".to_string(), |n| format!("{n:?}")),
            manifest.experiment
        );
    }
    Ok(crate::spec::parse(&manifest.spec_source, &manifest.spec_here()).ok())
}

/// What the manifest says of the rows, checked against them: each row's variant is one of the
/// spec's (as run), and each answer of a finished run has its largest fit and first
/// out-of-memory among that variant's rows that fitted and did not. A reader that takes the manifest's word (compare's
/// tables, claims) otherwise reports a depth no trial ran.
fn check_against_manifest(path: &Path, rows: &[SummaryRow], manifest: &Manifest) -> Result<()> {
    let names: Vec<&str> = manifest.spec["variants"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| {
        if names.is_empty() {
            !r.variant.is_empty()
        } else {
            !names.contains(&r.variant.as_str())
        }
    }) {
        bail!(
            "{}: row {}, column `variant`: {:?} is not a variant of the spec manifest.json records ({}); the file \
             is damaged or not this folder's",
            path.display(),
            i + 2,
            r.variant,
            if names.is_empty() { "it has none".to_string() } else { names.join(", ") }
        );
    }
    // Every row sweeps the key the spec sweeps (or none without a sweep): a row of another key
    // would be drawn and compared as that key's answer.
    let swept = manifest.spec["sweep"]["field"].as_str();
    // Only a validated spec (with its base) says what it sweeps.
    if manifest.spec.get("base").is_some() {
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.field.map(|f| f.key()) != swept) {
            bail!(
                "{}: row {}, column `field`: {} where the spec manifest.json records sweeps {}; the file is damaged \
                 or not this folder's",
                path.display(),
                i + 2,
                r.field.map_or("nothing".to_string(), |f| format!("{:?}", f.key())),
                swept.map_or("nothing".to_string(), |f| format!("{f:?}"))
            );
        }
    }
    // A run that did not finish may have answered from trials a resume measures again.
    let answers = if manifest.status.is_complete() { &manifest.answers[..] } else { &[] };
    for a in answers {
        let has = |value: u64, fitted: bool| {
            rows.iter().any(|r| {
                r.variant == a.variant && r.value == Some(value as f64) && r.status.fitted() == fitted
            })
        };
        let named = if a.variant.is_empty() { String::new() } else { format!(" of variant {}", a.variant) };
        if let Some(v) = a.largest_fit.filter(|&v| !has(v, true)) {
            bail!(
                "manifest.json: the answer{named} says {} = {v} fits largest, and no row of summary.csv fitted there; \
                 the folder is damaged",
                a.field.key()
            );
        }
        // A curve is values counting up, each with bytes a device could be asked for.
        if a.curve.len() > MAX_CURVE
            || a.curve.windows(2).any(|w| w[1].0 <= w[0].0)
            || a.curve.iter().any(|p| p.0 == 0 || p.1 > MAX_BYTES)
        {
            bail!(
                "manifest.json: the answer{named}'s `curve` is not {} values counting up with their bytes \
                 (at most {MAX_CURVE} points); the folder is damaged",
                a.field.key()
            );
        }
        if let Some(v) = a.first_oom.filter(|&v| !has(v, false)) {
            bail!(
                "manifest.json: the answer{named} says {} = {v} first runs out of memory, and no row of summary.csv \
                 ran out there; the folder is damaged",
                a.field.key()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trial: usize, variant: &str, value: f64, status: Status) -> SummaryRow {
        SummaryRow {
            trial,
            variant: variant.into(),
            field: Some(crate::spec::Field::Depth),
            value: Some(value),
            status,
            ..SummaryRow::default()
        }
    }

    /// A folder cut by a hard kill: a torn summary row and the trace rows of a trial whose
    /// summary row never came are left out, and said to be.
    #[test]
    fn a_folder_cut_mid_trial_reads_as_its_whole_trials() {
        let committed =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("results/cpu-amd-epyc/depth_sweep");
        let tmp = tempfile::tempdir().unwrap();
        // As the killed run left it: still running, no trial counted.
        let mut manifest = Manifest::read(&committed).unwrap();
        (manifest.status, manifest.trials) = (super::super::RunStatus::Running, 0);
        manifest.write(tmp.path()).unwrap();
        let summary = std::fs::read_to_string(committed.join(super::super::SUMMARY)).unwrap();
        let mut lines = summary.lines();
        let (head, first, second) = (lines.next().unwrap(), lines.next().unwrap(), lines.next().unwrap());
        let torn = &second[..second.len() / 2];
        std::fs::write(tmp.path().join(super::super::SUMMARY), format!("{head}\n{first}\n{torn}")).unwrap();
        let trace = std::fs::read_to_string(committed.join(super::super::TRACE)).unwrap();
        let kept: Vec<&str> = trace.lines().take_while(|l| !l.starts_with("3,")).collect();
        std::fs::write(tmp.path().join(super::super::TRACE), kept.join("\n") + "\n").unwrap();

        let exp = ExperimentDir::read(tmp.path()).unwrap();
        assert_eq!(exp.rows.len(), 1);
        assert!(exp.trace.iter().all(|t| t.trial == 1) && !exp.trace.is_empty(), "trial 2's rows left out");
        assert!(exp.cut_row);
    }

    /// The swept field is a closed set: a key oomlab does not sweep is refused where it stands,
    /// and the keys it does sweep, or none, read back as written.
    #[test]
    fn a_field_oomlab_does_not_sweep_is_refused_with_its_row_and_column() {
        let committed =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("results/cpu-amd-epyc/depth_sweep");
        let tmp = tempfile::tempdir().unwrap();
        Manifest::read(&committed).unwrap().write(tmp.path()).unwrap();
        std::fs::copy(committed.join(super::super::TRACE), tmp.path().join(super::super::TRACE)).unwrap();
        let summary = std::fs::read_to_string(committed.join(super::super::SUMMARY)).unwrap();
        assert!(summary.contains(",model.depth,"), "the committed sweep is over model.depth");
        std::fs::write(tmp.path().join(super::super::SUMMARY), &summary).unwrap();
        let exp = ExperimentDir::read(tmp.path()).unwrap();
        assert!(exp.rows.iter().all(|r| r.field == Some(crate::spec::Field::Depth)));

        let bad = summary.replacen(",model.depth,", ",model.depthh,", 1);
        std::fs::write(tmp.path().join(super::super::SUMMARY), bad).unwrap();
        let err = format!("{:#}", ExperimentDir::read(tmp.path()).unwrap_err());
        assert!(err.contains("row 2") && err.contains("field") && err.contains("model.depthh"), "{err}");
    }

    /// The committed depth sweep, run since trace.csv named each row's variant and value, reads
    /// back with them equal to its summary rows; one row changed is refused; a folder written
    /// before the columns (width_sweep) reads with them empty.
    #[test]
    fn a_trace_rows_variant_and_value_are_its_summary_rows() {
        let results = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("results/cpu-amd-epyc");
        let old = ExperimentDir::read(&results.join("width_sweep")).unwrap();
        assert!(
            old.trace.iter().all(|t| t.variant.is_empty() && t.value.is_none()),
            "written before the columns"
        );
        let committed = results.join("depth_sweep");
        let exp = ExperimentDir::read(&committed).unwrap();
        assert!(!exp.trace.is_empty());
        for t in &exp.trace {
            let r = &exp.rows[t.trial - 1];
            assert_eq!((&t.variant, t.value), (&r.variant, r.value));
            assert!(!t.variant.is_empty() && t.value.is_some());
        }
        let tmp = tempfile::tempdir().unwrap();
        Manifest::read(&committed).unwrap().write(tmp.path()).unwrap();
        std::fs::copy(committed.join(super::super::SUMMARY), tmp.path().join(super::super::SUMMARY)).unwrap();
        let trace = std::fs::read_to_string(committed.join(super::super::TRACE)).unwrap();
        assert!(trace.starts_with("trial,variant,value,step,"), "the columns after `trial`");
        // Row 7 (the file's 8th line) moved to another depth.
        let lines: Vec<String> = trace
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i != 7 {
                    return l.to_string();
                }
                let cells: Vec<&str> = l.splitn(4, ',').collect();
                let value: u64 = cells[2].parse().unwrap();
                format!("{},{},{},{}", cells[0], cells[1], value + 1, cells[3])
            })
            .collect();
        std::fs::write(tmp.path().join(super::super::TRACE), lines.join("\n") + "\n").unwrap();
        let err = format!("{:#}", ExperimentDir::read(tmp.path()).unwrap_err());
        assert!(err.contains("row 8, columns `variant` and `value`"), "{err}");
    }

    #[test]
    fn the_answer_is_per_variant_and_field() {
        let rows = [
            row(1, "a", 1.0, Status::Ok),
            row(2, "a", 8.0, Status::Oom),
            row(3, "a", 4.0, Status::Ok),
            row(4, "a", 6.0, Status::Oom),
            row(5, "b", 40.0, Status::Ok),
            row(6, "b", 2.0, Status::Error),
        ];
        let a = answer("a", Field::Depth, &rows);
        assert_eq!((a.largest_fit, a.first_oom), (Some(4), Some(6)));
        let b = answer("b", Field::Depth, &rows);
        assert_eq!((b.largest_fit, b.first_oom), (Some(40), None));
        assert_eq!(answer("a", Field::BatchSize, &rows).largest_fit, None);
    }

    #[test]
    fn an_answer_from_before_the_probe_counts_still_reads() {
        let old =
            r#"{"variant": "", "field": "training.batch_size", "largest_fit": 19215, "first_oom": 19216}"#;
        let a: Answer = serde_json::from_str(old).unwrap();
        assert_eq!((a.largest_fit, a.first_oom), (Some(19215), Some(19216)));
        assert_eq!((a.probes, a.probe_seconds, a.guess, a.strategy), (None, None, None, None));
    }
}
