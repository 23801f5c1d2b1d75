//! The timeline's data: the trial's phases from the trace, the OOM that ended it, and what the
//! drawing asks of them (steps, phases present, the highest value).
use crate::schema::{Phase, PhaseRecord, Status, SummaryRow};

/// The chart's data: the phases of one trial, in the order they ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub title: String,
    pub subtitle: String,
    pub trial: usize,
    /// The `[[variant]]` name, empty without variants; it goes into the file stem.
    pub variant: String,
    pub status: Status,
    /// In the order of the trace.
    pub points: Vec<TimelinePoint>,
    /// The device's memory budget in bytes, drawn as a dashed line.
    pub budget: Option<u64>,
    /// Where the trial ran out of memory, when it did.
    pub oom: Option<OomMark>,
}

/// One phase of the trial.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelinePoint {
    pub step: usize,
    pub micro: usize,
    pub phase: Phase,
    /// At the end of the phase.
    pub allocated: u64,
    pub reserved: u64,
    /// Within the phase.
    pub max_allocated: u64,
    pub max_reserved: u64,
    /// What the device reported as used (NVML), at the end of the phase.
    pub device_used: Option<u64>,
    /// When the phase started and how long it ran, in seconds since the trial started.
    pub start_seconds: f64,
    pub seconds: f64,
    /// The memory model's peak for the phase (baseline included), when known.
    pub predicted_peak: Option<u64>,
}

/// The out-of-memory that ended a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct OomMark {
    /// The index in `points` of the phase it struck in; None when the trace has no such phase.
    pub index: Option<usize>,
    pub phase: Option<Phase>,
    pub step: Option<usize>,
    /// What the failed allocation asked for.
    pub requested: Option<u64>,
    /// Allocated + requested when it failed: the least the phase needed.
    pub need: Option<u64>,
}

impl TimelinePoint {
    fn from_record(r: &PhaseRecord) -> TimelinePoint {
        TimelinePoint {
            step: r.step,
            micro: r.micro,
            phase: r.phase,
            allocated: r.memory_allocated,
            reserved: r.memory_reserved,
            max_allocated: r.max_memory_allocated,
            max_reserved: r.max_memory_reserved,
            device_used: r.device_used,
            start_seconds: (r.elapsed_seconds - r.phase_seconds).max(0.0),
            seconds: r.phase_seconds,
            predicted_peak: r.predicted_peak,
        }
    }

    /// The highest of the numbers drawn for this phase.
    pub(super) fn top(&self) -> u64 {
        [
            self.allocated,
            self.reserved,
            self.max_allocated,
            self.max_reserved,
            self.device_used.unwrap_or(0),
            self.predicted_peak.unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

impl Timeline {
    /// The records of `row`'s trial in `trace` (which may hold every trial of a run), in the
    /// order they were written, and the OOM that ended it if it did: in the last phase that
    /// matches the row's phase and step, or the last phase of all when none does.
    pub fn from_trace(
        trace: &[PhaseRecord],
        row: &SummaryRow,
        title: impl Into<String>,
        subtitle: impl Into<String>,
        budget: Option<u64>,
    ) -> Timeline {
        let points: Vec<TimelinePoint> =
            trace.iter().filter(|r| r.measured_by(row)).map(TimelinePoint::from_record).collect();
        let oom = (row.status == Status::Oom).then(|| {
            let at = |p: &TimelinePoint| Some(p.phase) == row.phase && Some(p.step) == row.step;
            let index = points.iter().rposition(at).or(points.len().checked_sub(1));
            let need = match (row.oom_allocated, row.oom_requested) {
                (Some(a), Some(r)) => a.checked_add(r),
                _ => None,
            };
            OomMark { index, phase: row.phase, step: row.step, requested: row.oom_requested, need }
        });
        Timeline {
            title: title.into(),
            subtitle: subtitle.into(),
            trial: row.trial,
            variant: row.variant.clone(),
            status: row.status,
            points,
            budget,
            oom,
        }
    }

    /// Whether any phase has a predicted peak.
    pub fn has_predicted(&self) -> bool {
        self.points.iter().any(|p| p.predicted_peak.is_some())
    }

    /// Whether the trace has NVML's numbers.
    pub fn has_device_used(&self) -> bool {
        self.points.iter().any(|p| p.device_used.is_some())
    }

    /// Whether reserved memory differs from allocated anywhere (it does not on the CPU, which
    /// has no caching allocator; then the reserved series would only hide the allocated one).
    pub fn reserved_differs(&self) -> bool {
        self.points.iter().any(|p| p.reserved != p.allocated || p.max_reserved != p.max_allocated)
    }

    /// The steps as `(step, first index, end index)`, in order: consecutive phases of one step.
    pub fn step_spans(&self) -> Vec<(usize, usize, usize)> {
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for (i, p) in self.points.iter().enumerate() {
            match spans.last_mut() {
                Some((step, _, end)) if *step == p.step => *end = i + 1,
                _ => spans.push((p.step, i, i + 1)),
            }
        }
        spans
    }

    /// Where the OOM cross is drawn: at what the phase needed; else the budget; else the peak
    /// the phase reached.
    pub(super) fn oom_marker(&self, oom: &OomMark) -> u64 {
        let reached = oom.index.and_then(|i| self.points.get(i)).map(|p| p.top()).unwrap_or(0);
        oom.need.or(self.budget).unwrap_or(reached)
    }

    /// The highest value drawn.
    pub(super) fn top(&self) -> u64 {
        let data = self.points.iter().map(TimelinePoint::top).max().unwrap_or(0);
        let oom = self.oom.as_ref().map(|o| self.oom_marker(o));
        [Some(data), oom, self.budget].into_iter().flatten().max().unwrap_or(0)
    }

    /// The phases in the order they first appear, for the band's key.
    pub(super) fn phases(&self) -> Vec<Phase> {
        let mut seen = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.phase) {
                seen.push(p.phase);
            }
        }
        seen
    }

    pub(super) fn trial_seconds(&self) -> f64 {
        self.points.iter().map(|p| p.start_seconds + p.seconds).fold(0.0, f64::max)
    }
}
