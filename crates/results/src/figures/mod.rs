//! Which charts an experiment folder gets, in one place, so that `oomlab run` (at the end of a
//! run) and `oomlab plot` (from the CSVs and manifest, later) draw the same things:
//!
//! - per variant whose rows have a swept value, the peak-vs-swept-value chart
//!   (`peak_vs_<key>[-<variant>]`), and where two or more sweep the same field, theirs on one
//!   chart, a line per variant (`peak_vs_<key>-variants`);
//! - per variant, the memory timeline ([`Timeline`]) of the trial with the highest peak that
//!   fit, and of the first trial that ran out of memory (the smallest swept value that did, or
//!   the earliest trial without a sweep): what the largest model that fits does step by step,
//!   and what broke the next one;
//! - the timelines of any trials asked for by number (`--trial N`);
//! - with at least two variants, memory by category per variant ([`CategoryBars`]) and step time
//!   against peak memory ([`Tradeoff`]), each variant at the trial [`compared`] picks.
mod pick;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::chart::{
    self, CategoryBars, CompareSeries, CompareSweep, SeriesOf, SweepPeak, Timeline, Tradeoff,
};
use crate::results::{perfetto, ExperimentDir, Manifest};
use crate::schema::{Status, SummaryRow, TraceLevel};
use crate::spec::format_size;

pub use pick::{compared, select, Pick, Why};

/// What [`plot`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plotted {
    /// PNG and SVG of every chart, in the order drawn.
    pub charts: Vec<PathBuf>,
    pub trace_json: PathBuf,
    /// The folder's CSVs ended in part of a trial (a hard kill while writing), left out.
    pub cut_row: bool,
}

/// `oomlab plot`: redraws every chart of the folder, and `trace.json` from `trace.csv`.
pub fn plot(dir: &Path, extra_trials: &[usize]) -> Result<Plotted> {
    let exp = ExperimentDir::read(dir)?;
    let charts = draw_charts(&exp, extra_trials, recorded_spec_budget(&exp.manifest))?;
    let trace_json = perfetto::write_trace_json(&exp.dir, &exp.trace, &exp.rows)?;
    Ok(Plotted { charts, trace_json, cut_row: exp.cut_row })
}

/// Draws the charts [`select`] picks into the experiment's folder; returns the files written.
/// `spec_budget` is the spec's own budget for the run's device, named beside a `--budget` that
/// replaced it: the plan's where a run has one in hand, else the recorded spec's.
pub fn draw_charts(
    exp: &ExperimentDir,
    extra_trials: &[usize],
    spec_budget: Option<u64>,
) -> Result<Vec<PathBuf>> {
    charts(exp, extra_trials, spec_budget, &mut Mode::Draw)
}

/// What is wrong with the text of the charts [`draw_charts`] draws, drawing none: each line
/// names the chart and says which text leaves the canvas or lies over another
/// ([`chart::text_check`]). Empty where every chart reads at a glance.
pub fn text_problems(exp: &ExperimentDir, spec_budget: Option<u64>) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    charts(exp, &[], spec_budget, &mut Mode::Check(&mut problems))?;
    Ok(problems)
}

/// What [`charts`] does with each chart it picks.
enum Mode<'a> {
    /// Draws it (its files claimed in the manifest first).
    Draw,
    /// Names its files only.
    Name,
    /// Checks its text, into the list.
    Check(&'a mut Vec<String>),
}

/// The files a run's charts take in its folder, named but not drawn: what a run wrote there
/// before its manifest listed its outputs (with its data files), so that `--force` and
/// `--resume` on such a folder replace that and nothing else. A folder that cannot be read
/// names its data files only.
pub fn drawn_by(dir: &Path) -> Vec<String> {
    let mut names = crate::results::outputs::unlisted_data_files();
    if let Ok(exp) = ExperimentDir::read(dir) {
        let budget = recorded_spec_budget(&exp.manifest);
        let charts = charts(&exp, &[], budget, &mut Mode::Name).unwrap_or_default();
        names.extend(charts.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()));
    }
    names
}

/// A chart's two files in `dir`: listed in the folder's manifest as oomlab's, then drawn; or
/// only named; or named, and its text checked.
fn drawn(chart: &impl chart::Chart, dir: &Path, mode: &mut Mode) -> Result<chart::Rendered> {
    let files = chart::files(chart, dir);
    match mode {
        Mode::Draw => {}
        Mode::Name => return Ok(files),
        Mode::Check(problems) => {
            let name = files.png.display().to_string();
            problems
                .extend(chart::text_check::text_problems(chart)?.into_iter().map(|p| format!("{name}: {p}")));
            return Ok(files);
        }
    }
    let names: Vec<String> = [&files.png, &files.svg]
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    crate::results::outputs::claim(dir, &names)?;
    chart::render(chart, dir)
}

