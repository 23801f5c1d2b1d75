//! The committed results re-plot byte-identical: `oomlab plot` on a copy of every experiment
//! folder under `results/` and `oomlab claims` on every device folder rewrite exactly the charts,
//! `trace.json` and `CLAIMS.md` that are committed, and nothing else.
//!
//! This holds refactors of the readers, the chart kit and the claims to "behaviour unchanged".
//! When a change to a chart or a claim is meant, redraw the committed results with the same two
//! commands (`oomlab plot results/<device>/<experiment>`, `oomlab claims results/<device>`) and
//! commit them with the change.
use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

fn oomlab(cwd: &Path, args: &[&str]) {
    let out = Command::cargo_bin("oomlab").unwrap().current_dir(cwd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "oomlab {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_committed_results_replot_byte_identical() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("results");
    copy_tree(&committed, &copy);
    let mut experiments = 0;
    for device in subdirs(&committed) {
        let name = device.file_name().unwrap().to_str().unwrap().to_string();
        for exp in subdirs(&device).iter().filter(|d| d.join("manifest.json").exists()) {
            let exp = format!("results/{name}/{}", exp.file_name().unwrap().to_str().unwrap());
            oomlab(tmp.path(), &["plot", &exp]);
            experiments += 1;
        }
        if device.join("CLAIMS.md").exists() {
            oomlab(tmp.path(), &["claims", &format!("results/{name}")]);
        }
    }
    assert!(experiments > 0, "no experiment folders under {}", committed.display());
    assert_eq!(files(&copy), files(&committed), "plot or claims wrote files that are not committed");
    let differ: Vec<PathBuf> = files(&committed)
        .into_iter()
        .filter(|f| fs::read(committed.join(f)).unwrap() != fs::read(copy.join(f)).unwrap())
        .collect();
    assert!(
        differ.is_empty(),
        "re-plotting the committed results changed {differ:?}; if the change is meant, redraw them \
         (oomlab plot results/<device>/<experiment>, oomlab claims results/<device>) and commit"
    );
}
