//! From the workers' reports to results: each contender's steps pooled over its processes, their
//! spreads, the per-phase medians, the verdicts, and the check that every process of a
//! configuration trained the same model.
use std::collections::BTreeMap;

use anyhow::{bail, Result};

use super::configs::{Plan, Role};
use super::runner::Sample;
use super::stats::Spread;
use super::verdict::{self, Measured, Verdict};
use super::Contender;

/// One contender on one configuration, over every round.
#[derive(Debug, Clone, PartialEq)]
pub struct ContenderResult {
    pub contender: Contender,
    pub spread: Spread,
    /// Per phase, over the pooled steps; empty when the contender does not time phases.
    pub phases: BTreeMap<String, Spread>,
    pub processes: usize,
}

/// What both sides trained: it must be the same model, trained the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct SameModel {
    pub param_count: u64,
    /// The last step's loss on each side (its first process's).
    pub oomlab_loss: Option<f64>,
    pub pytorch_loss: Option<f64>,
    /// The largest difference between any two processes' final losses, over the largest loss.
    pub loss_difference: f64,
}

/// One configuration's results.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigResult {
    pub name: String,
    pub title: String,
    pub role: Role,
    pub warmup: usize,
    /// Timed steps per process.
    pub steps: usize,
    pub contenders: Vec<ContenderResult>,
    pub verdicts: Vec<Verdict>,
    pub same_model: SameModel,
}

impl ConfigResult {
    pub fn get(&self, c: Contender) -> Option<&ContenderResult> {
        self.contenders.iter().find(|r| r.contender == c)
    }
}

/// Every configuration's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    pub configs: Vec<ConfigResult>,
    pub cuda: bool,
}

/// Pools each contender's samples per configuration and judges the targets. Fails when a
/// process trained another model than the configuration's (a parameter count that differs):
/// the timings would compare two different things.
pub fn analyse(plan: &Plan, samples: &[Sample]) -> Result<Analysis> {
    let mut configs = Vec::new();
    for c in &plan.configs {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.config == c.name).collect();
        if mine.is_empty() {
            continue;
        }
        let expected = c.param_count();
        for s in &mine {
            if s.report.param_count != expected {
                bail!(
                    "{} trained {} parameters for {}, where the configuration has {expected}: the two sides \
                     did not train the same model, so their times do not compare",
                    s.contender,
                    s.report.param_count,
                    c.name
                );
            }
        }
        // Per process: the interval of a ratio resamples processes first (see `stats`).
        let mut steps: BTreeMap<Contender, Vec<Vec<f64>>> = BTreeMap::new();
        let mut phases: BTreeMap<Contender, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
        let mut processes: BTreeMap<Contender, usize> = BTreeMap::new();
        for s in &mine {
            steps.entry(s.contender).or_default().push(s.report.step_seconds.clone());
            *processes.entry(s.contender).or_default() += 1;
            for (phase, secs) in &s.report.phase_seconds {
                phases.entry(s.contender).or_default().entry(phase.clone()).or_default().extend(secs);
            }
        }
        let contenders = Contender::ALL
            .into_iter()
            .filter_map(|k| {
                Some(ContenderResult {
                    contender: k,
                    spread: Spread::of(&steps.get(&k)?.concat())?,
                    phases: phases
                        .get(&k)
                        .map(|m| m.iter().filter_map(|(p, v)| Some((p.clone(), Spread::of(v)?))).collect())
                        .unwrap_or_default(),
                    processes: processes.get(&k).copied().unwrap_or(0),
                })
            })
            .collect();
        let measured = Measured { steps: &steps, phases: &phases, cuda: plan.cuda };
        let verdicts = verdict::targets(c.role, plan.cuda)
            .into_iter()
            .filter_map(|t| verdict::judge(t, &measured))
            .collect();
        configs.push(ConfigResult {
            name: c.name.clone(),
            title: c.title.clone(),
            role: c.role,
            warmup: c.warmup,
            steps: c.steps,
            contenders,
            verdicts,
            same_model: same_model(expected, &mine),
        });
    }
    Ok(Analysis { configs, cuda: plan.cuda })
}

fn same_model(param_count: u64, samples: &[&Sample]) -> SameModel {
    let first = |python: bool| {
        samples
            .iter()
            .filter(|s| s.contender.python_mode().is_some() == python)
            .find_map(|s| s.report.final_loss)
    };
    let losses: Vec<f64> = samples.iter().filter_map(|s| s.report.final_loss).collect();
    let (lo, hi) = losses.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let scale = lo.abs().max(hi.abs());
    let loss_difference = match losses.len() {
        0 | 1 => 0.0,
        _ if scale > 0.0 => (hi - lo) / scale,
        _ => 0.0,
    };
    SameModel { param_count, oomlab_loss: first(false), pytorch_loss: first(true), loss_difference }
}
