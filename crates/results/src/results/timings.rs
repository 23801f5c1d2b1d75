//! Where a run's time went, stage by stage, so the slowest part of a suite is visible in its
//! manifests: the process's start (loading the binary and libtorch's libraries), libtorch's
//! first use and the warm-up, the trials (making data, making models, training steps, the
//! rest), and the charts.
use std::sync::OnceLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::schema::SummaryRow;

/// Seconds per stage of one `oomlab run` process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTimings {
    /// From the process's start to `main`: the dynamic loader mapping the binary and libtorch's
    /// shared libraries (several hundred MiB). To 10 ms (Linux's /proc clock); empty where
    /// /proc cannot tell.
    pub process_start: Option<f64>,
    /// From `main` to the first trial: reading the spec, opening the device (on CUDA its
    /// context), libtorch's first operations and the warm-up trials.
    pub libtorch_init: f64,
    /// Making the trials' data sets, on the device's clock.
    pub data: f64,
    /// Making the trials' models and optimizers.
    pub model: f64,
    /// The trials' training steps.
    pub steps: f64,
    /// The trials' wall time in all: the above and each trial's clean-up, checks and exports.
    pub trials: f64,
    /// Drawing the charts after the run; empty until they are drawn.
    pub charts: Option<f64>,
    /// From the process's start to the manifest's last write.
    pub total: f64,
}

/// When `main` began, and how long the process had existed by then.
struct Start {
    main: Instant,
    age: Option<f64>,
}

static START: OnceLock<Start> = OnceLock::new();

/// Marks the start of `main`; call it first thing. Later calls keep the first mark.
pub fn mark_main() {
    START.get_or_init(|| Start { main: Instant::now(), age: process_age() });
}

/// Seconds since `main` began (since the first call, when `mark_main` was not called).
pub fn since_main() -> f64 {
    START.get_or_init(|| Start { main: Instant::now(), age: process_age() }).main.elapsed().as_secs_f64()
}

impl RunTimings {
    /// The process's start and its time up to the end of warm-up (`warmed`: seconds since main).
    pub fn new(warmed: f64) -> Self {
        let age = START.get().and_then(|s| s.age);
        RunTimings { process_start: age, libtorch_init: warmed, ..RunTimings::default() }
    }

    /// Adds the trials' stages (`trials`: their wall time, seconds).
    pub fn add_trials(&mut self, rows: &[SummaryRow], trials: f64) {
        self.data += rows.iter().filter_map(|r| r.data_seconds).sum::<f64>();
        self.model += rows.iter().filter_map(|r| r.model_seconds).sum::<f64>();
        self.steps += rows.iter().filter_map(|r| r.steps_total_seconds).sum::<f64>();
        self.trials += trials;
    }

    /// Sets the total: the process's age now.
    pub fn close(&mut self) {
        self.total = self.process_start.unwrap_or(0.0) + since_main();
    }
}

/// Seconds since this process started, from /proc: its start time in clock ticks since boot
/// (field 22 of /proc/self/stat; Linux fixes USER_HZ at 100 for /proc) against the uptime.
fn process_age() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name, in parentheses, may hold spaces: count fields after its closing one.
    let rest = &stat[stat.rfind(')')? + 1..];
    let start_ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 =
        std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    Some((uptime - start_ticks / 100.0).max(0.0))
}
