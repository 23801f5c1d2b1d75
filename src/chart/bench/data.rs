//! The bench chart's data: a group of bars per configuration, each bar a contender's median
//! and spread over PyTorch's median.
use crate::bench::analysis::Analysis;
use crate::bench::verdict::RatioKind;
use crate::bench::{format_seconds, Contender, BENCH_CHART};

/// The whole chart.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchChart {
    pub title: String,
    pub subtitle: String,
    pub groups: Vec<BenchGroup>,
    /// The contenders that have a bar somewhere, in the legend's order.
    pub contenders: Vec<Contender>,
}

/// One configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchGroup {
    pub label: String,
    /// PyTorch's median step, in seconds: what the bars are multiples of.
    pub reference: f64,
    pub bars: Vec<BenchBar>,
    /// The limit of oomlab `off` over PyTorch, drawn across oomlab-off's bar.
    pub target: Option<f64>,
}

/// A contender's median step and its p10-p90, as multiples of the group's reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchBar {
    pub contender: Contender,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
}

impl BenchChart {
    /// A group per configuration that has PyTorch's default loop to compare with.
    pub fn from_analysis(a: &Analysis, device: &str) -> BenchChart {
        let mut groups = Vec::new();
        for c in &a.configs {
            let Some(reference) = c.get(Contender::Pytorch).map(|r| r.spread.median).filter(|m| *m > 0.0)
            else {
                continue;
            };
            let bars = c
                .contenders
                .iter()
                .map(|r| BenchBar {
                    contender: r.contender,
                    median: r.spread.median / reference,
                    p10: r.spread.p10 / reference,
                    p90: r.spread.p90 / reference,
                })
                .collect();
            let target = c
                .verdicts
                .iter()
                .find(|v| v.target.kind == RatioKind::OffOverPytorch)
                .map(|v| v.target.limit);
            groups.push(BenchGroup { label: c.name.clone(), reference, bars, target });
        }
        let contenders = Contender::ALL
            .into_iter()
            .filter(|k| groups.iter().any(|g| g.bars.iter().any(|b| b.contender == *k)))
            .collect();
        BenchChart {
            title: "oomlab's step time against PyTorch's loop".into(),
            subtitle: format!("{device}: median step over PyTorch's median, bars p10-p90; lower is faster"),
            groups,
            contenders,
        }
    }

    /// The top of the plot: the highest spread, but no higher than twice the highest median or
    /// target (and PyTorch's 1), so that one slow step in a noisy sample does not flatten every
    /// bar; a whisker past it is cut there and labelled with its value.
    pub(super) fn top(&self) -> f64 {
        let bars = || self.groups.iter().flat_map(|g| g.bars.iter());
        let medians =
            bars().map(|b| b.median).chain(self.groups.iter().filter_map(|g| g.target)).fold(1.0, f64::max);
        bars().map(|b| b.p90).fold(medians, f64::max).min(2.0 * medians)
    }

    /// "PyTorch 1.85 ms" above each group.
    pub(super) fn reference_label(g: &BenchGroup) -> String {
        format!("PyTorch {}", format_seconds(g.reference))
    }

    pub(super) fn stem() -> &'static str {
        BENCH_CHART
    }

    pub(super) fn notes(&self) -> Vec<String> {
        vec![
            "Each bar: a contender's median step time over PyTorch's default loop's median on the same configuration \
             (the dashed line at 1); whiskers: p10-p90."
                .into(),
            "The black dash across oomlab-off's bar is its target against PyTorch. Steps: the host's clock between \
             step ends, the device waited for at each."
                .into(),
        ]
    }
}
