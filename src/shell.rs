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
