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
use crate::schema::{Status, SummaryRow};
use crate::spec::Field;
use crate::units::{format_bytes, format_tick};

pub mod chart;
pub mod devices;
pub mod spec_diff;

pub use spec_diff::SpecDiff;

pub const COMPARE_MD: &str = "COMPARE.md";

/// The comparison of folders of one experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub experiment: String,
    /// The first folder's spec description.
    pub description: String,
    pub folders: Vec<Side>,
    /// The folders whose spec differs from A's in what it runs, with the keys that differ.
    pub spec_differs: Vec<SpecDiff>,
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

    /// `bytes` as a share of the limit: "96%"; none without a limit.
    fn share(&self, bytes: u64) -> Option<String> {
        match self.limit() {
            0 => None,
            limit => Some(format!("{:.0}%", 100.0 * bytes as f64 / limit as f64)),
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
    /// The true figure is at least `number`, not `number`: the largest fit of a sweep that never
    /// ran out of memory (it stopped at its last value, not at a boundary), or the peak of a run
    /// that ran out (what it held when it stopped, short of what it needed).
    pub at_least: bool,
}

impl Figure {
    /// Each folder's number over A's, for B onwards, as a table shows it: "0.10"; "≥ 1.60" or
    /// "≤ 0.62" where one side is only a lower bound; "—" where either is missing, A's is 0, or
    /// both are lower bounds (their ratio could be anything).
    pub fn ratios(&self) -> Vec<String> {
        let first = self.cells.first().and_then(Option::as_ref);
        self.cells.iter().skip(1).map(|c| ratio(first, c.as_ref())).collect()
    }
}

/// `b` over `a`, as [`Figure::ratios`] writes it.
pub fn ratio(a: Option<&Cell>, b: Option<&Cell>) -> String {
    let (Some(a), Some(b)) = (a, b) else { return "—".into() };
    match (a.number, b.number, a.at_least, b.at_least) {
        (Some(x), Some(y), false, false) if x != 0.0 => significant(y / x),
        // B is at least y, so B / A is at least y / x.
        (Some(x), Some(y), false, true) if x != 0.0 => format!("≥ {}", significant(y / x)),
        // A is at least x, so B / A is at most y / x.
        (Some(x), Some(y), true, false) if x != 0.0 => format!("≤ {}", significant(y / x)),
        _ => "—".into(),
    }
}

/// A ratio with two decimals, or below 0.1 with two significant digits ("0.0020", not "0.00",
/// which would say B is nothing beside A).
fn significant(r: f64) -> String {
    if r == 0.0 || !r.is_finite() || r.abs() >= 0.1 {
        return format!("{r:.2}");
    }
    let decimals = (1 - r.abs().log10().floor() as i32).clamp(2, 12) as usize;
    format!("{r:.decimals$}")
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
        .map(|(i, f)| SpecDiff {
            letter: letters[i].clone(),
            keys: spec_diff::differences(&first.manifest, &f.manifest, [&letters[0], &letters[i]]),
        })
        .filter(|d| !d.keys.is_empty())
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

/// Largest fit, first OOM, and the peaks of the largest fit. A sweep that measured no OOM (it
/// reached its end, or stopped at a value predicted not to fit, or at an error) has no
/// measured boundary: its largest fit is a lower bound, and its first OOM lies past it.
fn sweep_figures(side: &Side, answer: &Answer, rows: &[SummaryRow]) -> Vec<Option<Cell>> {
    let fit =
        answer.largest_fit.and_then(|v| rows.iter().find(|r| r.status.fitted() && r.value == Some(v as f64)));
    let past = |v: u64, text: String| lower_bound(text, v as f64);
    vec![
        answer.largest_fit.map(|v| match answer.first_oom {
            Some(_) => number(v as f64),
            None => past(v, format!("≥ {} (no OOM measured)", format_tick(v as f64))),
        }),
        match (answer.first_oom, answer.largest_fit) {
            (Some(v), _) => Some(number(v as f64)),
            (None, Some(v)) => Some(past(v, format!("> {} (none measured)", format_tick(v as f64)))),
            (None, None) => None,
        },
        fit.map(|r| bytes(side, r.max_memory_allocated)),
        fit.map(|r| bytes(side, r.max_memory_reserved)),
        fit.and_then(|r| r.step_seconds).map(seconds),
    ]
}

/// Outcome and peaks, for a variant without a sweep. A peak reached by a row that did not
/// complete (out of memory) is a lower bound of what the run needed.
fn plain_figures(side: &Side, rows: &[SummaryRow]) -> Vec<Option<Cell>> {
    // A row predicted not to fit never ran: it has no peak. One that ran out of memory stopped
    // short of what it needed; an error's peak is what it held, as measured.
    let ran = || rows.iter().filter(|r| r.status != Status::PredictedOom);
    let peak = |of: fn(&SummaryRow) -> u64| {
        let top = ran().max_by_key(|r| (of(r), r.status != Status::Oom))?;
        let b = of(top);
        Some(if top.status == Status::Oom {
            let share = side.share(b).map(|s| format!("{s}, ")).unwrap_or_default();
            lower_bound(format!("≥ {} ({share}at its OOM)", format_bytes(b)), b as f64)
        } else {
            bytes(side, b)
        })
    };
    vec![
        Some(text(outcome(rows))),
        peak(|r| r.max_memory_allocated),
        peak(|r| r.max_memory_reserved),
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
    Cell { text: format!("{s:.3} s"), number: Some(s), at_least: false }
}

/// "ok", "OOM in backward", "error", or several of those for several rows.
fn outcome(rows: &[SummaryRow]) -> String {
    let each: Vec<String> = rows.iter().map(SummaryRow::outcome).collect();
    each.join(", ")
}

fn text(s: String) -> Cell {
    Cell { text: s, number: None, at_least: false }
}

fn number(v: f64) -> Cell {
    Cell { text: format_tick(v), number: Some(v), at_least: false }
}

fn bytes(side: &Side, b: u64) -> Cell {
    let share = side.share(b).map(|s| format!(" ({s})")).unwrap_or_default();
    Cell { text: format!("{}{share}", format_bytes(b)), number: Some(b as f64), at_least: false }
}

/// A figure known only from below: `text` says so ("≥ 64 (no OOM measured)"), ratios bound.
fn lower_bound(text: String, v: f64) -> Cell {
    Cell { text, number: Some(v), at_least: true }
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
            cells.extend(f.ratios());
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
    let which = c.spec_differs.iter().map(|d| d.letter.as_str()).collect::<Vec<_>>().join(", ");
    let first = c.folders.first().map_or("A", |s| s.letter.as_str());
    let (whose, verb) = if c.spec_differs.len() == 1 { ("file", "differs") } else { ("files", "differ") };
    format!(
        "the spec {whose} of {which} {verb} from {first}'s in what it runs (model, data, training, sweep, \
         variants, or the files it reads): the same experiment name, but not the same run, so these figures \
         may not compare. {}",
        c.spec_differs
            .iter()
            .map(|d| format!("{} differs in {}.", d.letter, d.summary()))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

#[cfg(test)]
pub(crate) mod tests;
