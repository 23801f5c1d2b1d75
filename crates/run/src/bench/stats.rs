//! Statistics of step times: the median and its spread (p10-p90 and the interquartile range)
//! over a contender's pooled steps, and an interval for the ratio of two medians.
//!
//! Medians, not means: a step time's distribution has a long right tail (a page fault, another
//! process, a garbage collection), and one slow step should not move the figure.
//!
//! The ratio's interval is a two-level bootstrap: processes drawn with replacement, then each
//! drawn process's steps. Steps of one process are not independent draws: a process keeps its
//! memory layout, its threads' placement and the machine's mood of that minute, and on a shared
//! 2-core machine two processes of the same contender differ by up to 30% where the steps within
//! one differ by a few. Resampling the steps alone would give an interval as narrow as if every
//! step had been a process of its own. A fixed seed makes BENCH.md a function of bench.csv.

/// The median and spread of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p25: f64,
    pub p75: f64,
    pub p90: f64,
}

impl Spread {
    /// None for an empty sample.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let sorted = sorted(values);
        if sorted.is_empty() {
            return None;
        }
        let q = |p| quantile_sorted(&sorted, p);
        Some(Spread { n: sorted.len(), median: q(0.5), p10: q(0.1), p25: q(0.25), p75: q(0.75), p90: q(0.9) })
    }

    /// The interquartile range over the median: how much steps vary, as a share.
    pub fn relative_iqr(&self) -> f64 {
        if self.median > 0.0 {
            (self.p75 - self.p25) / self.median
        } else {
            0.0
        }
    }
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The `p` quantile (0..=1) of sorted values, interpolated linearly between the two nearest
/// ranks (numpy's default, R's type 7).
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = p.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, frac) = (h.floor() as usize, h - h.floor());
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + frac * (sorted[hi] - sorted[lo])
        }
    }
}

pub fn median(values: &[f64]) -> f64 {
    quantile_sorted(&sorted(values), 0.5)
}

/// `median(a) / median(b)` over the pooled steps, and the 5th-95th percentiles of that ratio
/// over `resamples` two-level bootstrap resamples of both: `a` and `b` are given per process.
pub fn ratio_interval(a: &[Vec<f64>], b: &[Vec<f64>], resamples: usize) -> Option<(f64, (f64, f64))> {
    let pooled = |x: &[Vec<f64>]| sorted(&x.concat());
    let (pa, pb) = (pooled(a), pooled(b));
    if pa.is_empty() || pb.is_empty() {
        return None;
    }
    let point = quantile_sorted(&pa, 0.5) / quantile_sorted(&pb, 0.5);
    let (a, b): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (
        a.iter().map(|v| sorted(v)).filter(|v| !v.is_empty()).collect(),
        b.iter().map(|v| sorted(v)).filter(|v| !v.is_empty()).collect(),
    );
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut draw = |processes: &[Vec<f64>]| {
        let mut s = Vec::new();
        for _ in 0..processes.len() {
            let p = &processes[rng.below(processes.len())];
            s.extend((0..p.len()).map(|_| p[rng.below(p.len())]));
        }
        s.sort_by(f64::total_cmp);
        quantile_sorted(&s, 0.5)
    };
    let mut ratios: Vec<f64> = (0..resamples.max(1)).map(|_| draw(&a) / draw(&b)).collect();
    ratios.sort_by(f64::total_cmp);
    Some((point, (quantile_sorted(&ratios, 0.05), quantile_sorted(&ratios, 0.95))))
}

/// xorshift64: a few lines of reproducible randomness for the bootstrap.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0, 5.0]).unwrap();
        assert_eq!((s.n, s.median, s.p25, s.p75), (5, 3.0, 2.0, 4.0));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12, "{s:?}");
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), 2.5);
        assert_eq!(Spread::of(&[7.0]).unwrap().p90, 7.0);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none(), "a NaN is not a step time");
        assert!((s.relative_iqr() - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_ratio_s_interval_holds_it_and_narrows_with_agreement() {
        let a = vec![(0..40).map(|i| 1.0 + 0.01 * (i % 5) as f64).collect::<Vec<f64>>()];
        let b = vec![(0..40).map(|i| 2.0 + 0.02 * (i % 5) as f64).collect::<Vec<f64>>()];
        let (r, (lo, hi)) = ratio_interval(&a, &b, 500).unwrap();
        assert!((r - 0.5).abs() < 1e-12, "{r}");
        assert!(lo <= r && r <= hi && hi - lo < 0.02, "{lo}..{hi}");
        let noisy: Vec<f64> = (0..40).map(|i| 1.0 + (i % 7) as f64).collect();
        let (_, (lo2, hi2)) = ratio_interval(&[noisy], &b, 500).unwrap();
        assert!(hi2 - lo2 > 10.0 * (hi - lo), "a noisier sample gives a wider interval");
        assert_eq!(ratio_interval(&a, &b, 500), ratio_interval(&a, &b, 500), "seeded: reproducible");
        assert!(ratio_interval(&[], &b, 10).is_none());
    }

    #[test]
    fn processes_that_disagree_widen_the_interval_steps_alone_would_not() {
        // Five processes of one side, steps steady within each, their medians 1.0 to 1.2.
        let steady = |m: f64| (0..30).map(|i| m * (1.0 + 0.001 * (i % 3) as f64)).collect::<Vec<f64>>();
        let a: Vec<Vec<f64>> = (0..5).map(|i| steady(1.0 + 0.05 * i as f64)).collect();
        let b = [steady(1.0)];
        let (r, (lo, hi)) = ratio_interval(&a, &b, 1000).unwrap();
        assert!((r - 1.1).abs() < 0.01, "{r}");
        assert!(lo < 1.06 && hi > 1.14, "another draw of five processes could have any of them: {lo}..{hi}");
        let (_, (lo1, hi1)) = ratio_interval(&[a.concat()], &b, 1000).unwrap();
        assert!(hi1 - lo1 < (hi - lo) / 2.0, "pooled as one process, falsely narrow: {lo1}..{hi1}");
    }
}
