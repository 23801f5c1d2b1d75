//! `oomlab compare` of device folders, experiment by experiment, on copies of part of the
//! committed results (results/cpu-amd-epyc, results/cpu-intel-r-xeon-r-processor) in a temp
//! folder: one COMPARE.md with a section per shared experiment, the summary and the experiments
//! in one folder only; each experiment's charts in a folder of its own; a mix of device and
//! experiment folders refused; an earlier comparison replaced only with --force; a damaged
//! experiment folder left out with a warning.
use crate::common::oomlab;
use std::path::{Path, PathBuf};

use predicates::prelude::*;

const AMD: &str = "cpu-amd-epyc";
const INTEL: &str = "cpu-intel-r-xeon-r-processor";
/// In both folders; checkpointing's spec files differ between the two.
const SHARED: [&str; 4] = ["accumulation", "checkpointing", "depth_sweep", "width_sweep"];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `<temp>/results/<device>/<experiment>` for the shared experiments, leak in the AMD folder
/// only and memory_breakdown in the Intel one only; the two device folders.
fn devices(temp: &Path) -> (PathBuf, PathBuf) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let root = temp.join("results");
    for (device, only) in [(AMD, "leak"), (INTEL, "memory_breakdown")] {
        for e in SHARED.iter().chain([&only]) {
            copy_dir(&repo.join(device).join(e), &root.join(device).join(e));
        }
        std::fs::copy(repo.join(device).join("CLAIMS.md"), root.join(device).join("CLAIMS.md")).unwrap();
    }
    (root.join(AMD), root.join(INTEL))
}

fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().unwrap());
    (be(16..20), be(20..24))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn device_folders_compare_experiment_by_experiment_into_one_table() {
    let temp = tempfile::tempdir().unwrap();
    let (a, b) = devices(temp.path());
    oomlab()
        .current_dir(temp.path())
        .args(["compare", s(&a), s(&b)])
        .assert()
        .success()
        .stdout(predicate::str::contains("4 experiments compared, 2 in one folder only"))
        .stderr(predicate::str::contains("warning: checkpointing: the spec file of B differs from A's"));
    // Under the working folder's runs/, as a run's folders: never beside the folders compared.
    let out = temp.path().join("runs/compare/cpu-amd-epyc_vs_cpu-intel-r-xeon-r-processor");
    assert!(!temp.path().join("results/compare").exists(), "nothing written beside the inputs");
    let md = std::fs::read_to_string(out.join("COMPARE.md")).expect("one COMPARE.md under runs/compare");
    let written = md.clone();
    let md = oomlab::markdown::squeezed(&md);
    let lines: Vec<&str> = md.lines().collect();

    // The header: each folder's device, host, CPU and revision, from its manifests.
    // The revision each folder's manifests name (the results are regenerated now and then).
    // A folder whose experiments ran at several revisions names each with its count, most first.
    let rev = |dir: &Path| {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("manifest.json").is_file())
            .collect();
        names.sort();
        let mut revs: Vec<(String, usize)> = Vec::new();
        for exp in names {
            let r = oomlab::results::Manifest::read(&exp).unwrap().git.revision.unwrap()[..12].to_string();
            match revs.iter_mut().find(|(have, _)| *have == r) {
                Some((_, n)) => *n += 1,
                None => revs.push((r, 1)),
            }
        }
        revs.sort_by_key(|r| std::cmp::Reverse(r.1));
        match revs.as_slice() {
            [(r, _)] => r.clone(),
            _ => revs.iter().map(|(r, n)| format!("{r} ({n})")).collect::<Vec<_>>().join(", "),
        }
    };
    let a_line = format!("| A | CPU (AMD EPYC) | vm | CPU (AMD EPYC) | {} | `{}` |", rev(&a), a.display());
    let b_line = format!(
        "| B | CPU (Intel(R) Xeon(R) Processor) | vm | CPU (Intel(R) Xeon(R) Processor) | {} | `{}` |",
        rev(&b),
        b.display()
    );
    let summary_head = "| experiment | figure | A | B | B / A | A step time | B step time | step B / A |";
    for line in [
        "# cpu-amd-epyc vs cpu-intel-r-xeon-r-processor: 4 experiments compared",
        a_line.as_str(),
        b_line.as_str(),
        "## Summary",
        summary_head,
        "## Only in one folder",
    ] {
        assert!(lines.contains(&line), "{line:?} not in\n{md}");
    }

    // One summary row per shared experiment, in name order, with the headline and its ratio.
    let at = lines.iter().position(|l| *l == summary_head).unwrap();
    let rows: Vec<&str> = lines[at + 2..].iter().take_while(|l| l.starts_with('|')).copied().collect();
    let names: Vec<&str> =
        rows.iter().map(|r| r.split(" | ").next().unwrap().trim_start_matches("| ")).collect();
    assert_eq!(
        names,
        ["accumulation", "checkpointing (the spec files differ)", "depth_sweep", "width_sweep"],
        "{md}"
    );
    assert!(
        rows[2].starts_with("| depth_sweep | largest depth that fit (foreach) | 35 | 35 | 1.00 |"),
        "{}",
        rows[2]
    );
    assert!(
        // Neither width sweep ran out of memory: each fit is a lower bound, and their ratio unknown.
        rows[3].starts_with(
            "| width_sweep | largest hidden that fit | ≥ 8192 (no OOM measured) | ≥ 8192 (no OOM measured) | — |"
        ),
        "{}",
        rows[3]
    );

    // Each shared experiment's section: today's COMPARE.md, its headings a level down.
    for e in SHARED {
        let heading = format!("## {e}: 2 results compared");
        assert_eq!(lines.iter().filter(|l| **l == heading).count(), 1, "{heading:?} in\n{md}");
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with("# ")).count(), 1, "one title");
    for line in [
        "### model.depth",
        "### Without a sweep",
        "### Charts",
        "![compare_peak_vs_depth-foreach.png](depth_sweep/compare_peak_vs_depth-foreach.png)",
        "![compare_peak_vs_hidden.png](width_sweep/compare_peak_vs_hidden.png)",
    ] {
        assert!(lines.contains(&line), "{line:?} not in\n{md}");
    }
    // The warning names the keys that differ (the two folders' checkpointing specs were written
    // at different revisions), each with both folders' values.
    let warning = "> **Warning:** the spec file of B differs from A's in what it runs (model, data, training, sweep, \
         variants, or the files it reads): the same experiment name, but not the same run, so these figures may \
         not compare. B differs in ";
    let named =
        lines.iter().find(|l| l.starts_with(warning)).unwrap_or_else(|| panic!("no warning in\n{md}"));
    assert!(named[warning.len()..].contains(" in A, ") && named.contains(" in B"), "{named}");

    // The experiments in one folder only: named, not compared.
    let leak = format!("- leak: only in A (`{}`)", a.join("leak").display());
    let breakdown = format!("- memory_breakdown: only in B (`{}`)", b.join("memory_breakdown").display());
    for line in [leak.as_str(), breakdown.as_str()] {
        assert!(lines.contains(&line), "{line:?} not in\n{md}");
    }
    assert!(!md.contains("## leak") && !md.contains("## memory_breakdown"));

    // Each experiment's charts in its folder; none for experiments without a sweep.
    for chart in ["depth_sweep/compare_peak_vs_depth-foreach", "width_sweep/compare_peak_vs_hidden"] {
        assert_eq!(png_size(&out.join(format!("{chart}.png"))), (1280, 800), "{chart}");
        assert!(out.join(format!("{chart}.svg")).is_file(), "{chart}");
    }
    assert!(!out.join("accumulation").exists(), "no sweep, no chart");
    // Both CPUs ran the depth sweep in the same 15.90 GiB: the bytes panel alone.
    let svg = std::fs::read_to_string(out.join("depth_sweep/compare_peak_vs_depth-foreach.svg")).unwrap();
    assert!(svg.contains("budget of every folder") && !svg.contains("% of budget"));

    // An earlier comparison is replaced only with --force.
    let before = written;
    oomlab().current_dir(temp.path()).args(["compare", s(&a), s(&b)]).assert().failure().stderr(
        predicate::str::contains("runs/compare/cpu-amd-epyc_vs_cpu-intel-r-xeon-r-processor")
            .and(predicate::str::contains("already holds a comparison (COMPARE.md, depth_sweep/"))
            .and(predicate::str::contains("--force")),
    );
    std::fs::write(out.join("COMPARE.md"), "mine").unwrap();
    oomlab().current_dir(temp.path()).args(["compare", s(&a), s(&b)]).assert().failure();
    assert_eq!(std::fs::read_to_string(out.join("COMPARE.md")).unwrap(), "mine", "left as it was");
    oomlab().current_dir(temp.path()).args(["compare", s(&a), s(&b), "--force"]).assert().success();
    assert_eq!(std::fs::read_to_string(out.join("COMPARE.md")).unwrap(), before, "replaced, the same");

    // --out elsewhere, B first: B's are the reference.
    let elsewhere = temp.path().join("cmp");
    oomlab().args(["compare", s(&b), s(&a), "--out", s(&elsewhere)]).assert().success();
    let md = std::fs::read_to_string(elsewhere.join("COMPARE.md")).unwrap();
    assert!(
        md.starts_with("# cpu-intel-r-xeon-r-processor vs cpu-amd-epyc: 4 experiments compared\n"),
        "{md}"
    );
    assert!(md.contains("- leak: only in B ("), "{md}");
    assert!(elsewhere.join("depth_sweep/compare_peak_vs_depth-foreach.png").is_file());
}

