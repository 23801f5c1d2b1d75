//! The sweep chart's tests, on the lesson's depth sweep and on the edge cases (all OOM, one
//! point, a log axis, nothing).
use super::SweepPeak;
use crate::chart::style::PREDICTED_LABEL;
use crate::chart::test_support::{out_dir, png_size, svg_size, svg_texts};
use crate::chart::{render, Chart};
use crate::schema::{Phase, Status, SummaryRow};
use crate::spec::Field;

const GIB: u64 = 1 << 30;

fn row(field: Option<Field>, value: Option<f64>, status: Status) -> SummaryRow {
    SummaryRow {
        trial: 0,
        field,
        value,
        status,
        phase: (status != Status::Ok).then_some(Phase::Forward),
        step: (status != Status::Ok).then_some(1),
        depth: value.unwrap_or(1.0) as usize,
        hidden: 4096,
        batch_size: 64,
        samples: 1024,
        features: 4096,
        classes: 10,
        optimizer: Some(crate::spec::OptimizerKind::Adam),
        dtype: Some(crate::spec::Dtype::Float32),
        max_memory_allocated: 0,
        max_memory_reserved: 0,
        baseline_allocated: 0,
        after_allocated: 0,
        param_count: 0,
        param_bytes: 0,
        step_seconds: None,
        final_loss: None,
        oom_requested: None,
        oom_total_capacity: None,
        oom_free: None,
        oom_allocated: None,
        oom_reserved: None,
        message: String::new(),
        ..SummaryRow::default()
    }
}

/// The lesson's sweep: depth 1 to 64 in bisection order, about 0.37 GiB a layer, out of
/// memory from 41 layers on a 15.90 GiB budget.
fn depth_sweep() -> (Vec<SummaryRow>, u64) {
    let budget = (15.90 * GIB as f64) as u64;
    let per_layer = (0.37 * GIB as f64) as u64;
    let base = (0.6 * GIB as f64) as u64;
    let rows = [1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]
        .into_iter()
        .enumerate()
        .map(|(trial, depth)| {
            let need = base + per_layer * depth;
            let mut r = if depth <= 40 {
                let mut r = row(Some(Field::Depth), Some(depth as f64), Status::Ok);
                r.max_memory_allocated = need;
                r.max_memory_reserved = need + need / 50;
                r
            } else {
                let mut r = row(Some(Field::Depth), Some(depth as f64), Status::Oom);
                // Fails asking for its last layer's activations.
                let allocated = need - per_layer;
                r.max_memory_allocated = allocated;
                r.max_memory_reserved = allocated + allocated / 50;
                r.oom_allocated = Some(allocated);
                r.oom_requested = Some(need - allocated);
                r
            };
            r.trial = trial;
            r
        })
        .collect();
    (rows, budget)
}

#[test]
fn from_summary_sorts_and_computes_what_an_oom_needed() {
    let mut rows = vec![
        row(Some(Field::Depth), Some(8.0), Status::Ok),
        row(Some(Field::Depth), Some(2.0), Status::Ok),
        row(Some(Field::Depth), Some(16.0), Status::Oom),
        row(Some(Field::Depth), Some(12.0), Status::Oom),
        row(Some(Field::Depth), None, Status::Ok),
        row(Some(Field::Depth), Some(10.0), Status::Error),
    ];
    rows[2].oom_allocated = Some(10 * GIB);
    rows[2].oom_requested = Some(GIB / 2);
    rows[3].oom_allocated = Some(9 * GIB); // no requested size: need unknown
    rows[0].max_memory_allocated = 3 * GIB;
    rows[0].max_memory_reserved = 4 * GIB;

    let chart = SweepPeak::from_summary(&rows, "t", "s", Some(15 * GIB));
    let xs: Vec<f64> = chart.points.iter().map(|p| p.x).collect();
    assert_eq!(xs, [2.0, 8.0, 10.0, 12.0, 16.0]);
    assert_eq!(chart.x_label, "depth");
    assert_eq!(chart.file_stem(), "peak_vs_depth");
    assert_eq!(chart.points[4].oom_need, Some(10 * GIB + GIB / 2));
    assert_eq!(chart.points[3].oom_need, None);
    assert_eq!(chart.points[1].oom_need, None);
    assert_eq!(chart.points[1].max_allocated, 3 * GIB);
    assert_eq!(chart.points[1].max_reserved, 4 * GIB);
    assert_eq!(chart.points[2].status, Status::Error);
    assert_eq!(chart.largest_fit().map(|p| p.x), Some(8.0));
    assert_eq!(chart.budget, Some(15 * GIB));
    // Unknown need: marked at the budget.
    assert_eq!(chart.oom_marker(&chart.points[3]), 15 * GIB);
}

#[test]
fn from_summary_labels_x_with_the_last_part_of_the_field() {
    let rows = [row(Some(Field::BatchSize), Some(64.0), Status::Ok)];
    let chart = SweepPeak::from_summary(&rows, "", "", None);
    assert_eq!(chart.x_label, "batch_size");
    assert_eq!(chart.file_stem(), "peak_vs_batch_size");
    let rows = [row(None, Some(1.0), Status::Ok)];
    assert_eq!(SweepPeak::from_summary(&rows, "", "", None).x_label, "value");
}

