//! Ctrl-C and SIGTERM as a request to stop cleanly. The first one lets the phase under way
//! finish, then the trial in progress is dropped (its tensors freed, none of its rows written),
//! the manifest says `interrupted`, and the process exits 130 (SIGINT) or 143 (SIGTERM). A
//! second one exits at once with the same code.
//!
//! Only `oomlab run` installs the handlers; elsewhere (the library's tests) nothing is ever
//! requested.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

/// Set by the first signal; arms the immediate exit of the second.
static ASKED: AtomicBool = AtomicBool::new(false);
/// The exit code the signal asks for (128 + its number); 0 before any.
static CODE: AtomicUsize = AtomicUsize::new(0);

/// A run stopped because it was asked to: the error that carries the exit code up the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {} after the phase under way; the trial in progress was dropped", signal_name(*code))]
pub struct Interrupted {
    /// 130 for SIGINT, 143 for SIGTERM.
    pub code: i32,
}

fn signal_name(code: i32) -> &'static str {
    if code == 128 + SIGTERM {
        "SIGTERM"
    } else {
        "SIGINT (Ctrl-C)"
    }
}

/// Installs the handlers for SIGINT and SIGTERM.
pub fn install() -> Result<()> {
    for signal in [SIGINT, SIGTERM] {
        let code = 128 + signal;
        // The shutdown first: it fires only once ASKED is set, i.e. on the second signal.
        signal_hook::flag::register_conditional_shutdown(signal, code, &ASKED)
            .and_then(|_| signal_hook::flag::register_usize(signal, &CODE, code as usize))
            .and_then(|_| signal_hook::flag::register(signal, &ASKED))
            .context("installing the SIGINT/SIGTERM handlers")?;
    }
    Ok(())
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
