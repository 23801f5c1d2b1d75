//! The exact largest value that fits, by bisection, or guided by the estimate's guess.
//!
//! The search keeps a bracket: `lo`, the largest value seen to fit (0 stands for "nothing", and
//! fits by definition), and `hi`, the smallest value seen to run out of memory (`max + 1`
//! stands for "past the end", never tried). Every probe lies strictly inside the bracket, so
//! each one narrows it, and the search ends when `hi = lo + 1`: `lo` is then the answer and
//! `hi` the first OOM, exactly, as long as memory grows with the value (every integer field
//! does). An `Error` trial ends the search: nothing can be concluded from it.
//!
//! **Unguided** (no prediction, or `guided = false`): try `start`, then `max`, then bisect. At
//! most `ceil(log2(max - start + 1)) + 2` probes when `start` fits, and
//! `1 + ceil(log2(start))` when it does not (the search then looks below `start`, as the old
//! grow-then-bisect did): never more than `ceil(log2(max)) + 2`. Growing from `start` by
//! `factor` until a trial runs out of memory and then bisecting (this module's old way) needs
//! about `2 * log2` probes: the growth spends `log2(answer / start)` of them only to find an upper
//! bound that `max` already is (24 probes for batch 19,215 between 64 and 65,536, against 18
//! here). The cost of starting with `max` is one probe there, which runs out of memory in its
//! first allocations (it is the search's cheapest kind of probe); a spec whose `max` is far too
//! large pays one probe for it, not one per doubling.
//!
//! **Guided** by `guess`, the estimate's largest value predicted to fit (0: not even 1): try the
//! guess (it must fit), then the value above it (it must run out): 2 probes when the estimate
//! is right (1 when the guess is `max`, or 0 and 1 runs out). When a probe comes back the other
//! way, the search gallops away from the guess in the direction it points, at distances 1,
//! `factor`, `factor^2`, ..., until a probe comes back the other way, then bisects the last
//! gap. For a guess off by `e` and `factor = 2`, that is at most `2 * ceil(log2(e + 1)) + 1`
//! probes (3 for an error of 1, 17 for an error of 192, 1% of 19,215); a guess far off costs
//! up to about twice the unguided search, which is why it is used only where the estimate
//! covers the configuration. `tests` check both bounds for every boundary and guess in a range.
//!
//! **Anchored** (`anchor`, either way): one value tried before all the others, so that variants
//! that each search their own boundary also share one trial where their memory compares (the
//! `amp` experiment's fp32, fp16 and bf16 at batch 4096, each then at its own boundary). Its
//! outcome narrows the bracket like any probe's; a guess it contradicts is not tried, the
//! search galloping from the anchor instead.
use super::{Fit, Strategy};

/// What the next probe is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// The anchor, before the plan it holds.
    Anchor(u64),
    /// Unguided: `start` first.
    Start,
    /// Unguided, `start` fitted: then `max`.
    Max,
    /// Guided: the guess itself.
    Guess(u64),
    /// Galloping up from `from` (which fits), `dist` above it.
    Up { from: u64, dist: u64 },
    /// Galloping down from `from` (which ran out), `dist` below it.
    Down { from: u64, dist: u64 },
    /// Halving the bracket.
    Bisect,
}

#[derive(Debug, Clone)]
pub struct Search {
    start: u64,
    factor: u64,
    max: u64,
    /// The estimate's guess, when guided.
    guess: Option<u64>,
    /// What follows the anchor (the plan the search had before `anchored`).
    after_anchor: Option<Plan>,
    /// Largest value seen to fit (0: none yet).
    pub largest_fit: u64,
    /// Smallest value seen to run out of memory.
    pub first_oom: Option<u64>,
    plan: Plan,
    done: bool,
}

impl Search {
    /// Unguided. Requires `1 <= start <= max` and `factor >= 2` (the spec validator guarantees
    /// it; anything else is clamped into it).
    pub fn new(start: u64, factor: u64, max: u64) -> Self {
        let max = max.clamp(1, u64::MAX - 1);
        Search {
            start: start.clamp(1, max),
            factor: factor.max(2),
            max,
            guess: None,
            after_anchor: None,
            largest_fit: 0,
            first_oom: None,
            plan: Plan::Start,
            done: false,
        }
    }

