//! The README's first screen as a new user meets it: its commands are taken from the README
//! itself, so that the two cannot drift apart, and the quick start (the first command) is run
//! as written with the binary this build made, on the default device, into a temporary
//! folder: it must finish and write the answer, the results and the charts the README promises.
//! (`scripts/setup-libtorch` and the build, the command's other half, are what `scripts/test`
//! has done before any test runs, on CI's fresh clone too.)
use crate::common;

use common::Sandbox;
use oomlab::results::manifest::Manifest;

/// The lines of the README's `sh` code blocks before its first `## ` heading, in order.
fn first_screen_commands() -> Vec<String> {
    let readme = std::fs::read_to_string("README.md").expect("README.md at the crate's root");
    let first = readme.split("\n## ").next().unwrap_or_default();
    let mut commands = Vec::new();
    let mut inside = false;
    for line in first.lines() {
        match line.trim() {
            "```sh" => inside = true,
            "```" => inside = false,
            l if inside && !l.is_empty() && !l.starts_with('#') => commands.push(l.to_string()),
            _ => {}
        }
    }
    commands
}

#[test]
fn the_first_screen_gives_the_quick_start_the_full_sweep_and_the_tests() {
    let c = first_screen_commands();
    let sweep = "scripts/setup-libtorch && cargo run --release -- run experiments/depth_sweep.toml";
    assert_eq!(c.len(), 3, "three commands: {c:?}");
    assert!(c[0].starts_with(&format!("{sweep} --budget ")), "the quick start first: {c:?}");
    assert_eq!(c[1], sweep, "the lesson's full sweep second: {c:?}");
    assert_eq!(c[2], "scripts/test", "the tests last: {c:?}");
    let ci = std::fs::read_to_string(".ci/run").expect(".ci/run");
    assert!(ci.lines().any(|l| l.trim() == c[2]), "CI runs the README's test command");
}

