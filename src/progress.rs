//! Progress over trials: a bar (or a spinner when a search's length is unknown) on a terminal,
//! one plain line per trial otherwise, so logs stay readable.
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    quiet: bool,
}

impl Progress {
    pub fn new(len: Option<usize>, quiet: bool) -> Self {
        let bar = match (quiet, len) {
            (true, _) => ProgressBar::hidden(),
            (false, Some(n)) => ProgressBar::new(n as u64).with_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} trials  {msg}",
                )
                .expect("valid template"),
            ),
            (false, None) => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] trial {pos}  {msg}")
                    .expect("valid template"),
            ),
        };
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar, quiet }
    }

    /// Says which trial is running.
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    /// Reports a finished trial above the bar, or as a line when there is no terminal.
    pub fn done(&self, line: &str) {
        self.say(line);
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
        self.bar.finish_and_clear();
    }
}
