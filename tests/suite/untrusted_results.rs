//! A results folder as untrusted input, and a disk that fills: what `plot`, `compare`, `claims`
//! and `run --resume` do with a real run's folder made hostile or damaged by hand, each through
//! the real binary. Nothing may hang, read without bound, write outside the folder or through a
//! link, take a damaged file for a whole one, or call a run complete over lost rows.
use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use common::{untimed_csv, Sandbox};
use oomlab::results::{ExperimentDir, RunStatus};
use predicates::prelude::*;

fn oomlab() -> Command {
    let mut c = common::oomlab();
    // A reader that blocks would hang the test: a minute is far more than any command here needs.
    c.timeout(Duration::from_secs(60));
    c
}

/// A depth sweep of a tiny MLP under a budget that stops it at depth 3, named as the lesson's
/// experiment so that `claims` reads it.
fn spec_text(budget: &str) -> String {
    format!(
        "[experiment]\nname = \"depth_sweep\"\n[model]\nhidden = 64\ndepth = 1\n[data]\nsamples = 64\nfeatures = 16\n\
         classes = 4\n[training]\noptimizer = \"adam\"\nbatch_size = 8\nsteps = 2\n[run]\ndevice = \"cpu\"\n\
         budget = \"{budget}\"\n[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 3, 4]\n"
    )
}

/// Runs the spec into `out`; returns the experiment's folder.
fn run_into(sb: &Sandbox, out: &Path, budget: &str) -> PathBuf {
    let spec = sb.spec("depth_sweep.toml", &spec_text(budget));
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
        .assert()
        .success();
    let device = std::fs::read_dir(out).unwrap().next().unwrap().unwrap().path();
    device.join("depth_sweep")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A copy of `dir` at `<root>/<device>/depth_sweep` (as `claims` wants it), its device folder.
fn copy_as_device(dir: &Path, root: &Path, name: &str) -> PathBuf {
    let device = root.join(name);
    copy_dir(dir, &device.join("depth_sweep"));
    device
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success(), "mkfifo {}", path.display());
}

/// `plot`, `compare` and `claims` of the copy all fail, naming `file` and saying `why`.
fn every_reader_refuses(device: &Path, file: &str, why: &str) {
    let exp = device.join("depth_sweep");
    let expect = || predicate::str::contains(file).and(predicate::str::contains(why));
    oomlab().args(["plot", exp.to_str().unwrap()]).assert().failure().stderr(expect());
    oomlab()
        .args(["compare", exp.to_str().unwrap(), exp.to_str().unwrap(), "--out"])
        .arg(device.join("cmp"))
        .assert()
        .failure()
        .stderr(expect());
    oomlab().args(["claims", device.to_str().unwrap()]).assert().failure().stderr(expect());
}

#[test]
fn fifos_devices_and_links_out_of_the_folder_are_refused_without_waiting() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let root = sb.path().join("hostile");
    for (i, file) in ["summary.csv", "trace.csv", "manifest.json"].into_iter().enumerate() {
        let device = copy_as_device(&made, &root, &format!("fifo{i}"));
        mkfifo(&device.join("depth_sweep").join(file));
        every_reader_refuses(&device, file, "named pipe (fifo)");

        let device = copy_as_device(&made, &root, &format!("zero{i}"));
        let path = device.join("depth_sweep").join(file);
        std::fs::remove_file(&path).unwrap();
        symlink("/dev/zero", &path).unwrap();
        every_reader_refuses(&device, file, "outside its folder");
    }
    // A link to a file of the folder itself is read.
    let device = copy_as_device(&made, &root, "inner");
    let exp = device.join("depth_sweep");
    std::fs::rename(exp.join("summary.csv"), exp.join("summary-real.csv")).unwrap();
    symlink("summary-real.csv", exp.join("summary.csv")).unwrap();
    oomlab().args(["plot", exp.to_str().unwrap()]).assert().success();
}

