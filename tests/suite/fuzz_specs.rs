//! Hostile specs through the real binary: a seeded generator (xorshift, no crates) of malformed
//! specs (unknown keys, wrong types, extreme numbers, bad sizes, invalid UTF-8, hostile names,
//! CSV paths to devices, folders, missing and hostile files), each run through `oomlab estimate`
//! and some through `oomlab run`, with a timeout. Whatever the input: no panic, no death by a
//! signal, exit 0 (a spec that happens to be valid), 1 or 2; the key at fault named; no file
//! written outside `--out`; a data file's contents never echoed.
use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rng::Rng;

/// How long one command may take before it is killed and the test fails.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Randomly generated cases, on top of the fixed ones.
const GENERATED: usize = 170;
/// Commands at once: the binary's start (loading libtorch) is most of a case's time.
const WORKERS: usize = 2;
/// Text in every data file the cases point at: never to be seen in a message or a result.
const SECRET: &str = "s3cr3tcell";

/// A spec as ordered tables of `key = value` lines (values as TOML text), so that a mutation can
/// set, add or remove one key.
#[derive(Clone)]
struct Spec {
    tables: Vec<(String, Vec<(String, String)>)>,
    /// Appended as written (sweeps, variants, garbage).
    tail: String,
}

impl Spec {
    fn base() -> Spec {
        let t = |name: &str, kv: &[(&str, &str)]| {
            (name.to_string(), kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
        };
        Spec {
            tables: vec![
                t("experiment", &[("name", "\"fuzz\"")]),
                t("model", &[("hidden", "8"), ("depth", "1")]),
                t("data", &[("samples", "16"), ("features", "4"), ("classes", "3")]),
                t(
                    "training",
                    &[("optimizer", "\"sgd\""), ("lr", "0.01"), ("batch_size", "4"), ("steps", "1")],
                ),
                t("run", &[("device", "\"cpu\""), ("budget", "\"64MiB\"")]),
            ],
            tail: String::new(),
        }
    }

    fn set(&mut self, table: &str, key: &str, value: &str) {
        let t = self.table(table);
        match t.iter_mut().find(|(k, _)| k == key) {
            Some(kv) => kv.1 = value.to_string(),
            None => t.push((key.to_string(), value.to_string())),
        }
    }

    fn remove(&mut self, table: &str, key: &str) {
        self.table(table).retain(|(k, _)| k != key);
    }

    fn table(&mut self, name: &str) -> &mut Vec<(String, String)> {
        if !self.tables.iter().any(|(n, _)| n == name) {
            self.tables.push((name.to_string(), Vec::new()));
        }
        &mut self.tables.iter_mut().find(|(n, _)| n == name).unwrap().1
    }

    /// CSV data at `path` (TOML-quoted), label column `y`.
    fn csv(&mut self, path: &Path) {
        for k in ["samples", "features", "classes"] {
            self.remove("data", k);
        }
        self.set("data", "kind", "\"csv\"");
        self.set("data", "path", &toml_str(&path.display().to_string()));
        self.set("data", "label", "\"y\"");
    }

    fn text(&self) -> Vec<u8> {
        let mut s = String::new();
        for (name, kv) in &self.tables {
            s += &format!("[{name}]\n");
            for (k, v) in kv {
                s += &format!("{k} = {v}\n");
            }
            s += "\n";
        }
        s += &self.tail;
        s.into_bytes()
    }
}

fn toml_str(s: &str) -> String {
    format!("{s:?}").replace("\\0", "\\u0000")
}

/// One malformed spec and what a refusal of it must name.
struct Case {
    what: String,
    text: Vec<u8>,
    /// A refusal's stderr names one of these (empty: no key is at fault, e.g. invalid UTF-8).
    keys: Vec<String>,
    /// Worth a `run` too.
    run: bool,
}

const NUMERIC: [(&str, &str); 14] = [
    ("model", "hidden"),
    ("model", "depth"),
    ("data", "samples"),
    ("data", "features"),
    ("data", "classes"),
    ("data", "seed"),
    ("training", "batch_size"),
    ("training", "steps"),
    ("training", "accumulation"),
    ("training", "lr"),
    ("training", "momentum"),
    ("training", "seed"),
    ("training", "checkpoint"),
    ("run", "skip_predicted_oom"),
];

const WORDS: [(&str, &str); 9] = [
    ("training", "optimizer"),
    ("training", "dtype"),
    ("training", "amp"),
    ("training", "mode"),
    ("training", "history"),
    ("training", "optimizer_impl"),
    ("data", "location"),
    ("run", "device"),
    ("run", "on_oom"),
];

/// Numbers and not-numbers at the edges; none of them in range and large (a valid spec stays
/// cheap to run).
const EXTREMES: [&str; 20] = [
    "0",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "2147483648",
    "1e308",
    "-1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "\"NaN\"",
    "1.5",
    "true",
    "[]",
    "{}",
    "\"\"",
    "\"x\"",
    "[1, 2]",
];

const SIZES: [&str; 14] = [
    "\"-1GiB\"",
    "\"1e999GiB\"",
    "\"16EiB\"",
    "\"99999999999TiB\"",
    "\"\"",
    "\"G\"",
    "0",
    "-5",
    "\"1.5\"",
    "nan",
    "18446744073709551615",
    "{ cpu = \"x\" }",
    "{ gpu = \"1GiB\" }",
    "{}",
];

fn hostile_names() -> Vec<String> {
    vec![
        "../up".into(),
        "a/b".into(),
        "/abs".into(),
        "..".into(),
        "x\0y".into(),
        "a".repeat(300),
        "b".repeat(65),
        String::new(),
        "Ünïcode".into(),
        "a b".into(),
        "con".repeat(30),
    ]
}

/// The data files the CSV cases point at, in `dir`; each with its keys.
fn data_files(dir: &Path) -> Vec<(PathBuf, Vec<&'static str>)> {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut files = vec![
        (PathBuf::from("/dev/zero"), vec!["data.path"]),
        (PathBuf::from("/dev/null"), vec!["data.path"]),
        (dir.to_path_buf(), vec!["data.path"]),
        (dir.join("missing.csv"), vec!["data.path"]),
        (write("two_rows.csv", "a,y\n1,0\n2,1\n"), vec!["training.batch_size"]),
        (write("nan.csv", "a,y\n1,0\nnan,1\n2,0\n3,1\n4,0\n"), vec!["row 3, column 1"]),
        (write("inf.csv", "a,y\n1,0\n2,1\n3,0\ninf,1\n"), vec!["row 5, column 1"]),
        (write("text_cell.csv", &format!("a,y\n1,0\n{SECRET},1\n2,0\n3,1\n")), vec!["row 3, column 1"]),
        (write("text_label.csv", &format!("a,y\n1,0\n2,{SECRET}\n2,0\n3,1\n")), vec!["data.label"]),
        (write("neg_label.csv", "a,y\n1,0\n2,-1\n2,0\n3,1\n"), vec!["data.label"]),
        (write("huge_label.csv", "a,y\n1,0\n2,9223372036854775807\n2,0\n3,1\n"), vec!["data.label"]),
        (write("no_label.csv", &format!("a,{SECRET}\n1,0\n2,1\n2,0\n3,1\n")), vec!["data.label"]),
        (write("empty.csv", ""), vec!["data.label", "data.path"]),
        (write("ragged.csv", "a,y\n1,0\n2,1,3\n2,0\n3,1\n"), vec!["row 3"]),
    ];
    // Invalid UTF-8 bytes in a cell.
    let bad_utf8 = dir.join("bad_utf8.csv");
    std::fs::write(&bad_utf8, b"a,y\n1,0\n\xff\xfe,1\n2,0\n3,1\n").unwrap();
    files.push((bad_utf8, vec!["row 3"]));
    if Path::new("/etc/shadow").exists() {
        files.push((PathBuf::from("/etc/shadow"), vec!["data.path", "data.label"]));
    }
    files
}

