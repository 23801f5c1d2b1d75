//! `oomlab compare`: one experiment's results from several devices (or budgets) side by side.
//!
//! The data is prepared here, apart from reading and drawing: [`compare`] takes folders read
//! back ([`ExperimentDir`]), refuses folders of different experiments, notes where their specs differ,
//! and works out the figures per variant (largest value that fit and first that ran out of
//! memory for a sweep, with the peak and the step time at the largest fit; the peak and the
//! step time of each variant without a sweep) and their ratio to the first folder's. [`markdown`] writes `COMPARE.md`;
//! [`crate::chart::CompareSweep`] overlays the sweeps.
//!
//! ExperimentDirs are lettered A, B, C... in the order given ([`compare_as`] takes the letters, for
//! [`devices`]: device folders compared experiment by experiment); ratios are each folder's figure over
//! the first's.
//! A share is of the folder's budget, or of the device's capacity where the run had no budget.
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::markdown;
use crate::results::experiment::answer;
use crate::results::manifest::Answer;
use crate::results::{ExperimentDir, RunStatus};
use crate::schema::SummaryRow;
use crate::spec::Field;
use crate::units::{format_bytes, format_tick};

pub mod chart;
pub mod devices;

pub const COMPARE_MD: &str = "COMPARE.md";

/// The comparison of folders of one experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub experiment: String,
    /// The first folder's spec description.
    pub description: String,
    pub folders: Vec<Side>,
    /// Letters of the folders whose spec file differs from A's.
    pub spec_differs: Vec<String>,
    /// One table per swept field (none without a sweep, the empty field).
    pub tables: Vec<Table>,
}

/// What the comparison says about one folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// "A", "B", ...
    pub letter: String,
    pub dir: PathBuf,
    pub device: String,
    pub budget: Option<u64>,
    pub capacity: u64,
    /// The manifest's status: complete, running (killed), failed...
    pub status: RunStatus,
    /// The folder's rows, for the charts.
    pub rows: Vec<SummaryRow>,
}

impl Side {
    /// What shares are of: the budget, or the capacity without one.
    pub fn limit(&self) -> u64 {
        self.budget.unwrap_or(self.capacity)
    }

    /// "budget" or "capacity", whichever [`Side::limit`] is.
    pub fn limit_name(&self) -> &'static str {
        if self.budget.is_some() {
            "budget"
        } else {
            "capacity"
        }
    }

    /// "A: Tesla T4, budget 15.90 GiB".
    pub fn label(&self) -> String {
        format!("{}: {}, {} {}", self.letter, self.device, self.limit_name(), format_bytes(self.limit()))
    }

    /// `bytes` as a share of the limit: "96%".
    fn share(&self, bytes: u64) -> String {
        match self.limit() {
            0 => String::new(),
            limit => format!(" ({:.0}%)", 100.0 * bytes as f64 / limit as f64),
        }
    }
}

/// The figures for one swept field (or for no sweep: `field` `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub field: Option<Field>,
    /// Whether any folder has more than the unnamed variant.
    pub has_variants: bool,
    pub rows: Vec<Figure>,
}

/// One line of a table: a figure for one variant in every folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub variant: String,
    pub name: String,
    /// Per folder, in order; None where the folder has no such figure.
    pub cells: Vec<Option<Cell>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    /// What ratios are taken of; None for a figure that is not a number ("OOM in backward").
    pub number: Option<f64>,
}

impl Figure {
    /// Each folder's number over A's, for B onwards; None where either is missing or A's is 0.
    pub fn ratios(&self) -> Vec<Option<f64>> {
        let first = self.cells.first().cloned().flatten().and_then(|c| c.number);
        self.cells
            .iter()
            .skip(1)
            .map(|c| match (first, c.as_ref().and_then(|c| c.number)) {
                (Some(a), Some(b)) if a != 0.0 => Some(b / a),
                _ => None,
            })
            .collect()
    }
}

/// What a summary of several experiments shows for one: a figure and the step time beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Headline {
    /// "largest depth that fit", "peak allocated (fp32)": the figure's name, and its variant's
    /// where the experiment has variants.
    pub name: String,
    pub figure: Figure,
    /// The step time that goes with it (at the largest fit, for a sweep).
    pub step: Figure,
}

