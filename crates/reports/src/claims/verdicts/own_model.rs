//! A model of your own: a module oomlab does not build (a hand-written ViT, exported as
//! TorchScript by scripts/export-model), searched for the largest batch that fits with the
//! estimate recorded from its own step.
use super::{budget, claim, not_run, Get};
use crate::claims::{Claim, Verdict};

pub(super) fn own_model(get: Get) -> Claim {
    const C: &str = "A model of your own (TorchScript) gets the same answer: its largest batch that fits is \
                     predicted before any trial runs, from its own step recorded at small batches";
    const E: &str = "own_model";
    let Some(e) = get(E) else { return not_run(C, E) };
    let Some(a) = e.answer("") else { return not_run(C, E) };
    let measured = format!(
        "largest batch that fits {}: {}; predicted: {}; probes: {}",
        budget(e),
        a.largest_fit.map_or("-".into(), |v| v.to_string()),
        a.guess.map_or("-".into(), |v| v.to_string()),
        e.rows.len()
    );
    if a.guess.is_none() && e.manifest.device.is_cuda() {
        let why = "the estimate of a TorchScript module is recorded on the CPU and models the CPU only for \
                   now, so a search on a GPU runs unguided; the claim is judged on a CPU.";
        return claim(C, E, measured, Verdict::NotJudged, why.to_string());
    }
    // A search that reached its max, or met only a predicted OOM, has no boundary to compare.
    if let Some(why) = super::capped(e, &[""]) {
        return claim(C, E, measured, Verdict::NotJudged, why);
    }
    let exact =
        a.largest_fit.is_some() && a.guess == a.largest_fit && a.first_oom == a.largest_fit.map(|v| v + 1);
    let verdict = match (a.guess, a.largest_fit) {
        _ if exact => Verdict::Confirmed,
        (Some(_), Some(_)) => Verdict::Partly,
        _ => Verdict::Refuted,
    };
    let why = match a.guess {
        Some(_) => "confirmed when the batch the estimate predicted is the largest that trained and the next one ran \
                    out of memory: the search then needs the two probes that prove it."
            .to_string(),
        None => format!(
            "the search was not guided: {}.",
            a.strategy.as_deref().unwrap_or("the manifest does not say why")
        ),
    };
    claim(C, E, measured, verdict, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use crate::results::manifest::Answer;
    use crate::results::ExperimentDir;

    fn dir(guess: Option<u64>, largest: u64, first_oom: u64) -> ExperimentDir {
        let mut m = manifest("own_model", "CPU", Some(64 << 20), 1 << 34);
        m.device.resolved = crate::device::RunDevice::Cpu;
        m.answers = vec![Answer {
            largest_fit: Some(largest),
            first_oom: Some(first_oom),
            guess,
            strategy: Some(if guess.is_some() { "guided by the estimate" } else { "unguided: x" }.into()),
            ..Answer::new("", crate::spec::Field::BatchSize)
        }];
        ExperimentDir {
            dir: "own_model".into(),
            manifest: m,
            rows: Vec::new(),
            trace: Vec::new(),
            cut_row: false,
        }
    }

    #[test]
    fn confirmed_only_when_the_prediction_is_the_boundary() {
        for (d, verdict) in [
            (dir(Some(46), 46, 47), Verdict::Confirmed),
            (dir(Some(48), 46, 47), Verdict::Partly),
            (dir(None, 46, 47), Verdict::Refuted),
        ] {
            let get = |e: &str| (e == "own_model").then_some(&d);
            let c = own_model(&get);
            assert_eq!(c.verdict, verdict, "{}", c.measured);
        }
        let none = |_: &str| None;
        assert_eq!(own_model(&none).verdict, Verdict::NotRun);
    }

    /// On a GPU the search cannot be guided yet: that is not the claim failing.
    #[test]
    fn an_unguided_search_on_a_gpu_is_not_judged() {
        let mut d = dir(None, 46, 47);
        d.manifest.device.resolved = crate::device::RunDevice::Cuda(0);
        let get = |e: &str| (e == "own_model").then_some(&d);
        assert_eq!(own_model(&get).verdict, Verdict::NotJudged);
    }

    /// A search that reached its max found a floor: a prediction equal to it is not confirmed.
    #[test]
    fn a_floor_is_not_judged() {
        let mut d = dir(Some(1024), 1024, 1025);
        d.manifest.answers[0].first_oom = None;
        let get = |e: &str| (e == "own_model").then_some(&d);
        let c = own_model(&get);
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:#?}");
        assert!(c.why.contains("reached its max"), "{}", c.why);
    }
}
