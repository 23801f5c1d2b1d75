//! The `oomlab` binary: parse the command line, dispatch, and turn any error into a message
//! and a non-zero exit.
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

/// Blocks SIGINT, SIGTERM and SIGHUP before anything else of the process runs: libtorch's own
/// start (its static initialisers, half a second) comes before `main`, and a signal then would
/// kill the process without a word. Blocked, a signal waits until `main` has installed the
/// handlers (`run`, `bench`) or restored the default (every other command), then is delivered.
/// In `.preinit_array`, which the dynamic loader runs before any library's initialisers.
#[used]
#[link_section = ".preinit_array"]
static BLOCK_SIGNALS_FIRST: extern "C" fn() = block_signals_first;

extern "C" fn block_signals_first() {
    signal_mask(libc::SIG_BLOCK);
}

/// Blocks or unblocks (`how`) the signals a run answers, for this thread (the only one, at both
/// calls; threads started between inherit the block, and the handler runs on this one).
fn signal_mask(how: libc::c_int) {
    // SAFETY: sigset_t is plain data, filled by sigemptyset before use; sigprocmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(how, &set, std::ptr::null_mut());
    }
}

fn main() -> ExitCode {
    oomlab::results::timings::mark_main();
    oomlab::hugepages::enable_unless_set();
    let cli = oomlab::cli::Cli::parse();
    // Before anything else, so that no instant is left to a signal's default action (a kill
    // without a word); until the command arms them, a signal still ends the process at once.
    if cli.command.stops_cleanly() {
        if let Err(e) = oomlab::interrupt::install() {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    // A signal that came while they were blocked is delivered now, to the handlers or, for the
    // other commands, as the default action.
    signal_mask(libc::SIG_UNBLOCK);
    match oomlab::cli::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: a closed stderr must not turn the exit code into a panic's.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            // Stopped by a signal: the shell's convention, 128 + the signal's number.
            match e.downcast_ref::<oomlab::interrupt::Interrupted>() {
                Some(i) => {
                    let resume = oomlab::interrupt::resume_line();
                    if !resume.is_empty() {
                        let _ = writeln!(std::io::stderr(), "{}", resume.trim_start_matches("; "));
                    }
                    ExitCode::from(i.code as u8)
                }
                None => ExitCode::FAILURE,
            }
        }
    }
}
