//! The timeline's tests, on a trace as the trainer writes it: an OOM, a CPU trial, a long
//! trial, predictions, and an empty one.
use super::band::stride_for;
use super::draw::{
    phases_per_column, ALLOCATED_LABEL, DEVICE_USED_LABEL, PEAK_ALLOCATED_LABEL, PEAK_RESERVED_LABEL,
    RESERVED_LABEL, SAME_RESERVED_LABEL,
};
use super::Timeline;
use crate::chart::style::{OOM_LABEL, PREDICTED_LABEL};
use crate::chart::test_support::{out_dir, png_size, svg_texts};
use crate::chart::{render, Chart};
use crate::schema::{Phase, PhaseRecord, Status, SummaryRow};

const MIB: u64 = 1 << 20;

/// One training trial as the trainer writes it: data and model, then `steps` steps of the
/// five phases; activations (`act`) built in forward and freed in backward, gradients and
/// (from the first optimizer step) Adam's state, with a caching allocator that keeps a
/// little more than it hands out.
fn trace(trial: usize, steps: usize, params: u64, act: u64) -> Vec<PhaseRecord> {
    let mut out = Vec::new();
    let mut t = 0.0;
    let mut push = |step, phase, allocated: u64, peak: u64, secs: f64| {
        t += secs;
        out.push(PhaseRecord {
            trial,
            variant: String::new(),
            value: None,
            step,
            micro: 0,
            phase,
            memory_allocated: allocated,
            memory_reserved: allocated + allocated / 8,
            max_memory_allocated: peak,
            max_memory_reserved: peak + peak / 8,
            device_used: None,
            phase_seconds: secs,
            elapsed_seconds: t,
            predicted_peak: None,
            page_faults: None,
            rank: None,
        });
    };
    push(0, Phase::Data, MIB, MIB, 0.01);
    push(0, Phase::Model, MIB + params, MIB + params, 0.02);
    let base = MIB + params;
    for step in 1..=steps {
        let state = if step == 1 { 0 } else { 2 * params };
        push(step, Phase::ToDevice, base + state + MIB / 4, base + state + MIB / 4, 0.001);
        push(step, Phase::Forward, base + state + act, base + state + act + act / 4, 0.05);
        push(step, Phase::Backward, base + state + params, base + state + act + params, 0.1);
        push(step, Phase::OptimizerStep, base + 3 * params, base + 3 * params + params / 2, 0.03);
        push(step, Phase::ZeroGrad, base + 2 * params, base + 3 * params, 0.0001);
    }
    out
}

fn summary(trial: usize, status: Status) -> SummaryRow {
    SummaryRow {
        trial,
        status,
        field: Some(crate::spec::Field::Depth),
        value: Some(4.0),
        ..SummaryRow::default()
    }
}

#[test]
fn from_trace_keeps_the_trial_in_order_and_finds_the_oom() {
    let mut all = trace(1, 2, 100 * MIB, 50 * MIB);
    let mut second = trace(2, 2, 100 * MIB, 50 * MIB);
    second.truncate(5); // data, model, to_device, forward, backward: OOM in backward
    all.extend(second);
    let mut row = summary(2, Status::Oom);
    row.phase = Some(Phase::Backward);
    row.step = Some(1);
    row.oom_allocated = Some(300 * MIB);
    row.oom_requested = Some(20 * MIB);
    let chart = Timeline::from_trace(&all, &row, "t", "s", Some(GIB));
    assert_eq!(chart.points.len(), 5);
    assert_eq!(chart.points[3].phase, Phase::Forward);
    assert!((chart.points[3].start_seconds - 0.031).abs() < 1e-9);
    let oom = chart.oom.clone().expect("an OOM");
    assert_eq!(oom.index, Some(4));
    assert_eq!(oom.need, Some(320 * MIB));
    assert_eq!(chart.oom_marker(&oom), 320 * MIB);
    assert_eq!(chart.step_spans(), [(0, 0, 2), (1, 2, 5)]);
    assert_eq!(chart.file_stem(), "timeline_trial2");
    assert_eq!(chart.phases(), [Phase::Data, Phase::Model, Phase::ToDevice, Phase::Forward, Phase::Backward]);

    let ok = Timeline::from_trace(&all, &summary(1, Status::Ok), "t", "s", None);
    assert_eq!(ok.points.len(), 12);
    assert!(ok.oom.is_none());
    assert!(ok.reserved_differs());
    assert!(!ok.has_device_used());

    // Without a matching phase, the OOM goes to the last phase; without a need, the budget.
    let mut row = summary(2, Status::Oom);
    row.variant = "fp16 amp".into();
    let chart = Timeline::from_trace(&all, &row, "t", "s", Some(GIB));
    assert_eq!(chart.oom.as_ref().and_then(|o| o.index), Some(4));
    assert_eq!(chart.oom_marker(chart.oom.as_ref().unwrap()), GIB);
    assert_eq!(chart.file_stem(), "timeline_trial2-fp16_amp");
}

const GIB: u64 = 1 << 30;

#[test]
fn dense_traces_share_columns() {
    assert_eq!(phases_per_column(50.0), 1);
    assert_eq!(phases_per_column(3.0), 1);
    assert_eq!(phases_per_column(1.0), 3);
    assert_eq!(phases_per_column(0.6), 5);
}

