//! A results folder belongs to one run: an exclusive advisory lock on `<dir>/.oomlab.lock`,
//! taken before the folder is checked or cleared and held until the run's report is done, with
//! the holder's pid in the file for the message a second run gets. The lock goes with the
//! process however it ends; the file is removed when the run ends normally.
//!
//! While a run goes, the file also carries its last heartbeat ([`DirLock::beat`]): the trial,
//! step and phase under way and, on the CPU, how much memory the host had left. A process
//! killed without a chance to speak (kill -9, the kernel's OOM killer) leaves the file behind
//! with that line in it, and the next command on the folder says what it knows of the death
//! ([`DirLock::stopped_run`]).
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::Read as _;
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The lock file's name in a results folder.
pub const LOCK: &str = ".oomlab.lock";

/// A held lock on a results folder.
#[derive(Debug)]
pub struct DirLock {
    /// Held open: the lock lives as long as this handle; heartbeats are written through it.
    file: File,
    path: PathBuf,
    /// What the file held before this process took it: a killed run's last heartbeat.
    previous: String,
    /// When the last heartbeat was written, so that a phase of microseconds writes none.
    last_beat: Mutex<Option<Instant>>,
}

/// How often a heartbeat is written at most.
const BEAT_EVERY: Duration = Duration::from_millis(200);

/// The pid a lock file names: its first line, `pid N` (or a bare number, as files were written
/// before the heartbeat).
fn holder(text: &str) -> &str {
    let first = text.lines().next().unwrap_or_default().trim();
    first.strip_prefix("pid ").unwrap_or(first)
}

impl DirLock {
    /// Locks `dir` (which must exist) for this process, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK);
        // A holder that ends removes the file; one that opened it just before may then lock a
        // file no longer in the folder, so the lock counts only if it is on the file there now.
        for _ in 0..8 {
            // Never through a link: the pid is written into the file, wherever it would lead.
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .with_context(|| format!("opening the lock file {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    let text = fs::read_to_string(&path).unwrap_or_default();
                    bail!(
                        "{} is being written by another oomlab run (pid {}); wait for it to end, or give \
                         --out another folder",
                        dir.display(),
                        holder(&text)
                    );
                }
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
            let same = fs::metadata(&path).ok().map(|m| m.ino()) == Some(file.metadata()?.ino());
            if same {
                let mut previous = String::new();
                let _ = (&file).take(4096).read_to_string(&mut previous);
                let lock = DirLock { file, path, previous, last_beat: Mutex::new(None) };
                lock.write(String::new())?;
                return Ok(lock);
            }
        }
        bail!("could not lock {}: its lock file keeps changing", dir.display())
    }
}

impl DirLock {
    /// Writes `pid N` and `rest` over the file, then cuts it to length: a run refused meanwhile
    /// reads a whole pid, never an empty file.
    fn write(&self, rest: String) -> std::io::Result<()> {
        let text = format!("pid {}\n{rest}", std::process::id());
        self.file.write_all_at(text.as_bytes(), 0)?;
        self.file.set_len(text.len() as u64)
    }

