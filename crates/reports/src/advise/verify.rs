//! `advise --verify N`: the top N options that fit and the N nearest misses, trained for real
//! under the budget on the device, with what was predicted beside what was measured. On the CPU
//! the estimate counts the allocator's bytes, so every option predicted to fit must train and
//! every one predicted not to must run out of memory (`tests/suite/advise.rs` holds it).
use anyhow::Result;
use serde::Serialize;

use super::evaluate::{Evaluated, Evaluator, Verdict};
use super::Advice;
use crate::estimate::Target;
use crate::run::plan::Plan;
use crate::run::progress::Progress;
use crate::schema::{Status, TraceLevel};

/// One option trained.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    pub rank: usize,
    pub describe: String,
    pub predicted: Verdict,
    pub status: Status,
    /// Where it ran out of memory.
    pub phase: Option<String>,
    pub predicted_peak: u64,
    /// `max_memory_allocated` on the CPU, `max_memory_reserved` on CUDA (what the budget caps).
    pub measured_peak: u64,
    pub predicted_seconds: Option<f64>,
    pub measured_seconds: Option<f64>,
    /// Whether the outcome is the one predicted (`None` for a borderline prediction).
    pub agrees: Option<bool>,
    /// Steps trained: the spec's, at least 3 so that a step time leaves the first out.
    pub steps: usize,
    pub message: String,
}

/// The options `--verify N` trains: the smallest change that fits first (rank `smallest`, what
/// the report's answer names), then the first that fit until `n` of them (of those the table
/// lists: none that only adds a change buying nothing to another), then the `n` nearest misses.
pub fn chosen(options: &[Evaluated], smallest: Option<usize>, n: usize) -> Vec<&Evaluated> {
    let named = smallest.and_then(|r| options.iter().find(|o| o.rank == r)).filter(|_| n > 0);
    let rest = options.iter().filter(|o| o.listed && Some(o.rank) != named.map(|o| o.rank));
    let fit = named.into_iter().chain(rest).take(n);
    let miss = options.iter().filter(|o| o.verdict == Verdict::Oom).take(n);
    fit.chain(miss).collect()
}

pub fn verify(
    plan: &Plan,
    advice: &Advice,
    n: usize,
    eval: &Evaluator,
    quiet: bool,
) -> Result<Vec<Verified>> {
    let picked = chosen(&advice.options, advice.smallest, n);
    let device = plan.device.resolve(crate::libtorch::cuda::devices()).map_err(anyhow::Error::msg)?;
    let probe = crate::run::open_probe(device, Some(advice.budget))?;
    let configs: Vec<crate::spec::Config> = picked
        .iter()
        .map(|o| {
            let mut c = o.candidate.config.clone();
            c.training.steps = c.training.steps.max(3);
            c
        })
        .collect();
    // What libtorch keeps for the process (cuBLAS workspaces) is made before the first trial,
    // as `run` does, so that every trial starts from the same baseline.
    crate::train::warm_up(configs.iter(), &*probe, TraceLevel::Phases)?;
    let progress = Progress::new(Some(picked.len()), quiet);
    let mut out = Vec::new();
    for (i, (o, config)) in picked.iter().zip(&configs).enumerate() {
        progress.start(&format!("verifying #{} {}", o.rank, o.describe));
        let row = crate::train::run_trial(config, &*probe, i + 1, TraceLevel::Phases, &mut |_| Ok(()))?;
        // Judged against the prediction for what was trained (more steps than the spec's, at
        // least 3, which raises no peak but a kept history's).
        let prediction = eval.predict(config).ok();
        let predicted_peak = prediction.as_ref().map_or(o.peak, |p| eval.capped_peak(p));
        let predicted = prediction.as_ref().map_or(o.verdict, |p| eval.verdict(config, p));
        let measured_peak = match eval.target {
            Target::Cpu => row.max_memory_allocated,
            Target::Cuda => row.max_memory_reserved,
        };
        let agrees = match predicted {
            Verdict::Fits => Some(row.status.fitted()),
            Verdict::Oom => Some(row.status == Status::Oom),
            _ => None,
        };
        let measured_seconds = row.step_seconds.filter(|_| row.status.fitted());
        let predicted_seconds = o.step_seconds;
        let v = Verified {
            rank: o.rank,
            describe: o.describe.clone(),
            predicted,
            status: row.status,
            phase: row.phase.map(|p| p.to_string()),
            predicted_peak,
            measured_peak,
            predicted_seconds,
            measured_seconds,
            agrees,
            steps: config.training.steps,
            message: row.message.clone(),
        };
        progress.done(&format!(
            "#{} {}: predicted {}, {}{}",
            v.rank,
            v.describe,
            v.predicted.as_str(),
            v.status,
            if v.agrees == Some(false) { "  (DISAGREES)" } else { "" }
        ));
        out.push(v);
    }
    progress.finish();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::rank::{rank, tests::evaluated};

    /// The smallest change the answer names is trained first, even where faster options rank
    /// above it; then the fastest until N fit, then the N nearest misses.
    #[test]
    fn the_smallest_change_named_is_verified_first() {
        let written = evaluated("written", Verdict::Oom, 100, Some(2.0), 0);
        let options = vec![
            evaluated("fast, two changes", Verdict::Fits, 60, Some(1.0), 2),
            evaluated("faster, two changes", Verdict::Fits, 70, Some(0.5), 2),
            evaluated("slow, one change", Verdict::Fits, 50, Some(4.0), 1),
            evaluated("near miss", Verdict::Oom, 101, Some(1.0), 1),
        ];
        let (ranked, smallest) = rank(options, &written);
        let smallest = smallest.expect("a smallest change that fits");
        let named = |n: usize| -> Vec<String> {
            chosen(&ranked, Some(smallest), n).iter().map(|o| o.describe.clone()).collect()
        };
        assert_eq!(ranked[smallest - 1].describe, "slow, one change");
        assert_ne!(ranked[0].describe, "slow, one change", "ranked below a faster option");
        assert_eq!(named(1), ["slow, one change", "near miss"]);
        let two = named(2);
        assert_eq!(two[0], "slow, one change");
        assert_eq!(two.len(), 3, "{two:?}");
        assert_eq!(two.iter().filter(|d| *d == "slow, one change").count(), 1, "once: {two:?}");
        assert!(named(0).is_empty());
        // Without a smallest change (the spec fits as written), the table's order.
        let plain: Vec<&str> = chosen(&ranked, None, 1).iter().map(|o| o.describe.as_str()).collect();
        assert_eq!(plain[0], ranked.iter().find(|o| o.listed).unwrap().describe);
    }
}
