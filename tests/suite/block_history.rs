//! The estimate's block sequence (`oomlab estimate --blocks`) against PyTorch's own allocation
//! history (`scripts/reference/train.py --history`: on the CPU its counting allocator's event
//! log), aligned by `scripts/reference/compare.py --blocks --history`: the tool that pins a GPU
//! gap to its first allocation, held here on the CPU, where the estimate replays libtorch's
//! allocations one for one.
//!
//! Without python3, a torch it can import, or g++ (cpu_memory.py builds its allocator once),
//! this test fails and says so: it does not skip.
use std::path::Path;
use std::process::Command;

use oomlab::run::plan::{Overrides, Plan};
use oomlab::run::{self, RunOptions};

use crate::common;
use common::{compare_blocks_py as compare, torch_site, Sandbox};

const SPEC: &str = r#"
[experiment]
name = "blocks"
[model]
hidden = 64
depth = 2
[data]
kind = "synthetic"
samples = 256
features = 32
classes = 4
seed = 0
[training]
optimizer = "adam"
lr = 0.001
batch_size = 128
steps = 2
dtype = "float32"
"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `oomlab estimate SPEC --device cpu --brief --blocks FILE`, as a user runs it.
fn estimate_blocks(spec: &Path, blocks: &Path) -> std::process::Output {
    Command::new(common::bin())
        .arg("estimate")
        .arg(spec)
        .args(["--device", "cpu", "--brief", "--blocks"])
        .arg(blocks)
        .output()
        .unwrap()
}

#[test]
fn the_estimates_blocks_align_with_pytorchs_history() {
    let sb = Sandbox::new();
    let spec_path = sb.spec("blocks.toml", SPEC);
    let spec = oomlab::spec::load(&spec_path).unwrap();
    let opts = RunOptions { out: sb.out(), quiet: true, ..RunOptions::default() };
    let report = {
        let _in_process = common::in_process();
        run::run(&Plan::here(spec, Overrides::default()), &opts).unwrap()
    };

    // PyTorch's history of the same trial.
    let history = sb.path().join("history.csv");
    let out = Command::new("python3")
        .arg(root().join("scripts/reference/train.py"))
        .args(["--device", "cpu", "--cpu-memory", "--summary"])
        .arg(report.dir.join("summary.csv"))
        .arg("--out")
        .arg(sb.path().join("pytorch.csv"))
        .arg("--history")
        .arg(&history)
        .env("PYTHONPATH", torch_site())
        .output()
        .expect("python3 runs (the PyTorch oracle)");
    assert!(out.status.success(), "train.py failed:\n{}", String::from_utf8_lossy(&out.stderr));

    // The estimate's, through the command a user runs.
    let blocks = sb.path().join("blocks.csv");
    let est = estimate_blocks(&spec_path, &blocks);
    assert!(est.status.success(), "estimate --blocks failed:\n{}", String::from_utf8_lossy(&est.stderr));
    let text = std::fs::read_to_string(&blocks).unwrap();
    assert!(text.starts_with(
        "variant,trial,value,seq,step,micro,phase,action,requested,block,category,pool,site,ranks\n"
    ));
    assert!(text.lines().count() > 50, "every allocation and free of two steps");

    // The rows add up to the run's memory at the end of every phase: what the loop frees between
    // phases is there too, as `outside_free` under the phase that follows.
    let blocks_csv: Vec<Vec<String>> =
        text.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect();
    let (mut live, mut at_end) = (0i64, std::collections::BTreeMap::new());
    for r in &blocks_csv {
        let block: i64 = r[9].parse().unwrap();
        live += match r[7].as_str() {
            "alloc" | "outside_alloc" => block,
            "free" | "outside_free" => -block,
            other => panic!("a CPU replay has no {other}"),
        };
        // A phase's own events come after what it follows (the trial's end frees after its last).
        if !r[7].starts_with("outside_") {
            at_end.insert((r[4].clone(), r[5].clone(), r[6].clone()), live);
        }
    }
    assert!(
        blocks_csv.iter().any(|r| r[7] == "outside_free"),
        "the loop frees a step's batch between phases"
    );
    let row = &report.rows[0];
    let trace = std::fs::read_to_string(report.dir.join("trace.csv")).unwrap();
    let mut checked = 0;
    let mut lines = trace.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"));
    let (step, micro, phase, allocated) = (col("step"), col("micro"), col("phase"), col("memory_allocated"));
    for l in lines {
        let c: Vec<&str> = l.split(',').collect();
        let Some(&sum) = at_end.get(&(c[step].to_string(), c[micro].to_string(), c[phase].to_string()))
        else {
            continue;
        };
        let measured = c[allocated].parse::<i64>().unwrap() - row.baseline_allocated as i64;
        assert_eq!(
            sum, measured,
            "allocated at the end of step {} {}: the blocks' sum against the run",
            c[step], c[phase]
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked} phases checked");

    // Named again, the file is not overwritten.
    let again = estimate_blocks(&spec_path, &blocks);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists"));

    // On the CPU the replay is libtorch's allocations one for one: through the first step's
    // forward and backward the two sequences are the same, event for event.
    let report = compare(&blocks, &history);
    let line = report.lines().find(|l| l.starts_with("- trial 1:")).unwrap_or_else(|| panic!("{report}"));
    for phase in ["data", "model", "to_device", "forward", "backward"] {
        assert!(
            !line.contains(&format!("parts in {phase}, step 1."))
                && !line.contains(&format!("parts in {phase}, step 0.")),
            "{line}"
        );
    }

    // And it finds a difference where there is one: the estimate against itself is the same
    // throughout; with one allocation's size changed, that event is the first to part.
    assert!(compare(&blocks, &blocks).contains("- trial 1: the same"));
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    let i = rows.iter().position(|r| r.contains(",forward,alloc,")).unwrap();
    let mut cells: Vec<String> = rows[i].split(',').map(str::to_string).collect();
    cells[8] = "3".into();
    rows[i] = cells.join(",");
    let changed = sb.path().join("changed.csv");
    std::fs::write(&changed, rows.join("\n") + "\n").unwrap();
    let report = compare(&blocks, &changed);
    assert!(
        report.contains("first parts in forward, step 1.0, event 0")
            && report.contains("reference alloc 3 B"),
        "{report}"
    );
}
