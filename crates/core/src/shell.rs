//! Commands printed for a person to paste into a shell (a resume hint, Slurm's scripts): each
//! word quoted where the shell would otherwise split or expand it.

/// A word for the shell, quoted when it needs to be.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// How a person here runs this binary: `oomlab` where that name on `PATH` is this very binary,
/// else its path, relative to the working folder when it lies under it (`target/release/oomlab`,
/// as `cargo run --release` built it), quoted. A printed command can then be pasted as it is.
pub fn program() -> String {
    let Some(exe) = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok()) else {
        return "oomlab".into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| d.join("oomlab").canonicalize().is_ok_and(|c| c == exe))
    });
    if on_path {
        return "oomlab".into();
    }
    let here = std::env::current_dir().ok().and_then(|d| d.canonicalize().ok());
    let shown = here.and_then(|d| exe.strip_prefix(d).ok().map(std::path::Path::to_path_buf)).unwrap_or(exe);
    quote(&shown.to_string_lossy())
}
