//! `bench.png`'s data from the bench's analysis: a group per configuration that ran PyTorch's
//! default loop, each contender's bar over PyTorch's median, oomlab-off's target across its bar
//! (the chart itself, `chart::BenchChart`, knows nothing of contenders).
use super::analysis::Analysis;
use super::verdict::RatioKind;
use super::{format_seconds, Contender, BENCH_CHART};
use crate::chart::{BenchBar, BenchChart, BenchGroup, BenchSeries};

/// A contender's colour: its place in `Contender::ALL`, the same on every configuration.
fn colour(c: Contender) -> usize {
    Contender::ALL.iter().position(|k| *k == c).unwrap_or(0)
}

/// A group per configuration that has PyTorch's default loop to compare with.
pub fn chart(a: &Analysis, device: &str) -> BenchChart {
    let mut groups = Vec::new();
    for c in &a.configs {
        let Some(reference) = c.get(Contender::Pytorch).map(|r| r.spread.median).filter(|m| *m > 0.0) else {
            continue;
        };
        let target =
            c.verdicts.iter().find(|v| v.target.kind == RatioKind::OffOverPytorch).map(|v| v.target.limit);
        let bars = c
            .contenders
            .iter()
            .map(|r| BenchBar {
                colour: colour(r.contender),
                median: r.spread.median / reference,
                p10: r.spread.p10 / reference,
                p90: r.spread.p90 / reference,
                target: target.filter(|_| r.contender == Contender::OomlabOff),
            })
            .collect();
        groups.push(BenchGroup {
            label: c.name.clone(),
            reference_label: format!("PyTorch {}", format_seconds(reference)),
            bars,
        });
    }
    let series = Contender::ALL
        .into_iter()
        .filter(|k| groups.iter().any(|g| g.bars.iter().any(|b| b.colour == colour(*k))))
        .map(|k| BenchSeries { name: k.as_str().to_string(), colour: colour(k) })
        .collect();
    BenchChart {
        title: "oomlab's step time against PyTorch's loop".into(),
        subtitle: format!("{device}: median step over PyTorch's median, bars p10-p90; lower is faster"),
        stem: BENCH_CHART.into(),
        notes: vec![
            "Each bar: a contender's median step time over PyTorch's default loop's median on the same configuration \
             (the dashed line at 1); whiskers: p10-p90."
                .into(),
            "The black dash across oomlab-off's bar is its target against PyTorch. Steps: the host's clock between \
             step ends, the device waited for at each."
                .into(),
        ],
        groups,
        series,
        target_label: "target, oomlab-off".into(),
    }
}

#[cfg(test)]
#[path = "chart_tests.rs"]
mod tests;