impl Comparison {
    /// The first table's first variant's headline figure: the largest value that fit for a
    /// sweep, the peak allocated without one; None for a comparison without rows.
    pub fn headline(&self) -> Option<Headline> {
        let t = self.tables.first()?;
        let variant = &t.rows.first()?.variant;
        let mine = || t.rows.iter().filter(|f| f.variant == *variant);
        let figure = if t.field.is_none() {
            mine().find(|f| f.name == "peak allocated")
        } else {
            mine().find(|f| f.name.starts_with("largest "))
        }?;
        let step = mine().find(|f| f.name.starts_with("step time"))?;
        let name = if t.has_variants { format!("{} ({variant})", figure.name) } else { figure.name.clone() };
        Some(Headline { name, figure: figure.clone(), step: step.clone() })
    }
}

/// Compares folders of one experiment; an error when they are of different experiments or
/// fewer than two.
pub fn compare(folders: &[ExperimentDir]) -> Result<Comparison> {
    let letters: Vec<String> = (0..folders.len()).map(letter).collect();
    compare_as(folders, &letters)
}

/// [`compare`], with each folder's letter given (one per folder, in order): a device folder's
/// letter in a comparison of device folders, where an experiment may be in B and C only.
pub fn compare_as(folders: &[ExperimentDir], letters: &[String]) -> Result<Comparison> {
    assert_eq!(folders.len(), letters.len(), "one letter per folder");
    let Some(first) = folders.first() else {
        bail!("nothing to compare: give two or more results folders");
    };
    if folders.len() < 2 {
        bail!("compare needs two or more results folders, got one ({})", first.dir.display());
    }
    let experiment = &first.manifest.experiment;
    let others: Vec<String> = folders
        .iter()
        .filter(|f| f.manifest.experiment != *experiment)
        .map(|f| format!("{} is {:?}", f.dir.display(), f.manifest.experiment))
        .collect();
    if !others.is_empty() {
        bail!(
            "these folders hold different experiments and do not compare: {} is {:?}, but {}",
            first.dir.display(),
            experiment,
            others.join(", ")
        );
    }
    let sides: Vec<Side> = folders
        .iter()
        .enumerate()
        .map(|(i, f)| Side {
            letter: letters[i].clone(),
            dir: f.dir.clone(),
            device: f.manifest.device.name.clone(),
            budget: f.manifest.device.budget_bytes,
            capacity: f.manifest.device.capacity_bytes,
            status: f.manifest.status.clone(),
            rows: f.rows.clone(),
        })
        .collect();
    let spec_differs = folders
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, f)| what_ran(&f.manifest) != what_ran(&first.manifest))
        .map(|(i, _)| letters[i].clone())
        .collect();

    // Fields in the order first seen; the empty field (no sweep) last.
    let mut fields: Vec<Option<Field>> = Vec::new();
    for f in folders {
        for r in &f.rows {
            if !fields.contains(&r.field) {
                fields.push(r.field);
            }
        }
    }
    fields.sort_by_key(Option::is_none);
    let tables = fields.into_iter().map(|field| table(folders, &sides, field)).collect();
    Ok(Comparison {
        experiment: experiment.clone(),
        description: first.title(),
        folders: sides,
        spec_differs,
        tables,
    })
}

/// What a run ran, as two folders must share to compare: the validated spec without its file's
/// path, its description and its `[run]` table (the device and budget, which the folders show
/// and may differ in on purpose), and the contents of the files it read. A comment or a
/// reworded description changes nothing; a width, a batch or a swapped module file does.
/// Manifests without a validated spec are compared by their spec text.
fn what_ran(m: &crate::results::Manifest) -> (serde_json::Value, Vec<String>) {
    let mut spec = m.spec.clone();
    if spec.is_null() {
        return (m.spec_source.clone().into(), Vec::new());
    }
    if let Some(o) = spec.as_object_mut() {
        for key in ["path", "description", "run"] {
            o.remove(key);
        }
    }
    (spec, m.inputs.iter().map(|i| i.sha256.clone()).collect())
}