#[test]
fn charts_replace_a_link_of_their_name_and_names_never_leave_the_folder() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let precious = sb.path().join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();

    let exp = copy_as_device(&made, &sb.path().join("linked"), "dev").join("depth_sweep");
    let chart = exp.join("peak_vs_depth.png");
    std::fs::remove_file(&chart).unwrap();
    symlink(&precious, &chart).unwrap();
    oomlab().args(["plot", exp.to_str().unwrap()]).assert().success();
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me", "plot wrote through the link");
    assert!(
        std::fs::symlink_metadata(&chart).unwrap().file_type().is_file(),
        "the chart is a file of its own"
    );

    // The same through `run --resume`, which draws the charts at its end.
    let mut m = oomlab::results::Manifest::read(&made).unwrap();
    m.status = RunStatus::Interrupted;
    m.write(&made).unwrap();
    let chart = made.join("peak_vs_depth.svg");
    let _ = std::fs::remove_file(&chart);
    symlink(&precious, &chart).unwrap();
    let spec = sb.path().join("depth_sweep.toml");
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--quiet", "--resume"])
        .assert()
        .success();
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me", "--resume wrote through the link");

    // A variant name read back that climbs out of the folder is refused before anything is drawn.
    let exp = copy_as_device(&made, &sb.path().join("climb"), "dev").join("depth_sweep");
    let summary = std::fs::read_to_string(exp.join("summary.csv")).unwrap();
    let mut lines: Vec<String> = summary.lines().map(String::from).collect();
    let variant = lines[0].split(',').position(|c| c == "variant").unwrap();
    for line in lines.iter_mut().skip(1) {
        let mut cells: Vec<&str> = line.split(',').collect();
        cells[variant] = "../../../escaped";
        *line = cells.join(",");
    }
    std::fs::write(exp.join("summary.csv"), lines.join("\n") + "\n").unwrap();
    oomlab()
        .args(["plot", exp.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("row 2, column `variant`"));
    let escaped: Vec<PathBuf> =
        common::walk(sb.path()).into_iter().filter(|p| p.to_string_lossy().contains("escaped")).collect();
    assert!(escaped.is_empty(), "{escaped:?}");
}

/// Edits `file` of a copy of `made` with `edit` and expects every reader to refuse it with `why`.
fn damaged(sb: &Sandbox, made: &Path, name: &str, file: &str, edit: impl Fn(String) -> String, why: &str) {
    let device = copy_as_device(made, &sb.path().join("damaged"), name);
    let path = device.join("depth_sweep").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
    every_reader_refuses(&device, file, why);
}