    /// Records where the run is (`what`, made only when a beat is due: at most every 200 ms, and
    /// always when `now`), for the next command to read if this process is killed. Best effort:
    /// a heartbeat that cannot be written costs the run nothing.
    pub fn beat(&self, now: bool, what: impl FnOnce() -> String) {
        let Ok(mut last) = self.last_beat.lock() else { return };
        if !now && last.is_some_and(|t| t.elapsed() < BEAT_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let _ = self.write(format!("{}\nat {}\n", what(), super::manifest::now()));
    }

    /// What is known of a run that stopped without finishing in this folder: its manifest still
    /// says `running` (or `merging`) though this process holds the lock, so the process that
    /// wrote it is gone without a word: killed, with its last heartbeat's trial, phase and the
    /// host's free memory then. `None` when the folder's run ended as runs end.
    pub fn stopped_run(&self, dir: &Path) -> Option<String> {
        use super::RunStatus;
        let m = super::Manifest::read(dir).ok()?;
        if !matches!(m.status, RunStatus::Running | RunStatus::Merging) {
            return None;
        }
        let beat = Heartbeat::parse(&self.previous);
        let mut s = format!(
            "the previous run (pid {}) stopped without finishing: killed without a chance to say why",
            beat.pid.as_deref().unwrap_or("unknown")
        );
        if let Some(at) = &beat.at {
            s += &format!("; its last phase was {at}");
        }
        if let Some((free, total)) = beat.host {
            let size = |b: u64| crate::units::format_bytes(b);
            s += &format!(", when host memory was {} free of {}", size(free), size(total));
            if (free as f64) < 0.05 * total as f64 {
                s += " (so perhaps the kernel's OOM killer: other processes, or this run, took the host's memory)";
            }
        }
        Some(s)
    }
}

/// A heartbeat as read back from a lock file.
#[derive(Debug, Default, PartialEq)]
struct Heartbeat {
    pid: Option<String>,
    /// "trial 3, step 1, backward (at 2026-12-01T10:00:00Z)".
    at: Option<String>,
    /// (available, total) host memory in bytes.
    host: Option<(u64, u64)>,
}

impl Heartbeat {
    /// Lines `pid N`, `trial T step S phase P`, `host_available A of T`, `at TIME`; any may be
    /// missing (a file from before heartbeats holds only the pid).
    fn parse(text: &str) -> Heartbeat {
        let mut beat = Heartbeat::default();
        let pid = holder(text);
        if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
            beat.pid = Some(pid.to_string());
        }
        let mut when = None;
        for line in text.lines().skip(1) {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("trial") => beat.at = Some(line.to_string()),
                Some("host_available") => {
                    let n: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                    if let [free, total] = n[..] {
                        beat.host = Some((free, total));
                    }
                }
                Some("at") => when = words.next().map(String::from),
                _ => {}
            }
        }
        if let (Some(at), Some(when)) = (&mut beat.at, when) {
            *at = format!("{at} (at {when})");
        }
        beat
    }
}

/// A heartbeat's lines for a phase: where the run is and, where known, the host's memory.
pub fn beat_line(trial: usize, step: usize, phase: &str, host: Option<(u64, u64)>) -> String {
    let mut s = format!("trial {trial} step {step} phase {phase}");
    if let Some((free, total)) = host {
        s += &format!("\nhost_available {free} of {total}");
    }
    s
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still held, so no other run can have locked this file in between.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_file_that_is_a_link_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("precious");
        fs::write(&target, "keep me").unwrap();
        let dir = tmp.path().join("exp");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(LOCK)).unwrap();
        assert!(DirLock::acquire(&dir).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[test]
    fn a_heartbeat_is_read_back_as_the_killed_runs_last_words() {
        let text =
            format!("pid 42\n{}\nat 2026-12-01T10:00:00Z\n", beat_line(3, 1, "backward", Some((100, 4000))));
        let beat = Heartbeat::parse(&text);
        assert_eq!(beat.pid.as_deref(), Some("42"));
        assert_eq!(beat.at.as_deref(), Some("trial 3 step 1 phase backward (at 2026-12-01T10:00:00Z)"));
        assert_eq!(beat.host, Some((100, 4000)));
        // A file from before heartbeats: the pid alone.
        assert_eq!(Heartbeat::parse("1234"), Heartbeat { pid: Some("1234".into()), ..Heartbeat::default() });
        assert_eq!(Heartbeat::parse(""), Heartbeat::default());
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(tmp.path()).unwrap();
        let err = DirLock::acquire(tmp.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(err.contains("--out"), "{err}");
        drop(first);
        assert!(!tmp.path().join(LOCK).exists(), "the file goes with the lock");
        let again = DirLock::acquire(tmp.path()).unwrap();
        drop(again);
    }
}
