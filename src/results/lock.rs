//! A results folder belongs to one run: an exclusive advisory lock on `<dir>/.oomlab.lock`,
//! taken before the folder is checked or cleared and held until the run's report is done, with
//! the holder's pid in the file for the message a second run gets. The lock goes with the
//! process however it ends; the file is removed when the run ends normally.
use std::fs::{self, File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The lock file's name in a results folder.
pub const LOCK: &str = ".oomlab.lock";

/// A held lock on a results folder.
#[derive(Debug)]
pub struct DirLock {
    /// Held open, never read: the lock lives as long as this handle.
    _file: File,
    path: PathBuf,
}

impl DirLock {
    /// Locks `dir` (which must exist) for this process, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK);
        // A holder that ends removes the file; one that opened it just before may then lock a
        // file no longer in the folder, so the lock counts only if it is on the file there now.
        for _ in 0..8 {
            // Never through a link: the pid is written into the file, wherever it would lead.
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .with_context(|| format!("opening the lock file {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    let pid = fs::read_to_string(&path).unwrap_or_default();
                    bail!(
                        "{} is being written by another oomlab run (pid {}); wait for it to end, or give \
                         --out another folder",
                        dir.display(),
                        pid.trim()
                    );
                }
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
            let same = fs::metadata(&path).ok().map(|m| m.ino()) == Some(file.metadata()?.ino());
            if same {
                // Written over the old pid, then cut to length: a run refused meanwhile reads a
                // whole number, never an empty file.
                let pid = std::process::id().to_string();
                file.write_all_at(pid.as_bytes(), 0)?;
                file.set_len(pid.len() as u64)?;
                return Ok(DirLock { _file: file, path });
            }
        }
        bail!("could not lock {}: its lock file keeps changing", dir.display())
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still held, so no other run can have locked this file in between.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_file_that_is_a_link_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("precious");
        fs::write(&target, "keep me").unwrap();
        let dir = tmp.path().join("exp");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(LOCK)).unwrap();
        assert!(DirLock::acquire(&dir).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(tmp.path()).unwrap();
        let err = DirLock::acquire(tmp.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(err.contains("--out"), "{err}");
        drop(first);
        assert!(!tmp.path().join(LOCK).exists(), "the file goes with the lock");
        let again = DirLock::acquire(tmp.path()).unwrap();
        drop(again);
    }
}
