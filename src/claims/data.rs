//! One experiment's results as the claims read them: summary rows, trace and manifest, with the
//! few look-ups every claim needs.
use std::path::Path;

use anyhow::Result;

use crate::record::{Phase, PhaseRecord, Status, SummaryRow};
use crate::results::{self, Manifest};

pub struct Experiment {
    pub rows: Vec<SummaryRow>,
    pub trace: Vec<PhaseRecord>,
    pub manifest: Manifest,
}

impl Experiment {
    /// Reads `dir/name`, or `None` when that experiment was not run there.
    pub fn read(dir: &Path, name: &str) -> Result<Option<Experiment>> {
        let d = dir.join(name);
        if !d.join(results::SUMMARY).exists() {
            return Ok(None);
        }
        Ok(Some(Experiment {
            rows: results::read_summary(&d)?,
            trace: results::read_trace(&d)?,
            manifest: Manifest::read(&d)?,
        }))
    }

    /// The first trial of a variant.
    pub fn variant(&self, name: &str) -> Option<&SummaryRow> {
        self.rows.iter().find(|r| r.variant == name)
    }

    /// Allocated bytes at the end of a phase of a step (the last micro-batch's, if several).
    pub fn allocated_after(&self, trial: usize, step: usize, phase: Phase) -> Option<u64> {
        self.trace
            .iter()
            .rfind(|t| t.trial == trial && t.step == step && t.phase == phase)
            .map(|t| t.memory_allocated)
    }

    /// The highest peak within one phase over a trial's steps.
    pub fn phase_peak(&self, trial: usize, phase: Phase) -> Option<u64> {
        self.trace
            .iter()
            .filter(|t| t.trial == trial && t.phase == phase)
            .map(|t| t.max_memory_allocated)
            .max()
    }

    /// Allocated bytes at the end of each step (its last phase), in step order.
    pub fn end_of_steps(&self, trial: usize) -> Vec<(usize, u64)> {
        let mut out: Vec<(usize, u64)> = Vec::new();
        for t in self.trace.iter().filter(|t| t.trial == trial && t.step > 0) {
            match out.last_mut() {
                Some(last) if last.0 == t.step => last.1 = t.memory_allocated,
                _ => out.push((t.step, t.memory_allocated)),
            }
        }
        out
    }

    /// Ok rows as (swept value, peak allocated) points, for one variant ("" for none).
    pub fn peaks(&self, variant: &str) -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter(|r| r.status == Status::Ok && r.variant == variant)
            .filter_map(|r| Some((r.value?, r.max_memory_allocated as f64)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }

    pub fn answer(&self, variant: &str) -> Option<&results::manifest::Answer> {
        self.manifest.answers.iter().find(|a| a.variant == variant)
    }
}
