//! Which files of a results folder are oomlab's: the names its manifest lists under `outputs`.
//!
//! A results folder is the user's folder too: a figure for a thesis, notes, a script may sit
//! beside a run or inside its folder, under any name and extension. So oomlab never decides by a
//! pattern what it may remove. Every file a run writes there is listed in `manifest.json` before
//! it is made ([`claim`]), the copies `--resume` sets aside included, and `--force`, `--resume`
//! and `merge` remove exactly the listed files ([`remove`]): never a folder, never a name the list
//! lacks, nothing matched by a pattern. A name that is listed but is now a folder, or a file of
//! that name that the list lacks when oomlab is about to write it, is the user's: kept, and said.
//!
//! The one thing oomlab may leave that it does not list: the temporary file of a write that a
//! kill -9 cut short (`.NAME.XXXXXX.tmp`, hidden), which it never removes, since a name like it
//! could be anyone's.
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::{perfetto, Manifest, MANIFEST, SUMMARY, TRACE};
use crate::fsio;

/// The files every run writes, listed in its first manifest, before any is made.
pub fn data_files() -> Vec<String> {
    [MANIFEST, TRACE, SUMMARY, perfetto::TRACE_JSON].map(String::from).to_vec()
}

/// The files `--resume` sets aside while it writes them again, each as [`aside`] names it.
pub const SET_ASIDE: [&str; 3] = [SUMMARY, TRACE, perfetto::TRACE_JSON];

/// The name a file set aside by `--resume` takes: `summary.csv.resuming`.
pub fn aside(name: &str) -> String {
    format!("{name}.resuming")
}

/// The files a run wrote before its manifest listed them: its data files and their set-aside
/// copies, which every run of then named so (its charts are the run's own to work out).
pub fn unlisted_data_files() -> Vec<String> {
    let mut names = data_files();
    names.extend(SET_ASIDE.iter().map(|n| aside(n)));
    names
}

/// Whether `name` in `dir` is a file oomlab wrote there, by its manifest's list (or, for a
/// manifest from before the list, by the exact names every run then gave its data files).
pub fn is_listed(dir: &Path, name: &str) -> bool {
    match read(dir) {
        Listed::Names(names) => names.iter().any(|n| n == name),
        Listed::Unlisted => unlisted_data_files().iter().any(|n| n == name),
        Listed::NoManifest => false,
    }
}

/// What a folder's manifest says of the files oomlab wrote there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// The names it lists.
    Names(Vec<String>),
    /// A manifest written before oomlab listed its outputs: which files are its own is worked
    /// out from what that run drew (see `figures::drawn_by`).
    Unlisted,
    /// No manifest that oomlab can read: nothing there is provably oomlab's.
    NoManifest,
}

/// The `outputs` of `dir`'s manifest, read leniently (only that key): a manifest that a later
/// check would refuse still says which files are oomlab's.
pub fn read(dir: &Path) -> Listed {
    #[derive(serde::Deserialize)]
    struct Only {
        #[serde(default)]
        outputs: Option<Vec<String>>,
    }
    let Ok(bytes) = fsio::read_limited(&dir.join(MANIFEST), fsio::MANIFEST_LIMIT) else {
        return Listed::NoManifest;
    };
    match serde_json::from_slice::<Only>(&bytes) {
        Ok(Only { outputs: Some(names) }) => {
            Listed::Names(names.into_iter().filter(|n| is_plain_name(n)).collect())
        }
        Ok(Only { outputs: None }) => Listed::Unlisted,
        Err(_) => Listed::NoManifest,
    }
}

/// The names listed by `dir`'s manifest now, for [`Manifest::write`] to keep.
pub(crate) fn listed_on_disk(dir: &Path) -> Option<Vec<String>> {
    match read(dir) {
        Listed::Names(names) => Some(names),
        Listed::Unlisted | Listed::NoManifest => None,
    }
}

