//! `oomlab compare`: one experiment's results from several devices (or budgets) side by side.
//!
//! The data is prepared here, apart from reading and drawing: [`compare`] takes folders read
//! back ([`ExperimentDir`]), refuses folders of different experiments, notes where their specs differ,
//! and works out the figures per variant (largest value that fit and first that ran out of
//! memory for a sweep, with the peak at the largest fit; the peak of each variant without a
//! sweep) and their ratio to the first folder's. [`markdown`] writes `COMPARE.md`;
//! [`crate::chart::CompareSweep`] overlays the sweeps.
//!
//! ExperimentDirs are lettered A, B, C... in the order given; ratios are each folder's figure over A's.
//! A share is of the folder's budget, or of the device's capacity where the run had no budget.
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::results::experiment::answer;
use crate::results::manifest::Answer;
use crate::results::ExperimentDir;
use crate::schema::{Status, SummaryRow};
use crate::units::{format_bytes, format_tick};

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
    /// The manifest's status: "complete", "running" (killed), "failed: ...".
    pub status: String,
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

/// The figures for one swept field (or for no sweep: `field` empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub field: String,
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

/// Compares folders of one experiment; an error when they are of different experiments or
/// fewer than two.
pub fn compare(folders: &[ExperimentDir]) -> Result<Comparison> {
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
            letter: letter(i),
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
        .filter(|(_, f)| f.manifest.spec_source != first.manifest.spec_source)
        .map(|(i, _)| letter(i))
        .collect();

    // Fields in the order first seen; the empty field (no sweep) last.
    let mut fields: Vec<String> = Vec::new();
    for f in folders {
        for r in &f.rows {
            if !fields.contains(&r.field) {
                fields.push(r.field.clone());
            }
        }
    }
    fields.sort_by_key(|f| f.is_empty());
    let tables = fields.into_iter().map(|field| table(folders, &sides, field)).collect();
    Ok(Comparison {
        experiment: experiment.clone(),
        description: first.title(),
        folders: sides,
        spec_differs,
        tables,
    })
}