#[test]
fn damaged_files_are_refused_with_the_row_and_column() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let trials = ExperimentDir::read(&made).unwrap().rows.len();
    assert!(trials >= 3, "the sweep ran {trials} trials");
    damaged(
        &sb,
        &made,
        "nul",
        "summary.csv",
        |t| t.replacen("status", "sta\0tus", 1),
        "row 1 (the header), column",
    );
    damaged(&sb, &made, "empty", "summary.csv", |_| String::new(), "summary.csv holds 0");
    let dup = |t: String| {
        let lines: Vec<&str> = t.lines().collect();
        let mut out: Vec<&str> = lines.clone();
        out.insert(2, lines[1]);
        out.join("\n") + "\n"
    };
    damaged(&sb, &made, "dup", "summary.csv", dup, "row 3, column `trial`: trial 1 where trial 2 belongs");
    let huge = |t: String| {
        let mut lines: Vec<String> = t.lines().map(String::from).collect();
        lines[2] = lines[2].replacen("2,", "18446744073709551615,", 1);
        lines.join("\n") + "\n"
    };
    damaged(&sb, &made, "huge", "summary.csv", huge, "trial 18446744073709551615 where trial 2 belongs");
    let bogus = |t: String| t.replace("\"status\": \"complete\"", "\"status\": \"bogus\"");
    damaged(&sb, &made, "bogus", "manifest.json", bogus, "status \"bogus\" is not one oomlab writes");
    // Numbers readers divide and scale by, and the manifest's word against the rows.
    for (column, value, why) in [
        ("step_seconds", "NaN", "column `step_seconds`: NaN is not a time"),
        ("trial_seconds", "-3", "column `trial_seconds`: -3 is not a time"),
        ("param_bytes", "0", "columns `param_count` and `param_bytes`"),
        ("variant", "nonexistent", "\"nonexistent\" is not a variant of the spec"),
    ] {
        let edit = move |t: String| set_cell(&t, 1, column, value);
        damaged(&sb, &made, &format!("cell-{column}"), "summary.csv", edit, why);
    }
    let answer = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["answers"][0]["largest_fit"] = 99.into();
        serde_json::to_string_pretty(&m).unwrap()
    };
    damaged(&sb, &made, "answer", "manifest.json", answer, "model.depth = 99 fits largest, and no row");
    let typed = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["device"]["capacity_bytes"] = "lots".into();
        serde_json::to_string_pretty(&m).unwrap()
    };
    damaged(&sb, &made, "typed", "manifest.json", typed, "key `device.capacity_bytes`: invalid type: string");
    // Names that become folder and file names, and numbers a verdict adds up.
    for (key, value, why) in [
        (
            "experiment",
            serde_json::json!("../../evil"),
            "key `experiment`: \"../../evil\" is not an experiment name",
        ),
        (
            "timings",
            serde_json::json!({"libtorch_init": 1.0, "data": 0.0, "model": 0.0, "steps": 0.0, "trials": 1.0, "total": -1e5}),
            "key `timings.total`: -100000 is not a time",
        ),
    ] {
        let edit = move |t: String| {
            let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
            m[key] = value.clone();
            serde_json::to_string_pretty(&m).unwrap()
        };
        damaged(&sb, &made, &format!("manifest-{key}"), "manifest.json", edit, why);
    }
    let zero = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["device"]["budget_bytes"] = 0.into();
        serde_json::to_string_pretty(&m).unwrap()
    };
    damaged(&sb, &made, "budget0", "manifest.json", zero, "key `device.budget_bytes`: a budget of 0 bytes");
    // Readers ask it "CPU or GPU?": a device no run writes would get two answers.
    let gpu = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["device"]["resolved"] = "gpu".into();
        serde_json::to_string_pretty(&m).unwrap()
    };
    damaged(
        &sb,
        &made,
        "resolved",
        "manifest.json",
        gpu,
        "key `device.resolved`: \"gpu\" is not a device a run uses",
    );
    let field = |t: String| set_cell(&t, 1, "field", "training.lr");
    damaged(&sb, &made, "field", "summary.csv", field, "column `field`: \"training.lr\" where the spec");
    let huge = |t: String| set_cell(&t, 1, "max_memory_allocated", "18446744073709551615");
    damaged(&sb, &made, "max", "summary.csv", huge, "more memory than any device has");
    let nan = |t: String| set_cell(&t, 1, "elapsed_seconds", "NaN");
    damaged(&sb, &made, "trace-nan", "trace.csv", nan, "column `elapsed_seconds`: NaN is not a time");
    // A finished run's folder without its summary is damaged, not a run to make: `claims` says
    // so as `plot` and `compare` do, instead of judging the claim "not run".
    let device = copy_as_device(&made, &sb.path().join("damaged"), "nosummary");
    std::fs::remove_file(device.join("depth_sweep/summary.csv")).unwrap();
    oomlab()
        .args(["claims", device.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("summary.csv is missing").and(predicate::str::contains("damaged")));
    let stranger = |t: String| t.replacen("max_memory_reserved", "max_memory_reservd", 1);
    damaged(
        &sb,
        &made,
        "column",
        "trace.csv",
        stranger,
        "`max_memory_reservd` is not a column oomlab writes",
    );
}

/// `text` (a CSV file) with the cell of data row `row` (1: the first after the header) in
/// `column` set to `value`.
fn set_cell(text: &str, row: usize, column: &str, value: &str) -> String {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().unwrap().clone();
    let at = header.iter().position(|h| h == column).unwrap_or_else(|| panic!("no column {column}"));
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(&header).unwrap();
    for (i, r) in reader.records().enumerate() {
        let r = r.unwrap();
        let cells: Vec<&str> =
            r.iter().enumerate().map(|(j, c)| if i + 1 == row && j == at { value } else { c }).collect();
        writer.write_record(&cells).unwrap();
    }
    String::from_utf8(writer.into_inner().unwrap()).unwrap()
}

