//! The batch finder guided by the estimate, on the real CPU: a guided search finds the same exact
//! largest batch as an unguided one, in at most 3 probes where the unguided takes
//! `log2(range) + 3` at most; `oomlab estimate` predicts the guided run's probes; and the steps
//! the summary calls needed are the ones the answer depends on (fewer finds a batch too large,
//! more finds the same one).
use crate::common;

use common::Sandbox;
use oomlab::estimate::{self, Options};
use oomlab::results::manifest::Answer;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};
use oomlab::schema::SummaryRow;

/// A batch search over a 2 x 64 MLP with 2048 rows, under 2 MiB: the boundary lies inside the
/// range, and near it a trial runs out of memory in step 2 with Adam.
fn spec_text(name: &str, optimizer: &str, steps: usize, guided: bool) -> String {
    format!(
        r#"[experiment]
name = "{name}"

[model]
hidden = 64
depth = 2

[data]
samples = 2048
features = 32
classes = 4

[training]
optimizer = "{optimizer}"
lr = 0.001
batch_size = 8
steps = {steps}

[run]
device = "cpu"
budget = "2MiB"

[sweep]
field = "training.batch_size"
search = {{ start = 8, factor = 2, max = 2048, guided = {guided} }}
"#
    )
}

struct Ran {
    answer: Answer,
    rows: Vec<SummaryRow>,
    /// `oomlab estimate`'s predicted probes, under what the run's baseline left.
    predicted: Vec<u64>,
}

fn run(sb: &Sandbox, name: &str, optimizer: &str, steps: usize, guided: bool) -> Ran {
    let path = sb.spec(&format!("{name}.toml"), &spec_text(name, optimizer, steps, guided));
    let spec = oomlab::spec::load(&path).expect("valid spec");
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).expect("run completes");
    for r in &report.rows {
        assert_eq!(r.after_allocated, r.baseline_allocated, "{name}: trial {} leaked", r.trial);
    }
    let baseline = report.rows[0].baseline_allocated;
    let budget = spec.run.budget.unwrap() - baseline;
    let p = &estimate::predict_spec(&spec, Some(budget), &Options::default()).unwrap()[0];
    let predicted = p.points.iter().map(|pt| pt.value.unwrap() as u64).collect();
    Ran { answer: report.manifest.answers[0].clone(), rows: report.rows, predicted }
}

fn tried(rows: &[SummaryRow]) -> Vec<u64> {
    rows.iter().map(|r| r.value.unwrap() as u64).collect()
}

fn log2_ceil(n: u64) -> usize {
    (64 - n.saturating_sub(1).leading_zeros()) as usize
}

#[test]
fn a_guided_search_finds_the_unguided_answer_in_at_most_3_probes() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let guided = run(&sb, "guided", "adam", 2, true);
    let unguided = run(&sb, "unguided", "adam", 2, false);
    let (g, u) = (&guided.answer, &unguided.answer);
    let what = format!("guided {:?}, unguided {:?}", tried(&guided.rows), tried(&unguided.rows));

    // The same exact boundary, each measured: a batch that trained and the one above out of memory.
    assert!(u.largest_fit.is_some_and(|b| b > 8 && b < 2048), "inside the range: {what}");
    assert_eq!(u.first_oom, u.largest_fit.map(|b| b + 1), "{what}");
    assert_eq!((g.largest_fit, g.first_oom), (u.largest_fit, u.first_oom), "{what}");

    // Probes: at most 3 guided (the estimate is exact on the CPU: 2), at most log2(range) + 3
    // unguided, and both counted in the manifest.
    assert!(guided.rows.len() <= 3, "{what}");
    assert_eq!(g.probes, Some(guided.rows.len()));
    assert!(unguided.rows.len() <= log2_ceil(2048 - 8 + 1) + 3, "{what}");
    assert!(unguided.rows.len() > guided.rows.len(), "{what}");
    assert_eq!(u.probes, Some(unguided.rows.len()));
    assert_eq!(g.guess, g.largest_fit, "{what}");
    assert_eq!(u.guess, None);
    assert_eq!(u.strategy.as_deref(), Some("unguided: guided = false in the spec"));
    assert!(g.strategy.as_deref().is_some_and(|s| s.starts_with("guided by the estimate")), "{g:?}");
    assert!(g.probe_seconds.is_some_and(|s| s > 0.0) && u.probe_seconds.is_some_and(|s| s > 0.0));

    // `oomlab estimate` replays both paths as the runs took them.
    assert_eq!(guided.predicted, tried(&guided.rows));
    assert_eq!(unguided.predicted, tried(&unguided.rows));
}

#[test]
fn the_steps_the_summary_needs_are_the_ones_the_answer_depends_on() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let answer = |name: &str, optimizer: &str, steps: usize| {
        let r = run(&sb, name, optimizer, steps, true);
        assert_eq!(r.answer.first_oom, r.answer.largest_fit.map(|b| b + 1), "{name}: {:?}", tried(&r.rows));
        r.answer.largest_fit
    };
    // Adam needs 2: with 1 the state never meets a forward and backward, and a larger batch
    // seems to fit; with 4 the answer is the 2 steps' one.
    let adam = answer("adam2", "adam", 2);
    assert!(answer("adam1", "adam", 1) > adam, "one step misses Adam's state");
    assert_eq!(answer("adam4", "adam", 4), adam, "steps 3 and 4 repeat step 2");
    // Plain SGD needs 1: every step repeats it.
    assert_eq!(answer("sgd3", "sgd", 3), answer("sgd1", "sgd", 1));
}