    /// Guided by `guess`: the largest value in `1..=max` predicted to fit, 0 when not even 1 is
    /// (a guess past `max` counts as `max`). `factor` is how fast it widens when the guess is
    /// wrong.
    pub fn guided(start: u64, factor: u64, max: u64, guess: u64) -> Self {
        let mut s = Search::new(start, factor, max);
        let g = guess.min(s.max);
        s.guess = Some(g);
        // 0 is never tried: "nothing fits" is checked by trying 1, the first value above it.
        s.plan = if g == 0 { Plan::Up { from: 0, dist: 1 } } else { Plan::Guess(g) };
        s
    }

    /// `anchor` (clamped into `1..=max`) tried before anything else.
    pub fn anchored(mut self, anchor: u64) -> Self {
        self.after_anchor = Some(self.plan);
        self.plan = Plan::Anchor(anchor.clamp(1, self.max));
        self
    }

    /// The plan after the anchor's outcome: a guess the anchor already contradicts becomes a
    /// gallop from the anchor, the way the guess would have gone had it been tried.
    fn after(&self, anchor: u64, fits: bool) -> Plan {
        match self.after_anchor.unwrap_or(Plan::Start) {
            Plan::Guess(g) if fits && g <= anchor => Plan::Up { from: anchor, dist: 1 },
            Plan::Guess(g) if !fits && g >= anchor => Plan::Down { from: anchor, dist: 1 },
            Plan::Up { from: 0, .. } if fits => Plan::Up { from: anchor, dist: 1 },
            plan => plan,
        }
    }

    /// The answer once done: the largest value that fits, if any did.
    pub fn answer(&self) -> Option<u64> {
        (self.largest_fit > 0).then_some(self.largest_fit)
    }

    /// The guess it was guided by, if any.
    pub fn guess(&self) -> Option<u64> {
        self.guess
    }

    /// The bracket's open end: the first OOM, or one past `max` while none was seen.
    fn hi(&self) -> u64 {
        self.first_oom.unwrap_or(self.max + 1)
    }

    /// The value the plan asks for, kept strictly inside the bracket; `None` once it is closed.
    fn pending(&self) -> Option<u64> {
        let (lo, hi) = (self.largest_fit, self.hi());
        if self.done || hi - lo <= 1 {
            return None;
        }
        let v = match self.plan {
            Plan::Anchor(a) => a,
            Plan::Start => self.start,
            Plan::Max => self.max,
            Plan::Guess(g) => g,
            Plan::Up { from, dist } => from.saturating_add(dist),
            Plan::Down { from, dist } => from.saturating_sub(dist),
            Plan::Bisect => lo + (hi - lo) / 2,
        };
        Some(v.clamp(lo + 1, hi - 1))
    }
}

impl Strategy for Search {
    fn next(&mut self) -> Option<f64> {
        self.pending().map(|v| v as f64)
    }