fn cases(rng: &mut Rng, data_dir: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Fixed: every CSV file, and every hostile name in both places.
    for (path, want) in data_files(data_dir) {
        let mut s = Spec::base();
        s.csv(&path);
        out.push(Case {
            what: format!("csv {}", path.display()),
            text: s.text(),
            keys: keys(&want),
            run: true,
        });
    }
    for name in hostile_names() {
        let mut s = Spec::base();
        s.set("experiment", "name", &toml_str(&name));
        out.push(Case {
            what: format!("name {name:?}"),
            text: s.text(),
            keys: keys(&["experiment.name"]),
            run: true,
        });
        let mut s = Spec::base();
        s.tail = format!("[[variant]]\nname = {}\n", toml_str(&name));
        out.push(Case {
            what: format!("variant {name:?}"),
            text: s.text(),
            keys: keys(&["variant[0].name"]),
            run: false,
        });
    }
    // A module of the user's, with tensors data: each hostile input list, target and loss.
    for (key, value, want) in [
        ("inputs", "[]", "data.inputs"),
        ("inputs", "\"x\"", "inputs"),
        ("inputs", "[{ shape = [-1] }]", "data.inputs"),
        ("inputs", "[{ shape = [99999999999] }]", "data.inputs"),
        ("inputs", "[{ shape = [1, 1, 1, 1, 1, 1, 1, 1, 1] }]", "data.inputs"),
        ("inputs", "[{ shape = [1000000000, 1000000000] }]", "data.inputs"),
        ("inputs", "[{ shape = [4], dtype = \"int64\", high = -1 }]", "data.inputs.high"),
        ("inputs", "[{ shape = [4], dtype = \"complex\" }]", "data.inputs.dtype"),
        ("inputs", "[{ shape = [4], name = 7 }]", "name"),
        ("inputs", "[{ shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }, { shape = [4] }]", "data.inputs"),
        ("target", "[0]", "data.target"),
        ("target", "[-3]", "data.target"),
        ("target", "\"x\"", "target"),
        ("classes", "1", "data.classes"),
    ] {
        let mut s = Spec::base();
        for k in ["hidden", "depth"] {
            s.remove("model", k);
        }
        s.set("model", "kind", "\"torchscript\"");
        s.set("model", "path", "\"missing.pt\"");
        s.remove("data", "features");
        s.set("data", "kind", "\"tensors\"");
        s.set("data", "inputs", "[{ shape = [4] }]");
        s.set("data", key, value);
        out.push(Case { what: format!("tensors data.{key} = {value}"), text: s.text(), keys: keys(&[want]), run: true });
    }
    for _ in 0..GENERATED {
        let mut s = Spec::base();
        let (what, want, run) = match rng.below(11) {
            0..=2 => {
                let (t, k) = rng.pick(&NUMERIC);
                let v = rng.pick(&EXTREMES);
                s.set(t, k, v);
                (format!("{t}.{k} = {v}"), vec![k.to_string()], true)
            }
            3 => {
                let (t, k) = rng.pick(&WORDS);
                let v = rng.pick(&EXTREMES);
                s.set(t, k, v);
                (format!("{t}.{k} = {v}"), vec![k.to_string()], true)
            }
            4 => {
                let v = rng.pick(&SIZES);
                s.set("run", "budget", v);
                (format!("run.budget = {v}"), vec!["budget".to_string()], true)
            }
            5 => {
                let t = rng.pick(&["experiment", "model", "data", "training", "run"]).to_string();
                let k = format!("widht{}", rng.below(100));
                s.set(&t, &k, "3");
                (format!("unknown {t}.{k}"), vec![k], false)
            }
            6 => {
                let (t, k) = rng.pick(&[
                    ("experiment", "name"),
                    ("model", "hidden"),
                    ("data", "classes"),
                    ("training", "optimizer"),
                    ("training", "batch_size"),
                ]);
                s.remove(t, k);
                (format!("missing {t}.{k}"), vec![k.to_string()], false)
            }
            7 => {
                let field = rng.pick(&[
                    "model.depth",
                    "model.hidden",
                    "training.batch_size",
                    "training.steps",
                    "training.accumulation",
                    "data.samples",
                    "training.lr",
                    "bogus.field",
                ]);
                let v = rng.pick(&EXTREMES);
                let w = rng.pick(&EXTREMES);
                let sweep = match rng.below(3) {
                    0 => format!("values = [1, {v}]"),
                    1 => format!("search = {{ start = 1, factor = {v}, max = {w} }}"),
                    _ => format!("halve = {{ start = {v} }}"),
                };
                s.tail = format!("[sweep]\nfield = {field:?}\n{sweep}\n");
                (format!("sweep {field} {sweep}"), vec!["sweep".to_string()], false)
            }
            8 => {
                // Invalid UTF-8 somewhere in the text.
                let mut text = s.text();
                let at = rng.below(text.len());
                text.splice(at..at, [0xff, 0xfe, 0xc0]);
                out.push(Case {
                    what: format!("invalid UTF-8 at byte {at}"),
                    text,
                    keys: vec![],
                    run: false,
                });
                continue;
            }
            9 => {
                // Cut anywhere.
                let mut text = s.text();
                let at = rng.below(text.len());
                text.truncate(at);
                out.push(Case { what: format!("cut at byte {at}"), text, keys: vec![], run: false });
                continue;
            }
            _ => {
                // A variant that sets one extreme value.
                let (t, k) = rng.pick(&NUMERIC[..9]);
                let v = rng.pick(&EXTREMES);
                s.tail = format!("[[variant]]\nname = \"v\"\n[variant.{t}]\n{k} = {v}\n");
                (format!("variant {t}.{k} = {v}"), vec![k.to_string()], false)
            }
        };
        out.push(Case { what, text: s.text(), keys: want, run });
    }
    out
}

