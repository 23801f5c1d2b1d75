//! `run --shard I/N`: the I-th of N slices of a spec's independent trials.
//!
//! The work of a spec is cut into [`Unit`]s, in the order a single process runs them: for each
//! variant in spec order, each value of a list sweep is a unit of one trial (it depends on no
//! other trial); a sweep whose trials depend on the ones before (a search, halving, a list that
//! stops at its first OOM) is one unit per variant, run whole by one shard, as is a variant's one
//! trial without a sweep. Unit `u` (from 0) goes to shard `u mod N + 1`: dealt round-robin, so
//! that the larger values at the end of a list are spread over the shards rather than all given
//! to the last. A shard runs its units in that order and numbers its trials from 1, as any run
//! does; `oomlab merge` puts them back in the single process's order (see `merge`).
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::results::manifest::ShardInfo;
use crate::spec::{OnOom, Spec, SweepMode};
use crate::sweep::{Fit, Strategy};

/// The folder inside an experiment's folder that holds its shards.
pub const SHARDS: &str = "shards";

/// The most shards a run is split into: more than any spec has trials to deal, and few enough
/// that a merge can name each one missing.
pub const MAX_SHARDS: usize = 100_000;

/// The I-th of N shards (1 <= I <= N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let how = "give I/N, the I-th of N shards with 1 <= I <= N, e.g. 2/4";
        let (i, n) = s.split_once('/').ok_or_else(|| format!("`{s}` is not a shard: {how}"))?;
        let number = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("`{s}` is not a shard: {how}"));
        let (index, count) = (number(i)?, number(n)?);
        if count == 0 {
            return Err(format!("`{s}`: there must be at least one shard (N >= 1); {how}"));
        }
        if index == 0 || index > count {
            return Err(format!("`{s}`: shard {index} of {count} does not exist; {how}"));
        }
        if count > MAX_SHARDS {
            return Err(format!("`{s}`: at most {MAX_SHARDS} shards (as `oomlab slurm --shards` takes)"));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The shard's folder name under `shards/`: `2-of-4`.
    pub fn folder(&self) -> String {
        format!("{}-of-{}", self.index, self.count)
    }

    /// The shard a folder name under `shards/` stands for, if it is one.
    pub fn from_folder(name: &str) -> Option<Shard> {
        let (i, n) = name.split_once("-of-")?;
        let shard: Shard = format!("{i}/{n}").parse().ok()?;
        // One spelling only: "02-of-4" is not shard 2's folder.
        (shard.folder() == name).then_some(shard)
    }

    /// Whether unit `u` (from 0, in run order) is this shard's.
    pub fn takes(&self, u: usize) -> bool {
        u % self.count == self.index - 1
    }
}

/// A piece of a spec's work that a process can run on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// One value of a list sweep (its position in the list) for one variant: one trial.
    Value { variant: usize, position: usize },
    /// A variant's whole sweep, whose trials depend on each other, or its one trial when the
    /// spec has no sweep.
    Whole { variant: usize },
}

impl Unit {
    pub fn variant(&self) -> usize {
        match *self {
            Unit::Value { variant, .. } | Unit::Whole { variant } => variant,
        }
    }
}

/// Whether each value of the spec's sweep is a trial of its own: a list that goes on after an
/// OOM. The other sweeps choose their next value from the outcomes so far.
pub fn independent_values(spec: &Spec) -> Option<&[f64]> {
    match &spec.sweep.as_ref()?.mode {
        SweepMode::List(values) if spec.run.on_oom == OnOom::Continue => Some(values),
        _ => None,
    }
}

/// The spec's units, in the order a single process runs them.
pub fn units(spec: &Spec) -> Vec<Unit> {
    let variants = spec.configs().len();
    match independent_values(spec) {
        Some(values) => (0..variants)
            .flat_map(|variant| (0..values.len()).map(move |position| Unit::Value { variant, position }))
            .collect(),
        None => (0..variants).map(|variant| Unit::Whole { variant }).collect(),
    }
}

/// The units a shard runs, as indices into [`units`], in run order.
pub fn dealt(spec: &Spec, shard: Shard) -> Vec<usize> {
    (0..units(spec).len()).filter(|&u| shard.takes(u)).collect()
}

/// A unit in words, for the manifest and messages: "adam, model.depth 4" or "adam: its whole
/// search".
pub fn describe(spec: &Spec, unit: Unit) -> String {
    let configs = spec.configs();
    let name = configs.get(unit.variant()).and_then(|(v, _)| *v);
    let field = spec.sweep.as_ref().map(|s| s.field.key());
    match unit {
        Unit::Value { position, .. } => {
            let value = independent_values(spec).and_then(|v| v.get(position)).copied().unwrap_or(f64::NAN);
            let what = format!("{} {value}", field.unwrap_or("value"));
            name.map_or(what.clone(), |n| format!("{n}, {what}"))
        }
        Unit::Whole { .. } => {
            let whole = match spec.sweep.as_ref().map(|s| &s.mode) {
                None => "its one trial",
                Some(SweepMode::Search { .. }) => "its whole search",
                Some(SweepMode::Halve { .. }) => "its whole halving",
                Some(SweepMode::List(_)) => "its whole list (it stops at the first OOM)",
            };
            match name {
                Some(n) => format!("{n}: {whole}"),
                None => format!("{}: {whole}", spec.name),
            }
        }
    }
}

