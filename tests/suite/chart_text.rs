//! The chart check over every chart the committed results hold (what `scripts/regenerate-figures`
//! draws): no text leaves the canvas, no two texts lie over one another. Each chart is drawn as
//! `oomlab plot` draws it, onto a backend that keeps where each text's ink falls
//! (`chart::text_check`), with the embedded font the PNGs use.
use std::path::{Path, PathBuf};

use oomlab::figures::{recorded_spec_budget, text_problems};
use oomlab::results::experiment::ExperimentDir;

/// Every experiment folder under `results/` (a folder with a manifest and a summary).
fn experiment_folders() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for device in std::fs::read_dir("results").unwrap() {
        let device = device.unwrap().path();
        if !device.is_dir() {
            continue;
        }
        for exp in std::fs::read_dir(&device).unwrap() {
            let exp = exp.unwrap().path();
            if exp.join("manifest.json").is_file() && exp.join("summary.csv").is_file() {
                out.push(exp);
            }
        }
    }
    out.sort();
    out
}

fn problems_of(dir: &Path) -> Vec<String> {
    let exp = ExperimentDir::read(dir).unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()));
    text_problems(&exp, recorded_spec_budget(&exp.manifest)).unwrap()
}

#[test]
fn every_committed_chart_has_its_text_inside_and_apart() {
    let folders = experiment_folders();
    assert!(folders.len() >= 20, "{folders:?}");
    let problems: Vec<String> = folders.iter().flat_map(|d| problems_of(d)).collect();
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}