fn letter(i: usize) -> String {
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
fn variants(folders: &[ExperimentDir], field: &str) -> Vec<String> {
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

fn table(folders: &[ExperimentDir], sides: &[Side], field: String) -> Table {
    let variants = variants(folders, &field);
    let has_variants = variants.iter().any(|v| !v.is_empty());
    let key = field.rsplit('.').next().unwrap_or_default();
    let names: Vec<String> = if field.is_empty() {
        vec!["outcome".into(), "peak allocated".into(), "peak reserved".into()]
    } else {
        vec![
            format!("largest {key} that fit"),
            format!("first {key} out of memory"),
            "peak allocated at the largest fit".into(),
            "peak reserved at the largest fit".into(),
        ]
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
                if mine.is_empty() {
                    vec![None; names.len()]
                } else if field.is_empty() {
                    plain_figures(side, &mine)
                } else {
                    sweep_figures(
                        side,
                        &f.answer(variant).unwrap_or_else(|| answer(variant, &field, &mine)),
                        &mine,
                    )
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
    let fit = answer
        .largest_fit
        .and_then(|v| rows.iter().find(|r| r.status == Status::Ok && r.value == Some(v as f64)));
    vec![
        answer.largest_fit.map(|v| number(v as f64)),
        answer.first_oom.map(|v| number(v as f64)),
        fit.map(|r| bytes(side, r.max_memory_allocated)),
        fit.map(|r| bytes(side, r.max_memory_reserved)),
    ]
}

/// Outcome and peaks, for a variant without a sweep.
fn plain_figures(side: &Side, rows: &[SummaryRow]) -> Vec<Option<Cell>> {
    vec![
        Some(text(outcome(rows))),
        rows.iter().map(|r| r.max_memory_allocated).max().map(|b| bytes(side, b)),
        rows.iter().map(|r| r.max_memory_reserved).max().map(|b| bytes(side, b)),
    ]
}

/// "ok", "OOM in backward", "error", or several of those for several rows.
fn outcome(rows: &[SummaryRow]) -> String {
    let each: Vec<String> = rows
        .iter()
        .map(|r| match (r.status, r.phase) {
            (Status::Ok, _) => "ok".to_string(),
            (Status::Oom, Some(p)) => format!("OOM in {p}"),
            (Status::Oom, None) => "OOM".to_string(),
            (Status::Error, _) => "error".to_string(),
            (Status::PredictedOom, _) => "predicted OOM (not run)".to_string(),
        })
        .collect();
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
    let mut out = Vec::new();
    out.push(format!("# {}: {} results compared", c.experiment, c.folders.len()));
    out.push(String::new());
    out.push(c.description.clone());
    out.push(String::new());
    if !c.spec_differs.is_empty() {
        out.push(format!("> **Warning:** {}", spec_warning(c)));
        out.push(String::new());
    }
    out.push("| | device | budget | capacity | run | folder |".into());
    out.push("|---|---|---|---|---|---|".into());
    for s in &c.folders {
        out.push(format!(
            "| {} | {} | {} | {} | {} | `{}` |",
            s.letter,
            cell_text(&s.device),
            s.budget.map(format_bytes).unwrap_or_else(|| "none".into()),
            format_bytes(s.capacity),
            cell_text(&s.status),
            s.dir.display()
        ));
    }
    out.push(String::new());
    out.push(
        "Shares are of each folder's budget, or of its device's capacity where it had none; ratios are each \
         folder's figure over A's."
            .into(),
    );
    for t in &c.tables {
        out.push(String::new());
        out.push(if t.field.is_empty() { "## Without a sweep".into() } else { format!("## {}", t.field) });
        out.push(String::new());
        let mut head = Vec::new();
        if t.has_variants {
            head.push("variant".to_string());
        }
        head.push("figure".into());
        head.extend(c.folders.iter().map(|s| s.letter.clone()));
        head.extend(c.folders.iter().skip(1).map(|s| format!("{} / A", s.letter)));
        out.push(format!("| {} |", head.join(" | ")));
        out.push(format!("|{}", "---|".repeat(head.len())));
        for f in &t.rows {
            let mut cells = Vec::new();
            if t.has_variants {
                cells.push(cell_text(&f.variant));
            }
            cells.push(f.name.clone());
            cells.extend(f.cells.iter().map(|c| c.as_ref().map_or("—".to_string(), |c| cell_text(&c.text))));
            cells.extend(f.ratios().into_iter().map(|r| r.map_or("—".to_string(), |r| format!("{r:.2}"))));
            out.push(format!("| {} |", cells.join(" | ")));
        }
    }
    if !charts.is_empty() {
        out.push(String::new());
        out.push("## Charts".into());
        out.push(String::new());
        for name in charts {
            out.push(format!("![{name}]({name})"));
        }
    }
    out.push(String::new());
    out.join("\n")
}

/// "the spec file of B differs from A's: ..."; also printed as a warning by the command.
pub fn spec_warning(c: &Comparison) -> String {
    let which = c.spec_differs.join(", ");
    let (whose, verb) = if c.spec_differs.len() == 1 { ("file", "differs") } else { ("files", "differ") };
    format!(
        "the spec {whose} of {which} {verb} from A's: the same experiment name, but what was run may not be \
         the same, so these figures may not compare"
    )
}

/// Text safe in a Markdown table cell.
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::manifest::{DeviceInfo, GitInfo, HostInfo, Versions};
    use crate::results::Manifest;
    use crate::schema::Phase;

    pub(crate) const GIB: u64 = 1 << 30;

    pub(crate) fn manifest(experiment: &str, device: &str, budget: Option<u64>, capacity: u64) -> Manifest {
        Manifest {
            experiment: experiment.into(),
            spec_path: format!("experiments/{experiment}.toml"),
            spec_source: format!("[experiment]\nname = \"{experiment}\"\n"),
            spec: serde_json::json!({"description": "How deep before out of memory?"}),
            device: DeviceInfo {
                requested: "auto".into(),
                resolved: "cuda:0".into(),
                name: device.into(),
                slug: crate::device::slug(device),
                capacity_bytes: capacity,
                budget_bytes: budget,
                budget_mechanism: None,
            },
            versions: Versions {
                oomlab: "0.1.0".into(),
                tch: "0.24.0".into(),
                libtorch: "2.11.0".into(),
                libtorch_path: None,
                cuda_runtime: None,
                nvidia_driver: None,
            },
            git: GitInfo { revision: Some("0123456789abcdef".into()), dirty: Some(false) },
            host: HostInfo { hostname: "h".into(), os: "linux".into(), cpu: "cpu".into(), torch_threads: 1 },
            command: vec!["oomlab".into()],
            started_at: "2025-01-01T00:00:00Z".into(),
            finished_at: None,
            status: "complete".into(),
            trials: 0,
            answers: Vec::new(),
            num_ooms: None,
            num_alloc_retries: None,
            workspace: None,
            data_location: None,
        }
    }

    /// A depth sweep: `per_layer` bytes a layer over `base`; fits up to `fit`, OOM from there.
    pub(crate) fn sweep(
        variant: &str,
        depths: &[u64],
        fit: u64,
        base: u64,
        per_layer: u64,
    ) -> Vec<SummaryRow> {
        depths
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let need = base + per_layer * d;
                let ok = d <= fit;
                SummaryRow {
                    trial: i + 1,
                    variant: variant.into(),
                    field: "model.depth".into(),
                    value: Some(d as f64),
                    status: if ok { Status::Ok } else { Status::Oom },
                    phase: (!ok).then_some(Phase::Backward),
                    step: (!ok).then_some(1),
                    depth: d as usize,
                    max_memory_allocated: if ok { need } else { need - per_layer },
                    max_memory_reserved: if ok { need + need / 64 } else { need },
                    oom_allocated: (!ok).then_some(need - per_layer),
                    oom_requested: (!ok).then_some(per_layer),
                    ..SummaryRow::default()
                }
            })
            .collect()
    }

    /// A T4 with the lesson's 15.90 GiB budget, fitting 40 layers, and a CPU with 2 GiB, fitting 4.
    pub(crate) fn two_devices() -> Vec<ExperimentDir> {
        let budget = 17_072_495_002;
        let per_layer = 400_000_000;
        let mut t4 = manifest("depth_sweep", "Tesla T4", Some(budget), 16 * GIB);
        t4.answers = vec![Answer {
            variant: String::new(),
            field: "model.depth".into(),
            largest_fit: Some(40),
            first_oom: Some(41),
        }];
        // The CPU run was killed: no answers in its manifest, worked out from its rows.
        let mut cpu = manifest("depth_sweep", "CPU (AMD EPYC)", Some(2 * GIB), 25_276_502_016);
        cpu.status = "running".into();
        vec![
            ExperimentDir {
                dir: "results/tesla-t4/depth_sweep".into(),
                manifest: t4,
                rows: sweep("", &[1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41], 40, 800_000_000, per_layer),
                trace: Vec::new(),
            },
            ExperimentDir {
                dir: "results/cpu-amd-epyc/depth_sweep".into(),
                manifest: cpu,
                rows: sweep("", &[1, 2, 4, 8, 6, 5], 4, 300_000_000, per_layer),
                trace: Vec::new(),
            },
        ]
    }

    #[test]
    fn two_devices_make_the_expected_table() {
        let c = compare(&two_devices()).unwrap();
        let md = markdown(&c, &["compare_peak_vs_depth.png".into()]);
        let lines: Vec<&str> = md.lines().collect();
        let expected = [
            "# depth_sweep: 2 results compared",
            "",
            "How deep before out of memory?",
            "",
            "| | device | budget | capacity | run | folder |",
            "|---|---|---|---|---|---|",
            "| A | Tesla T4 | 15.90 GiB | 16.00 GiB | complete | `results/tesla-t4/depth_sweep` |",
            "| B | CPU (AMD EPYC) | 2.00 GiB | 23.54 GiB | running | `results/cpu-amd-epyc/depth_sweep` |",
            "",
            "Shares are of each folder's budget, or of its device's capacity where it had none; ratios are each \
             folder's figure over A's.",
            "",
            "## model.depth",
            "",
            "| figure | A | B | B / A |",
            "|---|---|---|---|",
            "| largest depth that fit | 40 | 4 | 0.10 |",
            "| first depth out of memory | 41 | 5 | 0.12 |",
            "| peak allocated at the largest fit | 15.65 GiB (98%) | 1.77 GiB (88%) | 0.11 |",
            "| peak reserved at the largest fit | 15.89 GiB (100%) | 1.80 GiB (90%) | 0.11 |",
            "",
            "## Charts",
            "",
            "![compare_peak_vs_depth.png](compare_peak_vs_depth.png)",
        ];
        assert_eq!(lines, expected, "\n{md}");
    }

    #[test]
    fn different_experiments_are_refused() {
        let mut folders = two_devices();
        folders[1].manifest.experiment = "width_sweep".into();
        let err = compare(&folders).unwrap_err().to_string();
        assert!(err.contains("different experiments"), "{err}");
        assert!(err.contains("\"depth_sweep\"") && err.contains("\"width_sweep\""), "{err}");
        assert!(compare(&folders[..1]).is_err(), "one folder is no comparison");
    }

    #[test]
    fn a_different_spec_is_warned_about() {
        let mut folders = two_devices();
        folders[1].manifest.spec_source.push_str("# edited\n");
        let c = compare(&folders).unwrap();
        assert_eq!(c.spec_differs, ["B"]);
        let md = markdown(&c, &[]);
        assert!(
            md.lines().any(|l| l
                == "> **Warning:** the spec file of B differs from A's: the same experiment \
                name, but what was run may not be the same, so these figures may not compare"),
            "{md}"
        );
        assert!(!md.contains("## Charts"));
        assert!(compare(&two_devices()).unwrap().spec_differs.is_empty());
    }

    #[test]
    fn without_a_sweep_the_peaks_of_each_variant_compare() {
        let row = |trial, variant: &str, status, peak| SummaryRow {
            trial,
            variant: String::from(variant),
            status,
            phase: (status == Status::Oom).then_some(Phase::Forward),
            max_memory_allocated: peak,
            max_memory_reserved: peak + GIB / 4,
            ..SummaryRow::default()
        };
        let a = ExperimentDir {
            dir: "a".into(),
            manifest: manifest("amp", "NVIDIA H100 80GB HBM3", None, 80 * GIB),
            rows: vec![row(1, "fp32", Status::Ok, 8 * GIB), row(2, "fp16", Status::Ok, 6 * GIB)],
            trace: Vec::new(),
        };
        let b = ExperimentDir {
            dir: "b".into(),
            manifest: manifest("amp", "Tesla T4", Some(4 * GIB), 15 * GIB),
            rows: vec![row(1, "fp32", Status::Oom, 3 * GIB), row(2, "fp16", Status::Ok, 3 * GIB)],
            trace: Vec::new(),
        };
        let c = compare(&[a, b]).unwrap();
        let md = markdown(&c, &[]);
        let table: Vec<&str> = md.lines().skip_while(|l| *l != "## Without a sweep").collect();
        assert_eq!(
            table,
            [
                "## Without a sweep",
                "",
                "| variant | figure | A | B | B / A |",
                "|---|---|---|---|---|",
                "| fp32 | outcome | ok | OOM in forward | — |",
                "| fp32 | peak allocated | 8.00 GiB (10%) | 3.00 GiB (75%) | 0.38 |",
                "| fp32 | peak reserved | 8.25 GiB (10%) | 3.25 GiB (81%) | 0.39 |",
                "| fp16 | outcome | ok | ok | — |",
                "| fp16 | peak allocated | 6.00 GiB (8%) | 3.00 GiB (75%) | 0.50 |",
                "| fp16 | peak reserved | 6.25 GiB (8%) | 3.25 GiB (81%) | 0.52 |",
            ],
            "\n{md}"
        );
        assert!(md.contains("| A | NVIDIA H100 80GB HBM3 | none | 80.00 GiB | complete | `a` |"), "{md}");
    }

    #[test]
    fn letters_go_on_past_z() {
        assert_eq!(letter(0), "A");
        assert_eq!(letter(25), "Z");
        assert_eq!(letter(26), "AA");
        assert_eq!(letter(27), "AB");
    }
}
