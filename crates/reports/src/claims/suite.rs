//! How long the suite took on this device: each experiment's process, stage by stage, from
//! the timings its manifest recorded, against the suite's target (issue 14: a GPU's figures in
//! under 5 minutes on an H100; issue 31: the CPU's in at most 10 minutes on any x86 CPU of 2
//! cores, a variant that such a CPU cannot afford left out and named).
use std::fmt::Write as _;

use crate::results::timings::RunTimings;
use crate::results::ExperimentDir;

/// The suite's target on a device, in seconds, and what it is for.
fn target(exp: &ExperimentDir) -> (f64, &'static str) {
    if exp.manifest.device.is_cuda() {
        (300.0, "5 minutes on an H100")
    } else {
        (600.0, "10 minutes on 2 CPU cores")
    }
}

/// Where the machine that ran is not the target's ("an NVIDIA H200", "8 threads"), said after
/// the verdict: the time is compared with the target, not judged on its hardware.
fn off_target(exp: &ExperimentDir) -> String {
    let device = &exp.manifest.device;
    let threads = exp.manifest.host.torch_threads;
    if device.is_cuda() {
        if device.name.contains("H100") {
            return String::new();
        }
        return format!(
            " (this ran on {}, not an H100: compared with the target, not judged on its hardware)",
            device.name
        );
    }
    if threads == 2 {
        return String::new();
    }
    let s = if threads == 1 { "" } else { "s" };
    format!(" (this ran with {threads} thread{s}, not 2 cores: compared with the target, not judged on its hardware)")
}

/// The stages of a run, named as the table's columns.
fn stages(t: &RunTimings) -> [(&'static str, f64); 7] {
    let rest = (t.trials - t.data - t.model - t.steps).max(0.0);
    [
        ("process start", t.process_start.unwrap_or(0.0)),
        ("libtorch init", t.libtorch_init),
        ("data", t.data),
        ("model", t.model),
        ("steps", t.steps),
        ("trial upkeep", rest),
        ("charts", t.charts.unwrap_or(0.0)),
    ]
}

/// The "How long it took" section; empty when no experiment recorded its timings. The suite's
/// time is judged against its target only when every one of the suite's `of` experiments ran
/// to completion here: a part of the suite says nothing of the whole.
pub fn section(experiments: &[(&str, &ExperimentDir)], of: usize) -> String {
    let timed: Vec<(&str, &ExperimentDir, &RunTimings)> =
        experiments.iter().filter_map(|(n, e)| Some((*n, *e, e.manifest.timings.as_ref()?))).collect();
    let Some(&(_, first, _)) = timed.first() else { return String::new() };
    let mut s = String::new();
    let _ = writeln!(s, "\n## How long it took\n");
    let _ = writeln!(
        s,
        "Each experiment's process, from its start to its charts, as its manifest recorded it \
         (seconds). \"trial upkeep\" is what a trial spends around its data, model and steps: its \
         clean-up, checks and exports. `scripts/regenerate-figures` runs them one after another.\n"
    );
    let names = stages(&RunTimings::default()).map(|(n, _)| n);
    let head = ["experiment", "trials"].into_iter().chain(names).chain(["total"]);
    let mut sums = [0.0; 7];
    let mut total = 0.0;
    let mut rows = Vec::new();
    for (name, exp, t) in &timed {
        let cells = stages(t);
        for (sum, (_, v)) in sums.iter_mut().zip(cells) {
            *sum += v;
        }
        total += t.total;
        let mut row = vec![format!("`{name}`"), exp.rows.len().to_string()];
        row.extend(cells.iter().map(|(_, v)| format!("{v:.1}")));
        row.push(format!("{:.1}", t.total));
        rows.push(row);
    }
    let mut all = vec!["**all**".to_string(), String::new()];
    all.extend(sums.iter().map(|v| format!("{v:.1}")));
    all.push(format!("**{total:.1}**"));
    rows.push(all);
    let _ = writeln!(s, "{}", crate::markdown::table(head, rows));
    let (limit, what) = target(first);
    let slowest = names.iter().zip(sums).max_by(|a, b| a.1.total_cmp(&b.1)).map(|(n, _)| *n).unwrap_or("");
    let whole = experiments.len() == of && experiments.iter().all(|(_, e)| e.manifest.status.is_complete());
    let verdict = if !whole {
        let done = experiments.iter().filter(|(_, e)| e.manifest.status.is_complete()).count();
        format!(
            "{done} of the suite's {of} experiments ran to completion here, so the suite's time is not judged \
             against the target of {what}"
        )
    } else if total <= limit {
        format!("under the target of {what} ({:.0}% of it){}", 100.0 * total / limit, off_target(first))
    } else {
        format!("over the target of {what} by {:.0} s{}", total - limit, off_target(first))
    };
    let missing = experiments.len() - timed.len();
    let _ = writeln!(
        s,
        "\nThe suite: {} ({:.1} min), {verdict}; most of it in {slowest}.{}{}",
        fmt_secs(total),
        total / 60.0,
        if missing > 0 {
            format!(" {missing} experiment(s) ran before timings were recorded and are not counted.")
        } else {
            String::new()
        },
        left_out(experiments)
    );
    s
}

/// " Left out here: `amp_models` [resnet18_bf16, transformer_bf16] (why)." for the variants the
/// machine did not run (`skip_on_cpu_without`); empty when it ran them all.
fn left_out(experiments: &[(&str, &ExperimentDir)]) -> String {
    let parts: Vec<String> = experiments
        .iter()
        .filter(|(_, e)| !e.manifest.not_run.is_empty())
        .map(|(n, e)| {
            let names: Vec<&str> = e.manifest.not_run.iter().map(|v| v.variant.as_str()).collect();
            format!("`{n}` [{}]: {}", names.join(", "), e.manifest.not_run[0].why)
        })
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!(" Left out on this machine, and so not in the time: {}.", parts.join("; ")),
    }
}