/// What a command did.
struct Outcome {
    code: i32,
    stderr: String,
    stdout: String,
}

/// Runs the binary in `cwd` with `args`, killing it after [`TIMEOUT`].
fn oomlab(cwd: &Path, logs: &Path, args: &[&std::ffi::OsStr], what: &str) -> Outcome {
    let (out_log, err_log) = (logs.join("stdout"), logs.join("stderr"));
    let mut child = Command::new(common::bin())
        .args(args)
        .current_dir(cwd)
        // Two workers on small machines: one thread each.
        .env("OMP_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_log).unwrap())
        .stderr(std::fs::File::create(&err_log).unwrap())
        .spawn()
        .expect("start oomlab");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {TIMEOUT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let (stdout, stderr) = (read(&out_log), read(&err_log));
    let Some(code) = status.code() else {
        panic!("{what}: killed by a signal ({status:?}); stderr:\n{stderr}");
    };
    Outcome { code, stderr, stdout }
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out
}

fn check(case: &Case, command: &str, o: &Outcome) {
    let what = format!("{command} on {}", case.what);
    assert!(
        !o.stderr.contains("panicked") && o.code != 101,
        "{what}: panicked (exit {}):\n{}",
        o.code,
        o.stderr
    );
    assert!([0, 1, 2].contains(&o.code), "{what}: exit {}:\n{}", o.code, o.stderr);
    if o.code != 0 && !case.keys.is_empty() {
        assert!(
            case.keys.iter().any(|k| o.stderr.contains(k.as_str())),
            "{what}: exit {} without naming {:?}:\n{}",
            o.code,
            case.keys,
            o.stderr
        );
    }
    assert!(
        !o.stderr.contains(SECRET) && !o.stdout.contains(SECRET),
        "{what}: a data file's contents echoed"
    );
    if let Ok(shadow) = std::fs::read_to_string("/etc/shadow") {
        if let Some(first) = shadow.lines().next().filter(|l| l.len() > 8) {
            assert!(!o.stderr.contains(first), "{what}: /etc/shadow echoed");
        }
    }
}

/// One case: `estimate`, and `run` where it is worth it. Returns (refused, ran).
fn try_case(i: usize, case: &Case, specs: &Path, cwd: &Path, logs: &Path, root: &Path) -> (usize, usize) {
    let spec = specs.join(format!("case{i}.toml"));
    std::fs::write(&spec, &case.text).unwrap();
    let o = oomlab(cwd, logs, &["estimate".as_ref(), spec.as_os_str()], &case.what);
    check(case, "estimate", &o);
    // `run` only where it gets past parsing: the estimate ran, or the data is at fault (which a
    // run checks before it starts).
    let past_parsing = o.code == 0 || o.stderr.contains("estimating");
    if !(case.run && past_parsing) {
        return (usize::from(o.code != 0), 0);
    }
    let out = root.join(format!("out{i}"));
    let args = ["run".as_ref(), spec.as_os_str(), "--out".as_ref(), out.as_os_str(), "--quiet".as_ref()];
    let r = oomlab(cwd, logs, &args, &case.what);
    check(case, "run", &r);
    for f in files(&out).iter().filter(|f| f.extension().is_some_and(|e| e == "csv" || e == "json")) {
        let text = std::fs::read(out.join(f)).unwrap();
        assert!(
            !String::from_utf8_lossy(&text).contains(SECRET),
            "run on {}: {} echoes a data file",
            case.what,
            f.display()
        );
    }
    std::fs::remove_dir_all(&out).ok();
    (usize::from(o.code != 0), 1)
}

#[test]
fn no_spec_crashes_the_binary_or_writes_outside_its_out_folder() {
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    // The specs' folder, the data files' folder, an empty working folder, and the logs.
    let (specs, data, cwd, logs) = (
        root.path().join("specs"),
        root.path().join("data"),
        root.path().join("cwd"),
        root.path().join("logs"),
    );
    for d in [&specs, &data, &cwd, &logs] {
        std::fs::create_dir(d).unwrap();
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let cases = cases(&mut rng, &data);
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let data_before = files(&data);
    let (refused, ran) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (cases, specs, cwd, root) = (&cases, &specs, &cwd, root.path());
                let logs = logs.join(format!("w{w}"));
                std::fs::create_dir(&logs).unwrap();
                scope.spawn(move || {
                    let (mut refused, mut ran) = (0, 0);
                    for (i, case) in cases.iter().enumerate().skip(w).step_by(WORKERS) {
                        let (r, n) = try_case(i, case, specs, cwd, &logs, root);
                        (refused, ran) = (refused + r, ran + n);
                    }
                    (refused, ran)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    // Nothing written anywhere but the `--out` folders (removed above) and the logs.
    assert!(files(&cwd).is_empty(), "written in the working folder: {:?}", files(&cwd));
    assert_eq!(files(&data), data_before, "written next to the data");
    let spec_files: BTreeSet<PathBuf> =
        (0..cases.len()).map(|i| PathBuf::from(format!("case{i}.toml"))).collect();
    assert_eq!(files(&specs), spec_files, "written next to the specs");
    let top: BTreeSet<PathBuf> = ["specs", "data", "cwd", "logs"]
        .iter()
        .map(PathBuf::from)
        .chain(files(&specs).iter().map(|f| Path::new("specs").join(f)))
        .chain(files(&data).iter().map(|f| Path::new("data").join(f)))
        .chain(files(&logs).iter().map(|f| Path::new("logs").join(f)))
        .collect();
    assert_eq!(files(root.path()), top, "written outside --out");
    assert!(refused > cases.len() / 2, "only {refused} of {} refused", cases.len());
    eprintln!("{} cases, {refused} refused, {ran} runs, {:?}", cases.len(), started.elapsed());
}

/// Values that parse, are in no sense a training run, and were once accepted: each refused by
/// both `estimate` and `run`, before anything runs, with the key at fault named.
#[test]
fn nonsense_that_once_passed_is_refused_naming_the_key() {
    let root = tempfile::tempdir().unwrap();
    let (specs, logs) = (root.path().join("specs"), root.path().join("logs"));
    std::fs::create_dir(&specs).unwrap();
    std::fs::create_dir(&logs).unwrap();
    let transformer = |s: &mut Spec| {
        s.tables.retain(|(n, _)| n != "model" && n != "data");
        s.set("model", "kind", "\"transformer\"");
        for (k, v) in [("d_model", "8"), ("nhead", "2"), ("num_layers", "1"), ("dim_feedforward", "16")] {
            s.set("model", k, v);
        }
        for (k, v) in
            [("kind", "\"tokens\""), ("samples", "16"), ("seq_len", "4"), ("vocab", "10"), ("classes", "3")]
        {
            s.set("data", k, v);
        }
    };
    let sweep = |values: String| format!("[sweep]\nfield = \"model.depth\"\nvalues = [{values}]\n");
    let many: Vec<String> = (1..=100_000).map(|v| v.to_string()).collect();
    type Edit = Box<dyn Fn(&mut Spec)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("lr = 1e308", Box::new(|s| s.set("training", "lr", "1e308")), "training.lr"),
        ("lr = i64::MAX", Box::new(|s| s.set("training", "lr", "9223372036854775807")), "training.lr"),
        (
            "weight_decay = i64::MAX",
            Box::new(|s| s.set("training", "weight_decay", "9223372036854775807")),
            "training.weight_decay",
        ),
        (
            "skip_predicted_oom = 1e308",
            Box::new(|s| s.set("run", "skip_predicted_oom", "1e308")),
            "run.skip_predicted_oom",
        ),
        (
            "a swept lr of 1e308",
            Box::new(|s| s.tail = "[sweep]\nfield = \"training.lr\"\nvalues = [0.01, 1e308]\n".into()),
            "sweep.values[1]",
        ),
        ("values [1, 1, 1]", Box::new(move |s| s.tail = sweep("1, 1, 1".into())), "sweep.values[1]"),
        ("100,000 values", Box::new(move |s| s.tail = sweep(many.join(", "))), "sweep.values"),
        ("depth = 0", Box::new(|s| s.set("model", "depth", "0")), "model.depth"),
        (
            "checkpoint = 50 on one layer",
            Box::new(|s| s.set("training", "checkpoint", "50")),
            "training.checkpoint",
        ),
        (
            "checkpoint = { sequential = 50 } on one layer",
            Box::new(|s| s.set("training", "checkpoint", "{ sequential = 50 }")),
            "training.checkpoint",
        ),
        (
            "bf16 autocast over float64",
            Box::new(|s| {
                s.set("training", "amp", "\"bf16\"");
                s.set("training", "dtype", "\"float64\"");
            }),
            "training.amp",
        ),
        (
            "fp16 autocast over float16",
            Box::new(|s| {
                s.set("training", "amp", "\"fp16\"");
                s.set("training", "dtype", "\"float16\"");
            }),
            "training.amp",
        ),
        (
            "num_layers = 0",
            Box::new(move |s| {
                transformer(s);
                s.set("model", "num_layers", "0");
            }),
            "model.num_layers",
        ),
        (
            "vocab = 1",
            Box::new(move |s| {
                transformer(s);
                s.set("data", "vocab", "1");
            }),
            "data.vocab",
        ),
    ];
    for (i, (what, edit, key)) in cases.iter().enumerate() {
        let mut s = Spec::base();
        edit(&mut s);
        let spec = specs.join(format!("nonsense{i}.toml"));
        std::fs::write(&spec, s.text()).unwrap();
        let out = root.path().join(format!("out{i}"));
        for args in [
            vec!["estimate".as_ref(), spec.as_os_str()],
            vec!["run".as_ref(), spec.as_os_str(), "--out".as_ref(), out.as_os_str(), "--quiet".as_ref()],
        ] {
            let o = oomlab(root.path(), &logs, &args, what);
            let command = args[0].to_string_lossy();
            assert!(o.code == 1 || o.code == 2, "{command} on {what}: exit {}:\n{}", o.code, o.stderr);
            assert!(o.stderr.contains(key), "{command} on {what}: {key} not named:\n{}", o.stderr);
        }
        assert!(files(&out).is_empty(), "run on {what} wrote {:?}", files(&out));
    }
}
