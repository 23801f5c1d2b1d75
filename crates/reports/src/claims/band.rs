//! A claim's stated range as a rule that can refute: confirmed inside the range, partly within
//! a stated slack outside either edge, refuted beyond. Symmetric, so a measurement far above
//! the claim (a 3x slowdown against "20-30%") refutes it as surely as one far below.
use super::Verdict;

/// `[lo, hi]` with `slack` either side, in the claim's own unit (a share: 0.4 is 40%).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    pub lo: f64,
    pub hi: f64,
    pub slack: f64,
}

impl Band {
    pub const fn new(lo: f64, hi: f64, slack: f64) -> Band {
        Band { lo, hi, slack }
    }

    pub fn judge(&self, x: f64) -> Verdict {
        // A hair of tolerance, so that a share printed as 40.0% is judged as 40%.
        const EPS: f64 = 1e-9;
        if x.is_nan() {
            Verdict::Refuted
        } else if x >= self.lo - EPS && x <= self.hi + EPS {
            Verdict::Confirmed
        } else if x >= self.lo - self.slack - EPS && x <= self.hi + self.slack + EPS {
            Verdict::Partly
        } else {
            Verdict::Refuted
        }
    }

    /// Where `x` falls: -2 refuted below, -1 partly below, 0 confirmed, 1 partly above, 2
    /// refuted above (NaN: refuted, as its own zone).
    fn zone(&self, x: f64) -> i8 {
        const EPS: f64 = 1e-9;
        if x.is_nan() {
            3
        } else if x < self.lo - self.slack - EPS {
            -2
        } else if x < self.lo - EPS {
            -1
        } else if x <= self.hi + EPS {
            0
        } else if x <= self.hi + self.slack + EPS {
            1
        } else {
            2
        }
    }

    /// The verdict on an interval `[lo, hi]` of a measurement: confirmed when it lies within the
    /// band, partly when within the band and its slack, refuted when wholly beyond the slack on
    /// one side; `None` when it straddles the slack's edge, which the measurement cannot decide.
    pub fn judge_interval(&self, lo: f64, hi: f64) -> Option<Verdict> {
        match (self.zone(lo), self.zone(hi)) {
            (0, 0) => Some(Verdict::Confirmed),
            (-1..=1, -1..=1) => Some(Verdict::Partly),
            (a, b) if a == b && a.abs() == 2 => Some(Verdict::Refuted),
            _ => None,
        }
    }

    /// The rule in words, for a claim's "why": "confirmed within 40-50%, partly within 5 points
    /// of that (35-55%), refuted beyond".
    pub fn rule(&self) -> String {
        let p = |x: f64| format!("{}", (100.0 * x).round());
        format!(
            "confirmed within {}-{}%, partly within {} points of that ({}-{}%), refuted beyond",
            p(self.lo),
            p(self.hi),
            p(self.slack),
            p(self.lo - self.slack),
            p(self.hi + self.slack)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_band_judges_at_its_edges_the_same_from_both_sides() {
        let b = Band::new(0.40, 0.50, 0.05);
        for (x, v) in [
            (0.40, Verdict::Confirmed),
            (0.45, Verdict::Confirmed),
            (0.50, Verdict::Confirmed),
            (0.3999, Verdict::Partly),
            (0.5001, Verdict::Partly),
            (0.35, Verdict::Partly),
            (0.55, Verdict::Partly),
            (0.3499, Verdict::Refuted),
            (0.5501, Verdict::Refuted),
            (-1.0, Verdict::Refuted),
            (2.0, Verdict::Refuted),
            (f64::NAN, Verdict::Refuted),
        ] {
            assert_eq!(b.judge(x), v, "{x}");
        }
        assert_eq!(
            b.rule(),
            "confirmed within 40-50%, partly within 5 points of that (35-55%), refuted beyond"
        );
    }

    #[test]
    fn an_interval_is_judged_only_when_it_clears_an_edge() {
        let b = Band::new(0.20, 0.30, 0.05);
        assert_eq!(b.judge_interval(0.22, 0.28), Some(Verdict::Confirmed));
        assert_eq!(b.judge_interval(0.16, 0.19), Some(Verdict::Partly));
        assert_eq!(b.judge_interval(0.31, 0.34), Some(Verdict::Partly));
        assert_eq!(b.judge_interval(-0.29, -0.17), Some(Verdict::Refuted), "faster, wholly below");
        assert_eq!(b.judge_interval(0.40, 0.90), Some(Verdict::Refuted));
        assert_eq!(b.judge_interval(0.18, 0.25), Some(Verdict::Partly), "within the band and its slack");
        assert_eq!(b.judge_interval(0.233, 0.335), Some(Verdict::Partly));
        assert_eq!(b.judge_interval(0.10, 0.25), None, "straddles the slack's edge at 15%");
        assert_eq!(b.judge_interval(0.10, 0.40), None);
        assert_eq!(b.judge_interval(-0.5, 0.5), None, "below and above the band are not one verdict");
    }
}