    fn record(&mut self, value: f64, fit: Fit) {
        let v = value as u64;
        let fits = match fit {
            Fit::Error => {
                self.done = true;
                return;
            }
            Fit::Fits => true,
            Fit::Oom => false,
        };
        if fits {
            self.largest_fit = self.largest_fit.max(v);
        } else {
            self.first_oom = Some(self.first_oom.map_or(v, |o| o.min(v)));
        }
        let grow = |d: u64| d.saturating_mul(self.factor);
        self.plan = match (self.plan, fits) {
            (Plan::Anchor(a), fits) => self.after(a, fits),
            (Plan::Start, true) => Plan::Max,
            (Plan::Guess(g), true) => Plan::Up { from: g, dist: 1 },
            (Plan::Guess(g), false) => Plan::Down { from: g, dist: 1 },
            // Still going the way the guess was wrong: further.
            (Plan::Up { from, dist }, true) => Plan::Up { from, dist: grow(dist) },
            (Plan::Down { from, dist }, false) => Plan::Down { from, dist: grow(dist) },
            // The first outcome the other way (or start out, or max in): the bracket is set.
            _ => Plan::Bisect,
        };
        self.done = self.pending().is_none();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a machine where values up to `limit` fit.
    fn run_search(mut s: Search, limit: u64) -> (Vec<u64>, Search) {
        let mut tried = vec![];
        while let Some(v) = s.next() {
            let v = v as u64;
            assert!(!tried.contains(&v), "{v} tried twice: {tried:?}");
            tried.push(v);
            s.record(v as f64, if v <= limit { Fit::Fits } else { Fit::Oom });
        }
        (tried, s)
    }

    fn run(start: u64, factor: u64, max: u64, limit: u64) -> (Vec<u64>, Search) {
        run_search(Search::new(start, factor, max), limit)
    }

    fn guided(start: u64, factor: u64, max: u64, guess: u64, limit: u64) -> (Vec<u64>, Search) {
        run_search(Search::guided(start, factor, max, guess), limit)
    }

    fn log2_ceil(n: u64) -> usize {
        (64 - n.saturating_sub(1).leading_zeros()) as usize
    }

    /// The exact boundary: the largest value in 1..=max that fits, and the one above.
    fn assert_exact(s: &Search, max: u64, limit: u64, what: &str) {
        let want = limit.min(max);
        assert_eq!(s.answer(), (want > 0).then_some(want), "{what}");
        assert_eq!(s.first_oom, (want < max).then_some(want + 1), "{what}");
    }

    #[test]
    fn bisects_from_start_and_max_to_the_exact_boundary() {
        let (tried, s) = run(1, 2, 4096, 41);
        assert_eq!(tried, vec![1, 4096, 2048, 1024, 512, 256, 128, 64, 32, 48, 40, 44, 42, 41]);
        assert_eq!(s.answer(), Some(41));
        assert_eq!(s.first_oom, Some(42));
    }

    #[test]
    fn every_boundary_is_found_in_log2_range_plus_3() {
        for (start, max) in [(1, 1), (3, 1000), (64, 65536), (5, 6), (100, 100), (7, 1 << 20)] {
            let limits = (0..=max.min(3000) + 1).chain([max / 2, max - 1, max, max + 1, u64::MAX]);
            for limit in limits {
                let (tried, s) = run(start, 2, max, limit);
                let what = format!("start {start}, max {max}, limit {limit}: tried {tried:?}");
                assert_exact(&s, max, limit, &what);
                let range = if limit >= start { max - start + 1 } else { start };
                assert!(tried.len() <= log2_ceil(range) + 2, "{what}");
                assert!(tried.len() <= log2_ceil(max) + 2, "{what}");
            }
        }
    }

    #[test]
    fn find_batch_takes_18_probes_where_grow_then_bisect_took_24() {
        let (tried, s) = run(64, 2, 65536, 19215);
        assert_eq!(s.answer(), Some(19215));
        assert_eq!(tried.len(), 18, "{tried:?}");
        assert!(tried.len() <= log2_ceil(65536 - 64 + 1) + 3);
    }

    #[test]
    fn nothing_fits() {
        let (tried, s) = run(4, 2, 100, 0);
        assert_eq!(tried, vec![4, 2, 1]);
        assert_eq!(s.answer(), None);
        assert_eq!(s.first_oom, Some(1));
        let (tried, s) = guided(4, 2, 100, 0, 0);
        assert_eq!(tried, vec![1], "guess: nothing fits; 1 must run out");
        assert_eq!((s.answer(), s.first_oom), (None, Some(1)));
    }

    #[test]
    fn everything_fits_up_to_max() {
        let (tried, s) = run(1, 2, 20, 1000);
        assert_eq!(tried, vec![1, 20]);
        assert_eq!(s.answer(), Some(20));
        assert_eq!(s.first_oom, None);
        let (tried, s) = guided(1, 2, 20, 20, 1000);
        assert_eq!(tried, vec![20], "a guess at max that fits is the answer");
        assert_eq!((s.answer(), s.first_oom), (Some(20), None));
        let (tried, _) = guided(1, 2, 20, 500, 1000);
        assert_eq!(tried, vec![20], "a guess past max is max");
    }

    #[test]
    fn a_right_guess_takes_two_probes() {
        let (tried, s) = guided(64, 2, 65536, 19215, 19215);
        assert_eq!(tried, vec![19215, 19216]);
        assert_eq!((s.answer(), s.first_oom), (Some(19215), Some(19216)));
        // Below start: the search looks there too, as the unguided one does.
        let (tried, s) = guided(64, 2, 65536, 10, 10);
        assert_eq!(tried, vec![10, 11]);
        assert_eq!(s.answer(), Some(10));
    }

    #[test]
    fn a_wrong_guess_gallops_away_then_bisects() {
        // Too low by 5: 101, 102, 104 fit, 108 runs out, then 106, 105.
        let (tried, s) = guided(1, 2, 1000, 100, 105);
        assert_eq!(tried, vec![100, 101, 102, 104, 108, 106, 105]);
        assert_eq!((s.answer(), s.first_oom), (Some(105), Some(106)));
        // Too high by 5: 99, 98, 96 run out, 92 fits, then 94, 95.
        let (tried, s) = guided(1, 2, 1000, 100, 95);
        assert_eq!(tried, vec![100, 99, 98, 96, 92, 94, 95]);
        assert_eq!((s.answer(), s.first_oom), (Some(95), Some(96)));
    }

    #[test]
    fn any_guess_finds_the_exact_boundary_within_the_bound() {
        for (start, max) in [(1, 1), (1, 2), (3, 300), (64, 700), (50, 50)] {
            for guess in 0..=max + 2 {
                for limit in 0..=max + 1 {
                    let (tried, s) = guided(start, 2, max, guess, limit);
                    let what = format!("start {start}, max {max}, guess {guess}, limit {limit}: {tried:?}");
                    assert_exact(&s, max, limit, &what);
                    let (g, b) = (guess.min(max), limit.min(max));
                    let e = g.abs_diff(b);
                    let bound = if e == 0 { 2 } else { 2 * log2_ceil(e + 1) + 1 };
                    assert!(tried.len() <= bound, "off by {e}, bound {bound}: {what}");
                }
            }
        }
    }

    #[test]
    fn other_factors_widen_faster_and_stay_exact() {
        for factor in [3, 4, 10] {
            for guess in (0..=600).step_by(7) {
                for limit in (0..=601).step_by(5) {
                    let (tried, s) = guided(10, factor, 600, guess, limit);
                    let what = format!("factor {factor}, guess {guess}, limit {limit}: {tried:?}");
                    assert_exact(&s, 600, limit, &what);
                    // Galloping: 1 + ceil(log_f(e + 1)) + 1 probes at most; bisecting the last gap,
                    // at most (f - 1) * e wide, ceil(log2) more.
                    let e = guess.min(600).abs_diff(limit.min(600));
                    let gallop = (0..).find(|&k| factor.pow(k) > e).unwrap() as usize + 2;
                    assert!(tried.len() <= gallop + log2_ceil((factor - 1) * e + 1), "{what}");
                }
            }
        }
    }

    #[test]
    fn an_error_ends_the_search() {
        for mut s in [Search::new(1, 2, 100), Search::guided(1, 2, 100, 50)] {
            let v = s.next().unwrap();
            s.record(v, Fit::Error);
            assert_eq!(s.next(), None);
        }
    }

    #[test]
    fn an_anchor_is_tried_first_and_costs_one_probe_when_the_guess_is_right() {
        let (tried, s) = run_search(Search::guided(1, 2, 16384, 4154).anchored(4096), 4154);
        assert_eq!(tried, vec![4096, 4154, 4155]);
        assert_exact(&s, 16384, 4154, "anchor 4096");
        let (tried, _) = run_search(Search::new(4096, 2, 16384).anchored(4096), 4154);
        assert_eq!(tried[0], 4096);
    }

    #[test]
    fn anchored_searches_stay_exact_and_within_one_more_probe_of_a_gallop() {
        for anchor in [1, 37, 300, 600, 900] {
            for guess in (0..=600).step_by(11) {
                for limit in (0..=601).step_by(7) {
                    let (tried, s) = run_search(Search::guided(10, 2, 600, guess).anchored(anchor), limit);
                    let what = format!("anchor {anchor}, guess {guess}, limit {limit}: {tried:?}");
                    assert_eq!(tried[0], anchor.min(600), "{what}");
                    assert_exact(&s, 600, limit, &what);
                    let e = guess.min(600).abs_diff(limit.min(600));
                    assert!(tried.len() <= 2 * log2_ceil(e + 1) + 2 + 1, "{what}");
                    let (tried, s) = run_search(Search::new(10, 2, 600).anchored(anchor), limit);
                    assert_exact(&s, 600, limit, &format!("unguided, {what}"));
                    assert!(tried.len() <= log2_ceil(600) + 3, "unguided {what}");
                }
            }
        }
    }
}