#[test]
fn the_quick_start_runs_as_written() {
    let c = first_screen_commands();
    let args: Vec<&str> = c[0].split(" -- ").nth(1).expect("cargo run -- ARGS").split_whitespace().collect();
    let sb = Sandbox::new();
    let out = std::process::Command::new(common::bin())
        .args(&args)
        .args(["--out", sb.out().to_str().unwrap()])
        .output()
        .expect("oomlab runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} failed:\n{stdout}\n{stderr}", c[0]);
    let devices: Vec<_> = std::fs::read_dir(sb.out()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(devices.len(), 1, "{devices:?}");
    let dir = devices[0].join("depth_sweep");
    let m = Manifest::read(&dir).expect("a manifest");
    assert!(m.status.is_complete(), "{:?}", m.status);
    let budget = args.iter().skip_while(|a| **a != "--budget").nth(1).expect("--budget SIZE");
    assert_eq!(m.device.budget_bytes, Some(oomlab::spec::parse_size(budget).unwrap()));
    assert_eq!(m.answers.len(), 3, "one answer per Adam implementation: {:?}", m.answers);
    let exp = oomlab::results::experiment::ExperimentDir::read(&dir).expect("the folder reads");
    for a in &m.answers {
        let (fit, oom) = (a.largest_fit.expect("some depth fits"), a.first_oom.expect("and one does not"));
        assert_eq!(oom, fit + 1, "{a:?}");
        assert!(stdout.contains(&a.variant), "the answer names {}:\n{stdout}", a.variant);
        // The chart's curve: every depth from 1 past the first OOM, growing, and through each
        // probe's own prediction (the same estimate, the same baseline).
        let depths: Vec<u64> = a.curve.iter().map(|p| p.0).collect();
        assert_eq!(depths, (1..=depths.len() as u64).collect::<Vec<_>>(), "{a:?}");
        assert!(depths.len() as u64 > oom, "the curve goes past the first OOM: {a:?}");
        assert!(a.curve.windows(2).all(|w| w[1].1 > w[0].1), "deeper needs more: {a:?}");
        for r in exp.rows.iter().filter(|r| r.variant == a.variant) {
            let at = a.curve.iter().find(|p| Some(p.0 as f64) == r.value).expect("the probe's depth");
            assert_eq!(Some(at.1), r.predicted_peak, "trial {}: the curve through its prediction", r.trial);
        }
    }
    // What a probe's steps are for, said once where the variants' are alike, never twice.
    let steps: Vec<&str> = stdout.lines().filter_map(|l| l.trim().strip_prefix("steps: ")).collect();
    assert_eq!(steps.len(), m.answers.len(), "a steps line per answer:\n{stdout}");
    let said: Vec<&&str> = steps.iter().filter(|s| **s != "as above").collect();
    let unique: std::collections::HashSet<&&&str> = said.iter().collect();
    assert_eq!(unique.len(), said.len(), "a description said twice:\n{stdout}");
    for file in ["summary.csv", "trace.csv"] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    for a in &m.answers {
        for ext in ["png", "svg"] {
            let chart = dir.join(format!("peak_vs_depth-{}.{ext}", a.variant));
            assert!(chart.is_file(), "{} (README names it)", chart.display());
        }
    }
}

/// The commands of the README's "Your own model" worked example, in order.
fn own_model_commands() -> Vec<String> {
    let readme = std::fs::read_to_string("README.md").expect("README.md at the crate's root");
    let section = readme.split("\n## Your own model").nth(1).expect("a section \"Your own model\"");
    let block = section.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The worked example as written, in a fresh folder: export a torchvision model the repository
/// does not have, estimate it without training, then run the search the estimate guides; the run
/// must end where the estimate said (the estimate is exact on the CPU).
#[test]
fn the_own_model_example_runs_as_written() {
    let c = own_model_commands();
    assert_eq!(c.len(), 3, "export, estimate, run: {c:?}");
    assert!(c[0].starts_with("scripts/export-model "), "{c:?}");
    let sb = Sandbox::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let export: Vec<&str> = c[0].split_whitespace().collect();
    let out = std::process::Command::new(root.join(export[0]))
        .args(&export[1..])
        .current_dir(sb.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}:\n{}", c[0], String::from_utf8_lossy(&out.stderr));
    let oomlab = |line: &str| {
        let args: Vec<&str> =
            line.split(" -- ").nth(1).expect("cargo run -- ARGS").split_whitespace().collect();
        let out = std::process::Command::new(common::bin())
            .args(&args)
            .current_dir(sb.path())
            .output()
            .expect("oomlab runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{line}:\n{said}\n{}", String::from_utf8_lossy(&out.stderr));
        said
    };
    let estimated = oomlab(&c[1]);
    let predicted = estimated
        .lines()
        .find_map(|l| l.strip_prefix("largest batch_size predicted to fit in "))
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the estimate names a largest batch:\n{estimated}"));
    oomlab(&c[2]);
    let runs: Vec<_> =
        std::fs::read_dir(sb.path().join("runs")).unwrap().map(|e| e.unwrap().path()).collect();
    let dirs: Vec<_> =
        runs.iter().flat_map(|d| std::fs::read_dir(d).unwrap()).map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let m = Manifest::read(&dirs[0]).unwrap();
    let a = &m.answers[0];
    assert_eq!((a.largest_fit, a.first_oom), (Some(predicted), Some(predicted + 1)), "{a:?}");
    // A module's step is recorded per batch, not replayed: no curve is made for its chart.
    assert!(a.curve.is_empty(), "{a:?}");
}

/// `scripts/export-model` checks what it will write into the spec before writing anything: a
/// budget oomlab cannot read, a batch past its largest, an input the forward cannot take (one
/// line, not Python's traceback). Each exits non-zero and leaves no file behind.
#[test]
fn export_model_refuses_what_oomlab_would_refuse_and_writes_nothing() {
    let sb = Sandbox::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let export = |extra: &[&str]| {
        std::process::Command::new(root.join("scripts/export-model"))
            .args(["resnet18", "--classes", "4"])
            .args(extra)
            .current_dir(sb.path())
            .output()
            .unwrap()
    };
    for (extra, says) in [
        (&["--input", "images:3x32x32", "--budget", "banana"][..], "--budget 'banana' is not a size"),
        (&["--input", "images:3x32x32", "--budget", "64MiB\""][..], "is not a size"),
        (
            &["--input", "images:3x32x32", "--max-batch", "100000000000"][..],
            "--max-batch from 2 to 100000000",
        ),
        (&["--input", "features:20"][..], "the forward fails on 2 rows of --input features:20: RuntimeError"),
    ] {
        let out = export(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} exits non-zero");
        assert!(err.contains(says) && !err.contains("Traceback"), "{extra:?}: {err}");
        assert!(common::walk(sb.path()).is_empty(), "{extra:?} wrote {:?}", common::walk(sb.path()));
    }
    // The spec may go into a folder that is not there yet.
    let out = export(&["--input", "images:3x32x32", "--budget", "2GiB", "--spec", "specs/deep/r18.toml"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        sb.path().join("specs/deep/r18.toml").is_file() && sb.path().join("models/resnet18.pt").is_file()
    );
}

/// The README's "depth challenge on 8 H100s" runs as written, and the depths its text gives for
/// one GPU, DDP over 8 and ZeRO stage 1 over 8 are the ones the estimate answers; more than
/// that, what they say holds: DDP's buckets cost depth, ZeRO's shards buy it.
#[test]
fn the_readmes_eight_gpu_answer_is_what_the_estimate_says() {
    let readme = std::fs::read_to_string("README.md").expect("README.md at the crate's root");
    let section = readme.split("**The depth challenge on 8 H100s**").nth(1).expect("the section");
    let block = section.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    let line = block.lines().map(str::trim).find(|l| !l.is_empty()).expect("a command");
    let args: Vec<&str> = line.split(" -- ").nth(1).expect("cargo run -- ARGS").split_whitespace().collect();
    let out = std::process::Command::new(common::bin()).args(&args).output().expect("oomlab runs");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{line}:\n{said}\n{}", String::from_utf8_lossy(&out.stderr));
    // Each variant's "largest depth predicted to fit in …: N", in the spec's order.
    let depths: Vec<u64> = said
        .lines()
        .filter_map(|l| l.strip_prefix("largest depth predicted to fit in "))
        .filter_map(|l| l.split(": ").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    let [one, ddp, zero] = depths[..] else { panic!("three answers:\n{said}") };
    let text = section.split("\n\n").take(3).collect::<Vec<_>>().join(" ").replace('\n', " ");
    for (words, n) in
        [("on one GPU", one), ("a GPU with DDP over 8", ddp), ("with ZeRO stage 1 over 8", zero)]
    {
        assert!(text.contains(&format!("{n} layers {words}")), "README says {n} layers {words}?\n{text}");
    }
    assert!(ddp < one && one < zero, "DDP's buckets cost depth, ZeRO's shards buy it: {depths:?}");
}
