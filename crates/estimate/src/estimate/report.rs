//! `oomlab estimate`'s reports: the prediction as text (each sweep point's line and phase table,
//! the answer and the path a run's search takes) and, with `--blocks`, every allocation and free
//! of the replay as CSV. The command line prints what these return.
use anyhow::{Context, Result};

use crate::estimate::{self, Category, PhasePrediction, SweepPoint, SweepPrediction, Target};
use crate::schema::NotRun;
use crate::spec::{against, format_size, Spec, SweepMode};

/// One row of `--blocks`.
#[derive(serde::Serialize)]
struct BlockRow<'a> {
    variant: &'a str,
    trial: usize,
    value: Option<f64>,
    seq: usize,
    step: usize,
    micro: usize,
    phase: crate::schema::Phase,
    action: crate::estimate::BlockAction,
    requested: u64,
    block: u64,
    category: &'a str,
    pool: &'a str,
    site: &'a str,
    /// The ranks that make this event, for a `[parallel]` trial ("0-3"; empty for one
    /// process). DDP's ranks all make the same: its wrap, buckets and broadcasts allocate alike
    /// on the root and the others (measured: every rank's phases equal, and PyTorch's). ZeRO's
    /// differ by their shards: the rank replayed ("0").
    ranks: &'a str,
}