#[test]
fn a_mix_of_device_and_experiment_folders_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let (a, b) = devices(temp.path());
    let out = temp.path().join("out");
    let experiment = b.join("depth_sweep");
    for args in [[s(&a), s(&experiment)], [s(&experiment), s(&a)]] {
        oomlab().args(["compare", args[0], args[1], "--out", s(&out)]).assert().failure().stderr(
            predicate::str::contains(format!("{} is an experiment's results folder", experiment.display()))
                .and(predicate::str::contains(format!("but {} is a device's", a.display())))
                .and(predicate::str::contains("device folders only")),
        );
    }
    // A folder that is neither, beside a device folder, is named.
    let empty = temp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    oomlab()
        .args(["compare", s(&a), s(&empty), "--out", s(&out)])
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!("{} is not a device's results folder", empty.display())));
    assert!(!out.exists(), "nothing written");

    // Device folders that share no experiment: nothing compares, and each one's are named.
    let lone = temp.path().join("results/lone");
    copy_dir(&a.join("leak"), &lone.join("leak"));
    oomlab().args(["compare", s(&b), s(&lone), "--out", s(&out)]).assert().failure().stderr(
        predicate::str::contains("no experiment is in two or more")
            .and(predicate::str::contains("lone: leak")),
    );
    assert!(!out.exists(), "nothing written");
}

#[test]
fn a_damaged_experiment_folder_is_left_out_with_a_warning() {
    let temp = tempfile::tempdir().unwrap();
    let (a, b) = devices(temp.path());
    let damaged = b.join("width_sweep");
    std::fs::write(damaged.join("summary.csv"), "not,a,summary\n1,2\n").unwrap();
    let out = temp.path().join("out");
    oomlab()
        .args(["compare", s(&a), s(&b), "--out", s(&out)])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!("warning: `{}` not read", damaged.display())))
        .stdout(predicate::str::contains("3 experiments compared"));
    let md = std::fs::read_to_string(out.join("COMPARE.md")).unwrap();
    let warning = md.lines().find(|l| l.starts_with("> **Warning:** `")).unwrap_or_else(|| panic!("{md}"));
    assert!(warning.contains(&format!("`{}` not read (", damaged.display())), "{warning}");
    assert!(warning.ends_with("; width_sweep is not compared"), "{warning}");
    assert!(!md.contains("## width_sweep") && !md.contains("| width_sweep |"), "{md}");
    for e in ["accumulation", "checkpointing", "depth_sweep"] {
        assert!(md.contains(&format!("## {e}: 2 results compared")), "{e}");
    }
    assert!(!out.join("width_sweep").exists());

    // When nothing can be compared, it fails, naming each folder not read.
    for e in ["accumulation", "checkpointing", "depth_sweep"] {
        std::fs::remove_file(a.join(e).join("summary.csv")).unwrap();
    }
    let again = temp.path().join("again");
    oomlab().args(["compare", s(&a), s(&b), "--out", s(&again)]).assert().failure().stderr(
        predicate::str::contains("no experiment could be compared")
            .and(predicate::str::contains(a.join("depth_sweep").display().to_string())),
    );
    assert!(!again.join("COMPARE.md").exists());
}