/// An anchored search: every variant trains the anchor first (so their memory compares there),
/// then finds its own boundary; the answers equal the unanchored search's. A variant that asks
/// for bf16 instructions is left out exactly where this CPU lacks them, and the manifest says
/// why; elsewhere it runs like any other.
#[test]
fn an_anchor_is_every_variants_first_trial_and_a_variant_can_be_left_out() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let plain = run(&sb, "plain", "adam", 2, true);
    let text = spec_text("anchored", "adam", 2, true)
        .replace("guided = true }", "guided = true, anchor = 64 }")
        + "\n[[variant]]\nname = \"a\"\n\n[[variant]]\nname = \"b\"\ntraining.seed = 1\n\n\
           [[variant]]\nname = \"half\"\nskip_on_cpu_without = \"bf16\"\ntraining.amp = \"bf16\"\n";
    let path = sb.spec("anchored.toml", &text);
    let spec = oomlab::spec::load(&path).expect("valid spec");
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec, Overrides::default()), &opts).expect("run completes");
    for v in ["a", "b"] {
        let rows: Vec<SummaryRow> = report.rows.iter().filter(|r| r.variant == v).cloned().collect();
        assert_eq!(tried(&rows)[0], 64, "{v}: {:?}", tried(&rows));
        let answer = report.manifest.answers.iter().find(|a| a.variant == v).expect("answered");
        assert_eq!(answer.largest_fit, plain.answer.largest_fit, "{v}");
        assert_eq!(answer.first_oom, plain.answer.first_oom, "{v}");
    }
    let half_rows = report.rows.iter().filter(|r| r.variant == "half").count();
    if oomlab::device::CpuCaps::here().bf16 {
        assert!(report.manifest.not_run.is_empty() && half_rows > 0);
    } else {
        assert_eq!(half_rows, 0);
        assert_eq!(report.manifest.not_run.len(), 1);
        assert_eq!(report.manifest.not_run[0].variant, "half");
        assert!(report.manifest.not_run[0].why.contains("no bf16 matrix instructions"));
        assert!(report.manifest.answers.iter().all(|a| a.variant != "half"));
        let written = oomlab::results::manifest::Manifest::read(&report.dir).unwrap();
        assert_eq!(written.not_run, report.manifest.not_run);
    }
}

/// A search without `max` grows until out of memory: guided or not, it finds the answer a search
/// with a max finds, unguided by galloping up from `start` (no probe at the data set's size);
/// the estimate says where it may go. Without a budget on the CPU nothing bounds it but the
/// host's memory, and both `run` and `estimate` refuse it before anything is written.
#[test]
fn a_search_without_max_grows_until_out_of_memory_and_needs_a_bound() {
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let bounded = run(&sb, "bounded", "adam", 2, false);
    for guided in [true, false] {
        let name = format!("open_{guided}");
        let text = spec_text(&name, "adam", 2, guided).replace("max = 2048, ", "");
        assert!(!text.contains("max ="), "{text}");
        let path = sb.spec(&format!("{name}.toml"), &text);
        let spec = oomlab::spec::load(&path).expect("a search without max is a valid spec");
        let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
        let report = run::run(&Plan::here(spec, Overrides::default()), &opts).expect("run completes");
        let a = &report.manifest.answers[0];
        let what = format!("{name}: tried {:?}", tried(&report.rows));
        assert_eq!(
            (a.largest_fit, a.first_oom),
            (bounded.answer.largest_fit, bounded.answer.first_oom),
            "{what}"
        );
        if !guided {
            // Galloping up from start (no probe at the largest value first), at distances 1, 2,
            // 4, ..., then bisecting: for a boundary e above start, 2 ceil(log2(e + 1)) + 1 at most.
            let e = a.largest_fit.unwrap() - 8;
            assert_eq!(tried(&report.rows)[..2], [8, 9], "{what}");
            assert!(report.rows.len() <= 2 * log2_ceil(e + 1) + 1, "{what}");
        }
    }
    let open = sb.spec("open.toml", &spec_text("open", "adam", 2, true).replace("max = 2048, ", ""));
    let out = common::oomlab().args(["estimate", open.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("search from 8 up, no max (the spec takes up to 2048)"), "{said}");

    // No budget, on the CPU: refused by both, naming the way out, and no folder written.
    let unbounded = sb
        .spec("unbounded.toml", &std::fs::read_to_string(&open).unwrap().replace("budget = \"2MiB\"\n", ""));
    for args in [
        vec!["estimate", unbounded.to_str().unwrap()],
        vec!["run", unbounded.to_str().unwrap(), "--out", sb.path().join("none").to_str().unwrap()],
    ] {
        let out = common::oomlab().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("sweep.search has no max") && err.contains("--budget"),
            "{args:?}: {err}"
        );
    }
    assert!(!sb.path().join("none").exists(), "nothing written by a refused run");
}
