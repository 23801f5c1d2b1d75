//! The committed results re-plot byte-identical: `oomlab plot` on a copy of every experiment
//! folder under `results/` and `oomlab claims` on every device folder rewrite exactly the charts,
//! `trace.json` and `CLAIMS.md` that are committed, and nothing else. A test per device folder,
//! so that the three run at once.
//!
//! This holds refactors of the readers, the chart kit and the claims to "behaviour unchanged".
//! When a change to a chart or a claim is meant, redraw the committed results with the same two
//! commands (`oomlab plot results/<device>/<experiment>`, `oomlab claims results/<device>`) and
//! commit them with the change.
use crate::common;
use std::fs;
use std::path::{Path, PathBuf};

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
    let out = common::oomlab().current_dir(cwd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "oomlab {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The device folders under `results/`, a test each (below): another folder fails
/// [`every_device_folder_is_replotted`] until it has its test.
const DEVICES: [&str; 3] = ["cpu-amd-epyc", "cpu-intel-r-xeon-r-processor", "nvidia-h200"];

#[test]
fn every_device_folder_is_replotted() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let names: Vec<String> =
        subdirs(&committed).iter().map(|d| d.file_name().unwrap().to_str().unwrap().to_string()).collect();
    assert_eq!(names, DEVICES, "each folder under results/ needs its test in tests/suite/replot.rs");
}

/// `oomlab plot` on a copy of every experiment of `results/<device>`, then `oomlab claims` on the
/// copy of the device folder: the copy must be the committed folder again, byte for byte, and
/// nothing written beside it.
fn replots_byte_identical(device: &str) {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results").join(device);
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("results").join(device);
    copy_tree(&committed, &copy);
    let mut experiments = 0;
    for exp in subdirs(&committed).iter().filter(|d| d.join("manifest.json").exists()) {
        let exp = format!("results/{device}/{}", exp.file_name().unwrap().to_str().unwrap());
        oomlab(tmp.path(), &["plot", &exp]);
        experiments += 1;
    }
    if committed.join("CLAIMS.md").exists() {
        oomlab(tmp.path(), &["claims", &format!("results/{device}")]);
    }
    assert!(experiments > 0, "no experiment folders under {}", committed.display());
    let mine = Path::new("results").join(device);
    let beside: Vec<PathBuf> = files(tmp.path()).into_iter().filter(|f| !f.starts_with(&mine)).collect();
    assert!(beside.is_empty(), "plot or claims wrote files outside the device's folder: {beside:?}");
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

#[test]
fn the_committed_amd_epyc_results_replot_byte_identical() {
    replots_byte_identical(DEVICES[0]);
}

#[test]
fn the_committed_xeon_results_replot_byte_identical() {
    replots_byte_identical(DEVICES[1]);
}

#[test]
fn the_committed_h200_results_replot_byte_identical() {
    replots_byte_identical(DEVICES[2]);
}