/// What the manifest of a shard records: which shard, what it runs, and the Slurm job.
pub fn info(spec: &Spec, shard: Shard) -> ShardInfo {
    let all = units(spec);
    ShardInfo {
        index: shard.index,
        count: shard.count,
        units: dealt(spec, shard).into_iter().map(|u| describe(spec, all[u])).collect(),
        of_units: all.len(),
        slurm_job: job_here(),
    }
}

/// What a run takes of one variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// Every trial its sweep asks for.
    All,
    /// These positions of its list, in order.
    Positions(Vec<usize>),
}

impl Take {
    /// The variant's sweep order cut down to what is taken: for `Positions`, the values at
    /// those positions only (the list's other values are other shards' trials).
    pub fn restrict(self, order: Box<dyn Strategy>) -> Box<dyn Strategy> {
        match self {
            Take::All => order,
            Take::Positions(keep) => Box::new(Only { inner: order, keep, position: 0 }),
        }
    }
}

/// What a run (a shard, or the whole spec) takes of each variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection(Option<Vec<Option<Take>>>);

impl Selection {
    /// Everything, without a shard; else the shard's units, per variant.
    pub fn new(spec: &Spec, shard: Option<Shard>) -> Selection {
        let Some(shard) = shard else { return Selection(None) };
        let mut per_variant: Vec<Option<Take>> = vec![None; spec.configs().len()];
        let all = units(spec);
        for u in dealt(spec, shard) {
            match all[u] {
                Unit::Whole { variant } => per_variant[variant] = Some(Take::All),
                Unit::Value { variant, position } => match &mut per_variant[variant] {
                    Some(Take::Positions(p)) => p.push(position),
                    slot => *slot = Some(Take::Positions(vec![position])),
                },
            }
        }
        Selection(Some(per_variant))
    }

    /// What to take of variant `v` (its index in the spec), `None` when nothing.
    pub fn variant(&self, v: usize) -> Option<Take> {
        match &self.0 {
            None => Some(Take::All),
            Some(per) => per.get(v).cloned().flatten(),
        }
    }

    /// How many trials a shard of list values runs, known in advance (for the progress bar).
    pub fn trials(&self) -> Option<usize> {
        let per = self.0.as_ref()?;
        per.iter()
            .map(|t| match t {
                None => Some(0),
                Some(Take::Positions(p)) => Some(p.len()),
                Some(Take::All) => None,
            })
            .sum()
    }
}

/// A list's order with only the values at `keep` (increasing positions). Only for independent
/// values: what the skipped ones would have told the list is never recorded.
struct Only {
    inner: Box<dyn Strategy>,
    keep: Vec<usize>,
    position: usize,
}

impl Strategy for Only {
    fn next(&mut self) -> Option<f64> {
        loop {
            let value = self.inner.next()?;
            self.position += 1;
            if self.keep.contains(&(self.position - 1)) {
                return Some(value);
            }
        }
    }
    fn record(&mut self, value: f64, fit: Fit) {
        self.inner.record(value, fit);
    }
    fn len_hint(&self) -> Option<usize> {
        Some(self.keep.len())
    }
}

/// The Slurm job this process runs as: "1234_2" (array job 1234, task 2), or the job id; `None`
/// outside Slurm.
pub fn job_here() -> Option<String> {
    job_from(|k| std::env::var(k).ok())
}

