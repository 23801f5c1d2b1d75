//! The bench chart's test: made-up results drawn, and what the SVG says.
use super::{chart as bench_chart, colour};
use crate::bench::analysis::{Analysis, ConfigResult, ContenderResult, SameModel};
use crate::bench::stats::Spread;
use crate::bench::verdict::{self, Measured};
use crate::bench::{Contender, Role};
use crate::chart::test_support::{out_dir, png_size, svg_size, svg_texts};
use crate::chart::{render, Chart};
use std::collections::BTreeMap;

/// The texts of a rendered SVG, apostrophes unescaped ("PyTorch's").
fn texts_of(svg: &std::path::Path) -> Vec<String> {
    svg_texts(&std::fs::read_to_string(svg).unwrap()).iter().map(|t| t.replace("&apos;", "'")).collect()
}

/// A configuration where oomlab-off's median is `off` and PyTorch's `torch` seconds.
fn config(name: &str, role: Role, off: f64, torch: f64) -> ConfigResult {
    let around = |m: f64| (0..30).map(|i| m * (0.95 + 0.004 * i as f64)).collect::<Vec<f64>>();
    let medians = [
        (Contender::OomlabOff, off),
        (Contender::OomlabPhases, off * 1.01),
        (Contender::OomlabSync, off * 1.3),
        (Contender::Pytorch, torch),
        (Contender::PytorchSync, torch * 1.3),
    ];
    let steps: BTreeMap<Contender, Vec<Vec<f64>>> =
        medians.iter().map(|&(c, m)| (c, vec![around(m)])).collect();
    let contenders = medians
        .iter()
        .map(|&(c, _)| ContenderResult {
            contender: c,
            spread: Spread::of(&steps[&c][0]).unwrap(),
            phases: BTreeMap::new(),
            processes: 3,
        })
        .collect();
    let m = Measured { steps: &steps, phases: &BTreeMap::new(), cuda: true };
    ConfigResult {
        name: name.into(),
        title: name.into(),
        role,
        warmup: 1,
        steps: 10,
        contenders,
        verdicts: verdict::targets(role, true).into_iter().filter_map(|t| verdict::judge(t, &m)).collect(),
        same_model: SameModel { param_count: 1, oomlab_loss: None, pytorch_loss: None, loss_difference: 0.0 },
    }
}

#[test]
fn bars_are_multiples_of_pytorch_with_the_targets() {
    let temp = tempfile::tempdir().expect("temp dir");
    let a = Analysis {
        configs: vec![
            config("3x256-fused", Role::Small, 0.0004, 0.0011),
            config("8x5000", Role::Lesson, 0.95, 1.0),
        ],
        cuda: true,
    };
    let chart = bench_chart(&a, "NVIDIA H100 80GB HBM3");
    assert_eq!(chart.file_stem(), "bench");
    assert_eq!(chart.groups.len(), 2);
    let small = &chart.groups[0];
    // PyTorch's median, 0.0011 * 1.008 s, above the group.
    assert_eq!(small.reference_label, "PyTorch 1.11 ms");
    let off_bar = |g: &crate::chart::BenchGroup| {
        *g.bars.iter().find(|b| b.colour == colour(Contender::OomlabOff)).unwrap()
    };
    let off = off_bar(small);
    assert_eq!(off.target, Some(0.5));
    assert!(
        small.bars.iter().filter(|b| b.target.is_some()).count() == 1,
        "the target on oomlab-off's bar alone"
    );
    assert!((off.median - 0.4 / 1.1).abs() < 1e-9 && off.p10 < off.median && off.median < off.p90, "{off:?}");
    assert_eq!(off_bar(&chart.groups[1]).target, Some(0.9));
    assert!(
        !chart.series.iter().any(|s| s.name == Contender::OomlabSteps.as_str()),
        "no bar, no legend entry"
    );

    let out = render(&chart, &out_dir(&temp)).expect("rendered");
    assert_eq!(png_size(&out.png), (1280, 800));
    assert_eq!(svg_size(&out.svg), (1280, 800));
    let texts = texts_of(&out.svg);
    for text in [
        "oomlab's step time against PyTorch's loop",
        "3x256-fused",
        "8x5000",
        "PyTorch 1.11 ms",
        "PyTorch 1.01 s",
        "oomlab-off",
        "pytorch-sync",
        "target, oomlab-off",
        "PyTorch = 1",
        "step time / PyTorch's median",
    ] {
        assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
    }
}

#[test]
fn a_configuration_without_pytorch_has_no_group() {
    let mut c = config("x", Role::Small, 1.0, 1.0);
    c.contenders.retain(|r| r.contender != Contender::Pytorch);
    let chart = bench_chart(&Analysis { configs: vec![c], cuda: false }, "CPU");
    assert!(chart.groups.is_empty());
    let temp = tempfile::tempdir().expect("temp dir");
    let out = render(&chart, &out_dir(&temp)).expect("an empty chart still draws");
    let texts = texts_of(&out.svg);
    assert!(texts.iter().any(|t| t == "no configuration ran PyTorch's loop"), "{texts:?}");
}

#[test]
fn one_slow_step_does_not_flatten_the_bars() {
    let a = Analysis { configs: vec![config("4x32", Role::Lesson, 0.5, 1.0)], cuda: false };
    let mut chart = bench_chart(&a, "CPU");
    let before = chart.top();
    chart.groups[0].bars[1].p90 = 40.0;
    assert_eq!(chart.top(), 2.0 * chart.groups[0].bars.iter().map(|b| b.median).fold(1.0, f64::max));
    assert!(chart.top() < 3.0 && before <= chart.top());
    let temp = tempfile::tempdir().expect("temp dir");
    let out = render(&chart, &out_dir(&temp)).expect("rendered");
    let texts = texts_of(&out.svg);
    assert!(texts.iter().any(|t| t == "p90 40.0"), "the cut whisker says where it ends: {texts:?}");
}
