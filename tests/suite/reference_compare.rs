//! `scripts/reference/compare.py` reads oomlab's summary.csv, and train.py's reference summary,
//! whichever names their OOM columns have: `oom_phase` and `oom_step` since 2026-11-26, `phase`
//! and `step` before. A committed folder (the old names) and the same rows written now (the new
//! names) are put beside one reference made from their own rows, in either spelling: each pair
//! agrees everywhere, the OOM named where it struck, and all say the same.
//!
//! Needs python3 (no torch: compare.py reads CSVs only); without it this test fails and says so.
use std::path::{Path, PathBuf};
use std::process::Command;

use oomlab::results::{ExperimentDir, Exporter, SummaryCsv};
use oomlab::schema::SummaryRow;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A results folder: the committed one's manifest and trace, and `rows` written as a run writes
/// them now (or the committed summary.csv as it is, without rows).
fn folder(at: &Path, committed: &Path, rows: Option<&[SummaryRow]>) -> PathBuf {
    std::fs::create_dir_all(at).unwrap();
    for f in ["manifest.json", "trace.csv"] {
        std::fs::copy(committed.join(f), at.join(f)).unwrap();
    }
    match rows {
        None => drop(std::fs::copy(committed.join("summary.csv"), at.join("summary.csv")).unwrap()),
        Some(rows) => {
            let mut out = SummaryCsv::create(at).unwrap();
            rows.iter().for_each(|r| out.trial(r).unwrap());
        }
    }
    at.to_path_buf()
}

/// train.py's --out (the trace) and its summary beside it, made from oomlab's own rows, its OOM
/// columns named `phase` (the names before 2026-11-26) and `step`, or `oom_phase` and `oom_step`.
fn reference(at: &Path, committed: &Path, rows: &[SummaryRow], phase: &str, step: &str) -> PathBuf {
    std::fs::copy(committed.join("trace.csv"), at).unwrap();
    let mut w = csv::Writer::from_path(format!("{}.summary.csv", at.display())).unwrap();
    w.write_record([
        "trial",
        "status",
        phase,
        step,
        "max_memory_allocated",
        "max_memory_reserved",
        "message",
    ])
    .unwrap();
    for r in rows {
        w.write_record([
            r.trial.to_string(),
            r.status.to_string(),
            r.phase.map(|p| p.to_string()).unwrap_or_default(),
            r.step.map(|s| s.to_string()).unwrap_or_default(),
            r.max_memory_allocated.to_string(),
            r.max_memory_reserved.to_string(),
            r.message.clone(),
        ])
        .unwrap();
    }
    w.flush().unwrap();
    at.to_path_buf()
}

fn compare(results: &Path, reference: &Path) -> String {
    let out = Command::new("python3")
        .arg(root().join("scripts/reference/compare.py"))
        .arg(results)
        .arg(reference)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs compare.py");
    assert!(out.status.success(), "compare.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // The paths aside: the line naming the two folders.
    text.lines().filter(|l| !l.starts_with("oomlab: `")).collect::<Vec<_>>().join("\n")
}

#[test]
fn compare_reads_the_oom_columns_in_their_old_names_and_their_new() {
    let committed = root().join("results/cpu-intel-r-xeon-r-processor/resnet_checkpointing");
    let head = std::fs::read_to_string(committed.join("summary.csv")).unwrap();
    assert!(head.lines().next().unwrap().split(',').any(|c| c == "phase"), "a folder of the old names");
    let tmp = tempfile::tempdir().unwrap();
    let old = folder(&tmp.path().join("old"), &committed, None);
    let rows = ExperimentDir::read(&old).unwrap().rows;
    assert!(rows.iter().any(|r| r.phase.is_some()), "an OOM, with where it struck");
    let new = folder(&tmp.path().join("new"), &committed, Some(&rows));
    let header = std::fs::read_to_string(new.join("summary.csv")).unwrap();
    assert!(header.lines().next().unwrap().split(',').any(|c| c == "oom_phase"), "a folder of the new names");

    let ref_old = reference(&tmp.path().join("ref_old.csv"), &committed, &rows, "phase", "step");
    let ref_new = reference(&tmp.path().join("ref_new.csv"), &committed, &rows, "oom_phase", "oom_step");
    let said = compare(&old, &ref_old);
    assert!(said.contains("status agrees in all"), "{said}");
    let oom = rows.iter().find(|r| r.phase.is_some()).unwrap();
    let at = format!("oom ({} {})", oom.phase.unwrap(), oom.step.unwrap());
    assert!(said.lines().any(|l| l.matches(&at).count() == 2), "both name the OOM, {at}:\n{said}");
    for (results, reference) in [(&new, &ref_new), (&new, &ref_old), (&old, &ref_new)] {
        assert_eq!(compare(results, reference), said, "{} beside {}", results.display(), reference.display());
    }
}