/// "A", "B", ... "Z", "AA", ...: the `i`th folder's letter.
pub fn letter(i: usize) -> String {
    let mut s = String::new();
    let mut n = i;
    loop {
        s.insert(0, (b'A' + (n % 26) as u8) as char);
        if n < 26 {
            return s;
        }
        n = n / 26 - 1;
    }
}

/// The variants with rows of `field`, in the order first seen across folders.
fn variants(folders: &[ExperimentDir], field: Option<Field>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in folders {
        for r in f.rows.iter().filter(|r| r.field == field) {
            if !out.contains(&r.variant) {
                out.push(r.variant.clone());
            }
        }
    }
    out
}

fn table(folders: &[ExperimentDir], sides: &[Side], field: Option<Field>) -> Table {
    let variants = variants(folders, field);
    let has_variants = variants.iter().any(|v| !v.is_empty());
    let names: Vec<String> = match field {
        None => vec!["outcome".into(), "peak allocated".into(), "peak reserved".into(), "step time".into()],
        Some(field) => {
            let key = field.column();
            vec![
                format!("largest {key} that fit"),
                format!("first {key} out of memory"),
                "peak allocated at the largest fit".into(),
                "peak reserved at the largest fit".into(),
                "step time at the largest fit".into(),
            ]
        }
    };
    let mut rows = Vec::new();
    for variant in &variants {
        // Per folder, its cell of each figure; a folder without the variant has none.
        let columns: Vec<Vec<Option<Cell>>> = folders
            .iter()
            .zip(sides)
            .map(|(f, side)| {
                let mine: Vec<SummaryRow> =
                    f.rows.iter().filter(|r| r.field == field && r.variant == *variant).cloned().collect();
                match field {
                    _ if mine.is_empty() => vec![None; names.len()],
                    None => plain_figures(side, &mine),
                    Some(field) => sweep_figures(
                        side,
                        &f.answer(variant).unwrap_or_else(|| answer(variant, field, &mine)),
                        &mine,
                    ),
                }
            })
            .collect();
        for (k, name) in names.iter().enumerate() {
            rows.push(Figure {
                variant: variant.clone(),
                name: name.clone(),
                cells: columns.iter().map(|c| c[k].clone()).collect(),
            });
        }
    }
    Table { field, has_variants, rows }
}

/// Largest fit, first OOM, and the peaks of the largest fit.
fn sweep_figures(side: &Side, answer: &Answer, rows: &[SummaryRow]) -> Vec<Option<Cell>> {
    let fit =
        answer.largest_fit.and_then(|v| rows.iter().find(|r| r.status.fitted() && r.value == Some(v as f64)));
    vec![
        answer.largest_fit.map(|v| number(v as f64)),
        answer.first_oom.map(|v| number(v as f64)),
        fit.map(|r| bytes(side, r.max_memory_allocated)),
        fit.map(|r| bytes(side, r.max_memory_reserved)),
        fit.and_then(|r| r.step_seconds).map(seconds),
    ]
}

/// Outcome and peaks, for a variant without a sweep.
fn plain_figures(side: &Side, rows: &[SummaryRow]) -> Vec<Option<Cell>> {
    vec![
        Some(text(outcome(rows))),
        rows.iter().map(|r| r.max_memory_allocated).max().map(|b| bytes(side, b)),
        rows.iter().map(|r| r.max_memory_reserved).max().map(|b| bytes(side, b)),
        median(rows.iter().filter(|r| r.status.fitted()).filter_map(|r| r.step_seconds).collect())
            .map(seconds),
    ]
}

/// The median of `v` (of several rounds' rows, say); `None` when empty.
fn median(v: Vec<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| crate::bench::stats::median(&v))
}

/// A mean step time (the trial's first step left out), as measured on that folder's machine:
/// what differs most between two CPUs.
fn seconds(s: f64) -> Cell {
    Cell { text: format!("{s:.3} s"), number: Some(s) }
}

/// "ok", "OOM in backward", "error", or several of those for several rows.
fn outcome(rows: &[SummaryRow]) -> String {
    let each: Vec<String> = rows.iter().map(SummaryRow::outcome).collect();
    each.join(", ")
}