/// [`draw_charts`], or as `mode` says: only the files it would write, or its text checked.
fn charts(
    exp: &ExperimentDir,
    extra_trials: &[usize],
    spec_budget: Option<u64>,
    mode: &mut Mode,
) -> Result<Vec<PathBuf>> {
    let (dir, manifest, rows, trace) = (&exp.dir, &exp.manifest, &exp.rows, &exp.trace);
    let subtitle = |variant: &str| subtitle(manifest, variant, spec_budget);
    let budget = manifest.device.budget_bytes;
    let title = exp.title();
    // Runs from before `--trace` measured every phase.
    let level = manifest.trace.unwrap_or(TraceLevel::Sync);
    let per_phase = matches!(level, TraceLevel::Phases | TraceLevel::Sync);
    let mut files = Vec::new();
    for pick in select(rows, extra_trials)? {
        // Drawing many charts takes a while: a signal stops it between two (the folder's
        // measurements are whole; `oomlab plot` or `run --resume` draws the rest).
        if matches!(mode, Mode::Draw) {
            crate::interrupt::check()?;
        }
        let out = match pick {
            Pick::Sweep { variant } => {
                let mine: Vec<SummaryRow> = rows.iter().filter(|r| r.variant == variant).cloned().collect();
                let mut chart = SweepPeak::from_summary(&mine, title.clone(), subtitle(&variant), budget);
                chart.stem_suffix = (!variant.is_empty()).then(|| format!("-{variant}"));
                chart.curve = manifest
                    .answers
                    .iter()
                    .find(|a| a.variant == variant)
                    .map(|a| a.curve.iter().map(|&(x, b)| (x as f64, b)).collect())
                    .unwrap_or_default();
                drawn(&chart, dir, mode)?
            }
            Pick::Variants { variants } => {
                let Some(field) = rows.iter().find(|r| r.value.is_some_and(f64::is_finite)).map(|r| r.field)
                else {
                    continue;
                };
                let x_label = crate::chart::scale::swept_key(field).to_string();
                let series = variants
                    .iter()
                    .map(|v| {
                        let mine: Vec<SummaryRow> =
                            rows.iter().filter(|r| r.variant == **v).cloned().collect();
                        CompareSeries {
                            label: v.to_string(),
                            // No budget, no line: a CPU's capacity would flatten every curve.
                            limit: budget.unwrap_or(0),
                            limit_name: "budget".into(),
                            points: SweepPeak::from_summary(&mine, "", "", None).points,
                        }
                    })
                    .collect();
                let chart = CompareSweep {
                    title: format!("{title}: peak memory by {x_label}, a line per variant"),
                    subtitle: subtitle(""),
                    x_label,
                    variant: String::new(),
                    series_of: SeriesOf::Variants,
                    series,
                };
                drawn(&chart, dir, mode)?
            }
            Pick::Timeline { trial, why } => {
                // `select` picks trials of the summary only: the reader keeps no trace rows of a
                // trial without its summary row.
                let Some(row) = rows.iter().find(|r| r.trial == trial) else { continue };
                if !trace.iter().any(|r| r.trial == trial) {
                    // Nothing to draw: said when the trial was asked for of a run that traced
                    // nothing (a trial skipped as predicted out of memory has no rows at any level,
                    // and its row says why).
                    if extra_trials.contains(&trial) && level == TraceLevel::Off {
                        note!(
                            "trial {trial} has no rows in {}: its run traced nothing (`--trace {}`), so it has no \
                             timeline; run it again with --trace phases to draw one",
                            dir.join(crate::results::TRACE).display(),
                            level.as_str()
                        );
                    }
                    continue;
                }
                let chart = Timeline::from_trace(
                    trace,
                    row,
                    timeline_title(row, why),
                    subtitle(&row.variant),
                    budget,
                );
                drawn(&chart, dir, mode)?
            }
            // Categories are told apart by what each phase adds: they need a row per phase.
            Pick::Categories if !per_phase => continue,
            Pick::Categories => {
                let chart = CategoryBars::from_picked(
                    &compared(rows),
                    trace,
                    format!("{title}: memory by category"),
                    subtitle(""),
                );
                drawn(&chart, dir, mode)?
            }
            Pick::Tradeoff => {
                let chart = Tradeoff::from_picked(
                    &compared(rows),
                    format!("{title}: step time against peak memory"),
                    format!("{}; step times from that machine (--trace {})", subtitle(""), level.as_str()),
                );
                drawn(&chart, dir, mode)?
            }
        };
        files.extend([out.png, out.svg]);
    }
    Ok(files)
}

