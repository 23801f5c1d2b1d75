//! Trading time for memory: gradient checkpointing's saving and its cost in step time, and
//! gradient accumulation's smaller peak.
use super::{claim, kept_by_forward, not_run, pct, size, Get};
use crate::claims::band::Band;
use crate::claims::{Claim, Verdict};
use crate::results::ExperimentDir as Experiment;

/// "~40-50% memory on activations".
pub(super) const ACTIVATION_SAVING: Band = Band::new(0.40, 0.50, 0.05);
/// "~20-30%" more training time.
const SLOWDOWN: Band = Band::new(0.20, 0.30, 0.05);

pub(super) fn checkpoint_memory(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing saves ~40-50% memory on activations";
    const E: &str = "checkpointing";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(none) = kept_by_forward(e, "none") else { return not_run(C, E) };
    let savings: Vec<(&str, Option<f64>)> = ["every1", "every4", "sqrt"]
        .iter()
        .map(|v| (*v, kept_by_forward(e, v).map(|k| 1.0 - k / none)))
        .collect();
    let peak = |v: &str| e.variant(v).map(|r| r.max_memory_allocated as f64);
    let peak_saving = match (peak("none"), peak("sqrt")) {
        (Some(a), Some(b)) => pct(1.0 - b / a),
        _ => "-".into(),
    };
    let measured = format!(
        "activations kept by forward: none {}; saved {}; peak saved (sqrt) {peak_saving}",
        size(none),
        savings
            .iter()
            .map(|(v, s)| format!("{v} {}", s.map_or("-".into(), pct)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let verdict = savings[2].1.map_or(Verdict::NotRun, |s| ACTIVATION_SAVING.judge(s));
    let why = format!(
        "activations = memory the forward pass leaves allocated for backward (after forward minus \
         after to_device); checkpointing keeps only segment inputs, so the saving grows with depth \
         and is not a fixed 40-50% (verdict on sqrt(n) segments: {}).",
        ACTIVATION_SAVING.rule()
    );
    claim(C, E, measured, verdict, why)
}

pub(super) fn checkpoint_time(get: Get) -> Claim {
    const C: &str = "Gradient checkpointing increases training time by ~20-30%";
    const E: &str = "checkpointing";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(base) = Steps::of(e, "none") else { return not_run(C, E) };
    let mut parts = vec![format!(
        "step time without: median {:.3} s ({} timed steps in {} round{})",
        base.median(),
        base.count(),
        base.rounds.len(),
        if base.rounds.len() == 1 { "" } else { "s" }
    )];
    let mut sqrt = None;
    for v in ["every1", "every4", "sqrt"] {
        let Some(s) = Steps::of(e, v).and_then(|s| s.against(&base)) else { return not_run(C, E) };
        parts.push(format!("{v} {}", s.describe()));
        if v == "sqrt" {
            sqrt = Some(s);
        }
    }
    let sqrt = sqrt.expect("sqrt is measured");
    let faults = ["none", "sqrt"].map(|v| Steps::of(e, v).and_then(|s| s.faults_per_step()));
    if let [Some(a), Some(b)] = faults {
        parts.push(format!("page faults a step: none {a:.0}, sqrt {b:.0}"));
    }
    let verdict = sqrt.verdict(&SLOWDOWN);
    let lead = sqrt.unjudged(&SLOWDOWN).map(|u| u + ". ").unwrap_or_default();
    let why = format!(
        "{lead}step times after each trial's first step (which makes the optimizer's state), the variants' \
         trials interleaved round after round (`run.rounds`) so that each is timed across the same \
         stretch of time; the slowdown is the ratio of the medians, with a 90% interval from resampling \
         the rounds and their steps. Recomputing the forward of each segment costs about one more forward \
         pass, a third of a step. Verdict on sqrt(n) {}, and only where the interval clears the band's \
         edges ({}).{}",
        sqrt.describe(),
        SLOWDOWN.rule(),
        cpu_times(e)
    );
    claim(C, E, parts.join("; "), verdict, why)
}

/// What a CPU's step time holds that a GPU's does not, for the timing claims' reasons, after
/// a space: nothing for results made on a GPU.
pub(super) fn cpu_times(e: &Experiment) -> String {
    if e.manifest.device.is_cuda() {
        String::new()
    } else {
        format!(" {CPU_TIMES}")
    }
}

const CPU_TIMES: &str = "On a CPU a step's time also holds what a GPU's does not: a page \
    fault for each 4 KiB of fresh memory it writes (large tensors are mapped anew and unmapped when \
    freed; a GPU's caching allocator reuses its blocks), on a virtual machine the host backing guest \
    memory touched for the first time (which the first variant to run pays), and cores shared \
    with every other process; the trace counts the page faults of every phase (`page_faults`). On \
    an Intel Xeon VM the variants once ran one after another, each once, while the machine sped up \
    (none's steps 1.31-1.44 s and then 0.95 s, every1 1.19 to 1.03 s, sqrt 1.03 to 0.90 s): \
    checkpointing looked 17-29% faster. Rounds and intervals are there so that such drift no \
    longer decides a verdict.";

/// A variant's step times from the trace: per trial (a round), its steps after the first.
pub(super) struct Steps {
    /// Seconds of each timed step, per round.
    pub rounds: Vec<Vec<f64>>,
    /// Page faults of each timed step, where the trace counted them.
    faults: Vec<u64>,
}

/// Fewer timed steps than this a side, and no interval is trusted.
const MIN_STEPS: usize = 5;

impl Steps {
    pub fn of(e: &Experiment, variant: &str) -> Option<Steps> {
        Self::of_trials(
            e,
            e.rows.iter().filter(|r| r.variant == variant && r.status.fitted()).map(|r| r.trial),
        )
    }

    /// The step times of the given trials, one round each.
    pub fn of_trials(e: &Experiment, trials: impl Iterator<Item = usize>) -> Option<Steps> {
        let (mut rounds, mut faults) = (Vec::new(), Vec::new());
        for trial in trials {
            let mut steps: std::collections::BTreeMap<usize, (f64, Option<u64>)> = Default::default();
            for t in e.trace.iter().filter(|t| t.trial == trial && t.step >= 2) {
                let s = steps.entry(t.step).or_insert((0.0, Some(0)));
                s.0 += t.phase_seconds;
                s.1 = s.1.zip(t.page_faults).map(|(a, b)| a + b);
            }
            rounds.push(steps.values().map(|s| s.0).collect::<Vec<f64>>());
            faults.extend(steps.values().filter_map(|s| s.1));
        }
        rounds.retain(|r: &Vec<f64>| !r.is_empty());
        (!rounds.is_empty()).then_some(Steps { rounds, faults })
    }

    pub fn count(&self) -> usize {
        self.rounds.iter().map(Vec::len).sum()
    }

    pub fn median(&self) -> f64 {
        crate::bench::stats::median(&self.rounds.concat())
    }

    fn faults_per_step(&self) -> Option<f64> {
        (!self.faults.is_empty()).then(|| self.faults.iter().sum::<u64>() as f64 / self.faults.len() as f64)
    }

    /// This variant's slowdown over `base`'s, with its interval.
    pub fn against(&self, base: &Steps) -> Option<Slowdown> {
        self.against_scaled(base, 1.0)
    }

    /// The slowdown of this variant's steps times `scale` over `base`'s (a time per sample: the
    /// batches' ratio), with its interval.
    pub fn against_scaled(&self, base: &Steps, scale: f64) -> Option<Slowdown> {
        let (ratio, (lo, hi)) = crate::bench::stats::ratio_interval(&self.rounds, &base.rounds, 2000)?;
        let s = |r: f64| r * scale - 1.0;
        let (steps, rounds) = (self.count().min(base.count()), self.rounds.len().min(base.rounds.len()));
        Some(Slowdown { slower: s(ratio), lo: s(lo), hi: s(hi), steps, rounds })
    }
}

/// How much slower one variant's steps are than another's: the ratio of their medians less 1,
/// and its 90% interval.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slowdown {
    pub slower: f64,
    pub lo: f64,
    pub hi: f64,
    /// The fewer timed steps of the two sides, and the fewer rounds.
    steps: usize,
    rounds: usize,
}

impl Slowdown {
    /// "+26.6% (90% interval +21.0% to +31.9%)".
    pub fn describe(&self) -> String {
        format!(
            "{:+.1}% (90% interval {:+.1}% to {:+.1}%)",
            100.0 * self.slower,
            100.0 * self.lo,
            100.0 * self.hi
        )
    }

    /// The band's verdict where the interval clears its edges and rests on enough steps;
    /// otherwise not judged.
    pub fn verdict(&self, band: &Band) -> Verdict {
        if self.unjudged(band).is_some() {
            return Verdict::NotJudged;
        }
        band.judge_interval(self.lo, self.hi).unwrap_or(Verdict::NotJudged)
    }

    /// Why a verdict was not given, if it was not.
    pub fn unjudged(&self, band: &Band) -> Option<String> {
        if self.rounds < 2 {
            return Some(
                "not judged: each variant ran in one round, one after another, so a machine that sped up or \
                 slowed down during the run could decide it (see below); `run.rounds` interleaves them"
                    .into(),
            );
        }
        if self.steps < MIN_STEPS {
            return Some(format!(
                "not judged: {} timed step{} a side, fewer than the {MIN_STEPS} an interval needs",
                self.steps,
                if self.steps == 1 { "" } else { "s" }
            ));
        }
        band.judge_interval(self.lo, self.hi).is_none().then(|| {
            format!(
                "not judged: its 90% interval, {:+.1}% to {:+.1}%, straddles an edge of the band",
                100.0 * self.lo,
                100.0 * self.hi
            )
        })
    }
}

pub(super) fn accumulation(get: Get) -> Claim {
    const C: &str = "Gradient accumulation gives the effect of a larger batch without its memory";
    const E: &str = "accumulation";
    let Some(e) = get(E) else { return not_run(C, E) };
    let variants = ["1024x1", "256x4", "64x16", "32x32"];
    let rows: Vec<_> = variants.iter().filter_map(|v| e.variant(v).map(|r| (*v, r))).collect();
    let Some((_, full)) = rows.first().filter(|(v, _)| *v == "1024x1") else { return not_run(C, E) };
    let measured = rows
        .iter()
        .map(|(v, r)| {
            format!(
                "{v}: {} ({}), {}",
                size(r.max_memory_allocated as f64),
                pct(r.max_memory_allocated as f64 / full.max_memory_allocated as f64),
                r.step_seconds.map_or("-".into(), |s| format!("{s:.2} s"))
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let smallest =
        rows.last().map_or(1.0, |(_, r)| r.max_memory_allocated as f64 / full.max_memory_allocated as f64);
    // BatchNorm normalises each micro-batch by its own statistics: the effect is not the larger
    // batch's, whatever the memory does.
    let batch_norm = rows.iter().any(|(_, r)| r.arch.starts_with("resnet"));
    let verdict = match smallest < 0.9 {
        true if !batch_norm => Verdict::Confirmed,
        _ => Verdict::Partly,
    };
    let effect = if batch_norm {
        "this model's BatchNorm normalises each micro-batch by its own statistics, so the accumulated \
         gradient is not the full batch's (partly, at most)"
    } else {
        "the accumulated gradient equals the full batch's (the test `accumulated_gradient_equals_the_full_batch` \
         checks it to 1e-5)"
    };
    let why = format!(
        "{effect}, while the peak falls with the micro-batch down to the fixed cost of parameters, gradients \
         and optimizer state; the price is time per effective batch."
    );
    claim(C, E, measured, verdict, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use crate::schema::{Phase, PhaseRecord, SummaryRow};

    /// The checkpointing experiment with each variant's step times, round after round: `times`
    /// holds, per round, the variants' steps (none, every1, every4, sqrt) after the first.
    fn experiment(times: &[[Vec<f64>; 4]]) -> Experiment {
        let (mut rows, mut trace) = (Vec::new(), Vec::new());
        for (r, round) in times.iter().enumerate() {
            for (v, steps) in ["none", "every1", "every4", "sqrt"].iter().zip(round) {
                let trial = rows.len() + 1;
                rows.push(SummaryRow {
                    trial,
                    variant: v.to_string(),
                    round: (times.len() > 1).then_some(r + 1),
                    ..SummaryRow::default()
                });
                for (i, &secs) in [1.0].iter().chain(steps).enumerate() {
                    trace.push(PhaseRecord {
                        trial,
                        variant: String::new(),
                        value: None,
                        step: i + 1,
                        micro: 0,
                        phase: Phase::Backward,
                        memory_allocated: 0,
                        memory_reserved: 0,
                        max_memory_allocated: 0,
                        max_memory_reserved: 0,
                        device_used: None,
                        phase_seconds: secs,
                        elapsed_seconds: 0.0,
                        predicted_peak: None,
                        page_faults: Some(10),
                        rank: None,
                    });
                }
            }
        }
        let m = manifest("checkpointing", "cpu", None, 1 << 30);
        Experiment { dir: "e".into(), manifest: m, rows, trace, cut_row: false }
    }

    fn judged(e: &Experiment) -> Claim {
        checkpoint_time(&|name| (name == "checkpointing").then_some(e))
    }

    /// Steps around `mean`, a little apart.
    fn steps(mean: f64) -> Vec<f64> {
        [0.99, 1.0, 1.01].iter().map(|f| mean * f).collect()
    }

    #[test]
    fn interleaved_rounds_that_agree_are_judged() {
        let round = || [steps(1.0), steps(1.3), steps(1.25), steps(1.25)];
        let c = judged(&experiment(&[round(), round(), round()]));
        assert_eq!(c.verdict, Verdict::Confirmed, "{c:#?}");
        assert!(
            c.measured.contains("sqrt +25.0%") && c.measured.contains("9 timed steps in 3 rounds"),
            "{}",
            c.measured
        );
        assert!(c.measured.contains("page faults a step: none 10, sqrt 10"), "{}", c.measured);
    }

    /// The Intel Xeon's run: each variant once, the machine speeding up as they went; the
    /// steps agree within each variant, so the interval is narrow, and wrong.
    #[test]
    fn one_round_on_a_drifting_machine_is_not_judged() {
        let once = [steps(1.35), steps(1.1), steps(1.0), steps(0.92)];
        let c = judged(&experiment(&[once]));
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:#?}");
        assert!(c.why.starts_with("not judged: each variant ran in one round"), "{}", c.why);
    }

    #[test]
    fn rounds_that_disagree_straddle_the_band_and_are_not_judged() {
        let round = |sqrt: f64| [steps(1.0), steps(1.2), steps(1.2), steps(sqrt)];
        let c = judged(&experiment(&[round(1.05), round(1.45), round(1.25)]));
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:#?}");
        assert!(c.why.starts_with("not judged: its 90% interval"), "{}", c.why);
    }

    /// Accumulation's memory saving holds for any model, its effect only without BatchNorm.
    #[test]
    fn accumulation_through_batch_norm_is_partly_the_larger_batch() {
        let judge = |arch: &str| {
            let rows = [("1024x1", 1000), ("32x32", 100)]
                .iter()
                .enumerate()
                .map(|(i, &(v, peak))| SummaryRow {
                    trial: i + 1,
                    variant: v.into(),
                    arch: arch.into(),
                    max_memory_allocated: peak,
                    ..SummaryRow::default()
                })
                .collect();
            let m = manifest("accumulation", "cpu", None, 1 << 30);
            let e = Experiment { dir: "e".into(), manifest: m, rows, trace: Vec::new(), cut_row: false };
            accumulation(&|n: &str| (n == "accumulation").then_some(&e))
        };
        let mlp = judge("");
        assert_eq!(mlp.verdict, Verdict::Confirmed, "{mlp:#?}");
        let resnet = judge("resnet18");
        assert_eq!(resnet.verdict, Verdict::Partly, "{resnet:#?}");
        assert!(resnet.why.contains("BatchNorm normalises each micro-batch"), "{}", resnet.why);
    }
}
