//! Embeds the revision of the source tree the binary is built from (`revision::git_info`), so
//! that every result names the code that made it, wherever the binary runs.
use std::path::{Path, PathBuf};

fn main() {
    embed_git_revision();
}

/// What the binary is built from: a change to any of them outside a commit makes the build
/// "with uncommitted changes". README, scripts and results are not: editing them leaves the
/// binary the revision's.
const BUILT_FROM: [&str; 4] = ["src", "crates", "Cargo.toml", "Cargo.lock"];

/// The workspace's root, where git and the paths above are read from.
fn root() -> PathBuf {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    here.join("../..")
}

/// The revision this binary is built from and whether its sources had changes, embedded so that
/// every result names the code that made it wherever the binary runs (a GPU machine given the
/// binary, with a checkout of another revision or none). Re-read when HEAD moves or anything the
/// crate is built from changes; not when git's index does (`git status` rewrites it), which
/// rebuilt the crate before every quick start.
fn embed_git_revision() {
    let root = root();
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"].into_iter().chain(BUILT_FROM) {
        let path = root.join(path);
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").current_dir(&root).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let dirty =
        git(&[&["status", "--porcelain", "--untracked-files=no", "--"][..], &BUILT_FROM[..]].concat())
            .map(|s| if s.is_empty() { "false" } else { "true" })
            .unwrap_or_default();
    println!("cargo:rustc-env=OOMLAB_BUILT_GIT_REVISION={revision}");
    println!("cargo:rustc-env=OOMLAB_BUILT_GIT_DIRTY={dirty}");
    let tree = match dirty {
        "false" => "clean",
        "true" => "with uncommitted changes",
        _ => "no git",
    };
    println!("cargo:rustc-env=OOMLAB_BUILT_GIT_TREE={tree}");
}
