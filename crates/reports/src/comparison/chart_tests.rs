//! The comparison chart's test, on two devices' sweeps.
use super::sweeps;
use crate::chart::style::OOM_LABEL;
use crate::chart::test_support::{out_dir, png_size, svg_texts};
use crate::chart::{render, Chart};
use crate::comparison::{compare, tests::two_devices};

#[test]
fn overlays_one_line_per_folder_in_bytes_and_shares() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = out_dir(&temp);
    let c = compare(&two_devices()).unwrap();
    let charts = sweeps(&c);
    assert_eq!(charts.len(), 1);
    let chart = &charts[0];
    assert_eq!(chart.file_stem(), "compare_peak_vs_depth");
    assert_eq!(chart.series.len(), 2);
    assert_eq!(chart.series[1].points.len(), 6);
    assert_eq!(chart.series[1].limit, 2 << 30);
    assert!(chart.top_share() > 100.0);

    let out = render(chart, &dir).expect("rendered");
    assert_eq!(png_size(&out.png), (1280, 800));
    let svg = std::fs::read_to_string(&out.svg).unwrap();
    // B's points are rings around where A's dots would be, in both panels: visible where the
    // two coincide.
    let rings = svg.matches("r=\"8\"").count();
    assert!(rings >= 2 * chart.series[1].ok().count(), "{rings} rings");
    let texts = svg_texts(&svg);
    for text in [
        "A: Tesla T4, budget 15.90 GiB",
        "B: CPU (AMD EPYC), budget 2.00 GiB",
        OOM_LABEL,
        "100% of budget",
        "peak reserved (GiB)",
        "peak reserved (% of budget)",
        "depth",
        "depth_sweep: peak memory by depth, compared",
    ] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }
}

/// Two folders with the same budget: the share of it would repeat the bytes, so the chart is
/// the bytes panel alone; different budgets keep both panels.
#[test]
fn the_same_budget_everywhere_draws_the_bytes_panel_alone() {
    let c = compare(&two_devices()).unwrap();
    assert_eq!(sweeps(&c)[0].shared_limit(), None, "15.90 GiB and 2 GiB");

    let mut folders = two_devices();
    let budget = folders[0].manifest.device.budget_bytes;
    folders[1].manifest.device.budget_bytes = budget;
    let c = compare(&folders).unwrap();
    let chart = &sweeps(&c)[0];
    assert_eq!(chart.shared_limit(), budget);
    assert_eq!(chart.shared_limit_name(), "budget");
    // Without budgets, two devices of the same capacity share it too; of different ones, not.
    for f in &mut folders {
        f.manifest.device.budget_bytes = None;
    }
    folders[1].manifest.device.capacity_bytes = folders[0].manifest.device.capacity_bytes;
    let same = sweeps(&compare(&folders).unwrap())[0].clone();
    assert_eq!(same.shared_limit(), Some(16 << 30));
    assert_eq!(same.shared_limit_name(), "capacity");
    folders[1].manifest.device.capacity_bytes += 1;
    assert_eq!(sweeps(&compare(&folders).unwrap())[0].shared_limit(), None);

    // What is drawn follows: no share axis, the shared budget in the legend.
    let temp = tempfile::tempdir().expect("temp dir");
    let out = render(chart, &out_dir(&temp)).expect("rendered");
    let texts = svg_texts(&std::fs::read_to_string(&out.svg).unwrap());
    assert!(!texts.iter().any(|t| t.contains("% of budget")), "{texts:?}");
    assert!(texts.iter().any(|t| t == "budget of every folder"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "peak reserved (GiB)"), "{texts:?}");
}
