//! oomlab's cache folder: `$OOMLAB_CACHE`, else `$XDG_CACHE_HOME/oomlab`, else
//! `~/.cache/oomlab` (the folder `scripts/setup-libtorch` installs libtorch into). What is kept
//! there was measured on this machine and can always be measured again, so a file that cannot
//! be read, or was made by another machine, libtorch or revision, is started afresh.
use std::path::PathBuf;

/// The cache folder, if one can be named (not necessarily made yet).
pub fn dir() -> Option<PathBuf> {
    std::env::var_os("OOMLAB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("oomlab")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("oomlab")))
}
