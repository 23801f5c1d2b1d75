//! The sweep chart's data: a point per trial from the summary's rows, and what the drawing asks
//! of them (where an OOM is marked, how high the axis goes).
use crate::chart::scale::swept_key;
use crate::schema::{Status, SummaryRow};

/// The chart's data: one point per trial, sorted by the swept value.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPeak {
    pub title: String,
    /// Device, model, optimizer...: what the reader needs to read the numbers.
    pub subtitle: String,
    /// The swept key's last part: "depth" for `model.depth`.
    pub x_label: String,
    /// Sorted by `x`.
    pub points: Vec<PeakPoint>,
    /// The device's memory budget in bytes, drawn as a dashed line.
    pub budget: Option<u64>,
    /// Appended to the file stem, e.g. "-fp16" for one variant of a spec.
    pub stem_suffix: Option<String>,
    /// The estimate's curve through the values a guided search did not try, sorted by x: the
    /// predicted peak (baseline included) as the run predicted it. Empty where it made none.
    pub curve: Vec<(f64, u64)>,
}

/// One trial of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakPoint {
    /// The swept value.
    pub x: f64,
    pub status: Status,
    /// Peaks over the trial, in bytes (up to the failure for an OOM).
    pub max_allocated: u64,
    pub max_reserved: u64,
    /// For an OOM: what was allocated plus what was requested when it failed, the least the
    /// trial would have needed. None when the message did not give both.
    pub oom_need: Option<u64>,
    /// The memory model's peak for the whole trial (baseline included), when the summary has it.
    pub predicted: Option<u64>,
}

impl PeakPoint {
    fn from_row(row: &SummaryRow, x: f64) -> PeakPoint {
        let oom_need = match (row.status, row.oom_allocated, row.oom_requested) {
            (Status::Oom, Some(allocated), Some(requested)) => allocated.checked_add(requested),
            // Not run: the estimate's peak is what it would have needed.
            (Status::PredictedOom, _, _) => row.predicted_peak,
            _ => None,
        };
        // A predicted OOM is drawn with the OOMs, at its predicted need.
        let status = if row.status == Status::PredictedOom { Status::Oom } else { row.status };
        PeakPoint {
            x,
            status,
            max_allocated: row.max_memory_allocated,
            max_reserved: row.max_memory_reserved,
            oom_need,
            predicted: row.predicted_peak,
        }
    }
}

impl SweepPeak {
    /// The points of `rows` that have a swept value, sorted by it (a bisection runs them in
    /// another order: 1, 2, 4, ..., 64, 48, 40, ...). The x label is the last part of the
    /// first such row's `field`, or "value" when the field is empty.
    pub fn from_summary(
        rows: &[SummaryRow],
        title: impl Into<String>,
        subtitle: impl Into<String>,
        budget: Option<u64>,
    ) -> SweepPeak {
        let swept: Vec<(&SummaryRow, f64)> =
            rows.iter().filter_map(|row| row.value.filter(|v| v.is_finite()).map(|v| (row, v))).collect();
        let x_label = swept.first().map_or("value", |(row, _)| swept_key(row.field)).to_string();
        let mut points: Vec<PeakPoint> =
            swept.into_iter().map(|(row, x)| PeakPoint::from_row(row, x)).collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        SweepPeak {
            title: title.into(),
            subtitle: subtitle.into(),
            x_label,
            points,
            budget,
            stem_suffix: None,
            curve: Vec::new(),
        }
    }

    /// The trials that ran, in order.
    pub fn ok_points(&self) -> impl Iterator<Item = &PeakPoint> {
        self.points.iter().filter(|p| p.status.fitted())
    }

    /// The trials that ran out of memory, in order.
    pub fn oom_points(&self) -> impl Iterator<Item = &PeakPoint> {
        self.points.iter().filter(|p| p.status == Status::Oom)
    }

    /// The trials with a predicted peak, in order.
    pub(super) fn predicted_points(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.points.iter().filter_map(|p| p.predicted.map(|b| (p.x, b)))
    }

    /// The predicted line: the curve where the run made one, else through the trials' own
    /// predictions; drawn only up to the axis's top, a tenth past what was measured or budgeted,
    /// so that the curve's far end does not flatten the trials.
    pub(super) fn predicted_line(&self) -> Vec<(f64, u64)> {
        if self.curve.is_empty() {
            return self.predicted_points().collect();
        }
        let cap = self.top();
        self.curve.iter().copied().take_while(|&(_, b)| b <= cap.saturating_add(cap / 10)).collect()
    }

    /// The trial with the largest swept value that ran.
    pub fn largest_fit(&self) -> Option<&PeakPoint> {
        self.ok_points().last()
    }

    /// Where an OOM is marked: at what it needed; else at the budget; else at the peak it
    /// reached before failing (a lower bound too); else as high as anything measured, since it
    /// needed more than the trials that ran.
    pub(super) fn oom_marker(&self, p: &PeakPoint) -> u64 {
        let reached = p.max_allocated.max(p.max_reserved);
        p.oom_need.or(self.budget).or((reached > 0).then_some(reached)).unwrap_or_else(|| self.measured_top())
    }

    /// The highest value measured: peaks of the trials that ran, and the known needs.
    fn measured_top(&self) -> u64 {
        let peaks = self.ok_points().map(|p| p.max_allocated.max(p.max_reserved));
        let needs = self.oom_points().filter_map(|p| p.oom_need);
        peaks.chain(needs).max().unwrap_or(0)
    }

    /// The highest value drawn: peaks, OOM markers, predictions and budget.
    pub(super) fn top(&self) -> u64 {
        let ooms = self.oom_points().map(|p| self.oom_marker(p)).max();
        let predicted = self.predicted_points().map(|(_, b)| b).max();
        [Some(self.measured_top()), ooms, predicted, self.budget].into_iter().flatten().max().unwrap_or(0)
    }
}
