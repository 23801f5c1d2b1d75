//! Nothing lost, nothing corrupted: an out-of-memory in any phase, under any technique, leaves
//! the allocator exactly where the trial found it.
//!
//! A seeded generator draws configurations across every phase that allocates (data, model,
//! to_device, forward, backward, optimizer_step) and every technique (fp16 with its grad scaler,
//! bf16, checkpointing "sqrt" and every K, accumulation, kept losses, each optimizer and
//! implementation, the forward-only modes). Each runs on the CPU under a budget between the
//! trial's baseline and its predicted peak, placed so that the phase the generator aimed at is
//! the first to go over. Every trial must run out of memory and end back at its baseline.
//! (zero_grad allocates nothing, it only lets go of the gradients, so no budget makes it the
//! phase that runs out; every other phase must have been hit.)
//!
//! The counting allocator counts the whole process, so the tests here hold the suite's lock for
//! libtorch work in this process (`common::in_process`) and run one trial at a time.
use crate::common;

use common::rng::Rng;
use common::Sandbox;
use oomlab::estimate::{self, Options};
use oomlab::probe::{CpuProbe, MemoryProbe};
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};
use oomlab::schema::{Phase, Status, TraceLevel};
use oomlab::spec::{
    Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec, OptimizerImpl,
    OptimizerSpec, ScalerSpec, Techniques, TrainingSpec,
};

const OPTIMIZERS: [OptimizerSpec; 4] = [
    OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 },
    OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 1e-4 },
    OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 },
    OptimizerSpec::AdamW { lr: 1e-3, weight_decay: 0.01 },
];

/// A configuration drawn from `rng`; `i` spreads the techniques evenly over the draws so that
/// every one of them is met many times whatever the seed.
fn draw(rng: &mut Rng, i: usize) -> Config {
    let amp = match i % 3 {
        0 => Amp::Off,
        1 => Amp::Fp16 { scaler: ScalerSpec::default() },
        _ => Amp::Bf16,
    };
    let depth = 1 + rng.below(5);
    let checkpoint = match (i / 3) % 3 {
        0 => Checkpoint::None,
        1 => Checkpoint::Sqrt,
        _ => Checkpoint::Every(1 + rng.below(3)),
    };
    let history = match (i / 9) % 3 {
        0 => History::LossTensor,
        1 => History::None,
        _ => History::LossValue,
    };
    let mode = if i % 11 == 10 { rng.pick(&[Mode::Forward, Mode::ForwardNoGrad]) } else { Mode::Train };
    let techniques = Techniques {
        accumulation: rng.pick(&[1, 1, 2, 3]),
        amp,
        checkpoint,
        mode,
        history,
        optimizer_impl: Some(
            [OptimizerImpl::ForLoop, OptimizerImpl::Foreach, OptimizerImpl::Fused][(i / 4) % 3],
        ),
    };
    Config {
        model: ModelSpec::mlp(rng.pick(&[32, 64, 96, 128]), depth),
        data: DataSpec::Synthetic {
            samples: 256,
            features: rng.pick(&[16, 24, 48]),
            classes: rng.pick(&[3, 10]),
            seed: rng.next() % 100,
        },
        location: rng.pick(&[DataLocation::Host, DataLocation::Device]),
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer: OPTIMIZERS[i % 4],
            batch_size: rng.pick(&[8, 16, 32, 64]),
            steps: 2,
            dtype: Dtype::Float32,
            seed: rng.next() % 100,
            techniques,
        },
    }
}

/// The phases where the trial's running peak rises, with the peak before each and its own:
/// a budget between the two runs out of memory first in that phase.
fn targets(config: &Config) -> Vec<(Phase, usize, u64, u64)> {
    let p = estimate::predict(config).expect("prediction");
    let mut high = 0;
    let mut out = vec![];
    for ph in &p.phases {
        if ph.peak > high {
            // At least a few hundred bytes of room, so the budget's place is not a rounding.
            if ph.peak > high + 256 {
                out.push((ph.phase, ph.step, high, ph.peak));
            }
            high = ph.peak;
        }
    }
    out
}

/// The allocator's count now (no trial running).
fn allocated() -> u64 {
    let probe = CpuProbe::new(None).expect("probe");
    probe.snapshot().unwrap().memory_allocated
}

