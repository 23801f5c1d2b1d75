//! The revision of the source tree this binary was built from, as build.rs embedded it: what a
//! manifest, the bench, advise's calibration cache and the estimate's kernel cache record, so
//! that a result or a cached measurement names the code that made it.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GitInfo {
    pub revision: Option<String>,
    /// Uncommitted changes to tracked files outside results/ when the run started.
    pub dirty: Option<bool>,
}

/// The revision of the source tree this binary was built from, and whether it had changes
/// (outside results/), as build.rs saw them: the code that runs, wherever the binary was copied
/// to. Shared by the manifest, the bench, advise's calibration cache and the estimate's kernel
/// cache.
pub fn git_info() -> GitInfo {
    let revision = env!("OOMLAB_BUILT_GIT_REVISION");
    GitInfo {
        revision: (!revision.is_empty()).then(|| revision.to_string()),
        dirty: match env!("OOMLAB_BUILT_GIT_DIRTY") {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
    }
}

/// `oomlab --version`: the package version and the revision it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("OOMLAB_BUILT_GIT_REVISION"),
    ", ",
    env!("OOMLAB_BUILT_GIT_TREE"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A binary built in a checkout carries its revision, for the machines it is copied to.
    #[test]
    fn a_build_in_a_checkout_embeds_its_revision() {
        let in_checkout = Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !in_checkout {
            return; // built outside a git checkout: nothing to embed
        }
        let built = git_info();
        let revision = built.revision.expect("build.rs embedded no revision");
        assert!(revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()), "{revision}");
        assert!(built.dirty.is_some());
        assert!(VERSION.contains(&revision), "{VERSION}");
    }
}