/// Writes `--blocks`: each trial replayed again, recording (a replay takes milliseconds).
pub fn write_blocks(path: &std::path::Path, sweeps: &[SweepPrediction]) -> Result<()> {
    if path.exists() {
        anyhow::bail!("--blocks {}: the file exists; remove it or name another", path.display());
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    // Numbered as `run` numbers its trials: variant after variant, each one's sweep in order
    // (the same trials where the sweep is a list and nothing runs out of memory on one side only).
    let points =
        sweeps.iter().flat_map(|s| s.points.iter().map(move |p| (s.variant.as_deref().unwrap_or(""), p)));
    for (i, (variant, point)) in points.enumerate() {
        {
            let p = &point.prediction;
            let (_, events) = estimate::predict_blocks(&point.config, p.shape, &p.options)?;
            let world = point.config.parallel.world_size;
            let ranks = match estimate::predicted_rank(&point.config, p.shape, &p.options) {
                Some(rank) => rank.to_string(),
                None if point.config.parallel.is_distributed() => format!("0-{}", world - 1),
                None => String::new(),
            };
            for (seq, event) in events.iter().enumerate() {
                let e = event;
                w.serialize(BlockRow {
                    variant,
                    trial: i + 1,
                    value: point.value,
                    seq,
                    step: e.step,
                    micro: e.micro,
                    phase: e.phase,
                    action: e.action,
                    requested: e.requested,
                    block: e.block,
                    category: e.category,
                    pool: e.pool,
                    site: &e.site,
                    ranks: &ranks,
                })?;
            }
        }
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("--blocks: {e}"))?;
    crate::fsio::write_atomic(path, &bytes).with_context(|| format!("--blocks {}", path.display()))
}

/// The whole report, as text. `not_run`: the variants a run on this machine leaves out, said
/// so where their predictions are (which are for a machine that runs them).
pub fn render(
    spec: &Spec,
    sweeps: &[SweepPrediction],
    budget: Option<u64>,
    target: Target,
    brief: bool,
    not_run: &[NotRun],
) -> String {
    let mut out = String::new();
    let allocator = match target {
        Target::Cpu => "cpu (oomlab's counting allocator: exact bytes)",
        Target::Cuda => "cuda (libtorch's caching allocator replayed, workspaces included; the budget caps reserved memory)",
    };
    let budget_text = budget.map(|b| format!(", budget {}", format_size(b))).unwrap_or_default();
    out += &format!("{}: predicted memory for {allocator}{budget_text}\n", spec.name);
    if let Some(s) = &spec.sweep {
        let how = match &s.mode {
            SweepMode::List(v) => format!("values {v:?}"),
            SweepMode::Search { start, factor, max, guided, anchor, implied_max } => {
                let how = match guided {
                    true => format!("guided by the estimate (widening x{factor} from a wrong guess)"),
                    false => "bisecting (guided = false)".into(),
                };
                let anchor =
                    anchor.map(|a| format!(", {a} tried first by every variant")).unwrap_or_default();
                let range = match implied_max {
                    true => format!("from {start} up, no max (the spec takes up to {max})"),
                    false => format!("{start}..{max}"),
                };
                format!("search {range} for the largest value that fits, {how}{anchor}")
            }
            SweepMode::Halve { start } => format!("halving from {start}"),
        };
        out += &format!("sweep {}: {how}\n", s.field.key());
    }
    if spec.run.rounds > 1 {
        out += &format!(
            "rounds: {} (every trial runs once a round, for step times; its memory is the same each round)\n",
            spec.run.rounds
        );
    }
    let mut noted = std::collections::HashSet::new();
    for sweep in sweeps {
        out += "\n";
        if let Some(v) = &sweep.variant {
            out += &format!("[{v}]\n");
        }
        let skipped = not_run.iter().find(|n| sweep.variant.as_deref() == Some(n.variant.as_str()));
        if let Some(n) = skipped {
            out += &format!("not run here: {}; what follows is for a machine that runs it\n", n.why);
        }
        for point in &sweep.points {
            out += &point_line(sweep, point, budget, &mut noted);
            if !brief {
                out += &table(point);
            }
        }
        out += &answer(sweep);
        // A run here makes no probes of a variant it leaves out.
        if skipped.is_none() {
            out += &probes(sweep);
        }
    }
    out
}

/// "search guided by the estimate (predicted 41): 2 probes (41, 42)": the path a run takes.
fn probes(sweep: &SweepPrediction) -> String {
    let Some(guide) = &sweep.guide else { return String::new() };
    let tried: Vec<String> = sweep.points.iter().filter_map(|p| p.value).map(|v| v.to_string()).collect();
    format!(
        "search {}: {} ({})\n",
        guide.describe(),
        crate::units::count(tried.len(), "probe"),
        tried.join(", ")
    )
}

/// One trial's line; its notes, each the first time it comes up.
fn point_line(
    sweep: &SweepPrediction,
    point: &SweepPoint,
    budget: Option<u64>,
    noted: &mut std::collections::HashSet<String>,
) -> String {
    let p = &point.prediction;
    let at = p.peak_phase();
    let name = match (sweep.field, point.value) {
        (Some(f), Some(v)) => format!("{} {v}", f.column()),
        _ => "trial".to_string(),
    };
    let params = format!("{} params, {}", p.param_count, format_size(p.param_bytes));
    let mut line = match budget {
        // Out of memory: where it fails and what it asks for there, not a peak the run never
        // reaches.
        Some(b) if !point.fits => {
            let at = p.first_over(b);
            let ask = match p.oom.filter(|o| at.is_some_and(|a| std::ptr::eq(a, &p.phases[o.phase_index]))) {
                Some(o) => {
                    let held = if p.options.target == Target::Cuda { "reserved" } else { "allocated" };
                    let (bytes, by) = against(o.reserved, b);
                    let budget = by.unwrap_or_else(|| format!("against {}", format_size(b)));
                    format!(": tries to allocate {} with {bytes} {held}, {budget}", format_size(o.requested))
                }
                None => at
                    .map(|a| match against(a.peak, b) {
                        (bytes, Some(by)) => format!(": needs {bytes} there, {by}"),
                        (bytes, None) => format!(": needs {bytes} there"),
                    })
                    .unwrap_or_default(),
            };
            format!("{name:<14} OOM predicted in {}{ask} ({params})\n", at.map(where_).unwrap_or_default())
        }
        Some(b) => {
            let (peak, by) = peak_against(p, b);
            let by = by.map(|by| format!(", {by}")).unwrap_or_default();
            format!("{name:<14} peak {peak:>11} in {} ({params})  fits{by}\n", where_(at))
        }
        None => format!("{name:<14} peak {:>11} in {} ({params})\n", p.describe_peak(), where_(at)),
    };
    if point.fits && (p.is_bounded_above() || p.bound.reserved > p.peak_reserved()) {
        line += &bound_line(p, budget);
    }
    for note in p.notes.iter().filter(|n| noted.insert(n.to_string())) {
        line += &format!("  note: {note}\n");
    }
    line
}

/// Where rules no GPU has confirmed widen the prediction: how high the peak may be, and whether
/// the budget still holds it there.
fn bound_line(p: &estimate::Prediction, budget: Option<u64>) -> String {
    let b = &p.bound;
    let over = match budget {
        Some(budget) if !p.fits_surely(budget) => {
            format!(": over the budget of {} there", format_size(budget))
        }
        _ => String::new(),
    };
    let why = if b.margin > 0.0 {
        format!(
            "+{:.0}% of the trial's bytes: {} not yet confirmed on a GPU",
            100.0 * b.margin,
            b.unconfirmed_names()
        )
    } else {
        "reserved only: allocated confirmed on a GPU, its cache grew more than the replay's".to_string()
    };
    format!(
        "  bound: up to {} allocated, {} reserved ({why}){over}\n",
        format_size(b.allocated),
        format_size(b.reserved),
    )
}

/// The peak against a budget, told apart from it where the two round alike: "2,202,350,216 B,
/// 4,189,232 B under the 2.05 GiB budget".
fn describe_against(p: &estimate::Prediction, budget: u64) -> String {
    match peak_against(p, budget) {
        (peak, Some(by)) => format!("{peak}, {by}"),
        (peak, None) => peak,
    }
}

/// [`describe_against`] in two parts: the peak ("22.17 GiB allocated, 23,995,613,184 B
/// reserved") and, where what the budget caps rounds like it, by how much it is under.
fn peak_against(p: &estimate::Prediction, budget: u64) -> (String, Option<String>) {
    match p.options.target {
        Target::Cpu => against(p.peak_allocated(), budget),
        Target::Cuda => {
            let (reserved, by) = against(p.peak_reserved(), budget);
            (format!("{} allocated, {reserved} reserved", format_size(p.peak_allocated())), by)
        }
    }
}

/// "backward, step 1" (with the micro-batch when there are several).
fn where_(p: &PhasePrediction) -> String {
    match (p.step, p.micro) {
        (0, _) => p.phase.to_string(),
        (s, 0) => format!("{}, step {s}", p.phase),
        (s, m) => format!("{}, step {s}.{m}", p.phase),
    }
}

/// Peak and end per phase, and what the peak is made of. Steps after the second repeat it
/// (unless a history grows), so only the last is shown after them.
fn table(point: &SweepPoint) -> String {
    let p = &point.prediction;
    let cats: Vec<Category> =
        Category::ALL.into_iter().filter(|&c| p.phases.iter().any(|ph| ph.by_category.get(c) > 0)).collect();
    let mut out = format!("  {:<15}{:>6}{:>12}{:>12} |", "phase", "step", "peak", "end");
    for c in &cats {
        out += &format!("{:>12}", c.as_str());
    }
    out += "\n";
    let last = p.phases.last().map_or(0, |ph| ph.step);
    let mut skipped = false;
    for ph in &p.phases {
        if ph.step > 2 && ph.step < last {
            if !skipped {
                out += &format!("  {:<15}{:>6}\n", "...", format!("3-{}", last - 1));
                skipped = true;
            }
            continue;
        }
        let step = if ph.micro > 0 { format!("{}.{}", ph.step, ph.micro) } else { ph.step.to_string() };
        out += &format!(
            "  {:<15}{step:>6}{:>12}{:>12} |",
            ph.phase.as_str(),
            format_size(ph.peak),
            format_size(ph.allocated_end)
        );
        for &c in &cats {
            out += &format!("{:>12}", format_size(ph.by_category.get(c)));
        }
        out += "\n";
    }
    out
}

/// A value predicted to fit above one predicted not to, from the rows' largest fit and smallest
/// OOM: then no single boundary describes them (on CUDA, a cuBLAS or cuDNN workspace chosen by
/// shape can do this).
fn not_monotone(largest_fit: Option<u64>, first_oom: Option<u64>) -> Option<(u64, u64)> {
    largest_fit.zip(first_oom).filter(|(fits, not)| not < fits)
}

fn answer(sweep: &SweepPrediction) -> String {
    let (Some(field), Some(budget)) = (sweep.field, sweep.budget) else { return String::new() };
    if !field.is_integer() {
        return String::new();
    }
    let col = field.column();
    let mut out = String::new();
    let peak_of = |v: u64| {
        sweep
            .points
            .iter()
            .find(|p| p.value == Some(v as f64))
            .map(|p| describe_against(&p.prediction, budget))
    };
    match (sweep.exact_largest_fit, sweep.range) {
        (Some(v), Some((_, hi))) => {
            let of = if sweep.from_list { format!("of the listed {col} values") } else { col.to_string() };
            out += &format!("largest {of} predicted to fit in {}: {v}", format_size(budget));
            if let Some(peak) = peak_of(v) {
                out += &format!(" (peak {peak})");
            }
            if v == hi {
                out += &format!("; the sweep goes no higher than {hi}");
            } else if let Some(peak) = peak_of(v + 1) {
                out += &format!("; {} needs {peak}", v + 1);
            }
            out += "\n";
        }
        (None, Some((lo, _))) => {
            out += &format!("nothing from {col} {lo} up is predicted to fit in {}\n", format_size(budget));
        }
        _ => {}
    }
    if let Some((fits, not)) = not_monotone(sweep.largest_fit, sweep.first_oom) {
        out += &format!(
            "note: the predicted peak does not grow steadily with {col} here ({fits} fits, {not} does not): \
             each row is its own value's prediction\n"
        );
    }
    if sweep.largest_fit != sweep.exact_largest_fit {
        let found = sweep.largest_fit.map_or("none".to_string(), |v| v.to_string());
        out += &format!("the sweep's own trials would find: {found}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_fit_above_one_that_does_not_are_told() {
        // (largest value that fits, smallest that does not), as a sweep's rows give them.
        assert_eq!(not_monotone(Some(16), Some(32)), None);
        assert_eq!(not_monotone(Some(24), Some(16)), Some((24, 16)));
        assert_eq!(not_monotone(None, Some(16)), None);
        assert_eq!(not_monotone(Some(16), None), None);
    }
}
