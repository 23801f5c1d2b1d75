//! `--trace` levels measure the same memory: `phases` (no device waits) and `sync` (a wait at
//! every phase's end) write the same rows, byte for byte in every memory column; `steps` writes a
//! step's peak and its end; `off` writes nothing; every level gives the trial the same summary.
//! On the real trainer and the CPU's counting allocator, across techniques and an OOM.
use oomlab::probe::CpuProbe;
use oomlab::run::{self, RunOptions};
use oomlab::schema::{Phase, PhaseRecord, Status, SummaryRow, TraceLevel};
use oomlab::spec::{Amp, Checkpoint, Config, Mode, OptimizerImpl};
use oomlab::train::run_trial;

use crate::common::{self, Sandbox};

/// `optimizer` is the spec's lines for it: `optimizer = "sgd"\nmomentum = 0.9`.
fn base(optimizer: &str, batch: usize, steps: usize) -> Config {
    let text = format!(
        "[experiment]\nname = \"t\"\n[model]\nhidden = 96\ndepth = 3\n\
         [data]\nsamples = 512\nfeatures = 24\nclasses = 5\n\
         [training]\n{optimizer}\nbatch_size = {batch}\nsteps = {steps}\n"
    );
    oomlab::spec::parse(&text, std::path::Path::new("t.toml")).expect("valid spec").base
}

const ADAM: &str = "optimizer = \"adam\"";

/// The techniques, each on its own: every one moves memory differently within a step.
fn configs() -> Vec<(&'static str, Config)> {
    let mut out = vec![("adam", base(ADAM, 32, 3))];
    let mut c = base("optimizer = \"sgd\"\nmomentum = 0.9", 16, 3);
    c.training.techniques.accumulation = 3;
    out.push(("momentum, accumulation 3", c));
    let mut c = base(ADAM, 32, 2);
    c.training.techniques.amp = Amp::Bf16;
    c.training.techniques.checkpoint = Checkpoint::Sqrt;
    out.push(("bf16, sqrt checkpointing", c));
    let mut c = base(ADAM, 32, 2);
    c.training.techniques.optimizer_impl = Some(OptimizerImpl::Foreach);
    out.push(("adam foreach", c));
    let mut c = base("optimizer = \"sgd\"", 64, 2);
    c.training.techniques.mode = Mode::Forward;
    out.push(("forward only", c));
    out
}

fn trial(config: &Config, budget: Option<u64>, level: TraceLevel) -> (SummaryRow, Vec<PhaseRecord>) {
    let probe = CpuProbe::new(budget).unwrap();
    let mut trace = Vec::new();
    let row = run_trial(config, &probe, 1, level, &mut |r| {
        trace.push(r.clone());
        Ok(())
    })
    .unwrap();
    (row, trace)
}

/// Everything a trace row says but its times.
fn memory(r: &PhaseRecord) -> (usize, usize, Phase, [u64; 4], Option<u64>) {
    (
        r.step,
        r.micro,
        r.phase,
        [r.memory_allocated, r.memory_reserved, r.max_memory_allocated, r.max_memory_reserved],
        r.device_used,
    )
}

/// Runs `config` at every level and checks what each wrote against `phases`.
fn check_levels(name: &str, config: &Config, budget: Option<u64>) -> SummaryRow {
    let (row, phases) = trial(config, budget, TraceLevel::Phases);
    assert!(!phases.is_empty(), "{name}: phases wrote no rows");
    for level in [TraceLevel::Sync, TraceLevel::Steps, TraceLevel::Off] {
        let (other, trace) = trial(config, budget, level);
        assert_eq!(other.untimed(), row.untimed(), "{name}: {level:?}'s summary differs from phases'");
        match level {
            TraceLevel::Sync => assert_eq!(
                trace.iter().map(memory).collect::<Vec<_>>(),
                phases.iter().map(memory).collect::<Vec<_>>(),
                "{name}: sync's rows differ from phases'"
            ),
            TraceLevel::Steps => check_steps(name, &phases, &trace),
            _ => assert!(trace.is_empty(), "{name}: off wrote {} rows", trace.len()),
        }
        if other.status == Status::Ok {
            assert!(other.step_seconds.is_some_and(|s| s > 0.0), "{name}: {level:?} timed no step");
        }
    }
    row
}

