//! The comparison's tests, and the fixtures other modules' tests build on (`pub(crate)`: a
//! manifest, a depth sweep's rows, two devices' folders of one experiment).
use super::*;
use crate::schema::{Phase, Status};

pub(crate) use crate::results::fixtures::{manifest, GIB};

/// A depth sweep: `per_layer` bytes a layer over `base`; fits up to `fit`, OOM from there.
pub(crate) fn sweep(variant: &str, depths: &[u64], fit: u64, base: u64, per_layer: u64) -> Vec<SummaryRow> {
    depths
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let need = base + per_layer * d;
            let ok = d <= fit;
            SummaryRow {
                trial: i + 1,
                variant: variant.into(),
                field: Some(crate::spec::Field::Depth),
                value: Some(d as f64),
                status: if ok { Status::Ok } else { Status::Oom },
                phase: (!ok).then_some(Phase::Backward),
                step: (!ok).then_some(1),
                depth: d as usize,
                max_memory_allocated: if ok { need } else { need - per_layer },
                max_memory_reserved: if ok { need + need / 64 } else { need },
                oom_allocated: (!ok).then_some(need - per_layer),
                oom_requested: (!ok).then_some(per_layer),
                // A pace per layer of its own for each device (from `base`).
                step_seconds: ok.then_some(d as f64 * base as f64 / 1e11),
                ..SummaryRow::default()
            }
        })
        .collect()
}

/// A T4 with the lesson's 15.90 GiB budget, fitting 40 layers, and a CPU with 2 GiB, fitting 4.
pub(crate) fn two_devices() -> Vec<ExperimentDir> {
    let budget = 17_072_495_002;
    let per_layer = 400_000_000;
    let mut t4 = manifest("depth_sweep", "Tesla T4", Some(budget), 16 * GIB);
    t4.answers = vec![Answer {
        largest_fit: Some(40),
        first_oom: Some(41),
        ..Answer::new("", crate::spec::Field::Depth)
    }];
    // The CPU run was killed: no answers in its manifest, worked out from its rows.
    let mut cpu = manifest("depth_sweep", "CPU (AMD EPYC)", Some(2 * GIB), 25_276_502_016);
    cpu.status = crate::results::RunStatus::Running;
    vec![
        ExperimentDir {
            dir: "results/tesla-t4/depth_sweep".into(),
            manifest: t4,
            rows: sweep("", &[1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41], 40, 800_000_000, per_layer),
            trace: Vec::new(),
            cut_row: false,
        },
        ExperimentDir {
            dir: "results/cpu-amd-epyc/depth_sweep".into(),
            manifest: cpu,
            rows: sweep("", &[1, 2, 4, 8, 6, 5], 4, 300_000_000, per_layer),
            trace: Vec::new(),
            cut_row: false,
        },
    ]
}

#[test]
fn two_devices_make_the_expected_table() {
    let c = compare(&two_devices()).unwrap();
    let md = crate::markdown::squeezed(&markdown(&c, &["compare_peak_vs_depth.png".into()]));
    let lines: Vec<&str> = md.lines().collect();
    let expected = [
        "# depth_sweep: 2 results compared",
        "",
        "How deep before out of memory?",
        "",
        "| | device | budget | capacity | run | folder |",
        "|---|---|---|---|---|---|",
        "| A | Tesla T4 | 15.90 GiB | 16.00 GiB | complete | `results/tesla-t4/depth_sweep` |",
        "| B | CPU (AMD EPYC) | 2.00 GiB | 23.54 GiB | running | `results/cpu-amd-epyc/depth_sweep` |",
        "",
        "Shares are of each folder's budget, or of its device's capacity where it had none; step times are \
         means over a trial's steps after the first, on the machine that ran it; ratios are each folder's figure \
         over A's.",
        "",
        "## model.depth",
        "",
        "| figure | A | B | B / A |",
        "|---|---|---|---|",
        "| largest depth that fit | 40 | 4 | 0.10 |",
        "| first depth out of memory | 41 | 5 | 0.12 |",
        "| peak allocated at the largest fit | 15.65 GiB (98%) | 1.77 GiB (88%) | 0.11 |",
        "| peak reserved at the largest fit | 15.89 GiB (100%) | 1.80 GiB (90%) | 0.11 |",
        "| step time at the largest fit | 0.320 s | 0.012 s | 0.037 |",
        "",
        "## Charts",
        "",
        "![compare_peak_vs_depth.png](compare_peak_vs_depth.png)",
    ];
    assert_eq!(lines, expected, "\n{md}");
}

#[test]
fn different_experiments_are_refused() {
    let mut folders = two_devices();
    folders[1].manifest.experiment = "width_sweep".into();
    let err = compare(&folders).unwrap_err().to_string();
    assert!(err.contains("different experiments"), "{err}");
    assert!(err.contains("\"depth_sweep\"") && err.contains("\"width_sweep\""), "{err}");
    assert!(compare(&folders[..1]).is_err(), "one folder is no comparison");
}

