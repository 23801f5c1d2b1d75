//! oomlab's ground floor, which every other layer stands on and which stands on none of them:
//! sizes as people read them ([`units`]), the device a spec asks for ([`device`]), the experiment
//! spec, typed and checked once ([`spec`]), what a run measures ([`schema`]), which values a sweep
//! tries ([`sweep`]), files written whole and read as untrusted ([`fsio`]), Markdown tables
//! ([`markdown`]), commands for a shell ([`shell`]), interrupts ([`interrupt`]), the cache folder
//! ([`cache`]), huge pages ([`hugepages`]), the revision the binary was built from
//! ([`revision`]) and ZeRO's partition of the parameters over ranks ([`zero`]). Nothing here
//! runs libtorch: tch's `Kind` and `Device` are named as values only.
/// `println!` that never panics: a closed stdout (`oomlab run … | head -3`) ends the output,
/// not the work.
#[macro_export]
macro_rules! say {
    () => {{ use std::io::Write as _; let _ = writeln!(std::io::stdout()); }};
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = writeln!(std::io::stdout(), $($arg)*); }};
}

/// `print!` that never panics (see [`say!`]).
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = write!(std::io::stdout(), $($arg)*); }};
}

/// `eprintln!` that never panics (see [`say!`]).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = writeln!(std::io::stderr(), $($arg)*); }};
}

pub mod cache;
pub mod device;
pub mod fsio;
pub mod hugepages;
pub mod interrupt;
pub mod markdown;
pub mod revision;
pub mod schema;
pub mod shell;
pub mod spec;
pub mod step;
pub mod sweep;
pub mod units;
pub mod zero;
