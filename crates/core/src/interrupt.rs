//! Ctrl-C and SIGTERM as a request to stop cleanly, answered at once.
//!
//! The first signal is answered within the moment by a line that says what will happen: the
//! phase under way finishes (libtorch cannot be stopped inside a kernel, and a phase can be long),
//! then the trial in progress is dropped (its tensors freed, none of its rows written), the
//! manifest says `interrupted`, the `--resume` command is printed and the process exits 130
//! (SIGINT) or 143 (SIGTERM). A second signal abandons the trial at once, without waiting for
//! the kernel: the manifest is marked `interrupted` from the signal's thread (the completed
//! trials' rows are whole on disk already, as they are after a kill -9), the `--resume` command
//! is printed, and the process exits with the first signal's code.
//!
//! SIGHUP (the terminal closed, an ssh session dropped) is answered as SIGTERM is, with 129.
//!
//! Only `oomlab run` and `oomlab bench` install the handlers, first thing in `main`, so that no
//! instant of theirs is left to the signal's default (which kills without a word); elsewhere (the
//! library's tests) nothing is ever requested. Until the command [`arm`]s them (it is about to
//! write, and checks between its phases from then on), a signal ends the process at once: there
//! is nothing to keep, and loading a large model would not look at the request for minutes.
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The exit code the first signal asks for (128 + its number); 0 before any.
static CODE: AtomicUsize = AtomicUsize::new(0);
/// What a second signal does before the process exits (the run's manifest marked), if set.
type Hook = Box<dyn Fn() + Send>;
static ABANDON: Mutex<Option<Hook>> = Mutex::new(None);
/// The command that resumes the run under way, when there is one.
static RESUME: OnceLock<String> = OnceLock::new();
static INSTALLED: OnceLock<()> = OnceLock::new();
/// Whether the command is under way and answers a request between its phases (see [`arm`]);
/// set and read under [`ARMING`], so that a signal's exit and the command's first write never
/// cross.
static ARMED: AtomicBool = AtomicBool::new(false);
static ARMING: Mutex<()> = Mutex::new(());

/// A run stopped because it was asked to: the error that carries the exit code up the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {} {}", signal_name(*code), stopped_words())]
pub struct Interrupted {
    /// 130 for SIGINT, 143 for SIGTERM.
    pub code: i32,
}

/// What a signal stops and what is kept, in the words of the command under way (a run's
/// trials, a bench's processes): said at the first signal and in the error.
struct Wording {
    stopping: String,
    stopped: String,
}
static WORDING: Mutex<Option<Wording>> = Mutex::new(None);

/// Words for a command that is not a run: `stopping` at the first signal ("after the process
/// under way"), `stopped` in the error ("after the process under way; ... kept in ...").
pub fn set_wording(stopping: String, stopped: String) {
    if let Ok(mut w) = WORDING.lock() {
        *w = Some(Wording { stopping, stopped });
    }
}

/// The command's words, `pick`ed from its wording, or a run's (`default`).
fn words(pick: fn(&Wording) -> &String, default: &str) -> String {
    let set = WORDING.lock().ok().and_then(|w| w.as_ref().map(|w| pick(w).clone()));
    set.unwrap_or_else(|| default.into())
}

fn stopping_words() -> String {
    words(
        |w| &w.stopping,
        "stopping after the phase under way (the trial in progress is dropped); Ctrl-C again to abandon the \
         trial now",
    )
}

fn stopped_words() -> String {
    words(|w| &w.stopped, "after the phase under way; the trial in progress was dropped")
}

fn signal_name(code: i32) -> &'static str {
    match code - 128 {
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP (the terminal closed)",
        _ => "SIGINT (Ctrl-C)",
    }
}

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP: a thread that answers them.
pub fn install() -> Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing the SIGINT/SIGTERM/SIGHUP handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                answer(128 + signal);
            }
        })
        .context("starting the thread that answers Ctrl-C")?;
    let _ = INSTALLED.set(());
    Ok(())
}

/// The first signal: say what will happen. The second: abandon the trial now.
fn answer(code: i32) {
    let first = CODE.compare_exchange(0, code as usize, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    // Straight to stderr: the progress bar's own thread may be drawing, and a line cut by it
    // is still read.
    let mut err = std::io::stderr();
    if first {
        // Held until the process exits, if it does here: `arm` waits, so nothing is written.
        let _arming = ARMING.lock().unwrap_or_else(|p| p.into_inner());
        if !ARMED.load(Ordering::SeqCst) {
            // Nothing written yet, nothing to keep: stop now rather than after a model's loading.
            let _ = writeln!(err, "\n{}: stopped before anything was written", signal_name(code));
            unsafe { libc::_exit(code) }
        }
    }
    if first {
        let _ = writeln!(err, "\n{}: {}", signal_name(code), stopping_words());
        return;
    }
    if let Ok(hook) = ABANDON.lock() {
        if let Some(hook) = hook.as_ref() {
            hook();
        }
    }
    let _ = writeln!(err, "\nabandoned the trial in progress without waiting for it{}", resume_line());
    let code = CODE.load(Ordering::SeqCst) as i32;
    // Not process::exit: that would run libtorch's static destructors under a kernel that is
    // still running on the main thread. What must be on disk is (the hook wrote the manifest).
    unsafe { libc::_exit(code) }
}

/// The command is about to write and will check [`check`] between its phases: from now on a
/// first signal asks it to stop there instead of ending the process. A signal that came before
/// is still in force: the first check answers it.
pub fn arm() {
    let _arming = ARMING.lock().unwrap_or_else(|p| p.into_inner());
    ARMED.store(true, Ordering::SeqCst);
}

/// What a second signal does before the process exits (the run's manifest marked
/// `interrupted`); replaced by the next call, removed by [`clear_abandon`].
pub fn on_abandon(hook: impl Fn() + Send + 'static) {
    if let Ok(mut slot) = ABANDON.lock() {
        *slot = Some(Box::new(hook));
    }
}

/// No hook any more: the run it marked has ended.
pub fn clear_abandon() {
    if let Ok(mut slot) = ABANDON.lock() {
        *slot = None;
    }
}

/// The command that resumes the run under way, printed when a signal stops it.
pub fn set_resume_command(command: String) {
    let _ = RESUME.set(command);
}

/// "; resume with: oomlab run ... --resume", or nothing when no run is under way.
pub fn resume_line() -> String {
    RESUME.get().map(|c| format!("; resume with:\n  {c}")).unwrap_or_default()
}

/// Whether a signal asked the run to stop, and with which code.
pub fn requested() -> Option<Interrupted> {
    match CODE.load(Ordering::SeqCst) {
        0 => None,
        code => Some(Interrupted { code: code as i32 }),
    }
}

/// `Err(Interrupted)` once a signal has asked the run to stop.
pub fn check() -> Result<(), Interrupted> {
    requested().map_or(Ok(()), Err)
}