/// `"depth_sweep [fp16] on Tesla T4 (cuda:0), budget 15.90 GiB, libtorch 2.11.0, 1a2b3c4d5e"`:
/// the device and budget the run had, and where the budget was not the spec's own (`--budget`),
/// the spec's beside it, since the title (the spec's description) may name the spec's.
pub fn subtitle(m: &Manifest, variant: &str, spec_budget: Option<u64>) -> String {
    let budget = match (m.device.budget_bytes, spec_budget) {
        (Some(b), Some(s)) if b != s => {
            format!("budget {} (--budget; the spec's is {})", format_size(b), format_size(s))
        }
        (Some(b), None) => format!("budget {} (--budget; the spec has none)", format_size(b)),
        (Some(b), _) => format!("budget {}", format_size(b)),
        (None, Some(s)) => format!("no budget (the spec's {} left off)", format_size(s)),
        (None, None) => "no budget".into(),
    };
    format!(
        "{}{} on {} ({}), {budget}, libtorch {}, {}",
        m.experiment,
        if variant.is_empty() { String::new() } else { format!(" [{variant}]") },
        m.device.name,
        m.device.resolved,
        m.versions.libtorch,
        m.git.revision.as_deref().map_or("no git revision", |r| &r[..r.len().min(10)])
    )
}

/// The budget the recorded spec sets for the device the run was on (`None` if none, or if the
/// spec no longer parses): what `plot` has, with no plan in hand.
pub fn recorded_spec_budget(m: &Manifest) -> Option<u64> {
    let spec = crate::spec::parse(&m.spec_source, &m.spec_here()).ok()?;
    spec.run.budget_on(m.device.is_cuda())
}

