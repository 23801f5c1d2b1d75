//! The memory model against the real thing: real libtorch trials on the CPU, where oomlab's
//! counting allocator counts every byte, compared phase by phase with `estimate::predict`.
//!
//! The model must match to the byte: every phase's end and peak, and the trial's peak (issue 5
//! asked for 2%; the replay does better, and a looser bound would hide a forgotten tensor). The
//! one exception is bf16, whose oneDNN matmuls take a workspace the model leaves out: a bf16
//! forward or backward peak (and so the trial's) may fall short of the measurement by at most
//! the largest workspace this test measures for the case's shapes, and never exceed it.
use crate::common::{self, compare, measure, Sandbox};
use oomlab::estimate::{self, Options};
use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};
use oomlab::schema::Status;
use oomlab::spec::{
    Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec, OptimizerImpl,
    OptimizerSpec, ScalerSpec, Techniques, TrainingSpec,
};
use predicates::prelude::PredicateBooleanExt;

const SGD: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 };
const MOMENTUM: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0 };
const MOMENTUM_WD: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 1e-4 };
const ADAM: OptimizerSpec = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 };
const ADAM_WD: OptimizerSpec = OptimizerSpec::Adam { lr: 1e-3, weight_decay: 1e-4 };
const ADAMW: OptimizerSpec = OptimizerSpec::AdamW { lr: 1e-3, weight_decay: 0.01 };

struct Case {
    optimizer: OptimizerSpec,
    depth: usize,
    hidden: usize,
    batch: usize,
    samples: usize,
    features: usize,
    dtype: Dtype,
    techniques: Techniques,
}

fn case(
    optimizer: OptimizerSpec,
    depth: usize,
    hidden: usize,
    batch: usize,
    samples: usize,
    features: usize,
) -> Case {
    Case {
        optimizer,
        depth,
        hidden,
        batch,
        samples,
        features,
        dtype: Dtype::Float32,
        techniques: Techniques::default(),
    }
}

impl Case {
    fn config(&self) -> Config {
        Config {
            model: ModelSpec::mlp(self.hidden, self.depth),
            data: DataSpec::Synthetic {
                samples: self.samples,
                features: self.features,
                classes: 10,
                seed: 1,
            },
            location: DataLocation::Host,
            parallel: Default::default(),
            training: TrainingSpec {
                optimizer: self.optimizer,
                batch_size: self.batch,
                steps: 2,
                dtype: self.dtype,
                seed: 1,
                techniques: self.techniques,
            },
        }
    }

    fn name(&self) -> String {
        format!(
            "{} depth {} width {} batch {} ({} x {}, {:?}) {:?}",
            self.optimizer.name(),
            self.depth,
            self.hidden,
            self.batch,
            self.samples,
            self.features,
            self.dtype,
            self.techniques
        )
    }
}

/// The largest scratch buffer oneDNN takes for this case's low-precision matrix products
/// ([`common::onednn_linear_scratch`]): what a prediction may fall short by.
fn onednn_matmul_workspace(c: &Case) -> u64 {
    let mut widths = vec![c.features as i64];
    widths.extend(std::iter::repeat_n(c.hidden as i64, c.depth));
    widths.push(10);
    let m = c.batch as i64;
    let linears: Vec<_> = widths.windows(2).map(|w| (m, w[0], w[1])).collect();
    common::onednn_linear_scratch(c.techniques.amp, &linears)
}

fn amp(amp: Amp, accumulation: usize) -> Techniques {
    Techniques { amp, accumulation, ..Techniques::default() }
}

fn amp_mode(amp: Amp, mode: Mode, history: History) -> Techniques {
    Techniques { amp, ..tech(1, mode, history) }
}

fn fp16() -> Amp {
    Amp::Fp16 { scaler: ScalerSpec::default() }
}

fn ckpt(checkpoint: Checkpoint, accumulation: usize) -> Techniques {
    Techniques { checkpoint, accumulation, ..Techniques::default() }
}

fn tech(accumulation: usize, mode: Mode, history: History) -> Techniques {
    Techniques { accumulation, mode, history, ..Techniques::default() }
}

