//! A results folder's files, read as untrusted input and written so that no reader ever meets
//! half of one.
//!
//! A folder may come from anywhere (a colleague's tarball, a shared disk, a run killed on a full
//! disk), so reading trusts nothing about it: [`read_limited`] takes regular files only (a fifo
//! would block the reader forever, a device such as `/dev/zero` never ends), follows a link only
//! to a file in the same folder, opens without following a link and without blocking (a fifo put
//! there between the check and the open cannot hang it), and reads at most a limit, refusing a
//! larger file with its size.
//!
//! Writing: a whole file goes to a fresh temporary file in its folder (created new, never opened
//! through a name that exists, so never through a link) and is renamed over its name
//! ([`write_atomic`]): a link of that name is replaced, not followed, and a write that fails (a
//! full disk) leaves the old file whole, or none, and an error that names the file. Files that
//! grow as a run goes are created new ([`create_new`]) and cut back to their last whole trial
//! when a write fails (see the exporters).
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The most oomlab reads of a manifest (the spec text in it is at most 1 MiB).
pub const MANIFEST_LIMIT: u64 = 64 << 20;
/// The most oomlab reads of a `summary.csv` (a row is about a kilobyte).
pub const SUMMARY_LIMIT: u64 = 256 << 20;
/// The most oomlab reads of a `trace.csv` (a row per phase of every step of every trial).
pub const TRACE_LIMIT: u64 = 2 << 30;
/// The most oomlab reads of a small JSON file it wrote itself (advice, a calibration).
pub const SMALL_LIMIT: u64 = 16 << 20;

/// Reads `path`, a file of a results folder, whole: a regular file (or a link to one in the same
/// folder) of at most `limit` bytes; anything else is refused with the path and the reason.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let target = regular_target(path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&target)
        .with_context(|| format!("reading {}", path.display()))?;
    // What was opened, not what the name pointed at a moment before.
    let meta = file.metadata().with_context(|| format!("reading {}", path.display()))?;
    if !meta.file_type().is_file() {
        bail!(
            "reading {}: {}; a results file must be a regular file",
            path.display(),
            kind(&meta.file_type())
        );
    }
    let mut bytes = Vec::with_capacity(meta.len().min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!(
            "reading {}: larger than the {} oomlab reads of such a file; it is not one oomlab wrote",
            path.display(),
            crate::units::format_bytes(limit)
        );
    }
    Ok(bytes)
}

/// [`read_limited`], as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String> {
    String::from_utf8(read_limited(path, limit)?).map_err(|e| {
        anyhow::anyhow!("reading {}: not UTF-8 text (byte {})", path.display(), e.utf8_error().valid_up_to())
    })
}

/// The file to open for `path`: itself when it is a regular file; the file a link names when
/// that is a regular file in the link's own folder; else refused, saying what it is.
fn regular_target(path: &Path) -> Result<std::path::PathBuf> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(path.to_path_buf());
    }
    if !ft.is_symlink() {
        bail!("reading {}: {}; a results file must be a regular file", path.display(), kind(&ft));
    }
    let folder = path.parent().unwrap_or(Path::new(".")).canonicalize();
    let target = path.canonicalize();
    match (folder, target) {
        (Ok(folder), Ok(target)) if target.parent() == Some(folder.as_path()) => {
            let ft = fs::symlink_metadata(&target)?.file_type();
            if !ft.is_file() {
                bail!("reading {}: a link to {}", path.display(), kind(&ft));
            }
            Ok(target)
        }
        (_, Ok(target)) => bail!(
            "reading {}: a link to {}, outside its folder; oomlab reads only the folder's own files",
            path.display(),
            target.display()
        ),
        (_, Err(e)) => bail!("reading {}: a link that leads nowhere ({e})", path.display()),
    }
}

/// What a file type is, in words, for a refusal.
fn kind(ft: &fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a folder"
    } else if ft.is_fifo() {
        "a named pipe (fifo)"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a link"
    } else {
        "not a regular file"
    }
}