/// "Memory per phase, trial 9: depth 40, the highest peak that fit".
fn timeline_title(row: &SummaryRow, why: Why) -> String {
    let mut title = format!("Memory per phase, trial {}", row.trial);
    if let Some(v) = row.value {
        let key = crate::chart::scale::swept_key(row.field);
        title += &format!(": {key} {}", crate::units::format_tick(v));
    }
    let outcome = match (row.status, why) {
        (Status::Ok, Why::HighestFit) => "the highest peak that fit",
        (Status::Oom, Why::FirstOom) => "the first out of memory",
        (Status::Ok, _) => "ok",
        (Status::Oom, _) => "out of memory",
        (Status::Error, _) => "error",
        (Status::PredictedOom, _) => "predicted out of memory, not run",
        (Status::Diverged, Why::HighestFit) => "the highest peak that fit (its loss diverged)",
        (Status::Diverged, _) => "fit, loss diverged",
    };
    format!("{title}, {outcome}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trial: usize, variant: &str, value: Option<f64>, status: Status, peak: u64) -> SummaryRow {
        SummaryRow {
            trial,
            variant: variant.into(),
            field: value.map(|_| crate::spec::Field::Depth),
            value,
            status,
            max_memory_allocated: peak,
            max_memory_reserved: peak,
            ..SummaryRow::default()
        }
    }

    #[test]
    fn a_sweep_gets_its_chart_and_the_timelines_at_its_boundary() {
        // A bisection: 1, 2, 4 fit, 8 OOM, then 6 OOM, 5 fits.
        let rows = [
            row(1, "", Some(1.0), Status::Ok, 10),
            row(2, "", Some(2.0), Status::Ok, 20),
            row(3, "", Some(4.0), Status::Ok, 40),
            row(4, "", Some(8.0), Status::Oom, 60),
            row(5, "", Some(6.0), Status::Oom, 55),
            row(6, "", Some(5.0), Status::Ok, 50),
        ];
        let picks = select(&rows, &[]).unwrap();
        assert_eq!(
            picks,
            [
                Pick::Sweep { variant: String::new() },
                Pick::Timeline { trial: 6, why: Why::HighestFit },
                Pick::Timeline { trial: 5, why: Why::FirstOom },
            ]
        );
        // Asked for: added once, after the others; one asked for twice or already drawn, once.
        let picks = select(&rows, &[2, 6, 2]).unwrap();
        assert_eq!(picks.len(), 4);
        assert_eq!(picks[3], Pick::Timeline { trial: 2, why: Why::Asked });
        let err = select(&rows, &[42]).unwrap_err().to_string();
        assert!(err.contains("--trial 42") && err.contains("1, 2, 3, 4, 5, 6"), "{err}");
    }

    #[test]
    fn variants_each_get_theirs_and_no_sweep_gets_timelines_only() {
        let rows = [
            row(1, "fp32", None, Status::Ok, 100),
            row(2, "fp16", None, Status::Ok, 60),
            row(3, "big", None, Status::Oom, 0),
            row(4, "big", None, Status::Oom, 0),
        ];
        let picks = select(&rows, &[]).unwrap();
        assert_eq!(
            picks,
            [
                Pick::Timeline { trial: 1, why: Why::HighestFit },
                Pick::Timeline { trial: 2, why: Why::HighestFit },
                Pick::Timeline { trial: 3, why: Why::FirstOom },
                Pick::Categories,
                Pick::Tradeoff,
            ]
        );
        let swept = [row(1, "a", Some(1.0), Status::Ok, 1), row(2, "b", Some(1.0), Status::Ok, 1)];
        let sweeps: Vec<Pick> =
            select(&swept, &[]).unwrap().into_iter().filter(|p| matches!(p, Pick::Sweep { .. })).collect();
        assert_eq!(sweeps, [Pick::Sweep { variant: "a".into() }, Pick::Sweep { variant: "b".into() }]);
    }

    /// Two variants or more sweeping one field get a chart of theirs together, after their own;
    /// one variant, or variants of no sweep, do not.
    #[test]
    fn variants_sweeping_one_field_are_drawn_together_too() {
        let swept = [
            row(1, "ddp", Some(1.0), Status::Ok, 10),
            row(2, "ddp", Some(2.0), Status::Ok, 10),
            row(3, "zero", Some(1.0), Status::Ok, 11),
            row(4, "zero", Some(2.0), Status::Ok, 8),
        ];
        let picks = select(&swept, &[]).unwrap();
        assert_eq!(
            picks[..3],
            [
                Pick::Sweep { variant: "ddp".into() },
                Pick::Sweep { variant: "zero".into() },
                Pick::Variants { variants: vec!["ddp".into(), "zero".into()] }
            ]
        );
        assert!(
            !select(&swept[..2], &[]).unwrap().iter().any(|p| matches!(p, Pick::Variants { .. })),
            "one variant"
        );
        let unswept = [row(1, "a", None, Status::Ok, 1), row(2, "b", None, Status::Ok, 1)];
        assert!(
            !select(&unswept, &[]).unwrap().iter().any(|p| matches!(p, Pick::Variants { .. })),
            "no sweep"
        );
        // Drawn: a line per variant, under no budget line when the run had none.
        let dir = tempfile::tempdir().unwrap();
        let exp = ExperimentDir {
            dir: dir.path().to_path_buf(),
            manifest: crate::results::fixtures::manifest("strategies", "AMD EPYC", None, 64 << 30),
            rows: swept.to_vec(),
            trace: Vec::new(),
            cut_row: false,
        };
        let files = draw_charts(&exp, &[], None).unwrap();
        let names: Vec<String> =
            files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"peak_vs_depth-variants.png".to_string()), "{names:?}");
        assert!(names.contains(&"peak_vs_depth-variants.svg".to_string()), "{names:?}");
    }

    #[test]
    fn subtitles_say_the_budget_the_run_had_and_the_specs_when_overridden() {
        let mut m = crate::results::fixtures::manifest("depth_sweep", "AMD EPYC", Some(2 << 30), 64 << 30);
        m.device.resolved = crate::device::RunDevice::Cpu;
        m.spec_source =
            "[experiment]\nname = \"depth_sweep\"\n[model]\nhidden = 8\ndepth = 1\n[data]\nsamples = 8\n\
                         features = 2\nclasses = 2\n[training]\noptimizer = \"sgd\"\nbatch_size = 4\n[run]\n\
                         budget = \"15.90GiB\"\n"
                .into();
        let spec_budget = recorded_spec_budget(&m);
        assert_eq!(spec_budget, Some(crate::spec::parse_size("15.90GiB").unwrap()));
        let s = subtitle(&m, "", spec_budget);
        assert!(s.contains("on AMD EPYC (cpu), budget 2.00 GiB (--budget; the spec's is 15.90 GiB)"), "{s}");
        m.device.budget_bytes = spec_budget;
        let s = subtitle(&m, "", spec_budget);
        assert!(s.contains("(cpu), budget 15.90 GiB, libtorch"), "{s}");
        let s = subtitle(&m, "", None);
        assert!(s.contains("(cpu), budget 15.90 GiB (--budget; the spec has none)"), "{s}");
    }

    #[test]
    fn timeline_titles_say_why() {
        let r = row(9, "", Some(40.0), Status::Ok, 1);
        assert_eq!(
            timeline_title(&r, Why::HighestFit),
            "Memory per phase, trial 9: depth 40, the highest peak that fit"
        );
        let r = row(3, "", None, Status::Oom, 1);
        assert_eq!(timeline_title(&r, Why::Asked), "Memory per phase, trial 3, out of memory");
    }
}
