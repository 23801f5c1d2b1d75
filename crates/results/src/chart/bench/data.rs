//! The bench chart's data: a group of bars per configuration, each bar a series' median and
//! spread over the group's reference, in the chart's own terms (`bench::chart` fills it from the
//! bench's analysis).

/// The whole chart.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchChart {
    pub title: String,
    pub subtitle: String,
    /// The file name, without extension.
    pub stem: String,
    pub notes: Vec<String>,
    pub groups: Vec<BenchGroup>,
    /// The series that have a bar somewhere, in the legend's order.
    pub series: Vec<BenchSeries>,
    /// The legend's name for a group's target, drawn across the bar that carries it.
    pub target_label: String,
}

/// A contender: its name in the legend and its colour (an index into the house palette, the
/// same on every configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSeries {
    pub name: String,
    pub colour: usize,
}

/// One configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchGroup {
    pub label: String,
    /// What the bars are multiples of, in words above the group ("PyTorch 1.85 ms").
    pub reference_label: String,
    pub bars: Vec<BenchBar>,
}

/// A series' median step and its p10-p90, as multiples of the group's reference; `target`, a
/// limit drawn across this bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchBar {
    /// Its series' colour (an index into the house palette).
    pub colour: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub target: Option<f64>,
}

impl BenchChart {
    /// The top of the plot: the highest spread, but no higher than twice the highest median or
    /// target (and PyTorch's 1), so that one slow step in a noisy sample does not flatten every
    /// bar; a whisker past it is cut there and labelled with its value.
    pub fn top(&self) -> f64 {
        let bars = || self.groups.iter().flat_map(|g| g.bars.iter());
        let medians = bars()
            .map(|b| b.median)
            .chain(self.groups.iter().flat_map(|g| g.bars.iter().filter_map(|b| b.target)))
            .fold(1.0, f64::max);
        bars().map(|b| b.p90).fold(medians, f64::max).min(2.0 * medians)
    }
}
