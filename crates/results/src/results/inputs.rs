//! The files a spec reads besides itself (a TorchScript module's `model.path`, a CSV data
//! set's `data.path`), fingerprinted in the manifest: the spec's text names them, not what is
//! in them, so a run resumed or merged after one was replaced would mix two models' or two
//! data sets' trials in one folder without a word.
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::spec::{DataSpec, ModelSpec, Spec};

/// One file as a run read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// As resolved from the spec (against the spec's folder).
    pub path: String,
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// Every file `spec`'s configurations read, each once, in the order they are named.
pub fn of_spec(spec: &Spec) -> Result<Vec<InputFile>> {
    let mut paths: Vec<&Path> = Vec::new();
    for (_, config) in spec.configs() {
        if let ModelSpec::Torchscript(s) = &config.model {
            paths.push(&s.path);
        }
        if let DataSpec::Csv { path, .. } = &config.data {
            paths.push(path);
        }
    }
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(*p));
    paths.into_iter().map(fingerprint).collect()
}

fn fingerprint(path: &Path) -> Result<InputFile> {
    let mut file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let (mut hasher, mut buf, mut bytes) = (Sha256::new(), vec![0u8; 1 << 20], 0u64);
    loop {
        let n = file.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(InputFile { path: path.display().to_string(), bytes, sha256 })
}

/// How `now` differs from `was` (what an earlier run read), in words; `None` when they are the
/// same files with the same contents. A run from before the manifest kept them (`was` empty)
/// cannot be checked, and passes.
pub fn changed(was: &[InputFile], now: &[InputFile]) -> Option<String> {
    if was.is_empty() || was == now {
        return None;
    }
    for n in now {
        match was.iter().find(|w| w.path == n.path) {
            None => return Some(format!("{} was not read then", n.path)),
            Some(w) if w.sha256 != n.sha256 => {
                return Some(format!(
                    "{} changed: {} bytes, SHA-256 {}… then; {} bytes, {}… now",
                    n.path,
                    w.bytes,
                    &w.sha256[..12.min(w.sha256.len())],
                    n.bytes,
                    &n.sha256[..12.min(n.sha256.len())]
                ))
            }
            Some(_) => {}
        }
    }
    was.iter()
        .find(|w| !now.iter().any(|n| n.path == w.path))
        .map(|w| format!("{} is no longer read", w.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> InputFile {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, text).unwrap();
        InputFile { path: path.into(), ..fingerprint(&p).unwrap() }
    }

    #[test]
    fn a_file_is_known_by_its_contents() {
        let a = file("m.pt", "one model");
        assert_eq!(a.bytes, 9);
        assert_eq!(a.sha256.len(), 64);
        assert_eq!(a, file("m.pt", "one model"));
        assert_ne!(a.sha256, file("m.pt", "one modem").sha256);
    }

    #[test]
    fn a_replaced_added_or_dropped_file_is_named() {
        let (a, b, c) = (file("a.pt", "1"), file("b.csv", "2"), file("a.pt", "3"));
        assert_eq!(changed(&[a.clone(), b.clone()], &[a.clone(), b.clone()]), None);
        assert_eq!(changed(&[], std::slice::from_ref(&a)), None, "a manifest from before: not checked");
        let said = changed(&[a.clone(), b.clone()], &[c, b.clone()]).unwrap();
        assert!(said.starts_with("a.pt changed: 1 bytes"), "{said}");
        assert_eq!(
            changed(std::slice::from_ref(&a), &[a.clone(), b.clone()]).unwrap(),
            "b.csv was not read then"
        );
        assert_eq!(changed(&[a.clone(), b], &[a]).unwrap(), "b.csv is no longer read");
    }
}