fn text(s: String) -> Cell {
    Cell { text: s, number: None }
}

fn number(v: f64) -> Cell {
    Cell { text: format_tick(v), number: Some(v) }
}

fn bytes(side: &Side, b: u64) -> Cell {
    Cell { text: format!("{}{}", format_bytes(b), side.share(b)), number: Some(b as f64) }
}

/// `COMPARE.md`: the folders, a warning where their specs differ, and a table per field.
/// `charts` are the file names of the charts written beside it, listed at the end.
pub fn markdown(c: &Comparison, charts: &[String]) -> String {
    section(c, charts, 1)
}

/// [`markdown`] with its headings at `level` (1: `#`, 2: `##` ...), as a section of a longer
/// file; `charts` are the charts' paths from that file (`depth_sweep/compare_peak_vs_depth.png`).
pub fn section(c: &Comparison, charts: &[String], level: usize) -> String {
    let h1 = "#".repeat(level);
    let h2 = "#".repeat(level + 1);
    let first = c.folders.first().map_or("A", |s| s.letter.as_str());
    let mut out = Vec::new();
    out.push(format!("{h1} {}: {} results compared", c.experiment, c.folders.len()));
    out.push(String::new());
    out.push(c.description.clone());
    out.push(String::new());
    if !c.spec_differs.is_empty() {
        out.push(format!("> **Warning:** {}", spec_warning(c)));
        out.push(String::new());
    }
    let folders = c.folders.iter().map(|s| {
        [
            s.letter.clone(),
            markdown::cell(&s.device),
            s.budget.map(format_bytes).unwrap_or_else(|| "none".into()),
            format_bytes(s.capacity),
            markdown::cell(&s.status.to_string()),
            format!("`{}`", s.dir.display()),
        ]
    });
    out.push(markdown::table(["", "device", "budget", "capacity", "run", "folder"], folders));
    out.push(String::new());
    out.push(
        format!(
            "Shares are of each folder's budget, or of its device's capacity where it had none; step times are \
             means over a trial's steps after the first, on the machine that ran it; ratios are each folder's \
             figure over {first}'s."
        ),
    );
    for t in &c.tables {
        out.push(String::new());
        out.push(match t.field {
            None => format!("{h2} Without a sweep"),
            Some(field) => format!("{h2} {}", field.key()),
        });
        out.push(String::new());
        let mut head = Vec::new();
        if t.has_variants {
            head.push("variant".to_string());
        }
        head.push("figure".into());
        head.extend(c.folders.iter().map(|s| s.letter.clone()));
        head.extend(c.folders.iter().skip(1).map(|s| format!("{} / {first}", s.letter)));
        let rows = t.rows.iter().map(|f| {
            let mut cells = Vec::new();
            if t.has_variants {
                cells.push(markdown::cell(&f.variant));
            }
            cells.push(f.name.clone());
            cells.extend(
                f.cells.iter().map(|c| c.as_ref().map_or("—".to_string(), |c| markdown::cell(&c.text))),
            );
            cells.extend(f.ratios().into_iter().map(|r| r.map_or("—".to_string(), |r| format!("{r:.2}"))));
            cells
        });
        out.push(markdown::table(head, rows));
    }
    if !charts.is_empty() {
        out.push(String::new());
        out.push(format!("{h2} Charts"));
        out.push(String::new());
        for path in charts {
            let name = path.rsplit('/').next().unwrap_or(path);
            out.push(format!("![{name}]({path})"));
        }
    }
    out.push(String::new());
    out.join("\n")
}

/// "the spec file of B differs from A's: ..."; also printed as a warning by the command.
pub fn spec_warning(c: &Comparison) -> String {
    let which = c.spec_differs.join(", ");
    let first = c.folders.first().map_or("A", |s| s.letter.as_str());
    let (whose, verb) = if c.spec_differs.len() == 1 { ("file", "differs") } else { ("files", "differ") };
    format!(
        "the spec {whose} of {which} {verb} from {first}'s in what it runs (model, data, training, sweep, \
         variants, or the files it reads): the same experiment name, but not the same run, so these figures \
         may not compare"
    )
}

#[cfg(test)]
pub(crate) mod tests;