/// The lesson's figure, drawn where `out_dir` says (`OOMLAB_CHART_DIR` keeps it to look at).
#[test]
fn renders_the_lesson_figure_with_its_labels() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let (rows, budget) = depth_sweep();
    let subtitle = "Tesla T4 (15.90 GiB) · MLP, hidden 4096, batch 64 · float32 · Adam";
    let chart = SweepPeak::from_summary(&rows, "How deep before out of memory", subtitle, Some(budget));
    let out = render(&chart, &dir).expect("rendered");
    assert_eq!(out.png, dir.join("peak_vs_depth.png"));
    assert_eq!(out.svg, dir.join("peak_vs_depth.svg"));
    assert_eq!(png_size(&out.png), (1280, 800));
    assert_eq!(svg_size(&out.svg), (1280, 800));
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(!texts.iter().any(|t| t == PREDICTED_LABEL), "no prediction in these rows");
    for text in [
        "peak allocated",
        "peak reserved",
        "OOM (allocated + requested)",
        "peak memory (GiB)",
        "depth",
        "budget 15.90 GiB",
        "largest depth that fit: 40",
        "How deep before out of memory",
        subtitle,
    ] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }
}

/// Predictions come from the rows, for failed trials too, raise the axis to the highest
/// one, and get a legend entry.
#[test]
fn predictions_are_kept_and_drawn() {
    let (mut rows, budget) = depth_sweep();
    for r in &mut rows {
        r.predicted_peak = Some((0.6 * GIB as f64) as u64 + (0.37 * GIB as f64) as u64 * r.depth as u64);
    }
    let chart = SweepPeak::from_summary(&rows, "t", "s", Some(budget));
    let at_64 = chart.points.iter().find(|p| p.x == 64.0).unwrap();
    assert_eq!(at_64.status, Status::Oom);
    assert_eq!(at_64.predicted, rows[6].predicted_peak);
    assert_eq!(chart.top(), at_64.predicted.unwrap(), "the highest prediction sets the axis");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = render(&chart, dir.path()).expect("rendered");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == PREDICTED_LABEL), "{texts:?}");
}

#[test]
fn renders_all_oom_single_point_wide_and_empty_sweeps() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let mut oom = row(Some(Field::Depth), Some(4.0), Status::Oom);
    oom.oom_allocated = Some(GIB);
    oom.oom_requested = Some(GIB);
    let unknown = row(Some(Field::Depth), Some(8.0), Status::Oom);
    let all_oom = SweepPeak::from_summary(&[oom, unknown], "all oom", "", None);
    render(&all_oom, &dir.join("all_oom")).expect("all-OOM sweep renders");

    let mut one = row(Some(Field::Hidden), Some(512.0), Status::Ok);
    one.max_memory_allocated = 3 << 20;
    one.max_memory_reserved = 4 << 20;
    let single = SweepPeak::from_summary(&[one], "one", "", None);
    let out = render(&single, &dir.join("single")).expect("single point renders");
    let texts = svg_texts(&std::fs::read_to_string(out.svg).expect("svg readable"));
    assert!(texts.iter().any(|t| t == "peak memory (MiB)"), "{texts:?}");

    let wide: Vec<SummaryRow> = (0..13)
        .map(|i| {
            let mut r = row(Some(Field::BatchSize), Some(f64::from(1 << i)), Status::Ok);
            r.max_memory_allocated = (1 << i) * (1 << 20);
            r.max_memory_reserved = (1 << i) * (1 << 20) * 2;
            r
        })
        .chain([row(Some(Field::BatchSize), Some(8192.0), Status::Error)])
        .collect();
    let wide = SweepPeak::from_summary(&wide, "wide", "", Some(16 * GIB));
    let out = render(&wide, &dir.join("wide")).expect("log axis renders");
    let texts = svg_texts(&std::fs::read_to_string(out.svg).expect("svg readable"));
    for text in ["batch_size (log scale)", "1", "64", "4096", "error (not memory)"] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }

    let empty = SweepPeak::from_summary(&[], "empty", "", None);
    render(&empty, &dir.join("empty")).expect("empty sweep renders");
}

/// A run's curve is the predicted line, cut a tenth above the highest thing drawn; without one
/// the line goes through the trials' predictions.
#[test]
fn the_predicted_line_is_the_runs_curve_where_it_made_one() {
    let fit = SummaryRow {
        max_memory_allocated: 200,
        max_memory_reserved: 200,
        ..row(Some(Field::Depth), Some(2.0), Status::Ok)
    };
    let rows = [fit, row(Some(Field::Depth), Some(3.0), Status::Oom)];
    let mut chart = SweepPeak::from_summary(&rows, "t", "s", Some(250));
    chart.points[0].predicted = Some(200);
    assert_eq!(chart.predicted_line(), [(2.0, 200)]);
    chart.curve = vec![(1.0, 100), (2.0, 200), (3.0, 300), (4.0, 400)];
    assert_eq!(chart.predicted_line(), [(1.0, 100), (2.0, 200)], "cut above 250 + 25");
    chart.points[0].predicted = Some(280);
    assert_eq!(chart.predicted_line(), [(1.0, 100), (2.0, 200), (3.0, 300)], "cut above 280 + 28");
}