fn fmt_secs(s: f64) -> String {
    format!("{s:.0} s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;

    fn exp(timings: Option<RunTimings>, device: &str) -> ExperimentDir {
        let mut m = manifest("e", device, None, 1 << 30);
        m.device.resolved = device.parse().expect("a run's device");
        m.host.torch_threads = 2;
        m.timings = timings;
        ExperimentDir { dir: "e".into(), manifest: m, rows: Vec::new(), trace: Vec::new(), cut_row: false }
    }

    fn timed(steps: f64, charts: f64) -> RunTimings {
        RunTimings {
            process_start: Some(0.5),
            libtorch_init: 1.0,
            data: 2.0,
            model: 3.0,
            steps,
            trials: 5.0 + steps + 1.0,
            charts: Some(charts),
            total: 0.5 + 1.0 + 5.0 + steps + 1.0 + charts,
        }
    }

    #[test]
    fn sums_the_stages_and_judges_the_target() {
        let (mut a, b, old) =
            (exp(Some(timed(100.0, 2.0)), "cpu"), exp(Some(timed(50.0, 1.0)), "cpu"), exp(None, "cpu"));
        let s = crate::markdown::squeezed(&section(&[("a", &a), ("b", &b), ("old", &old)], 3));
        // 0.5+1+5+100+1+2 = 109.5 and 0.5+1+5+50+1+1 = 58.5: 168 in all, under 600.
        assert!(s.contains("| `a` | 0 | 0.5 | 1.0 | 2.0 | 3.0 | 100.0 | 1.0 | 2.0 | 109.5 |"), "{s}");
        assert!(s.contains("| **all** | | 1.0 | 2.0 | 4.0 | 6.0 | 150.0 | 2.0 | 3.0 | **168.0** |"), "{s}");
        assert!(
            s.contains("under the target of 10 minutes on 2 CPU cores (28% of it); most of it in steps"),
            "{s}"
        );
        assert!(s.contains("1 experiment(s) ran before timings were recorded"), "{s}");
        assert!(!s.contains("`old`"), "{s}");
        assert!(!s.contains("Left out"), "{s}");
        let mut part = exp(Some(timed(10.0, 1.0)), "cpu");
        let why = "this CPU has no bf16 matrix instructions".to_string();
        part.manifest.not_run = ["x_bf16", "y_bf16"]
            .map(|v| crate::results::manifest::NotRun { variant: v.into(), why: why.clone() })
            .into();
        let s = section(&[("part", &part)], 1);
        assert!(s.contains("Left out on this machine, and so not in the time: `part` [x_bf16, y_bf16]: this CPU has no bf16"), "{s}");

        let mut slow = exp(Some(timed(400.0, 0.0)), "cuda:0");
        slow.manifest.device.name = "NVIDIA H100 80GB HBM3".into();
        let s = section(&[("slow", &slow)], 1);
        assert!(s.contains("over the target of 5 minutes on an H100 by 108 s; most"), "{s}");
        // Another machine is compared with the target, and named.
        slow.manifest.device.name = "NVIDIA H200".into();
        let s = section(&[("slow", &slow)], 1);
        assert!(s.contains("by 108 s (this ran on NVIDIA H200, not an H100: compared"), "{s}");
        a.manifest.host.torch_threads = 16;
        let s = section(&[("a", &a)], 1);
        assert!(s.contains("(this ran with 16 threads, not 2 cores: compared"), "{s}");
        assert_eq!(section(&[("old", &old)], 1), "");
    }

    #[test]
    fn a_part_of_the_suite_is_not_judged_against_its_target() {
        let (a, b) = (exp(Some(timed(10.0, 1.0)), "cpu"), exp(Some(timed(10.0, 1.0)), "cpu"));
        let s = section(&[("a", &a), ("b", &b)], 20);
        assert!(s.contains("2 of the suite's 20 experiments ran to completion here"), "{s}");
        assert!(!s.contains("under the target") && !s.contains("over the target"), "{s}");
        let mut cut = exp(Some(timed(10.0, 1.0)), "cpu");
        cut.manifest.status = crate::results::RunStatus::Interrupted;
        let s = section(&[("a", &a), ("cut", &cut)], 2);
        assert!(s.contains("1 of the suite's 2 experiments ran to completion"), "{s}");
    }
}