#[test]
fn step_labels_are_thinned_to_round_strides() {
    assert_eq!(stride_for(200.0, 30.0), 1);
    assert_eq!(stride_for(20.0, 30.0), 2);
    assert_eq!(stride_for(7.0, 30.0), 5);
    assert_eq!(stride_for(1.0, 30.0), 50);
}

#[test]
fn renders_png_and_svg_with_series_and_axis_labels() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let mut records = trace(7, 3, 300 * MIB, 200 * MIB);
    for (i, r) in records.iter_mut().enumerate() {
        r.device_used = Some(r.memory_reserved + 500 * MIB + i as u64 * MIB);
    }
    let row = summary(7, Status::Ok);
    let chart = Timeline::from_trace(
        &records,
        &row,
        "Memory through trial 7: depth 4",
        "depth_sweep on Tesla T4 (cuda:0)",
        Some(3 * GIB),
    );
    let out = render(&chart, &dir).expect("rendered");
    assert_eq!(out.png, dir.join("timeline_trial7.png"));
    assert_eq!(png_size(&out.png), (1280, 800));
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    for text in [
        ALLOCATED_LABEL,
        PEAK_ALLOCATED_LABEL,
        RESERVED_LABEL,
        PEAK_RESERVED_LABEL,
        DEVICE_USED_LABEL,
        "budget 3.00 GiB",
        "memory (GiB)",
        "setup",
        "1",
        "3",
        "forward",
        "optimizer_step",
        "Memory through trial 7: depth 4",
    ] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }
    assert!(texts.iter().any(|t| t.starts_with("step: 17 phases")), "{texts:?}");
}

/// Predictions are matched to the phases by step, micro-batch and phase, raise the axis
/// when above everything measured, and get a legend entry; without them, no entry.
#[test]
fn predicted_peaks_are_set_per_phase_and_drawn() {
    let temp = tempfile::tempdir().expect("temp dir");
    let records = trace(3, 2, 100 * MIB, 50 * MIB);
    let row = summary(3, Status::Ok);
    let mut chart = Timeline::from_trace(&records, &row, "t", "s", None);
    let plain = render(&chart, &temp.path().join("plain")).expect("rendered");
    let texts = svg_texts(&std::fs::read_to_string(&plain.svg).expect("svg readable"));
    assert!(!texts.iter().any(|t| t == PREDICTED_LABEL), "no prediction, no entry");

    let high = 10 * GIB;
    // As a trace with predictions carries them (`TimelinePoint::from_record`).
    for p in &mut chart.points {
        p.predicted_peak = (p.step == 2 && p.phase == Phase::Backward).then_some(high);
    }
    let marked: Vec<(usize, Phase)> =
        chart.points.iter().filter(|p| p.predicted_peak.is_some()).map(|p| (p.step, p.phase)).collect();
    assert_eq!(marked, [(2, Phase::Backward)]);
    assert_eq!(chart.top(), high);
    let out = render(&chart, &temp.path().join("predicted")).expect("rendered");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == PREDICTED_LABEL), "{texts:?}");
}

#[test]
fn renders_an_oom_a_cpu_trial_a_long_trial_and_an_empty_one() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let mut records = trace(3, 2, 2 * GIB, 3 * GIB);
    records.truncate(10); // OOM in step 2's backward
    let mut row = summary(3, Status::Oom);
    row.variant = "fp16".into();
    row.phase = Some(Phase::Backward);
    row.step = Some(2);
    row.oom_allocated = Some(records[9].memory_allocated);
    row.oom_requested = Some(4 * GIB);
    let chart = Timeline::from_trace(&records, &row, "oom", "", Some(14 * GIB));
    let out = render(&chart, &dir).expect("OOM renders");
    assert_eq!(out.png, dir.join("timeline_trial3-fp16.png"));
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    for text in [OOM_LABEL, "OOM in backward, step 2: tried to allocate 4.00 GiB"] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }

    // The CPU: reserved is allocated, so it is said rather than drawn.
    let mut cpu = trace(4, 2, 30 * MIB, 10 * MIB);
    for r in &mut cpu {
        r.memory_reserved = r.memory_allocated;
        r.max_memory_reserved = r.max_memory_allocated;
    }
    let chart = Timeline::from_trace(&cpu, &summary(4, Status::Ok), "cpu", "", None);
    assert!(!chart.reserved_differs());
    let out = render(&chart, &dir).expect("CPU trial renders");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == SAME_RESERVED_LABEL), "{texts:?}");
    assert!(texts.iter().any(|t| t == "memory (MiB)"), "{texts:?}");
    assert!(!texts.iter().any(|t| t == RESERVED_LABEL), "{texts:?}");

    let long = trace(5, 200, 64 * MIB, 32 * MIB);
    let chart = Timeline::from_trace(&long, &summary(5, Status::Ok), "long", "", Some(GIB));
    let out = render(&chart, &dir).expect("long trial renders");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == "180"), "every so many steps labelled: {texts:?}");
    assert!(texts.iter().any(|t| t.contains("lines as ranges over 3 phases at a time")), "{texts:?}");
    assert!(!texts.iter().any(|t| t == "190"), "not every step labelled");

    let empty = Timeline::from_trace(&[], &summary(6, Status::Error), "empty", "", None);
    render(&empty, &dir).expect("empty trial renders");
}