#[test]
fn an_oom_in_any_phase_under_any_technique_frees_everything() {
    let _in_process = common::in_process();
    // Warm libtorch up once (thread pools, oneDNN's first-use allocations) outside any baseline.
    {
        let mut warm = draw(&mut Rng(1), 0);
        warm.training.techniques.amp = Amp::Bf16;
        let probe = CpuProbe::new(None).unwrap();
        oomlab::train::run_trial(&warm, &probe, 0, TraceLevel::Phases, &mut |_| Ok(())).unwrap();
    }
    // OOM_RECOVERY_SEED and OOM_RECOVERY_TRIALS explore further than the default draw.
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut rng = Rng(env("OOM_RECOVERY_SEED").unwrap_or(0x5eed_0f00_ab0b).max(1));
    let wanted = env("OOM_RECOVERY_TRIALS").map_or(66, |n| n as usize);
    let mut failures = vec![];
    let mut seen_phases = std::collections::BTreeMap::new();
    let mut trials = 0;
    let mut i = 0;
    while trials < wanted {
        i += 1;
        let config = draw(&mut rng, i);
        let options = targets(&config);
        if options.is_empty() {
            continue;
        }
        // Spread the target over the phases: the latest rising phase often, any other too.
        let (phase, step, low, high) =
            if rng.below(2) == 0 { options[options.len() - 1] } else { options[rng.below(options.len())] };
        let room = low + ((high - low) as f64 * (0.2 + 0.6 * rng.unit())) as u64;
        let baseline = allocated();
        let budget = baseline + room;
        let probe = CpuProbe::new(Some(budget)).expect("probe");
        // Every trace level ends a trial the same way: each takes its turn.
        let level = TraceLevel::ALL[trials % TraceLevel::ALL.len()];
        let row =
            oomlab::train::run_trial(&config, &probe, trials, level, &mut |_| Ok(())).expect("trial runs");
        drop(probe);
        trials += 1;
        let t = &config.training.techniques;
        let what = format!(
            "trial {trials} ({level:?}) aimed at {phase} step {step} (budget baseline + {room}): {} {:?} model {} \
             batch {} amp {:?} checkpoint {:?} accumulation {} history {:?} mode {:?} impl {:?}",
            config.training.optimizer.name(),
            config.training.optimizer,
            config.model.describe(),
            config.training.batch_size,
            t.amp,
            t.checkpoint,
            t.accumulation,
            t.history,
            t.mode,
            t.optimizer_impl,
        );
        if row.status != Status::Oom {
            failures.push(format!("{what}: status {:?} ({})", row.status, row.message));
        }
        if let Some(p) = row.phase {
            *seen_phases.entry(p.as_str()).or_insert(0) += 1;
        }
        // A step time is a whole step's: none for a trial that ran out in its first step.
        let complete = row.step.map_or(0, |s| s.saturating_sub(1));
        if row.step_seconds.is_some() != (complete > 0) {
            failures.push(format!("{what}: {complete} steps completed, step_seconds {:?}", row.step_seconds));
        }
        if row.after_allocated != row.baseline_allocated {
            failures.push(format!(
                "{what}: OOM in {:?} step {:?} left {} B (baseline {}, after {})",
                row.phase,
                row.step,
                row.after_allocated as i64 - row.baseline_allocated as i64,
                row.baseline_allocated,
                row.after_allocated
            ));
        }
        // The next trial's baseline is this one's: nothing may be left in between.
        let now = allocated();
        if now != row.baseline_allocated {
            failures.push(format!(
                "{what}: {now} B allocated after the trial, {} before",
                row.baseline_allocated
            ));
        }
    }
    eprintln!("OOM phases: {seen_phases:?}");
    assert!(failures.is_empty(), "{} of {trials} trials failed:\n{}", failures.len(), failures.join("\n"));
    for phase in
        [Phase::Data, Phase::Model, Phase::ToDevice, Phase::Forward, Phase::Backward, Phase::OptimizerStep]
    {
        assert!(seen_phases.contains_key(phase.as_str()), "no OOM in {phase}: {seen_phases:?}");
    }
}

/// The issue's example: a batch search with fp16 and checkpointing in 7 MiB. Its OOM trials run
/// out in backward, where the engine used to keep the failed graph (the first layer's fp32
/// weight, biases, fp16 weight copies) alive past the trial, and the leak check stopped the run
/// before the search found its answer. Now it runs to its end, and the answer is the estimate's.
#[test]
fn an_fp16_checkpointed_batch_search_in_7_mib_finds_the_estimates_answer() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    let text = r#"[experiment]
name = "fp16_checkpointed_batch_search"

[model]
hidden = 256
depth = 6

[data]
samples = 3305
features = 64
classes = 10

[training]
optimizer = "adam"
lr = 0.001
batch_size = 8
steps = 2
amp = "fp16"
checkpoint = "sqrt"

[run]
device = "cpu"
budget = "7MiB"

[sweep]
field = "training.batch_size"
# Unguided: the bisection's path runs out of memory several times, which is what is tested.
search = { start = 8, factor = 2, max = 512, guided = false }
"#;
    let path = sandbox.spec("s.toml", text);
    let spec = oomlab::spec::load(&path).expect("valid spec");
    let budget = spec.run.budget.unwrap();
    // What `oomlab estimate` answers for the spec (it predicts from an empty allocator).
    let cli = estimate::predict_spec(&spec, Some(budget), &Options::default()).unwrap()[0].exact_largest_fit;
    assert_eq!(cli, Some(99), "the estimate's answer for this spec");

    let opts = RunOptions { out: sandbox.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).expect("the run completes");
    let rows: Vec<_> = report
        .rows
        .iter()
        .map(|r| (r.value, r.status, r.phase, r.after_allocated as i64 - r.baseline_allocated as i64))
        .collect();
    assert!(
        report.rows.iter().all(|r| r.after_allocated == r.baseline_allocated),
        "a trial leaked: {rows:#?}"
    );
    assert!(
        report.rows.iter().filter(|r| r.status == Status::Oom && r.phase == Some(Phase::Backward)).count()
            >= 2,
        "the search should run out of memory in backward on its way: {rows:#?}"
    );
    let real = &report.manifest.answers[0];
    // The budget caps everything allocated: the trials have what their baseline leaves.
    let baseline = report.rows[0].baseline_allocated;
    let predicted = estimate::predict_spec(&spec, Some(budget - baseline), &Options::default()).unwrap();
    let p = &predicted[0];
    let fp16 = oomlab::spec::Amp::Fp16 { scaler: Default::default() };
    if estimate::onednn::lowp_matmul(&fp16) {
        // On this CPU oneDNN runs the fp16 products, with a scratch buffer the estimate leaves
        // out: the real answer is at most the estimate's.
        assert!(real.largest_fit <= p.exact_largest_fit, "rows: {rows:#?}");
        assert!(real.first_oom <= p.first_oom, "rows: {rows:#?}");
    } else {
        assert_eq!((real.largest_fit, real.first_oom), (p.exact_largest_fit, p.first_oom), "rows: {rows:#?}");
        assert_eq!(real.largest_fit, cli, "the run's answer is `oomlab estimate`'s: {rows:#?}");
    }
}
