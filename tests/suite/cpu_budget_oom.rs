//! End to end on CPU with real libtorch: a depth search under a budget chosen so that arithmetic
//! predicts the boundary, then exact byte counts per phase, the baseline after every trial, and
//! complete results on disk.
use crate::common;

use common::{tiny_spec, Sandbox};
use oomlab::results::ExperimentDir;
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};
use oomlab::schema::{Phase, Status};

const D: u64 = 32; // features
const H: u64 = 256; // hidden width
const K: u64 = 4; // classes
const N: u64 = 32; // samples
const B: u64 = 4; // batch

/// Parameters of the MLP with `depth` hidden layers.
fn params(depth: u64) -> u64 {
    (D * H + H) + (depth - 1) * (H * H + H) + (H * K + K)
}

#[test]
fn depth_search_stops_where_arithmetic_says_and_memory_returns_to_baseline() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    // With plain SGD the step holds parameters and gradients (8 bytes per parameter) plus the
    // data set and a few small activations. Give depth 6 that, plus half a hidden layer: depth 6
    // fits, depth 7 needs a whole layer (526,336 bytes) more and cannot.
    let data_bytes = N * D * 4 + N * 8;
    let half_layer = 4 * (H * H + H);
    let budget = data_bytes + 8 * params(6) + half_layer;
    let text = tiny_spec(
        "depth_oom",
        "hidden = 256",
        Some(budget),
        "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, factor = 2, max = 64 }\n",
    );
    let path = sandbox.spec("depth_oom.toml", &text);
    let spec = oomlab::spec::load(&path).expect("valid spec");
    let opts = RunOptions { out: sandbox.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).expect("run completes");

    // The boundary, found where the estimate (exact on the CPU) put it: 6 fits, 7 does not.
    let answer = report.manifest.answers.first().cloned().expect("a sweep has an answer");
    assert_eq!((answer.largest_fit, answer.first_oom), (Some(6), Some(7)), "rows: {:#?}", report.rows);
    let tried: Vec<u64> = report.rows.iter().map(|r| r.value.unwrap() as u64).collect();
    assert_eq!(tried, vec![6, 7]);
    assert_eq!((answer.guess, answer.probes), (Some(6), Some(2)));
    assert!(answer.probe_seconds.is_some_and(|s| s > 0.0), "{answer:?}");

    // The estimate predicts every trial that ran to the byte (CPU counting is exact).
    for r in report.rows.iter().filter(|r| r.status == Status::Ok) {
        assert_eq!(r.predicted_error, Some(0.0), "trial {}: predicted {:?}", r.trial, r.predicted_peak);
    }
    // Every trial, OOM or not, gives its memory back.
    for r in &report.rows {
        assert_eq!(r.after_allocated, r.baseline_allocated, "trial {} leaked", r.trial);
    }
    let oom = report.rows.iter().find(|r| r.value == Some(7.0)).unwrap();
    assert_eq!(oom.status, Status::Oom);
    assert_eq!(oom.phase, Some(Phase::Backward), "gradients are what no longer fit");
    let requested = oom.oom_requested.expect("the message says what was requested");
    assert!(requested > 0 && requested <= 4 * (H * H + H), "requested {requested}");
    // To the byte, not as the message rounds them: the allocator kept the refusal's numbers.
    assert_eq!(oom.oom_total_capacity, Some(budget), "the capacity is the budget");
    let allocated = oom.oom_allocated.expect("what was allocated when it was refused");
    assert!(allocated + requested > budget && allocated <= budget, "{allocated} + {requested} vs {budget}");
    assert!(allocated <= oom.max_memory_allocated, "{allocated} is more than the trial's peak");
    assert_eq!(oom.oom_free, Some(budget - allocated));
    assert_eq!(oom.oom_reserved, Some(allocated), "no cache on the CPU");
    assert!(oom.max_memory_allocated <= budget);

    // Exact bytes, phase by phase, for the depth-6 trial (CPU counting is exact).
    let written = ExperimentDir::read(&report.dir).unwrap();
    let trace = &written.trace;
    let six = report.rows.iter().find(|r| r.value == Some(6.0)).unwrap();
    assert_eq!(six.param_count, params(6));
    let at = |phase: Phase, step: usize| {
        let rec = trace.iter().find(|t| t.trial == six.trial && t.phase == phase && t.step == step).unwrap();
        rec.memory_allocated - six.baseline_allocated
    };
    let p = 4 * params(6);
    let batch = B * D * 4 + B * 8;
    assert_eq!(at(Phase::Data, 0), data_bytes, "the data set");
    assert_eq!(at(Phase::Model, 0), data_bytes + p, "plus parameters; SGD has no state");
    assert_eq!(at(Phase::ToDevice, 1), data_bytes + p + batch, "plus the batch");
    // After backward the graph's saved activations are freed and the gradients are there; the
    // scalar loss (4 bytes) is still held.
    assert_eq!(at(Phase::Backward, 1), data_bytes + 2 * p + batch + 4, "plus gradients");
    // The micro-batch is dropped once its backward is done (so that accumulation holds one at a
    // time); plain SGD's step then allocates nothing.
    assert_eq!(at(Phase::OptimizerStep, 1), data_bytes + 2 * p + 4, "plain SGD allocates nothing");
    assert_eq!(at(Phase::ZeroGrad, 1), data_bytes + p + 4, "zero_grad frees the gradients");

    // The files are complete.
    let summary = &written.rows;
    assert_eq!(summary, &report.rows);
    let trials_in_trace: std::collections::BTreeSet<usize> = trace.iter().map(|t| t.trial).collect();
    assert_eq!(trials_in_trace.len(), summary.len());
    let manifest = &written.manifest;
    assert_eq!(manifest.status, oomlab::results::RunStatus::Complete);
    let ooms = report.rows.iter().filter(|r| r.status == Status::Oom).count() as u64;
    assert_eq!(manifest.num_ooms, Some(ooms), "the allocator refused once per OOM trial");
    assert_eq!(manifest.device.budget_bytes, Some(budget));
    assert_eq!(manifest.versions.libtorch, "2.11.0");
    assert!(manifest.finished_at.is_some() && manifest.git.revision.is_some());
    assert!(manifest.spec_source.contains("depth_oom"));
}