#[test]
fn a_different_spec_is_warned_about() {
    let mut folders = two_devices();
    folders[1].manifest.spec["base"] = serde_json::json!({"training": {"batch_size": 64}});
    let c = compare(&folders).unwrap();
    let letters = |c: &Comparison| c.spec_differs.iter().map(|d| d.letter.clone()).collect::<Vec<_>>();
    assert_eq!(letters(&c), ["B"]);
    let md = markdown(&c, &[]);
    assert!(
        md.lines().any(|l| l
            == "> **Warning:** the spec file of B differs from A's in what it runs (model, data, training, \
            sweep, variants, or the files it reads): the same experiment name, but not the same run, so these \
            figures may not compare. B differs in base: absent in A, {\"training\":{\"batch_size\":64}} in B."),
        "{md}"
    );
    assert!(!md.contains("## Charts"));
    assert!(compare(&two_devices()).unwrap().spec_differs.is_empty());
    // With the validated spec recorded, that is what counts: a comment in the text is nothing,
    // a batch size is a difference even where the text was left as it was.
    let mut folders = two_devices();
    for f in &mut folders {
        f.manifest.spec = serde_json::json!({"name": "depth_sweep", "path": "a.toml", "base": {"training": {"batch_size": 32}}, "run": {"device": "cpu"}});
    }
    folders[1].manifest.spec_source.push_str("# a comment\n");
    folders[1].manifest.spec["path"] = "elsewhere/a.toml".into();
    folders[1].manifest.spec["run"]["device"] = "cuda".into();
    assert!(compare(&folders).unwrap().spec_differs.is_empty(), "the text, path and device differ only");
    folders[1].manifest.spec["base"]["training"]["batch_size"] = 64.into();
    let c = compare(&folders).unwrap();
    assert_eq!(letters(&c), ["B"]);
    assert_eq!(c.spec_differs[0].keys, ["training.batch_size: 32 in A, 64 in B"]);
}

#[test]
fn without_a_sweep_the_peaks_of_each_variant_compare() {
    let row = |trial, variant: &str, status, peak| SummaryRow {
        trial,
        variant: String::from(variant),
        status,
        phase: (status == Status::Oom).then_some(Phase::Forward),
        max_memory_allocated: peak,
        max_memory_reserved: peak + GIB / 4,
        // A second a step per 8 GiB of peak, where the trial trained.
        step_seconds: (status == Status::Ok).then_some(peak as f64 / (8 * GIB) as f64),
        ..SummaryRow::default()
    };
    let a = ExperimentDir {
        dir: "a".into(),
        manifest: manifest("amp", "NVIDIA H100 80GB HBM3", None, 80 * GIB),
        rows: vec![row(1, "fp32", Status::Ok, 8 * GIB), row(2, "fp16", Status::Ok, 6 * GIB)],
        trace: Vec::new(),
        cut_row: false,
    };
    let b = ExperimentDir {
        dir: "b".into(),
        manifest: manifest("amp", "Tesla T4", Some(4 * GIB), 15 * GIB),
        rows: vec![row(1, "fp32", Status::Oom, 3 * GIB), row(2, "fp16", Status::Ok, 3 * GIB)],
        trace: Vec::new(),
        cut_row: false,
    };
    let c = compare(&[a, b]).unwrap();
    let md = crate::markdown::squeezed(&markdown(&c, &[]));
    let table: Vec<&str> = md.lines().skip_while(|l| *l != "## Without a sweep").collect();
    assert_eq!(
        table,
        [
            "## Without a sweep",
            "",
            "| variant | figure | A | B | B / A |",
            "|---|---|---|---|---|",
            "| fp32 | outcome | ok | OOM in forward | — |",
            "| fp32 | peak allocated | 8.00 GiB (10%) | ≥ 3.00 GiB (75%, at its OOM) | ≥ 0.38 |",
            "| fp32 | peak reserved | 8.25 GiB (10%) | ≥ 3.25 GiB (81%, at its OOM) | ≥ 0.39 |",
            "| fp32 | step time | 1.000 s | — | — |",
            "| fp16 | outcome | ok | ok | — |",
            "| fp16 | peak allocated | 6.00 GiB (8%) | 3.00 GiB (75%) | 0.50 |",
            "| fp16 | peak reserved | 6.25 GiB (8%) | 3.25 GiB (81%) | 0.52 |",
            "| fp16 | step time | 0.750 s | 0.375 s | 0.50 |",
        ],
        "\n{md}"
    );
    assert!(md.contains("| A | NVIDIA H100 80GB HBM3 | none | 80.00 GiB | complete | `a` |"), "{md}");
}

