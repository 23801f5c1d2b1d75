//! The category chart's tests: categories from a training trace and from a forward-only one,
//! and the chart drawn for variants, one trial, none, and a sweep.
use super::{CategoryBar, CategoryBars, CATEGORY_NAMES};
use crate::chart::render;
use crate::chart::test_support::{out_dir, picked, png_size, summary, svg_texts};
use crate::schema::{Phase, PhaseRecord, Status};

fn rec(trial: usize, step: usize, micro: usize, phase: Phase, allocated: u64) -> PhaseRecord {
    PhaseRecord {
        trial,
        variant: String::new(),
        value: None,
        step,
        micro,
        phase,
        memory_allocated: allocated,
        memory_reserved: allocated,
        max_memory_allocated: allocated,
        max_memory_reserved: allocated,
        device_used: None,
        phase_seconds: 0.1,
        elapsed_seconds: 0.1,
        predicted_peak: None,
        page_faults: None,
        rank: None,
    }
}

/// A training trial: baseline 100, data 1000, parameters 4000, batch 64, activations 500,
/// gradients 4000, optimizer state 8000, loss 4; two steps.
fn train_trace(trial: usize) -> Vec<PhaseRecord> {
    let (base, data, params, batch, act, grads, state) = (100, 1000, 4000, 64, 500, 4000, 8000);
    let model = base + data + params;
    let mut t = vec![rec(trial, 0, 0, Phase::Data, base + data), rec(trial, 0, 0, Phase::Model, model)];
    for step in 1..=2 {
        let kept = if step == 1 { 0 } else { state + 4 };
        t.extend([
            rec(trial, step, 0, Phase::ToDevice, model + kept + batch),
            rec(trial, step, 0, Phase::Forward, model + kept + batch + act + 4),
            rec(trial, step, 0, Phase::Backward, model + kept + grads + 4),
            rec(trial, step, 0, Phase::OptimizerStep, model + state + grads + 4),
            rec(trial, step, 0, Phase::ZeroGrad, model + state + 4),
        ]);
    }
    t
}

#[test]
fn categories_are_differences_at_phase_ends() {
    let mut row = summary(1, "adam", None, Status::Ok);
    row.baseline_allocated = 100;
    row.max_memory_allocated = 100 + 1000 + 4000 + 8000 + 4000 + 4;
    let bar = CategoryBar::from_trace("adam", &row, &train_trace(1));
    assert_eq!(bar.bytes, [1000, 4000, 8000, 4000, 64, 504]);
    assert_eq!(bar.peak, 1000 + 4000 + 8000 + 4000 + 4);
    assert!(!bar.autocast);

    // float64 keeps an 8-byte loss: the optimizer state is 4 bytes less than with 4.
    row.dtype = Some(crate::spec::Dtype::Float64);
    assert_eq!(CategoryBar::from_trace("adam", &row, &train_trace(1)).bytes[2], 7996);
}

#[test]
fn forward_only_trials_have_no_optimizer_state_nor_gradients() {
    let t = vec![
        rec(2, 0, 0, Phase::Data, 1000),
        rec(2, 0, 0, Phase::Model, 5000),
        rec(2, 1, 0, Phase::ToDevice, 5064),
        rec(2, 1, 0, Phase::Forward, 5068),
        rec(2, 2, 0, Phase::ToDevice, 5068),
        rec(2, 2, 0, Phase::Forward, 5072),
    ];
    let mut row = summary(2, "no_grad", None, Status::Ok);
    row.mode = Some(crate::spec::Mode::ForwardNoGrad);
    row.max_memory_allocated = 7000;
    let bar = CategoryBar::from_trace("no_grad", &row, &t);
    assert_eq!(bar.bytes, [1000, 4000, 0, 0, 64, 4]);
    assert_eq!(bar.peak, 7000);
    // Nothing in the trace: all zero, no panic.
    assert_eq!(CategoryBar::from_trace("x", &row, &[]).bytes, [0; 6]);
}