/// A file name of the folder itself: not empty, no separator, not `.` or `..`. A damaged list
/// naming `../x` or `a/b` must not reach outside the folder or into a sub-folder.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// Lists `names` in `dir`'s manifest as oomlab's before they are written. A name the list lacks
/// whose file is already there belongs to someone else and is refused, so that writing never
/// replaces a user's file. A folder whose manifest predates the list (or has none) is left as it
/// was: nothing is listed, and nothing is refused.
pub fn claim(dir: &Path, names: &[String]) -> Result<()> {
    let Listed::Names(listed) = read(dir) else { return Ok(()) };
    let new: Vec<&String> = names.iter().filter(|n| !listed.contains(n)).collect();
    if new.is_empty() {
        return Ok(());
    }
    for name in &new {
        let path = dir.join(name);
        if path.symlink_metadata().is_ok() {
            bail!(
                "{} is not oomlab's (its manifest.json does not list it), and oomlab would write a file of that \
                 name there; move it out of the folder, or write the results elsewhere with --out",
                path.display()
            );
        }
    }
    let mut manifest = Manifest::read(dir)?;
    let outputs = manifest.outputs.get_or_insert_with(Vec::new);
    outputs.extend(new.into_iter().cloned());
    manifest.write(dir)
}

/// Removes from `dir` the files named in `names`, and nothing else. A link is removed itself,
/// never what it leads to; a name that is now a folder is kept (oomlab never writes a folder of
/// such a name) and returned. `manifest.json` goes last, so that a process killed half-way leaves
/// a manifest naming what is still there.
pub fn remove(dir: &Path, names: &[String]) -> Result<Vec<PathBuf>> {
    let mut kept = Vec::new();
    let mut doomed: Vec<&String> = names.iter().filter(|n| is_plain_name(n)).collect();
    doomed.sort_by_key(|n| *n == MANIFEST);
    doomed.dedup();
    for name in doomed {
        let path = dir.join(name);
        let Ok(meta) = path.symlink_metadata() else { continue };
        if meta.is_dir() {
            kept.push(path);
            continue;
        }
        fs::remove_file(&path).with_context(|| format!("removing old results {}", path.display()))?;
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_list_never_names_a_path_outside_the_folder() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MANIFEST), r#"{"outputs": ["../escape", "a/b", "", "..", "ok.png"]}"#)
            .unwrap();
        assert_eq!(read(tmp.path()), Listed::Names(vec!["ok.png".into()]));
        fs::write(tmp.path().join(MANIFEST), r#"{"experiment": "x"}"#).unwrap();
        assert_eq!(read(tmp.path()), Listed::Unlisted);
        fs::write(tmp.path().join(MANIFEST), "not json").unwrap();
        assert_eq!(read(tmp.path()), Listed::NoManifest);
    }

    #[test]
    fn remove_takes_the_listed_files_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for f in
            ["summary.csv", "a.png", ".a.png.Zz09aB.tmp.png", "summary.csv.resuming", "mine.png", MANIFEST]
        {
            fs::write(dir.join(f), f).unwrap();
        }
        // A listed name that is now the user's folder, and a link to the user's file.
        fs::create_dir(dir.join("b.svg")).unwrap();
        fs::write(dir.join("b.svg/inside.txt"), "x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("thesis.png"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.path().join("thesis.png"), dir.join("c.png")).unwrap();
        let names: Vec<String> =
            ["summary.csv", "a.png", "b.svg", "c.png", MANIFEST, "../escape"].map(String::from).to_vec();
        let kept = remove(dir, &names).unwrap();
        assert_eq!(kept, vec![dir.join("b.svg")]);
        let mut left: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // A name like a temporary or set-aside copy of a listed file is not listed: kept.
        assert_eq!(left, [".a.png.Zz09aB.tmp.png", "b.svg", "mine.png", "summary.csv.resuming"]);
        assert_eq!(fs::read_to_string(dir.join("b.svg/inside.txt")).unwrap(), "x");
        assert_eq!(fs::read_to_string(outside.path().join("thesis.png")).unwrap(), "keep");
    }
}
