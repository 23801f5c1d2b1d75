//! The advice chart's tests: points, labels, budget line and legend drawn; without step times
//! it plots ranks, and an empty chart draws.
use super::*;
use crate::chart::test_support::{png_size, svg_texts};
use crate::chart::{render, Chart};

fn chart(timed: bool) -> AdviceChart {
    let p = |label: &str, peak: u64, y: f64, mark| AdvicePoint { label: label.into(), peak, y, mark };
    AdviceChart {
        title: "What fits".into(),
        subtitle: "s".into(),
        budget: 100 << 20,
        timed,
        points: vec![
            p("smallest change: #2 micro-batch 16 x 2", 60 << 20, 1.5, Mark::Fits),
            p("", 80 << 20, 1.2, Mark::Fits),
            p("", 99 << 20, 0.9, Mark::Borderline),
            p("", 140 << 20, 0.8, Mark::Oom),
            p("as written: 150.00 MiB", 150 << 20, 1.0, Mark::Written),
        ],
        notes: vec!["note".into()],
    }
}

#[test]
fn draws_points_labels_budget_and_legend() {
    let temp = tempfile::tempdir().unwrap();
    let out = render(&chart(true), temp.path()).unwrap();
    assert_eq!(png_size(&out.png), (1280, 800));
    assert_eq!(chart(true).file_stem(), "advice");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).unwrap());
    for t in [
        "smallest change: #2 micro-batch 16 x 2",
        "as written: 150.00 MiB",
        "budget 100.00 MiB",
        "fits",
        "does not fit",
        "predicted time per sample (x the spec as written, log scale)",
        "predicted peak (MiB)",
    ] {
        assert!(texts.iter().any(|x| x == t), "{t:?} not in {texts:?}");
    }
}

#[test]
fn without_times_it_plots_ranks_and_empty_is_fine() {
    let temp = tempfile::tempdir().unwrap();
    let out = render(&chart(false), temp.path()).unwrap();
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).unwrap());
    assert!(texts.iter().any(|x| x == "rank (fewest changes first)"), "{texts:?}");
    let empty = AdviceChart { points: vec![], ..chart(true) };
    render(&empty, &temp.path().join("empty")).unwrap();
}
