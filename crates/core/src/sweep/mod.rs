//! Which values a sweep tries, in what order: a fixed list, a search for the exact boundary
//! (guided by the estimate's guess, or bisecting), or the guide's halving from a large start.
//! Pure logic: the runner feeds back each outcome.
mod halve;
mod search;

pub use halve::Halve;
pub use search::Search;

use crate::spec::{OnOom, SweepMode};

/// What a trial told the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// It trained.
    Fits,
    /// It ran out of memory.
    Oom,
    /// Another error: the sweep cannot learn from it.
    Error,
}

/// The order of trials.
pub trait Strategy {
    /// The next value to try, or `None` when the sweep is over.
    fn next(&mut self) -> Option<f64>;
    /// The outcome of the value last returned by `next`.
    fn record(&mut self, value: f64, fit: Fit);
    /// How many trials it will run, when known in advance (for the progress bar).
    fn len_hint(&self) -> Option<usize> {
        None
    }
}

/// The values of a list, in order; stops early on OOM when the spec says so.
pub struct List {
    values: Vec<f64>,
    next: usize,
    stop_on_oom: bool,
    stopped: bool,
}

impl List {
    pub fn new(values: Vec<f64>, on_oom: OnOom) -> Self {
        List { values, next: 0, stop_on_oom: on_oom == OnOom::Stop, stopped: false }
    }
}

impl Strategy for List {
    fn next(&mut self) -> Option<f64> {
        if self.stopped {
            return None;
        }
        let v = self.values.get(self.next).copied();
        self.next += 1;
        v
    }
    fn record(&mut self, _value: f64, fit: Fit) {
        if fit == Fit::Oom && self.stop_on_oom {
            self.stopped = true;
        }
    }
    fn len_hint(&self) -> Option<usize> {
        Some(self.values.len())
    }
}

/// A spec without a sweep is one trial of its base config.
pub struct Single(bool);

impl Strategy for Single {
    fn next(&mut self) -> Option<f64> {
        (!std::mem::replace(&mut self.0, true)).then_some(f64::NAN)
    }
    fn record(&mut self, _: f64, _: Fit) {}
    fn len_hint(&self) -> Option<usize> {
        Some(1)
    }
}

/// The strategy a sweep mode asks for (or one trial when there is no sweep). `guess`: the
/// estimate's largest value predicted to fit, for a search with `guided` on (see
/// `estimate::search_guide`); `None` searches without it. The other modes ignore it.
pub fn strategy(mode: Option<&SweepMode>, on_oom: OnOom, guess: Option<u64>) -> Box<dyn Strategy> {
    match mode {
        None => Box::new(Single(false)),
        Some(SweepMode::List(values)) => Box::new(List::new(values.clone(), on_oom)),
        Some(&SweepMode::Search { start, factor, max, guided, anchor, implied_max }) => {
            let search = match guess.filter(|_| guided) {
                Some(g) => Search::guided(start, factor, max, g),
                // No max of the spec's to try: grow from start until out of memory, then bisect.
                None if implied_max => Search::guided(start, factor, max, start),
                None => Search::new(start, factor, max),
            };
            Box::new(match anchor {
                Some(a) => search.anchored(a),
                None => search,
            })
        }
        Some(SweepMode::Halve { start }) => Box::new(Halve::new(*start)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_runs_every_value_or_stops_at_oom() {
        let mut l = List::new(vec![1.0, 2.0, 3.0], OnOom::Continue);
        let mut seen = vec![];
        while let Some(v) = l.next() {
            seen.push(v);
            l.record(v, if v == 2.0 { Fit::Oom } else { Fit::Fits });
        }
        assert_eq!(seen, vec![1.0, 2.0, 3.0]);

        let mut l = List::new(vec![1.0, 2.0, 3.0], OnOom::Stop);
        let mut seen = vec![];
        while let Some(v) = l.next() {
            seen.push(v);
            l.record(v, if v == 2.0 { Fit::Oom } else { Fit::Fits });
        }
        assert_eq!(seen, vec![1.0, 2.0]);
    }

    #[test]
    fn single_runs_once() {
        let mut s = Single(false);
        assert!(s.next().is_some());
        assert!(s.next().is_none());
    }
}