#[test]
fn a_sweep_that_never_ran_out_is_a_lower_bound_and_so_are_its_ratios() {
    // A: an H200 whose sweep reached its end (64) without running out; B: the T4, 40 / 41.
    let mut folders = two_devices();
    folders.swap(0, 1);
    folders[0].manifest.answers = Vec::new();
    folders[0].rows = sweep("", &[1, 2, 4, 8, 16, 32, 64], 64, 300_000_000, 400_000_000);
    folders[1].rows = sweep("", &[1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41], 40, 800_000_000, 400_000_000);
    let c = compare(&folders).unwrap();
    let md = crate::markdown::squeezed(&markdown(&c, &[]));
    let figure =
        |name: &str| md.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or("").to_string();
    assert_eq!(
        figure("largest depth that fit"),
        "| largest depth that fit | ≥ 64 (no OOM measured) | 40 | ≤ 0.62 |"
    );
    assert_eq!(
        figure("first depth out of memory"),
        "| first depth out of memory | > 64 (none measured) | 41 | ≤ 0.64 |"
    );
    // The other way round, B's boundary is at least its sweep's end: B / A is at least the ratio.
    folders.swap(0, 1);
    let c = compare(&folders).unwrap();
    let largest = c.tables[0].rows.iter().find(|f| f.name == "largest depth that fit").unwrap();
    assert_eq!(largest.ratios(), ["≥ 1.60"]);
    // Both open: no ratio is known.
    folders[0].rows = sweep("", &[1, 2, 4, 8], 8, 300_000_000, 400_000_000);
    folders[0].manifest.answers = Vec::new();
    let c = compare(&folders).unwrap();
    let largest = c.tables[0].rows.iter().find(|f| f.name == "largest depth that fit").unwrap();
    assert_eq!(largest.ratios(), ["—"]);
}

#[test]
fn only_an_oom_is_a_lower_bound_and_a_trial_not_run_has_no_peak() {
    let row = |status, peak| SummaryRow {
        trial: 1,
        status,
        max_memory_allocated: peak,
        max_memory_reserved: peak,
        ..SummaryRow::default()
    };
    let folder = |dir: &str, r: SummaryRow| ExperimentDir {
        dir: dir.into(),
        manifest: manifest("x", "d", Some(8 * GIB), 16 * GIB),
        rows: vec![r],
        trace: Vec::new(),
        cut_row: false,
    };
    let peak = |a: SummaryRow, b: SummaryRow| {
        let c = compare(&[folder("a", a), folder("b", b)]).unwrap();
        let f = c.tables[0].rows.iter().find(|f| f.name == "peak allocated").unwrap().clone();
        (f.cells.iter().map(|c| c.as_ref().map(|c| c.text.clone())).collect::<Vec<_>>(), f.ratios())
    };
    let (cells, ratios) = peak(row(Status::Ok, 2 * GIB), row(Status::PredictedOom, 0));
    assert_eq!(cells, [Some("2.00 GiB (25%)".to_string()), None], "not run: no peak");
    assert_eq!(ratios, ["—"]);
    let (cells, ratios) = peak(row(Status::Ok, 2 * GIB), row(Status::Error, GIB));
    assert_eq!(cells[1].as_deref(), Some("1.00 GiB (12%)"), "an error's peak is as measured");
    assert_eq!(ratios, ["0.50"]);
    let (cells, ratios) = peak(row(Status::Oom, 4 * GIB), row(Status::Ok, 2 * GIB));
    assert_eq!(cells[0].as_deref(), Some("≥ 4.00 GiB (50%, at its OOM)"));
    assert_eq!(ratios, ["≤ 0.50"]);
}

#[test]
fn letters_go_on_past_z() {
    assert_eq!(letter(0), "A");
    assert_eq!(letter(25), "Z");
    assert_eq!(letter(26), "AA");
    assert_eq!(letter(27), "AB");
}

/// A ratio keeps two decimals, and two significant digits where two decimals would round it to
/// nothing: 0.002 is "0.0020", not "0.00".
#[test]
fn small_ratios_keep_their_significant_digits() {
    let cell = |n: f64, at_least: bool| Cell { text: String::new(), number: Some(n), at_least };
    let r = |a: f64, b: f64| ratio(Some(&cell(a, false)), Some(&cell(b, false)));
    assert_eq!(r(1000.0, 2.0), "0.0020");
    assert_eq!(r(1000.0, 12.3), "0.012");
    assert_eq!(r(10.0, 1.0), "0.10");
    assert_eq!(r(10.0, 16.0), "1.60");
    assert_eq!(r(10.0, 0.0), "0.00");
    assert_eq!(ratio(Some(&cell(1000.0, false)), Some(&cell(2.0, true))), "≥ 0.0020");
    assert_eq!(ratio(Some(&cell(0.0, false)), Some(&cell(2.0, false))), "—");
}