/// The random part of a temporary file's name: what `results::outputs` recognises as a copy
/// of a listed file being written, with the listed name before it.
pub const TEMP_RANDOM_LEN: usize = 6;

/// A new file's mode as `File::create` gives it: 0666 less the umask. A temporary file is 0600,
/// which renamed into place would keep the results from the rest of a cluster's group.
fn as_created() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o666)
}

/// Writes `bytes` as `path` whole: into a new temporary file beside it, then renamed over it.
/// A link at `path` is replaced, never followed; on any failure `path` is as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .rand_bytes(TEMP_RANDOM_LEN)
        .suffix(".tmp")
        .permissions(as_created())
        .tempfile_in(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.write_all(bytes).and_then(|()| tmp.flush()).with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path).map_err(|e| e.error).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A temporary file beside `path`, to be written by a library that takes a path and then put in
/// place with [`persist`]; removed if dropped before.
pub fn temp_beside(path: &Path) -> Result<tempfile::TempPath> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    Ok(tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .rand_bytes(TEMP_RANDOM_LEN)
        // The library may choose its format by the extension.
        .suffix(&format!(".tmp{ext}"))
        .permissions(as_created())
        .tempfile_in(dir)
        .with_context(|| format!("writing {}", path.display()))?
        .into_temp_path())
}

/// Renames a finished [`temp_beside`] file over `path`.
pub fn persist(tmp: tempfile::TempPath, path: &Path) -> Result<()> {
    tmp.persist(path).map_err(|e| e.error).with_context(|| format!("writing {}", path.display()))
}

/// Creates `path` as a new, empty file to append to: refused if anything has that name (a link
/// included), so that a run never writes through a name it did not make.
pub fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

/// Folders made for a command, removed again when it ends if they are still empty: a command
/// refused before it wrote anything leaves no trace, one that wrote keeps them (a folder with a
/// file in it is never removed). Deepest first.
#[derive(Debug, Default)]
pub struct NewDirs(Vec<std::path::PathBuf>);

impl NewDirs {
    /// Makes `path` and the folders above it that are missing, remembering which those were.
    pub fn create(path: &Path) -> Result<NewDirs> {
        let missing = path
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && p.symlink_metadata().is_err())
            .map(Path::to_path_buf)
            .collect();
        fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(NewDirs(missing))
    }
}

impl Drop for NewDirs {
    fn drop(&mut self) {
        for dir in &self.0 {
            // Fails, and so keeps it, unless it is empty.
            let _ = fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_folders_go_when_left_empty_and_stay_when_written() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        drop(NewDirs::create(&deep).unwrap());
        assert!(!tmp.path().join("a").exists(), "an unused folder is not left behind");
        let made = NewDirs::create(&deep).unwrap();
        std::fs::write(tmp.path().join("a/b/kept"), "x").unwrap();
        drop(made);
        assert!(!deep.exists() && tmp.path().join("a/b/kept").exists());
        // A folder that was there before is never removed.
        let made = NewDirs::create(&tmp.path().join("a/b")).unwrap();
        std::fs::remove_file(tmp.path().join("a/b/kept")).unwrap();
        drop(made);
        assert!(tmp.path().join("a/b").is_dir());
    }

    /// Results are shared: what is written whole gets the mode any new file gets here (the
    /// umask's), not a temporary file's 0600.
    #[test]
    fn a_file_written_whole_has_the_mode_of_any_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let whole = dir.path().join("whole.json");
        write_atomic(&whole, b"{}").unwrap();
        let tmp = temp_beside(&dir.path().join("chart.png")).unwrap();
        std::fs::write(&tmp, b"png").unwrap();
        persist(tmp, &dir.path().join("chart.png")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&whole), mode(&plain));
        assert_eq!(mode(&dir.path().join("chart.png")), mode(&plain));
    }
}