/// [`job_here`] from an environment.
fn job_from(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    match (var("SLURM_ARRAY_JOB_ID"), var("SLURM_ARRAY_TASK_ID")) {
        (Some(job), Some(task)) => Some(format!("{job}_{task}")),
        _ => var("SLURM_JOB_ID"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::List;

    fn spec(variants: &[&str], sweep: &str, on_oom: &str) -> Spec {
        let mut text = format!(
            "[experiment]\nname = \"x\"\n[model]\nhidden = 4\ndepth = 1\n[data]\nkind = \"synthetic\"\n\
             samples = 8\nfeatures = 2\nclasses = 2\n[training]\noptimizer = \"sgd\"\nlr = 0.1\n\
             batch_size = 4\nsteps = 1\n[run]\ndevice = \"cpu\"\non_oom = \"{on_oom}\"\n{sweep}\n"
        );
        for v in variants {
            text += &format!("[[variant]]\nname = \"{v}\"\n");
        }
        crate::spec::parse(&text, std::path::Path::new("x.toml")).unwrap()
    }

    const LIST: &str = "[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3]\n";
    const SEARCH: &str = "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, max = 8 }\n";

    #[test]
    fn i_of_n_is_checked_once_with_the_fix() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!("1/1".parse::<Shard>(), Ok(Shard { index: 1, count: 1 }));
        for (bad, why) in [
            ("0/4", "does not exist"),
            ("5/4", "shard 5 of 4 does not exist"),
            ("1/0", "at least one shard"),
            ("2", "not a shard"),
            ("a/4", "not a shard"),
            ("-1/4", "not a shard"),
        ] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains(why) && err.contains("e.g. 2/4"), "{bad}: {err}");
        }
        let s = Shard { index: 3, count: 12 };
        assert_eq!((s.to_string(), s.folder()), ("3/12".to_string(), "3-of-12".to_string()));
        assert_eq!(Shard::from_folder("3-of-12"), Some(s));
        for other in ["03-of-12", "13-of-12", "3of12", "x-of-2", "summary.csv"] {
            assert_eq!(Shard::from_folder(other), None, "{other}");
        }
    }

    #[test]
    fn list_values_are_units_dealt_round_robin_in_run_order() {
        let s = spec(&["a", "b"], LIST, "continue");
        let u = units(&s);
        assert_eq!(u.len(), 6);
        assert_eq!(u[4], Unit::Value { variant: 1, position: 1 });
        let shard = |index| Shard { index, count: 4 };
        assert_eq!(dealt(&s, shard(1)), [0, 4]);
        assert_eq!(dealt(&s, shard(4)), [3]);
        // Every unit once, over the shards.
        let mut all: Vec<usize> = (1..=4).flat_map(|i| dealt(&s, shard(i))).collect();
        all.sort();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        let sel = Selection::new(&s, Some(shard(1)));
        assert_eq!(sel.variant(0), Some(Take::Positions(vec![0])));
        assert_eq!(sel.variant(1), Some(Take::Positions(vec![1])));
        assert_eq!(sel.trials(), Some(2));
        assert_eq!(Selection::new(&s, None).variant(1), Some(Take::All));
        assert_eq!(describe(&s, u[4]), "b, model.depth 2");
        let i = info(&s, shard(2));
        assert_eq!(
            (i.units, i.of_units),
            (vec!["a, model.depth 2".to_string(), "b, model.depth 3".into()], 6)
        );
    }

    #[test]
    fn dependent_sweeps_go_whole_per_variant_and_extra_shards_get_nothing() {
        for s in [spec(&["a", "b"], SEARCH, "continue"), spec(&["a", "b"], LIST, "stop")] {
            assert_eq!(units(&s), [Unit::Whole { variant: 0 }, Unit::Whole { variant: 1 }]);
            let third = Selection::new(&s, Some(Shard { index: 3, count: 3 }));
            assert_eq!((third.variant(0), third.variant(1), third.trials()), (None, None, Some(0)));
            let second = Selection::new(&s, Some(Shard { index: 2, count: 3 }));
            assert_eq!(
                (second.variant(0), second.variant(1), second.trials()),
                (None, Some(Take::All), None)
            );
        }
        let s = spec(&["a", "b"], SEARCH, "continue");
        assert_eq!(describe(&s, Unit::Whole { variant: 1 }), "b: its whole search");
        let single = spec(&[], "", "continue");
        assert_eq!(units(&single), [Unit::Whole { variant: 0 }]);
        assert_eq!(describe(&single, Unit::Whole { variant: 0 }), "x: its one trial");
    }

    #[test]
    fn a_restricted_list_gives_only_its_positions() {
        let list = Box::new(List::new(vec![10.0, 20.0, 30.0, 40.0], OnOom::Continue));
        let mut order = Take::Positions(vec![1, 3]).restrict(list);
        assert_eq!(order.len_hint(), Some(2));
        let mut seen = Vec::new();
        while let Some(v) = order.next() {
            seen.push(v);
            order.record(v, Fit::Oom);
        }
        assert_eq!(seen, [20.0, 40.0]);
    }

    #[test]
    fn inside_a_slurm_array_the_job_is_named() {
        fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
            let pairs: Vec<(String, String)> =
                pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        }
        let task = [("SLURM_JOB_ID", "1236"), ("SLURM_ARRAY_JOB_ID", "1234"), ("SLURM_ARRAY_TASK_ID", "2")];
        assert_eq!(job_from(env(&task)).as_deref(), Some("1234_2"));
        assert_eq!(job_from(env(&[("SLURM_JOB_ID", "99")])).as_deref(), Some("99"));
        assert_eq!(job_from(env(&[])), None);
    }
}