/// `plot` on a device's folder draws every experiment it can: a damaged one is named and the
/// command fails at the end, after the others are drawn; a folder of results without a manifest
/// is named too, not passed over in silence.
#[test]
fn plotting_a_device_folder_draws_past_a_damaged_experiment() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let device = copy_as_device(&made, &sb.path().join("plotted"), "cpu");
    copy_dir(&made, &device.join("accumulation"));
    copy_dir(&made, &device.join("width_sweep"));
    std::fs::write(device.join("accumulation/manifest.json"), "{").unwrap();
    std::fs::remove_file(device.join("width_sweep/manifest.json")).unwrap();
    for f in common::walk(&device).into_iter().filter(|f| f.extension().is_some_and(|e| e == "png")) {
        std::fs::remove_file(f).unwrap();
    }
    oomlab().args(["plot", device.to_str().unwrap()]).assert().failure().stderr(
        predicate::str::contains("1 experiment not drawn")
            .and(predicate::str::contains("accumulation"))
            .and(predicate::str::contains("width_sweep has results but no manifest.json")),
    );
    let drawn = common::walk(&device.join("depth_sweep"));
    assert!(drawn.iter().any(|f| f.extension().is_some_and(|e| e == "png")), "depth_sweep drawn: {drawn:?}");
}

/// The run's rows without their times, and its answers: what a resumed run must equal.
fn untimed(dir: &Path) -> (Vec<String>, Vec<String>, Vec<oomlab::results::manifest::Answer>) {
    (untimed_csv(dir, "summary.csv"), untimed_csv(dir, "trace.csv"), common::answers(dir))
}

