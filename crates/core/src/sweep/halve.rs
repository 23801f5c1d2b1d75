//! The guide's batch-size strategy: start large and halve until a trial fits. It finds a value
//! that fits, not the largest: the gap to the search's exact answer is what it costs.
use super::{Fit, Strategy};

#[derive(Debug, Clone)]
pub struct Halve {
    pending: Option<u64>,
    /// The first value that fitted.
    pub fit: Option<u64>,
}

impl Halve {
    pub fn new(start: u64) -> Self {
        Halve { pending: Some(start.max(1)), fit: None }
    }
}

impl Strategy for Halve {
    fn next(&mut self) -> Option<f64> {
        self.pending.map(|v| v as f64)
    }

    fn record(&mut self, value: f64, fit: Fit) {
        let v = value as u64;
        self.pending = match fit {
            Fit::Fits => {
                self.fit = Some(v);
                None
            }
            Fit::Oom if v > 1 => Some(v / 2),
            Fit::Oom | Fit::Error => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_until_it_fits() {
        let mut h = Halve::new(128);
        let mut tried = vec![];
        while let Some(v) = h.next() {
            tried.push(v as u64);
            h.record(v, if v <= 40.0 { Fit::Fits } else { Fit::Oom });
        }
        assert_eq!(tried, vec![128, 64, 32]);
        assert_eq!(h.fit, Some(32), "fits, though 40 would have");
    }

    #[test]
    fn gives_up_below_one() {
        let mut h = Halve::new(4);
        while let Some(v) = h.next() {
            h.record(v, Fit::Oom);
        }
        assert_eq!(h.fit, None);
    }
}
