//! What `run` says at the end: the answer to the spec's question, and the charts it drew.
use std::path::PathBuf;

use bytesize::ByteSize;

use crate::estimate;
use crate::results::manifest::Answer;
use crate::run::{describe, details, RunReport};
use crate::schema::Status;
use crate::spec::{Amp, Config, Field, Spec, SweepMode};
use crate::units::count;

pub fn print(spec: &Spec, report: &RunReport, charts: &[PathBuf]) {
    let m = &report.manifest;
    let budget = m
        .device
        .budget_bytes
        .map(|b| format!(", budget {}", ByteSize::b(b).display().iec()))
        .unwrap_or_default();
    say!("{} on {}{budget}: {}", spec.name, m.device.name, count(report.rows.len(), "trial"));
    if let Some(shard) = &m.shard {
        // A shard's answers are its own trials' only: read as the spec's answer, a shard's
        // "largest that fits" can be half the merged one.
        say!(
            "  shard {} of {}: the answers below are this shard's trials only, not the spec's; the merge \
             named at the end gives the whole run's",
            shard.index,
            shard.count
        );
    }
    match &spec.sweep {
        Some(sweep) => {
            let configs = spec.configs();
            // What each probe's steps are for is said once where every variant's are the same
            // (the lesson's three Adam implementations: three 230-character lines alike).
            let mut said_steps: Option<String> = None;
            for a in &m.answers {
                print_answer(sweep.field.column(), a, report);
                if let Some(line) = probes_line(a) {
                    say!("  {line}");
                }
                // What each probe's steps are for (unless the steps are what is swept).
                let searches = !matches!(sweep.mode, SweepMode::List(_)) && sweep.field != Field::Steps;
                let config = configs.iter().find(|(v, _)| v.unwrap_or_default() == a.variant);
                if let (true, Some((_, c))) = (searches, config) {
                    let steps = estimate::describe_steps(c);
                    if said_steps.as_deref() == Some(steps.as_str()) {
                        say!("  steps: as above");
                    } else {
                        say!("  steps: {steps}");
                        said_steps = Some(steps);
                    }
                    if let Some(line) = scaler_line(c, &a.variant, report) {
                        say!("  {line}");
                    }
                }
            }
        }
        None => {
            // Names as wide as the longest, so that the columns line up.
            let label = |r: &crate::schema::SummaryRow| match r.round {
                Some(round) => format!("{} (round {round})", r.variant).trim_start().to_string(),
                None => r.variant.clone(),
            };
            let width = report.rows.iter().map(|r| label(r).len() + 1).max().unwrap_or(0).max(16);
            for row in &report.rows {
                let name = label(row);
                let name = if name.is_empty() { String::new() } else { format!("{name:<width$}") };
                say!("  {name}{}", describe(row));
            }
        }
    }
    let errors: Vec<f64> = report.rows.iter().filter_map(|r| r.predicted_error).collect();
    if let Some(worst) = errors.iter().copied().max_by(|a, b| a.abs().total_cmp(&b.abs())) {
        say!(
            "  estimate: worst error {:+.2}% of the measured peak over {} (`oomlab estimate`)",
            100.0 * worst,
            count(errors.len(), "trial")
        );
    }
    say!("  results: {}", report.dir.display());
    for line in chart_lines(&report.dir, charts) {
        say!("  {line}");
    }
}

/// The charts as a few lines: each drawn once per format, so each name once, with the formats
/// and the folder said once: "3 charts (.png, .svg) in DIR:" then the names, indented.
pub fn chart_lines(dir: &std::path::Path, charts: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut formats: Vec<String> = Vec::new();
    for c in charts {
        let rel = c.strip_prefix(dir).unwrap_or(c);
        let name = rel.with_extension("").display().to_string();
        if !names.contains(&name) {
            names.push(name);
        }
        let ext = c.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
        if !formats.contains(&ext) {
            formats.push(ext);
        }
    }
    if names.is_empty() {
        return Vec::new();
    }
    let mut lines =
        vec![format!("{} ({}) in {}:", count(names.len(), "chart"), formats.join(", "), dir.display())];
    let mut line = String::new();
    for name in names {
        if !line.is_empty() && line.len() + name.len() > 96 {
            lines.push(format!("  {line},"));
            line.clear();
        }
        if !line.is_empty() {
            line += ", ";
        }
        line += &name;
    }
    lines.push(format!("  {line}"));
    lines
}

/// "largest depth that fits: 41 (...)" and "first OOM: depth 42 (...)", for one variant.
fn print_answer(name: &str, a: &Answer, report: &RunReport) {
    let find = |pick: fn(Status) -> bool, v: Option<u64>| {
        let v = v? as f64;
        report.rows.iter().find(|r| pick(r.status) && r.variant == a.variant && r.value == Some(v))
    };
    if !a.variant.is_empty() {
        say!("  [{}]", a.variant);
    }
    match (a.largest_fit, find(Status::fitted, a.largest_fit)) {
        (Some(v), Some(row)) => {
            let diverged = if row.status == Status::Diverged { "its loss diverged; " } else { "" };
            say!("  largest {name} that fits: {v}  ({diverged}{})", details(row))
        }
        _ => say!("  largest {name} that fits: none"),
    }
    match (a.first_oom, find(|s| s == Status::Oom, a.first_oom)) {
        (Some(v), Some(row)) => {
            say!("  first OOM: {name} {v}  ({})", details(row))
        }
        _ => say!("  first OOM: none up to the sweep's end"),
    }
}

/// "search: 2 probes, 1.9 s; guided by the estimate (predicted 19215): right", or for other
/// sweeps "sweep: 5 trials, 3.2 s". `None` for a manifest that did not count them.
fn probes_line(a: &Answer) -> Option<String> {
    let (n, seconds) = (a.probes?, a.probe_seconds.unwrap_or_default());
    let Some(how) = &a.strategy else { return Some(format!("sweep: {}, {seconds:.1} s", count(n, "trial"))) };
    let verdict = match (a.guess, a.largest_fit.unwrap_or(0)) {
        (Some(g), b) if g == b => ": right".to_string(),
        (Some(g), b) => format!(": off by {}", g.abs_diff(b)),
        (None, _) => String::new(),
    };
    Some(format!("search: {}, {seconds:.1} s; {how}{verdict}", count(n, "probe")))
}

/// Whether the fp16 grad scaler skipped a step in any probe that completed: a skipped step
/// delays the optimizer's state, and the peak with it, past the step `steps_needed` counts on.
fn scaler_line(c: &Config, variant: &str, report: &RunReport) -> Option<String> {
    if !matches!(c.training.techniques.amp, Amp::Fp16 { .. }) {
        return None;
    }
    let ran: Vec<usize> =
        report.rows.iter().filter(|r| r.variant == variant).filter_map(|r| r.skipped_steps).collect();
    let skipped = ran.iter().filter(|&&s| s > 0).count();
    Some(match skipped {
        _ if ran.is_empty() => return None,
        0 => format!("grad scaler: no step skipped in the {} probes that trained", ran.len()),
        n => format!(
            "grad scaler: {n} of the {} probes that trained skipped a step: their peak may come later than \
             without the skip",
            ran.len()
        ),
    })
}
