//! Progress over trials and inside them: a bar (or a spinner when a search's length is unknown)
//! on a terminal whose line says where the trial under way is (step k of n, the phase, its time
//! so far and what is left), one plain line per trial otherwise, so logs stay readable.
//!
//! The training loop says where it is at each phase's start (`train::position`); a ticker thread
//! redraws the line from that every quarter second, so a phase of minutes still shows its clock.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::train::position::{self, Position};

/// "step 3 of 10, backward, 1m 04s in, about 2m 10s left": where the trial under way is.
fn where_now() -> Option<String> {
    Some(describe(position::now()?))
}

/// A duration as both lines show it: "0.4s" under ten seconds (a small trial's step), "12s" under
/// a minute, "1m 04s" past it.
fn clock(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s if s >= 10 => format!("{s}s"),
        _ => format!("{:.1}s", d.as_secs_f64()),
    }
}

fn describe(p: Position) -> String {
    let at = match (p.step, p.phase) {
        (0, Some(phase)) => format!("set-up, {phase}"),
        (0, None) => "starting".to_string(),
        (k, Some(phase)) => format!("step {k} of {}, {phase}", p.steps),
        (k, None) => format!("step {k} of {}", p.steps),
    };
    // The pace of the steps done so far, once one is done.
    let left = p.first_step.filter(|_| p.step >= 2).map(|first| {
        let per_step = first.elapsed() / (p.step as u32 - 1);
        let remaining = per_step * (p.steps + 1 - p.step) as u32;
        format!(", about {} left", clock(remaining))
    });
    format!("{at}, {} in{}", clock(p.started.elapsed()), left.unwrap_or_default())
}

/// How often a log gets a line while work is under way: every 30 s, or every
/// `OOMLAB_PROGRESS_EVERY` seconds (a whole number, at least 1).
fn log_every() -> Duration {
    let secs = std::env::var("OOMLAB_PROGRESS_EVERY").ok().and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_secs(secs.filter(|&s| s >= 1).unwrap_or(30))
}

/// "progress: option 3 of 29: amp fp16 (2 of 29 done, 1m 30s in)": a log's line for work under
/// way, with where the trial is when one is training.
fn heartbeat(label: &str, done: u64, len: Option<u64>, elapsed: Duration, at: Option<String>) -> String {
    let clock = clock(elapsed);
    let count = match len {
        Some(n) => format!("{done} of {n} done, "),
        None => format!("{done} done, "),
    };
    let what = if label.is_empty() { "working".to_string() } else { label.to_string() };
    let at = at.map(|a| format!("; the trial at {a}")).unwrap_or_default();
    format!("progress: {what} ({count}{clock} in{at})")
}

pub struct Progress {
    bar: ProgressBar,
    quiet: bool,
    label: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    /// The log's line thread, joined when the work ends so that no line follows the end.
    logger: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Progress {
    pub fn new(len: Option<usize>, quiet: bool) -> Self {
        let bar = match (quiet, len) {
            (true, _) => ProgressBar::hidden(),
            (false, Some(n)) => ProgressBar::new(n as u64).with_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} done  {msg}",
                )
                .expect("valid template"),
            ),
            // The message names the trial: one numbering, the result lines'.
            (false, None) => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}").expect("valid template"),
            ),
        };
        bar.enable_steady_tick(Duration::from_millis(200));
        let label = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        if !bar.is_hidden() {
            let (bar, label, stop) = (bar.clone(), label.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(at), Ok(label)) = (where_now(), label.lock()) {
                        bar.set_message(format!("{label}: {at}"));
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
        }
        let mut logger = None;
        if bar.is_hidden() && !quiet {
            // No terminal (a log, a SLURM job): a line every so often while work is under way,
            // so that minutes of one item (a TorchScript option under autocast) are not silence.
            let (bar, label, stop, every) = (bar.clone(), label.clone(), stop.clone(), log_every());
            logger = Some(std::thread::spawn(move || {
                let (began, mut last) = (Instant::now(), Instant::now());
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    // Once a signal asked to stop, the lines are the stop's.
                    if last.elapsed() < every
                        || stop.load(Ordering::Relaxed)
                        || crate::interrupt::requested().is_some()
                    {
                        continue;
                    }
                    last = Instant::now();
                    // Copied, so that a stalled stderr does not hold up the work's next label.
                    let now = label.lock().map(|l| l.clone()).unwrap_or_default();
                    note!("{}", heartbeat(&now, bar.position(), bar.length(), began.elapsed(), where_now()));
                }
            }));
        }
        Progress { bar, quiet, label, stop, logger: Mutex::new(logger) }
    }

    /// Says what is running.
    pub fn start(&self, what: &str) {
        if let Ok(mut label) = self.label.lock() {
            *label = what.to_string();
        }
        self.bar.set_message(what.to_string());
    }

    /// Reports a finished item above the bar, or as a line when there is no terminal.
    pub fn done(&self, line: &str) {
        self.say(line);
        self.bar.inc(1);
    }

    /// Counts a finished item without a line (work whose results are reported at the end).
    pub fn advance(&self) {
        self.bar.inc(1);
    }

    /// A line above the bar (or alone without a terminal); nothing with --quiet.
    pub fn say(&self, line: &str) {
        if self.quiet {
            // Nothing: --quiet.
        } else if self.bar.is_hidden() {
            note!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    pub fn finish(&self) {
        self.stop_logger();
        self.bar.finish_and_clear();
    }

    /// Stops the threads, and waits for the log's (a tenth of a second at most), so that a line
    /// it was about to write comes before what follows the work, not among it.
    fn stop_logger(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.logger.lock().ok().and_then(|mut l| l.take()) {
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_logger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Phase;

    #[test]
    fn a_log_line_says_what_is_under_way_and_how_far_along() {
        let line = heartbeat("option 3 of 29: amp fp16", 2, Some(29), Duration::from_secs(90), None);
        assert_eq!(line, "progress: option 3 of 29: amp fp16 (2 of 29 done, 1m 30s in)");
        let line =
            heartbeat("trial 4", 3, None, Duration::from_secs(12), Some("step 2 of 4, backward".into()));
        assert_eq!(line, "progress: trial 4 (3 done, 12s in; the trial at step 2 of 4, backward)");
        assert!(heartbeat("", 0, Some(1), Duration::ZERO, None).starts_with("progress: working (0 of 1"));
    }

    #[test]
    fn both_lines_share_one_clock() {
        let ms = Duration::from_millis;
        assert_eq!(clock(ms(400)), "0.4s");
        assert_eq!(clock(ms(12_400)), "12s");
        assert_eq!(clock(ms(64_000)), "1m 04s");
        assert_eq!(heartbeat("", 0, None, ms(12_400), None), "progress: working (0 done, 12s in)");
    }

    #[test]
    fn the_position_reads_as_step_of_n_with_what_is_left() {
        let ago = |s: u64| Instant::now() - Duration::from_secs(s);
        let at = |step, phase, first_step| Position { steps: 4, started: ago(100), step, phase, first_step };
        assert_eq!(describe(at(0, None, None)), "starting, 1m 40s in");
        assert_eq!(describe(at(0, Some(Phase::Model), None)), "set-up, model, 1m 40s in");
        assert_eq!(describe(at(1, Some(Phase::Forward), Some(ago(10)))), "step 1 of 4, forward, 1m 40s in");
        // Two steps of 30 s done before step 3: steps 3 and 4 are left, about a minute.
        let three = describe(at(3, Some(Phase::Backward), Some(ago(60))));
        assert!(three.starts_with("step 3 of 4, backward, 1m 40s in, about 1m 0"), "{three}");
    }
}
