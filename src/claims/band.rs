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
}