#[test]
fn a_budget_above_available_memory_is_refused() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    let text = tiny_spec("too_big", "hidden = 8\ndepth = 1", Some(1 << 50), "");
    let spec = oomlab::spec::load(&sandbox.spec("t.toml", &text)).unwrap();
    let opts = RunOptions { out: sandbox.out(), quiet: true, ..RunOptions::default() };
    let err = format!(
        "{:#}",
        run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).err().expect("refused")
    );
    assert!(err.contains("available memory"), "{err}");
    assert!(!sandbox.out().join("cpu").exists(), "nothing written for a refused run");
}

#[test]
fn predicted_ooms_are_skipped_and_the_answer_holds() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    let data_bytes = N * D * 4 + N * 8;
    let budget = data_bytes + 8 * params(6) + 4 * (H * H + H);
    let text = tiny_spec(
        "depth_skip",
        "hidden = 256",
        Some(budget),
        "skip_predicted_oom = 0.0\n[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, factor = 2, max = 64 }\n",
    );
    let spec = oomlab::spec::load(&sandbox.spec("s.toml", &text)).expect("valid spec");
    let opts = RunOptions { out: sandbox.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).expect("run completes");
    let answer = report.manifest.answers.first().cloned().unwrap();
    assert_eq!(
        (answer.largest_fit, answer.first_oom),
        (Some(6), None),
        "a predicted OOM is not a measured one"
    );
    let skipped: Vec<u64> = report
        .rows
        .iter()
        .filter(|r| r.status == Status::PredictedOom)
        .map(|r| r.value.unwrap() as u64)
        .collect();
    assert_eq!(skipped, vec![7], "the point over the budget was not run");
    assert!(report.rows.iter().all(|r| r.status != Status::Oom));
    let seven = report.rows.iter().find(|r| r.value == Some(7.0)).unwrap();
    assert_eq!(seven.phase, Some(Phase::Backward), "predicted to fail where the real run does");
    assert!(seven.predicted_peak.unwrap() > budget && seven.max_memory_allocated == 0);
}