#[test]
fn a_resume_measures_again_the_trials_whose_trace_rows_were_lost() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let whole = untimed(&made);
    let spec = sb.path().join("depth_sweep.toml");
    let resume = || {
        oomlab()
            .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--resume"])
            .assert()
            .success()
            .stderr(predicate::str::contains("measured again"))
    };
    // Cut in the middle of trial 2's rows, mid-line: readers refuse, a resume measures again.
    let trace = std::fs::read_to_string(made.join("trace.csv")).unwrap();
    let cut = trace.find("\n2,").unwrap() + 20;
    std::fs::write(made.join("trace.csv"), &trace[..cut]).unwrap();
    let refused = oomlab().args(["plot", made.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("rows written for trial 2"), "{said}");
    // The command it gives, pasted into a shell here, resumes the run.
    let command =
        said.split('`').find(|c| c.contains(" run ") && c.ends_with("--resume")).expect("a command to run");
    assert!(command.contains("--out"), "{command}");
    assert_cmd::Command::new("sh")
        .args(["-c", command])
        .assert()
        .success()
        .stderr(predicate::str::contains("measured again"));
    assert_eq!(ExperimentDir::read(&made).unwrap().manifest.status, RunStatus::Complete);
    assert_eq!(untimed(&made), whole, "the resumed folder is the uninterrupted run's");
    // trace.csv gone altogether: every trial again.
    std::fs::remove_file(made.join("trace.csv")).unwrap();
    resume();
    assert_eq!(untimed(&made), whole);
    // A complete, whole folder has nothing to resume.
    oomlab()
        .args(["run", spec.to_str().unwrap(), "--out", sb.out().to_str().unwrap(), "--resume"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("holds a complete run"));
}

/// A folder from before summary.csv counted each trial's trace rows (the committed Intel
/// results are such) keeps no count to check: a trial that ran its steps without a single row
/// lost them, and `plot` refuses rather than write a trace.json of nothing over the good one.
#[test]
fn a_summary_without_row_counts_still_tells_a_trace_that_lost_its_rows() {
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let summary = made.join("summary.csv");
    let mut reader = csv::Reader::from_path(&summary).unwrap();
    let header = reader.headers().unwrap().clone();
    let drop = header.iter().position(|h| h == "trace_rows").expect("a trace_rows column");
    let keep = |r: &csv::StringRecord| -> csv::StringRecord {
        r.iter().enumerate().filter(|&(i, _)| i != drop).map(|(_, f)| f).collect()
    };
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| keep(&r.unwrap())).collect();
    let mut writer = csv::Writer::from_path(&summary).unwrap();
    writer.write_record(&keep(&header)).unwrap();
    rows.iter().for_each(|r| writer.write_record(r).unwrap());
    writer.flush().unwrap();
    // As it is, the old-style folder reads and plots.
    oomlab().args(["plot", made.to_str().unwrap()]).assert().success();
    let trace_json = std::fs::read(made.join("trace.json")).unwrap();
    // Trial 2's rows and every later one's gone (a cut at a row's end, which reads as whole).
    let trace = std::fs::read_to_string(made.join("trace.csv")).unwrap();
    std::fs::write(made.join("trace.csv"), &trace[..trace.find("\n2,").unwrap() + 1]).unwrap();
    oomlab()
        .args(["plot", made.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("none of the rows written for trial 2"));
    std::fs::remove_file(made.join("trace.csv")).unwrap();
    oomlab()
        .args(["plot", made.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("none of the rows written for trial 1"));
    assert_eq!(std::fs::read(made.join("trace.json")).unwrap(), trace_json, "trace.json kept as it was");
}

/// A small tmpfs, unmounted when dropped; `None` where this machine lets no test mount one.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .ok()?;
        out.status.success().then(|| Tmpfs(at.to_path_buf())).or_else(|| {
            eprintln!("skipped: cannot mount a tmpfs here ({})", String::from_utf8_lossy(&out.stderr).trim());
            None
        })
    }

    fn resize(&self, size: &str) {
        let ok = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A run on a disk that fills mid-sweep stops with an error naming the file, leaves every file
/// parseable and whole trials only (no trace row without its summary row), is not `complete`, and
/// once there is room `--resume` ends exactly as an uninterrupted run.
#[test]
fn a_full_disk_loses_nothing_already_measured() {
    let sb = Sandbox::new();
    let reference = run_into(&sb, &sb.path().join("reference"), "1MiB");
    let whole = untimed(&reference);
    // Sizes from small to large: each fills at another point of the run (CSVs, trace.json, charts).
    let mut filled = 0;
    for size in ["24k", "32k", "48k", "96k", "160k", "320k"] {
        let Some(disk) = Tmpfs::mount(&sb.path().join(format!("disk-{size}")), size) else { return };
        let out = disk.0.join("results");
        let spec = sb.spec("depth_sweep.toml", &spec_text("1MiB"));
        let ran = oomlab()
            .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&ran.stderr).to_string();
        let Some(dir) = common::walk(&out)
            .into_iter()
            .find(|p| p.ends_with("manifest.json"))
            .map(|p| p.parent().unwrap().to_path_buf())
        else {
            assert!(!ran.status.success(), "{size}: no manifest, yet the run succeeded");
            continue;
        };
        if ran.status.success() {
            continue; // room enough at this size
        }
        filled += 1;
        assert!(stderr.contains("No space left on device"), "{size}: {stderr}");
        assert!(stderr.contains(&dir.display().to_string()), "{size}: the error names the file: {stderr}");
        let (exp, lost) = ExperimentDir::read_checked(&dir).unwrap_or_else(|e| panic!("{size}: {e:#}"));
        assert_eq!(lost, None, "{size}: trace rows of a written trial were lost");
        assert!(!exp.cut_row, "{size}: a torn row or trace rows without their summary row");
        assert!(!exp.manifest.status.is_complete(), "{size}: complete over a disk that filled");
        if let Ok(json) = std::fs::read_to_string(dir.join("trace.json")) {
            serde_json::from_str::<serde_json::Value>(&json)
                .unwrap_or_else(|e| panic!("{size}: trace.json: {e}"));
        }
        for f in common::walk(&dir) {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            assert!(
                !name.starts_with('.') || name == ".oomlab.lock",
                "{size}: a temporary file left: {name}"
            );
            if name.ends_with(".png") {
                let bytes = std::fs::read(&f).unwrap();
                assert!(bytes.ends_with(b"IEND\xaeB`\x82"), "{size}: {name} is cut short");
            }
        }
        disk.resize("64m");
        oomlab()
            .args(["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"])
            .assert()
            .success();
        assert_eq!(ExperimentDir::read(&dir).unwrap().manifest.status, RunStatus::Complete, "{size}");
        assert_eq!(untimed(&dir), whole, "{size}: resumed after the disk filled");
    }
    assert!(filled >= 3, "only {filled} sizes filled the disk during the run");
}

/// Every column of both files, fed each bad value its rule names (`schema::rules`), is refused
/// by the one reader every command reads through, naming the file, the row and the column; and
/// the values that only the whole row or the recorded spec tell from good ones: a swept depth
/// of -1, 0, 2.5 or 10^308 or none at all, an `oom` row that says nowhere where it struck, a
/// fitted row that says it ran out, a step longer than its trial, a manifest whose spec does not
/// parse or is another experiment's.
#[test]
fn every_column_is_refused_its_bad_values_by_name() {
    use oomlab::schema::rules;
    let sb = Sandbox::new();
    let made = run_into(&sb, &sb.out(), "1MiB");
    let capacity = ExperimentDir::read(&made).unwrap().manifest.device.capacity_bytes;
    let root = sb.path().join("bad");
    let mut n = 0;
    let mut refused = |file: &str, edit: &dyn Fn(String) -> String, column: &str, value: &str| {
        n += 1;
        let exp = root.join(n.to_string());
        copy_dir(&made, &exp);
        let path = exp.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, edit(text)).unwrap();
        let err = match ExperimentDir::read(&exp) {
            Ok(_) => panic!("{file}: {column} = {value:?} was read as good"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.contains(file), "{column} = {value:?}: {err}");
        assert!(err.contains(&format!("`{column}`")), "{column} = {value:?}: the column is not named: {err}");
    };
    for (file, table) in [("summary.csv", rules::SUMMARY), ("trace.csv", rules::TRACE)] {
        for &(column, rule) in table {
            for bad in rules::bad_values(rule, capacity) {
                let (c, b) = (column.to_string(), bad.clone());
                refused(file, &move |t| set_cell(&t, 1, &c, &b), column, &bad);
            }
        }
    }
    // What only the row or the recorded spec tells.
    for (column, value, also) in [
        ("value", "", None),
        ("value", "0", None),
        ("value", "2.5", None),
        ("oom_phase", "", Some(("status", "oom"))),
        ("oom_phase", "backward", None),
        ("step_seconds", "5000", Some(("trial_seconds", "1"))),
    ] {
        let edit = move |t: String| {
            let t = set_cell(&t, 1, column, value);
            match also {
                Some((c, v)) => set_cell(&t, 1, c, v),
                None => t,
            }
        };
        refused("summary.csv", &edit, column, value);
    }
    let spec_source = |source: &'static str| {
        move |t: String| {
            let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
            m["spec_source"] = source.into();
            serde_json::to_string_pretty(&m).unwrap()
        }
    };
    refused("manifest.json", &spec_source("this is [not toml"), "spec_source", "garbage");
    let other = spec_text("1MiB").replace("name = \"depth_sweep\"", "name = \"width_sweep\"");
    let other: &'static str = Box::leak(other.into_boxed_str());
    refused("manifest.json", &spec_source(other), "spec_source", "another experiment's");
    let curve = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["answers"][0]["curve"] = serde_json::json!([[2, 100], [1, 50]]);
        serde_json::to_string_pretty(&m).unwrap()
    };
    refused("manifest.json", &curve, "curve", "values counting down");
    let timings = |t: String| {
        let mut m: serde_json::Value = serde_json::from_str(&t).unwrap();
        m["timings"]["total"] = 1e308.into();
        serde_json::to_string_pretty(&m).unwrap()
    };
    refused("manifest.json", &timings, "timings.total", "1e308");
}
