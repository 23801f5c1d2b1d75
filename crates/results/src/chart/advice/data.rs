//! The advice chart's data: points, a budget and notes, in the chart's own terms (`advise`
//! builds it from an advice: `advise::chart`).

/// How a point is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Fits,
    Borderline,
    Oom,
    /// The spec as written.
    Written,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdvicePoint {
    /// Shown beside the point when not empty.
    pub label: String,
    /// The peak the budget caps, in bytes.
    pub peak: u64,
    /// Predicted time per sample relative to the spec as written (an epoch's time), or the rank
    /// when there are no times.
    pub y: f64,
    pub mark: Mark,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdviceChart {
    pub title: String,
    pub subtitle: String,
    pub budget: u64,
    /// True: `y` is relative time; false: it is the rank.
    pub timed: bool,
    pub points: Vec<AdvicePoint>,
    pub notes: Vec<String>,
}