/// A `steps` row per step: the highest of the step's phase peaks and the memory its last phase
/// left; the set-up phases as `phases` wrote them.
fn check_steps(name: &str, phases: &[PhaseRecord], steps: &[PhaseRecord]) {
    let setup = |t: &[PhaseRecord]| t.iter().filter(|r| r.step == 0).map(memory).collect::<Vec<_>>();
    assert_eq!(setup(steps), setup(phases), "{name}: steps' set-up rows");
    let last = phases.iter().map(|r| r.step).max().unwrap();
    let per_step: Vec<_> = steps.iter().filter(|r| r.step > 0).collect();
    assert_eq!(per_step.len(), last, "{name}: one row per step");
    for (r, step) in per_step.iter().zip(1..) {
        let mine: Vec<_> = phases.iter().filter(|p| p.step == step).collect();
        assert_eq!((r.step, r.phase), (step, Phase::Step), "{name}");
        let peak = mine.iter().map(|p| p.max_memory_allocated).max().unwrap();
        assert_eq!(r.max_memory_allocated, peak, "{name}: step {step}'s peak");
        let end = mine.last().unwrap();
        assert_eq!(
            (r.memory_allocated, r.memory_reserved),
            (end.memory_allocated, end.memory_reserved),
            "{name}: step {step}'s end"
        );
    }
}

#[test]
fn every_level_measures_the_same_memory() {
    // The CPU's counting allocator is one per process: one test at a time reads it.
    let _in_process = common::in_process();
    for (name, config) in configs() {
        let row = check_levels(name, &config, None);
        assert_eq!(row.status, Status::Ok, "{name}: {}", row.message);
        // The same config under a budget that cuts it in its last step: the OOM, its phase and
        // the rows up to it agree too.
        let budget = row.baseline_allocated + row.max_memory_allocated - row.baseline_allocated / 2 - 1;
        let budget = budget.min(row.max_memory_allocated - 1);
        let cut = check_levels(&format!("{name} under {budget} B"), &config, Some(budget));
        assert_eq!(cut.status, Status::Oom, "{name} under {budget} B: {}", cut.message);
    }
}

#[test]
fn the_manifest_records_the_level_and_where_the_time_went() {
    // The CPU's counting allocator is one per process: one test at a time reads it.
    let _in_process = common::in_process();
    let sb = Sandbox::new();
    let spec = sb.spec(
        "t.toml",
        "[experiment]\nname = \"t\"\n[model]\nhidden = 32\ndepth = 2\n[data]\nsamples = 64\nfeatures = 8\n\
         classes = 2\n[training]\noptimizer = \"adam\"\nbatch_size = 16\nsteps = 2\n[run]\ndevice = \"cpu\"\n",
    );
    let plan = oomlab::run::plan::Plan::here(oomlab::spec::load(&spec).unwrap(), Default::default());
    for level in TraceLevel::ALL {
        let opts =
            RunOptions { out: sb.out(), quiet: true, force: true, trace: level, ..RunOptions::default() };
        let report = run::run(&plan, &opts).unwrap();
        let m = oomlab::results::Manifest::read(&report.dir).unwrap();
        assert_eq!(m.trace, Some(level));
        let t = m.timings.expect("timings");
        assert!(t.libtorch_init > 0.0 && t.data > 0.0 && t.model > 0.0 && t.steps > 0.0, "{level:?}: {t:?}");
        assert!(t.trials >= t.data + t.model + t.steps, "{level:?}: the stages are within the trials: {t:?}");
        assert!(t.total >= t.libtorch_init + t.trials, "{level:?}: {t:?}");
        let trace = std::fs::read_to_string(report.dir.join("trace.csv")).unwrap();
        let rows = trace.lines().count().saturating_sub(1);
        let expected = match level {
            TraceLevel::Phases | TraceLevel::Sync => 2 + 2 * 5,
            TraceLevel::Steps => 2 + 2,
            TraceLevel::Off => 0,
        };
        assert_eq!(rows, expected, "{level:?}: trace rows");
        // A timeline asked of a run that traced nothing is said to be impossible, not skipped
        // in silence.
        let plot = std::process::Command::new(common::bin())
            .args(["plot", report.dir.to_str().unwrap(), "--trial", "1"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&plot.stderr);
        assert!(plot.status.success(), "{said}");
        assert_eq!(said.contains("trial 1 has no rows"), level == TraceLevel::Off, "{level:?}: {said}");
    }
}
