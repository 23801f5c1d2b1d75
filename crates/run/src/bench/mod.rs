//! `oomlab bench`: how fast oomlab trains at each trace level, against the PyTorch (Python) loop
//! it replaces, for the same model, data placement and optimizer implementation.
//!
//! Every contender runs in a process of its own (a fresh allocator, a fresh CUDA context),
//! launched by the bench in rounds, the order rotated each round so that no contender always
//! runs first or after the same neighbour; each process trains its warm-up steps, then the timed
//! ones, and prints one JSON line ([`protocol`]). A step is timed the same way on both sides:
//! the host's clock at each step's end, after waiting for the device.
//!
//! By concern: [`configs`] (what is timed, per device), [`protocol`] (the worker's request and
//! its JSON line), [`worker`] (oomlab's side of a worker; the Python side is
//! `scripts/reference/bench_loop.py`), [`runner`] (launching the rounds), [`stats`] (medians,
//! spreads, the interval of a ratio), [`analysis`] (pooling the reports, checking both sides
//! trained the same model), [`verdict`] (ratios against the targets, and why a target is
//! missed), [`report`] (`BENCH.md` and `bench.csv`); the chart is
//! [`crate::chart::BenchChart`].
use serde::{Deserialize, Serialize};

use crate::schema::TraceLevel;

pub mod analysis;
pub mod chart;
pub mod configs;
pub mod estimate_times;
pub mod protocol;
pub mod report;
pub mod runner;
pub mod stats;
pub mod verdict;
pub mod worker;

pub use analysis::{analyse, Analysis, ConfigResult};
pub use configs::{BenchConfig, Plan, Role};
pub use protocol::{Report, Request};
pub use report::Header;

/// The file names the bench writes into `<out>/<device>/`.
pub const BENCH_MD: &str = "BENCH.md";
pub const BENCH_CSV: &str = "bench.csv";
/// The samples of a bench under way (or stopped): replaced by `bench.csv` when it completes.
pub const BENCH_PARTIAL_CSV: &str = "bench.partial.csv";
/// The chart's stem: `bench.png` and `bench.svg`.
pub const BENCH_CHART: &str = "bench";

/// One thing timed: oomlab at a trace level, or the PyTorch loop, untraced or synchronised at
/// every phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    OomlabPhases,
    OomlabSync,
    OomlabSteps,
    OomlabOff,
    /// The loop as the lesson's readers write it, nothing measured inside a step.
    Pytorch,
    /// The same loop with `torch.cuda.synchronize()` and the host's clock at every phase's end.
    PytorchSync,
}

impl Contender {
    /// Every contender, in the order tables and charts list them.
    pub const ALL: [Contender; 6] = [
        Contender::OomlabOff,
        Contender::OomlabSteps,
        Contender::OomlabPhases,
        Contender::OomlabSync,
        Contender::Pytorch,
        Contender::PytorchSync,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Contender::OomlabPhases => "oomlab-phases",
            Contender::OomlabSync => "oomlab-sync",
            Contender::OomlabSteps => "oomlab-steps",
            Contender::OomlabOff => "oomlab-off",
            Contender::Pytorch => "pytorch",
            Contender::PytorchSync => "pytorch-sync",
        }
    }

    pub fn parse(s: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The trace level of an oomlab contender; None for PyTorch's.
    pub fn level(self) -> Option<TraceLevel> {
        match self {
            Contender::OomlabPhases => Some(TraceLevel::Phases),
            Contender::OomlabSync => Some(TraceLevel::Sync),
            Contender::OomlabSteps => Some(TraceLevel::Steps),
            Contender::OomlabOff => Some(TraceLevel::Off),
            Contender::Pytorch | Contender::PytorchSync => None,
        }
    }

    /// The Python worker's `--mode`; None for oomlab's contenders.
    pub fn python_mode(self) -> Option<&'static str> {
        match self {
            Contender::Pytorch => Some("default"),
            Contender::PytorchSync => Some("sync"),
            _ => None,
        }
    }

    /// What it is, for BENCH.md's legend.
    pub fn describe(self) -> &'static str {
        match self {
            Contender::OomlabOff => "`oomlab run --trace off`: no trace rows, one mark per step",
            Contender::OomlabSteps => "`--trace steps`: a row per step (its peak and end)",
            Contender::OomlabPhases => {
                "`--trace phases` (the default): a row per phase, the allocator read with no device wait, \
                 durations from CUDA events"
            }
            Contender::OomlabSync => "`--trace sync`: a row per phase, the device synchronised at every phase's end",
            Contender::Pytorch => {
                "PyTorch's loop as the lesson's readers write it (nn.Sequential, F.cross_entropy, torch.optim), \
                 nothing measured inside a step"
            }
            Contender::PytorchSync => {
                "the same loop with `torch.cuda.synchronize()` and the host's clock at every phase's end"
            }
        }
    }

    /// Whether it reports a duration per phase (what explains a missed target).
    pub fn times_phases(self) -> bool {
        matches!(self, Contender::OomlabSync | Contender::PytorchSync | Contender::OomlabPhases)
    }
}

impl std::fmt::Display for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// "1.23 ms", "45.6 µs", "4.56 s": three significant digits in the unit that reads best.
pub fn format_seconds(s: f64) -> String {
    let (value, unit) = match s.abs() {
        x if x >= 1.0 => (s, "s"),
        x if x >= 1e-3 => (s * 1e3, "ms"),
        _ => (s * 1e6, "µs"),
    };
    let digits = match value.abs() {
        x if x >= 100.0 => 0,
        x if x >= 10.0 => 1,
        _ => 2,
    };
    format!("{value:.digits$} {unit}")
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn contenders_round_trip_their_names() {
        for c in Contender::ALL {
            assert_eq!(Contender::parse(c.as_str()), Some(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.as_str()));
            assert!(c.level().is_some() != c.python_mode().is_some(), "{c} is one side's");
        }
        assert_eq!(Contender::parse("pytorch-fast"), None);
    }

    #[test]
    fn seconds_read_in_their_unit() {
        assert_eq!(format_seconds(4.5612), "4.56 s");
        assert_eq!(format_seconds(0.0123), "12.3 ms");
        assert_eq!(format_seconds(0.00185), "1.85 ms");
        assert_eq!(format_seconds(0.0000456), "45.6 µs");
        assert_eq!(format_seconds(0.000456), "456 µs");
        assert_eq!(format_seconds(-0.002), "-2.00 ms");
    }
}
