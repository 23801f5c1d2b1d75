//! The category chart's data: a bar per picked trial, its categories measured from the trace,
//! and the notes a reader needs to read the stacks.
use crate::chart::Compared;
use crate::schema::{Phase, PhaseRecord, SummaryRow};

/// The categories, bottom to top of a bar.
pub const CATEGORY_NAMES: [&str; 6] =
    ["data", "parameters", "optimizer state", "gradients", "batch", "activations"];

/// The chart's data: one bar per picked trial.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryBars {
    pub title: String,
    pub subtitle: String,
    pub bars: Vec<CategoryBar>,
    /// Which swept value the bars stand at (`Compared::note`), None without a sweep.
    pub comparison: Option<String>,
}

/// One trial's memory by category.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryBar {
    /// The variant's name (or the trial's, without variants).
    pub label: String,
    pub trial: usize,
    /// Bytes per category, in the order of [`CATEGORY_NAMES`].
    pub bytes: [u64; 6],
    /// `max_memory_allocated` minus the baseline.
    pub peak: u64,
    /// Whether the trial ran under autocast, whose weight copies count as activations.
    pub autocast: bool,
}

impl CategoryBar {
    pub fn total(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// The categories of `row`'s trial, from its rows of `trace`. Phases missing from the trace
    /// count as not having allocated anything.
    pub fn from_trace(label: impl Into<String>, row: &SummaryRow, trace: &[PhaseRecord]) -> CategoryBar {
        let mine: Vec<&PhaseRecord> = trace.iter().filter(|r| r.measured_by(row)).collect();
        let first = |phase: Phase| mine.iter().find(|r| r.phase == phase).map(|r| r.memory_allocated);
        let baseline = row.baseline_allocated;
        let data = first(Phase::Data).unwrap_or(baseline);
        let model = first(Phase::Model).unwrap_or(data);
        let loss = row.dtype.map_or(4, crate::spec::Dtype::loss_bytes);
        let optimizer = first(Phase::ZeroGrad).map_or(0, |z| z.saturating_sub(model).saturating_sub(loss));
        let gradients = match (first(Phase::OptimizerStep), first(Phase::ZeroGrad)) {
            (Some(step), Some(zero)) => step.saturating_sub(zero),
            _ => 0,
        };
        let to_device = first(Phase::ToDevice);
        let batch = to_device.map_or(0, |t| t.saturating_sub(model));
        let activations = match (first(Phase::Forward), to_device) {
            (Some(f), Some(t)) => f.saturating_sub(t),
            _ => 0,
        };
        CategoryBar {
            label: label.into(),
            trial: row.trial,
            bytes: [
                data.saturating_sub(baseline),
                model.saturating_sub(data),
                optimizer,
                gradients,
                batch,
                activations,
            ],
            peak: row.max_memory_allocated.saturating_sub(baseline),
            autocast: row.amp.is_some_and(|a| a != crate::spec::AmpKind::Off),
        }
    }
}

impl CategoryBars {
    /// One bar per trial picked (`figures::compared` picks them), with its label, and where
    /// they stand for the reader.
    pub fn from_picked(
        picked: &Compared,
        trace: &[PhaseRecord],
        title: impl Into<String>,
        subtitle: impl Into<String>,
    ) -> CategoryBars {
        let bars = picked
            .trials
            .iter()
            .map(|(label, row)| CategoryBar::from_trace(label.clone(), row, trace))
            .collect();
        CategoryBars { title: title.into(), subtitle: subtitle.into(), bars, comparison: picked.note.clone() }
    }

    fn autocast(&self) -> bool {
        self.bars.iter().any(|b| b.autocast)
    }

    /// The highest value drawn: a stack or a peak.
    pub(super) fn top(&self) -> u64 {
        self.bars.iter().map(|b| b.total().max(b.peak)).max().unwrap_or(0)
    }

    pub(super) fn notes(&self) -> Vec<String> {
        let mut notes =
            vec!["Each category is measured at the first training step; they are not all live at once, \
             so the stack is not the peak: the black line marks the trial's measured peak."
                .to_string()];
        if self.autocast() {
            notes.push(
                "Under autocast, activations include autocast's cached half-precision copies of the weights."
                    .to_string(),
            );
        }
        notes
    }
}