#[test]
fn renders_png_and_svg_with_names_and_categories() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let mut rows = Vec::new();
    let mut trace = Vec::new();
    for (trial, name) in [(1, "sgd"), (2, "adam"), (3, "adam_amp")] {
        let mut row = summary(trial, name, None, Status::Ok);
        row.max_memory_allocated = (17_104 + trial as u64 * 300) << 10;
        row.amp =
            Some(if name == "adam_amp" { crate::spec::AmpKind::Bf16 } else { crate::spec::AmpKind::Off });
        rows.push(row);
        trace.extend(train_trace(trial).into_iter().map(|mut r| {
            r.memory_allocated <<= 10;
            r
        }));
    }
    let chart = CategoryBars::from_picked(&picked(&rows, None), &trace, "Memory by category", "fake device");
    let out = render(&chart, &dir.join("categories")).expect("rendered");
    assert_eq!(png_size(&out.png), (1280, 800));
    assert!(out.png.ends_with("categories.png"));
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    for text in ["sgd", "adam", "adam_amp", "memory (MiB)", "variant", "measured peak", "Memory by category"]
        .into_iter()
        .chain(CATEGORY_NAMES)
    {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }
    assert!(texts.iter().any(|t| t.contains("autocast")), "{texts:?}");
}

#[test]
fn renders_empty_and_single_inputs() {
    let temp = tempfile::tempdir().expect("temp dir");
    let empty = CategoryBars::from_picked(&picked(&[], None), &[], "empty", "");
    render(&empty, &temp.path().join("empty")).expect("empty renders");
    let row = summary(1, "", None, Status::Ok);
    let one = [row];
    let one = CategoryBars::from_picked(&picked(&one, None), &train_trace(1), "one", "");
    assert_eq!(one.bars.len(), 1);
    let out = render(&one, &temp.path().join("one")).expect("one renders");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == "trial 1"), "{texts:?}");

    // A sweep says where the bars stand.
    let rows = [summary(1, "fp32", Some(64.0), Status::Ok), summary(2, "bf16", Some(64.0), Status::Ok)];
    let trace: Vec<PhaseRecord> = train_trace(1).into_iter().chain(train_trace(2)).collect();
    let picks = picked(&rows, Some("each variant at batch_size 64, the largest every variant ran"));
    let out = render(&CategoryBars::from_picked(&picks, &trace, "swept", ""), &temp.path().join("swept"))
        .expect("sweep renders");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    let desc = "variant: each variant at batch_size 64, the largest every variant ran";
    assert!(texts.iter().any(|t| t == desc), "{texts:?}");
}

/// A size label wider than its bar (or its bar's slot, for the peak) is shortened or left out:
/// centred on a narrow bar it crossed its neighbours, and at the plot's edge it was cut.
#[test]
fn labels_too_wide_for_their_bars_are_shortened_or_left_out() {
    let texts = ["peak 10.31 MiB".to_string(), "10.31 MiB".to_string()];
    let width = |t: &str| 10.0 * t.len() as f64;
    assert_eq!(super::draw::first_fitting(&texts, 200.0, width), Some(&texts[0]));
    assert_eq!(super::draw::first_fitting(&texts, 100.0, width), Some(&texts[1]));
    assert_eq!(super::draw::first_fitting(&texts, 50.0, width), None);

    let temp = tempfile::tempdir().expect("temp dir");
    let sizes = |bars: usize| {
        let mut rows = Vec::new();
        let mut trace = Vec::new();
        for trial in 1..=bars {
            let mut row = summary(trial, &format!("v{trial}"), None, Status::Ok);
            row.max_memory_allocated = (17_104 + trial as u64 * 300) << 10;
            rows.push(row);
            trace.extend(train_trace(trial).into_iter().map(|mut r| {
                r.memory_allocated <<= 10;
                r
            }));
        }
        let chart = CategoryBars::from_picked(&picked(&rows, None), &trace, "bars", "");
        let out = render(&chart, &temp.path().join(format!("bars{bars}"))).expect("rendered");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        texts.into_iter().filter(|t| t.ends_with(" MiB") || t.ends_with(" KiB")).collect::<Vec<_>>()
    };
    let few = sizes(3);
    assert!(few.iter().filter(|t| t.starts_with("peak ")).count() == 3, "{few:?}");
    let many = sizes(60);
    assert!(many.is_empty(), "60 bars leave no room for a size: {many:?}");
}

#[test]
fn a_bar_name_too_wide_for_its_slot_is_said_shorter() {
    use super::draw::fit_label;
    let width = |t: &str| t.chars().count() as f64 * 10.0;
    assert_eq!(fit_label("fp32 (batch_size 64)", 300.0, width), "fp32 (batch_size 64)");
    assert_eq!(fit_label("transformer_fp32 (batch_size 140)", 250.0, width), "transformer_fp32 (140)");
    assert_eq!(fit_label("transformer_fp32 (batch_size 140)", 100.0, width), "transform…");
    assert_eq!(fit_label("none", 10.0, width), "…");
}