/// Each of `torch.optim`'s implementations (for-loop, foreach, fused) of every optimizer, to
/// the byte: their temporaries differ (foreach holds whole-model lists), so do their peaks.
#[test]
fn every_optimizer_implementation_is_predicted_to_the_byte() {
    let _in_process = common::in_process();
    let with = |i: OptimizerImpl, t: Techniques| Techniques { optimizer_impl: Some(i), ..t };
    let mut failures = Vec::new();
    let mut adam_peaks = vec![];
    for i in [OptimizerImpl::ForLoop, OptimizerImpl::Foreach, OptimizerImpl::Fused] {
        let cases = [
            Case { techniques: with(i, Techniques::default()), ..case(SGD, 2, 256, 32, 64, 32) },
            Case { techniques: with(i, Techniques::default()), ..case(MOMENTUM, 3, 256, 32, 64, 32) },
            Case { techniques: with(i, Techniques::default()), ..case(MOMENTUM_WD, 2, 512, 16, 64, 32) },
            Case { techniques: with(i, Techniques::default()), ..case(ADAM, 3, 512, 32, 64, 32) },
            Case { techniques: with(i, Techniques::default()), ..case(ADAM_WD, 2, 256, 16, 64, 32) },
            Case { techniques: with(i, Techniques::default()), ..case(ADAMW, 2, 256, 16, 64, 32) },
            Case {
                techniques: with(i, Techniques::default()),
                dtype: Dtype::Float64,
                ..case(ADAM, 2, 128, 16, 64, 16)
            },
            Case { techniques: with(i, amp(fp16(), 1)), ..case(ADAM, 2, 256, 32, 64, 32) },
            Case { techniques: with(i, amp(fp16(), 2)), ..case(MOMENTUM, 2, 256, 32, 64, 32) },
            Case { techniques: with(i, ckpt(Checkpoint::Every(1), 2)), ..case(ADAMW, 3, 256, 16, 64, 32) },
        ];
        for (k, c) in cases.iter().enumerate() {
            let config = c.config();
            let predicted = estimate::predict(&config).expect("prediction");
            let (records, peak) = measure(&config);
            failures.extend(compare(&c.name(), &predicted, &records, peak, onednn_matmul_workspace(c)).0);
            if k == 3 {
                adam_peaks.push(peak);
            }
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // The implementations really differ where they should: foreach Adam holds a square root of
    // every parameter at once, more than the for-loop's few; fused holds none.
    let [for_loop, foreach, fused] = adam_peaks[..] else { panic!("three adam peaks") };
    assert!(
        fused < for_loop && for_loop < foreach,
        "adam peaks: fused {fused}, for-loop {for_loop}, foreach {foreach}"
    );
}

#[test]
fn predicted_memory_matches_the_counting_allocator() {
    let _in_process = common::in_process();
    let cases = [
        case(SGD, 0, 64, 1, 64, 32),
        case(SGD, 1, 64, 8, 64, 32),
        case(SGD, 3, 256, 64, 200, 64),
        case(MOMENTUM, 1, 512, 32, 48, 100),
        case(MOMENTUM, 3, 1024, 512, 1024, 128),
        case(MOMENTUM_WD, 3, 256, 32, 96, 64),
        case(ADAM, 0, 64, 512, 1024, 128),
        case(ADAM, 1, 1024, 16, 64, 20),
        case(ADAM, 3, 512, 128, 300, 64),
        case(ADAM_WD, 1, 256, 64, 100, 32),
        case(ADAMW, 3, 1024, 256, 512, 32),
        case(ADAMW, 1, 64, 1, 10, 8),
        Case { dtype: Dtype::Float64, ..case(ADAM, 3, 256, 32, 64, 16) },
        // The composed step: accumulation, forward-only modes, losses kept.
        Case { techniques: tech(4, Mode::Train, History::None), ..case(ADAM, 2, 256, 16, 128, 32) },
        Case { techniques: tech(3, Mode::Train, History::LossTensor), ..case(MOMENTUM, 2, 128, 8, 64, 16) },
        Case { techniques: tech(1, Mode::Forward, History::LossTensor), ..case(SGD, 3, 256, 32, 128, 32) },
        Case { techniques: tech(1, Mode::Forward, History::LossValue), ..case(SGD, 3, 256, 32, 128, 32) },
        Case { techniques: tech(1, Mode::ForwardNoGrad, History::None), ..case(ADAM, 3, 256, 32, 128, 32) },
        // Activation checkpointing: every layer, segments of 2 with a shorter last one, sqrt,
        // one segment for all, no hidden layer; with accumulation and a kept loss.
        Case { techniques: ckpt(Checkpoint::Every(1), 1), ..case(SGD, 4, 256, 64, 128, 32) },
        Case { techniques: ckpt(Checkpoint::Every(2), 1), ..case(MOMENTUM, 5, 512, 128, 256, 64) },
        Case { techniques: ckpt(Checkpoint::Sqrt, 1), ..case(ADAM, 9, 256, 32, 64, 16) },
        Case { techniques: ckpt(Checkpoint::Every(8), 1), ..case(ADAMW, 3, 128, 16, 32, 8) },
        Case { techniques: ckpt(Checkpoint::Every(1), 1), ..case(SGD, 0, 64, 8, 32, 16) },
        Case { techniques: ckpt(Checkpoint::Every(2), 3), ..case(ADAM, 4, 256, 16, 64, 32) },
        Case {
            techniques: Techniques { history: History::LossTensor, ..ckpt(Checkpoint::Sqrt, 2) },
            ..case(SGD, 4, 128, 8, 64, 16)
        },
        // PyTorch's checkpoint_sequential cut: one segment (the plain step), two (3..7 of 7
        // plain), three with a shorter cut than the plain rest (2 a segment, 4..7 plain), one a
        // unit (every layer checkpointed but the last); with accumulation.
        Case { techniques: ckpt(Checkpoint::Sequential(1), 1), ..case(SGD, 4, 256, 64, 128, 32) },
        Case { techniques: ckpt(Checkpoint::Sequential(2), 1), ..case(MOMENTUM, 7, 512, 128, 256, 64) },
        Case { techniques: ckpt(Checkpoint::Sequential(3), 2), ..case(ADAM, 7, 256, 32, 64, 16) },
        Case { techniques: ckpt(Checkpoint::Sequential(4), 1), ..case(ADAMW, 4, 128, 16, 32, 8) },
        // Mixed precision: bf16 and fp16 with its grad scaler, with accumulation.
        Case { techniques: amp(Amp::Bf16, 1), ..case(SGD, 2, 256, 64, 128, 32) },
        Case { techniques: amp(Amp::Bf16, 1), ..case(ADAM, 4, 512, 512, 1024, 64) },
        Case { techniques: amp(fp16(), 1), ..case(SGD, 2, 256, 64, 128, 32) },
        Case { techniques: amp(fp16(), 1), ..case(ADAM, 4, 512, 512, 1024, 64) },
        Case { techniques: amp(fp16(), 3), ..case(MOMENTUM, 1, 128, 16, 64, 16) },
        Case { techniques: amp(Amp::Bf16, 2), ..case(ADAMW, 0, 64, 32, 64, 16) },
        // Both: the recompute runs under autocast too, its casts cached to the end of backward.
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Every(2), ..amp(fp16(), 1) },
            ..case(SGD, 5, 256, 64, 128, 32)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sqrt, ..amp(fp16(), 2) },
            ..case(ADAM, 4, 128, 16, 64, 16)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sqrt, ..amp(Amp::Bf16, 1) },
            ..case(MOMENTUM, 4, 512, 256, 512, 64)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Every(1), ..amp(fp16(), 1) },
            ..case(SGD, 0, 64, 8, 32, 16)
        },
        // checkpoint_sequential under autocast: the plain tail's casts saved as a plain forward
        // saves them, the recompute's cached again.
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sequential(1), ..amp(Amp::Bf16, 1) },
            ..case(SGD, 3, 256, 64, 128, 32)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sequential(2), ..amp(Amp::Bf16, 1) },
            ..case(MOMENTUM, 5, 512, 256, 512, 64)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sequential(4), ..amp(Amp::Bf16, 2) },
            ..case(ADAM, 4, 128, 16, 64, 16)
        },
        Case {
            techniques: Techniques { checkpoint: Checkpoint::Sequential(3), ..amp(fp16(), 2) },
            ..case(ADAM, 5, 128, 16, 64, 16)
        },
        // Autocast in the forward-only modes: a kept loss keeps the saved casts too.
        Case {
            techniques: amp_mode(fp16(), Mode::Forward, History::LossTensor),
            ..case(SGD, 3, 256, 32, 128, 32)
        },
        Case {
            techniques: amp_mode(Amp::Bf16, Mode::Forward, History::LossValue),
            ..case(SGD, 2, 256, 32, 128, 32)
        },
        Case {
            techniques: amp_mode(fp16(), Mode::ForwardNoGrad, History::None),
            ..case(ADAM, 3, 256, 32, 128, 32)
        },
        Case {
            techniques: amp_mode(fp16(), Mode::ForwardNoGrad, History::None),
            ..case(ADAM, 0, 64, 8, 32, 16)
        },
    ];
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    for c in &cases {
        let config = c.config();
        let predicted = estimate::predict(&config).expect("prediction");
        let (records, peak) = measure(&config);
        let slack = onednn_matmul_workspace(c);
        let (f, worst) = compare(&c.name(), &predicted, &records, peak, slack);
        lines.push(format!(
            "{:<60} peak predicted {:>10} measured {:>10}  worst phase error {:.4}%{}",
            c.name(),
            predicted.peak,
            peak,
            100.0 * worst,
            if slack > 0 {
                format!(" ({} matmul scratch in oneDNN, {slack} B, allowed under)", c.techniques.amp.as_str())
            } else {
                String::new()
            }
        ));
        failures.extend(f);
    }
    println!("{}", lines.join("\n"));
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}\n\nall cases:\n{}",
        failures.len(),
        failures.join("\n"),
        lines.join("\n")
    );
}

