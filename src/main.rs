//! The `oomlab` binary: parse the command line, dispatch, and turn any error into a message
//! and a non-zero exit.
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    oomlab::results::timings::mark_main();
    oomlab::hugepages::enable_unless_set();
    let cli = oomlab::cli::Cli::parse();
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
