//! Grow, then bisect: the exact largest value that fits, in O(log n) trials.
//!
//! From `start`, multiply by `factor` until a trial runs out of memory (or `max` fits: then
//! there is no boundary below `max`). Then bisect between the largest value that fitted and the
//! smallest that did not, until they are adjacent. An `Error` trial ends the search: nothing can
//! be concluded from it.
use super::{Fit, Strategy};

#[derive(Debug, Clone)]
pub struct Search {
    factor: u64,
    max: u64,
    /// Largest value seen to fit (0: none yet).
    pub largest_fit: u64,
    /// Smallest value seen to run out of memory.
    pub first_oom: Option<u64>,
    pending: Option<u64>,
    done: bool,
}

impl Search {
    /// Requires `1 <= start <= max` and `factor >= 2` (the spec validator guarantees it).
    pub fn new(start: u64, factor: u64, max: u64) -> Self {
        Search {
            factor: factor.max(2),
            max,
            largest_fit: 0,
            first_oom: None,
            pending: Some(start.clamp(1, max.max(1))),
            done: false,
        }
    }

    /// The answer once done: the largest value that fits, if any did.
    pub fn answer(&self) -> Option<u64> {
        (self.largest_fit > 0).then_some(self.largest_fit)
    }
}

impl Strategy for Search {
    fn next(&mut self) -> Option<f64> {
        if self.done {
            return None;
        }
        self.pending.map(|v| v as f64)
    }

    fn record(&mut self, value: f64, fit: Fit) {
        let v = value as u64;
        match fit {
            Fit::Error => {
                self.done = true;
                return;
            }
            Fit::Fits => self.largest_fit = self.largest_fit.max(v),
            Fit::Oom => self.first_oom = Some(self.first_oom.map_or(v, |o| o.min(v))),
        }
        self.pending = match self.first_oom {
            // Still growing.
            None if v >= self.max => None,
            None => Some(v.saturating_mul(self.factor).min(self.max)),
            // Bisecting between the last fit and the first OOM.
            Some(oom) if oom - self.largest_fit <= 1 => None,
            Some(oom) => Some(self.largest_fit + (oom - self.largest_fit) / 2),
        };
        self.done = self.pending.is_none();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a machine where values up to `limit` fit.
    fn run(start: u64, factor: u64, max: u64, limit: u64) -> (Vec<u64>, Search) {
        let mut s = Search::new(start, factor, max);
        let mut tried = vec![];
        while let Some(v) = s.next() {
            tried.push(v as u64);
            s.record(v, if v as u64 <= limit { Fit::Fits } else { Fit::Oom });
        }
        (tried, s)
    }

    #[test]
    fn grows_then_bisects_to_the_exact_boundary() {
        let (tried, s) = run(1, 2, 4096, 41);
        assert_eq!(tried, vec![1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]);
        assert_eq!(s.answer(), Some(41));
        assert_eq!(s.first_oom, Some(42));
    }

    #[test]
    fn every_boundary_is_found() {
        for limit in 1..200 {
            let (tried, s) = run(3, 3, 1000, limit);
            assert_eq!(s.answer(), Some(limit), "limit {limit}, tried {tried:?}");
            assert_eq!(s.first_oom, Some(limit + 1));
            assert!(tried.len() < 20);
        }
    }

    #[test]
    fn nothing_fits() {
        let (tried, s) = run(4, 2, 100, 0);
        assert_eq!(tried, vec![4, 2, 1]);
        assert_eq!(s.answer(), None);
        assert_eq!(s.first_oom, Some(1));
    }

    #[test]
    fn everything_fits_up_to_max() {
        let (tried, s) = run(1, 2, 20, 1000);
        assert_eq!(tried, vec![1, 2, 4, 8, 16, 20]);
        assert_eq!(s.answer(), Some(20));
        assert_eq!(s.first_oom, None);
    }

    #[test]
    fn an_error_ends_the_search() {
        let mut s = Search::new(1, 2, 100);
        let v = s.next().unwrap();
        s.record(v, Fit::Error);
        assert_eq!(s.next(), None);
    }
}
