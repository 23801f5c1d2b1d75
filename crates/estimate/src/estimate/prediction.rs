//! What a replay gives back: a trial predicted phase by phase ([`Prediction`], [`PhasePrediction`],
//! [`PredictedOom`]), the questions asked of it (its peak, whether it fits a budget, where it first
//! goes over), and [`relative_error`] to hold it against a measurement.
use serde::Serialize;

use super::evidence::Bound;
use super::{Categories, DataShape, Options, Target};
use crate::schema::Phase;

/// One phase of one (micro-)step, as the trace records it, predicted. Bytes are the trial's own:
/// add the allocator's baseline to compare with `memory_allocated`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhasePrediction {
    /// 0 for `data` and `model`, then 1, 2, ...
    pub step: usize,
    /// The micro-batch (gradient accumulation), from 0.
    pub micro: usize,
    pub phase: Phase,
    /// Allocated when the phase ends.
    pub allocated_end: u64,
    /// The highest allocated during the phase (the probe resets its peak at the phase's start).
    pub peak: u64,
    /// Reserved memory (segments) when the phase ends and its highest during it, over the
    /// baseline's; on the CPU, which has no cache, the allocated figures.
    pub reserved_end: u64,
    pub reserved_peak: u64,
    /// What was live at that peak.
    pub by_category: Categories,
    /// What is live when the phase ends.
    pub end_by_category: Categories,
}

/// A trial, predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Every phase in the order the trial runs them.
    pub phases: Vec<PhasePrediction>,
    /// The highest of the phases' peaks: the trial's `max_memory_allocated` over its baseline.
    pub peak: u64,
    /// The highest reserved memory over the baseline's (CUDA: segments; CPU: as `peak`).
    pub reserved_peak: u64,
    /// What the allocator holds before the trial, allocated and reserved: the workspaces on
    /// CUDA, nothing on the CPU.
    pub baseline_allocated: u64,
    pub baseline_reserved: u64,
    /// CUDA with a limit: where the allocator refused a segment even with its cache emptied.
    pub oom: Option<PredictedOom>,
    pub param_count: u64,
    pub param_bytes: u64,
    /// Optimizer state once allocated.
    pub optimizer_state_bytes: u64,
    pub shape: DataShape,
    pub options: Options,
    /// Where the prediction is less than exact, in words (empty: exact on the CPU).
    pub notes: Vec<String>,
    /// The rules a CUDA replay used, which a GPU confirmed, and how high the others allow the
    /// peaks to be ([`super::evidence`]); on the CPU the prediction itself.
    pub bound: Bound,
}

impl Prediction {
    /// What `max_memory_allocated` reads at the trial's peak: the baseline (workspaces) and the
    /// trial's own bytes.
    pub fn peak_allocated(&self) -> u64 {
        self.baseline_allocated.saturating_add(self.peak)
    }

    /// What `max_memory_reserved` reads at the trial's highest.
    pub fn peak_reserved(&self) -> u64 {
        self.baseline_reserved.saturating_add(self.reserved_peak)
    }

    /// The peak in words: allocated, and on CUDA reserved too.
    pub fn describe_peak(&self) -> String {
        let size = crate::spec::format_size;
        match self.options.target {
            Target::Cpu => size(self.peak_allocated()),
            Target::Cuda => {
                format!("{} allocated, {} reserved", size(self.peak_allocated()), size(self.peak_reserved()))
            }
        }
    }

    /// The first phase that reaches the trial's peak.
    pub fn peak_phase(&self) -> &PhasePrediction {
        self.phases.iter().find(|p| p.peak == self.peak).expect("a trial has phases")
    }

    /// Whether the trial fits under a budget. On the CPU, counting from an allocator at zero:
    /// the counting allocator refuses an allocation that would take it past the budget, so the
    /// trial fits exactly when its peak does (subtract a nonzero baseline from the budget
    /// first). On CUDA the budget caps reserved memory, workspaces included: replayed under it
    /// (`Options::under`), the trial fits when no segment was refused; otherwise when reserved
    /// memory, never given back, stays under it.
    pub fn fits(&self, budget: u64) -> bool {
        match self.options.target {
            Target::Cpu => self.peak <= budget,
            Target::Cuda if self.options.limit == Some(budget) => self.oom.is_none(),
            Target::Cuda => self.baseline_reserved.saturating_add(self.reserved_peak) <= budget,
        }
    }

    /// Whether the trial fits under `budget` even at its [`Bound`]: what promises a fit asks
    /// this. The same as [`Self::fits`] where every rule used is confirmed (and on the CPU).
    pub fn fits_surely(&self, budget: u64) -> bool {
        self.fits(budget)
            && match self.options.target {
                Target::Cpu => true,
                Target::Cuda => self.bound.reserved <= budget,
            }
    }

    /// Whether the bound differs from the prediction (some rule used is unconfirmed and widens it).
    pub fn is_bounded_above(&self) -> bool {
        self.bound.allocated > self.peak_allocated()
    }

    /// Where the trial is predicted to run out of memory under `budget`: the first phase whose
    /// peak is over it (CUDA: the phase of the refusal, or whose reserved peak is over it).
    pub fn first_over(&self, budget: u64) -> Option<&PhasePrediction> {
        match self.options.target {
            Target::Cpu => self.phases.iter().find(|p| p.peak > budget),
            Target::Cuda if self.options.limit == Some(budget) => {
                self.oom.map(|o| &self.phases[o.phase_index])
            }
            Target::Cuda => {
                self.phases.iter().find(|p| self.baseline_reserved.saturating_add(p.reserved_peak) > budget)
            }
        }
    }

    /// The prediction for one phase of the trace.
    pub fn phase(&self, step: usize, micro: usize, phase: Phase) -> Option<&PhasePrediction> {
        self.phases.iter().find(|p| p.step == step && p.micro == micro && p.phase == phase)
    }

    /// The predicted peak of what one trace row measures, over the baseline: a phase's, or under
    /// `--trace steps` a whole step's (step 0: the set-up phases).
    pub fn row_peak(&self, step: usize, micro: usize, phase: Phase) -> Option<u64> {
        match phase {
            Phase::Step => self.phases.iter().filter(|p| p.step == step).map(|p| p.peak).max(),
            _ => self.phase(step, micro, phase).map(|p| p.peak),
        }
    }
}

/// Where a replay under a limit ran out of memory: the allocation refused.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictedOom {
    /// Into [`Prediction::phases`].
    pub phase_index: usize,
    /// What was refused ("Tried to allocate"): on CUDA the segment, on the CPU the tensor.
    pub requested: u64,
    /// Reserved memory when it was refused, workspaces included (the CPU: allocated).
    pub reserved: u64,
}

/// `(predicted - measured) / measured`: the error column a summary can show. 0 when both are 0.
pub fn relative_error(predicted: u64, measured: u64) -> f64 {
    if measured == 0 {
        return if predicted == 0 { 0.0 } else { f64::INFINITY };
    }
    (predicted as f64 - measured as f64) / measured as f64
}