#[test]
fn csv_data_is_predicted_too() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    let path = sandbox.spec("d.csv", &{
        let mut text = String::from("a,b,c,label\n");
        for i in 0..50 {
            text += &format!("{},{},{},{}\n", i as f32 * 0.1, -(i as f32), 1.5, i % 3);
        }
        text
    });
    for dtype in [Dtype::Float32, Dtype::Float64] {
        let mut config = case(ADAM, 2, 128, 16, 0, 0).config();
        config.data = DataSpec::Csv { path: path.clone(), label: "label".into() };
        config.training.dtype = dtype;
        let predicted = estimate::predict(&config).expect("prediction");
        assert_eq!((predicted.shape.samples, predicted.shape.features, predicted.shape.classes), (50, 3, 3));
        let (records, peak) = measure(&config);
        let (failures, _) = compare(&format!("csv {dtype:?}"), &predicted, &records, peak, 0);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// The depth a real search under a CPU budget finds is the depth the model predicts.
#[test]
fn predicted_largest_depth_is_what_a_real_search_finds() {
    let _in_process = common::in_process();
    let sandbox = Sandbox::new();
    let text = r#"[experiment]
name = "estimate_vs_search"

[model]
hidden = 256

[data]
samples = 64
features = 32
classes = 4

[training]
optimizer = "adam"
lr = 0.001
batch_size = 16
steps = 2

[run]
device = "cpu"
budget = "6MiB"

[sweep]
field = "model.depth"
search = { start = 1, factor = 2, max = 64 }
"#;
    let spec = oomlab::spec::load(&sandbox.spec("s.toml", text)).expect("valid spec");
    let budget = spec.run.budget.unwrap();
    let opts = RunOptions { out: sandbox.out(), quiet: true, ..RunOptions::default() };
    let report = run::run(&Plan::here(spec.clone(), Overrides::default()), &opts).expect("run completes");
    let real = report.manifest.answers[0].clone();

    // The budget caps everything allocated, so what the trial may use is what its baseline leaves.
    let baseline = report.rows[0].baseline_allocated;
    let predicted = estimate::predict_spec(&spec, Some(budget - baseline), &Options::default()).unwrap();
    let p = &predicted[0];
    assert_eq!(
        (p.exact_largest_fit, p.largest_fit, p.first_oom),
        (real.largest_fit, real.largest_fit, real.first_oom),
        "predicted vs real search; rows: {:#?}",
        report.rows.iter().map(|r| (r.value, r.status, r.max_memory_allocated)).collect::<Vec<_>>()
    );
    assert!(real.largest_fit.is_some_and(|d| d > 1), "the budget should allow a few layers: {real:?}");
    // The same trials, in the same order, with the same peaks where they ran.
    let tried: Vec<f64> = report.rows.iter().filter_map(|r| r.value).collect();
    let predicted_tried: Vec<f64> = p.points.iter().filter_map(|pt| pt.value).collect();
    assert_eq!(tried, predicted_tried);
    for (row, point) in report.rows.iter().zip(&p.points) {
        assert_eq!(row.status == Status::Ok, point.fits, "depth {:?}", row.value);
        if row.status == Status::Ok {
            let m = row.max_memory_allocated - row.baseline_allocated;
            assert_eq!(point.prediction.peak, m, "depth {:?}", row.value);
        }
    }
}

/// `oomlab estimate` answers from the model alone: no results folder, the boundary printed.
#[test]
fn the_estimate_command_prints_the_boundary() {
    let sandbox = Sandbox::new();
    let text = common::tiny_spec(
        "estimate_cli",
        "hidden = 256",
        Some(4 << 20),
        "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, factor = 2, max = 64 }\n",
    );
    let spec_path = sandbox.spec("e.toml", &text);
    let spec = oomlab::spec::load(&spec_path).unwrap();
    let expected = {
        let _in_process = common::in_process();
        estimate::predict_spec(&spec, spec.run.budget, &Options::default()).unwrap()[0]
            .exact_largest_fit
            .unwrap()
    };
    let out = common::oomlab()
        .current_dir(sandbox.path())
        .args(["estimate", spec_path.to_str().unwrap(), "--brief"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains(&format!("largest depth predicted to fit in 4.00 MiB: {expected} ")), "{out}");
    assert!(out.contains("OOM predicted in backward, step 1"), "SGD runs out where the grads come: {out}");
    assert!(!sandbox.out().exists() && !sandbox.path().join("results").exists(), "nothing written");
    // The phase tables, unless --brief.
    common::oomlab()
        .args(["estimate", spec_path.to_str().unwrap(), "--budget", "1MiB"])
        .assert()
        .success()
        .stdout(predicates::str::contains("optimizer_step").and(predicates::str::contains("params")));
}
