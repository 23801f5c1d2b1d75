//! `oomlab run` of a `[parallel]` DDP spec, end to end on the CPU: every trial's ranks started as
//! processes on torch.distributed's engine (gloo), each measured by its own counting allocator.
//! Held to a one-process run of the same model: a rank holds exactly what one process holds at
//! the rank's batch plus one copy of the gradients in DDP's buckets (none left after the
//! backward with `gradient_as_bucket_view`); the global batch trains to the same loss at any
//! world size; an out-of-memory on the ranks ends the trial as data and the next starts clean;
//! a world the machine cannot host is refused before anything is written. ZeRO stage 1 (the
//! same ranks with `ZeroRedundancyOptimizer`) is held to PyTorch's and to what it must save.
use std::collections::HashMap;
use std::path::PathBuf;

use oomlab::schema::{Phase, PhaseRecord, Status, SummaryRow};

use crate::common::{self, Sandbox};

/// An MLP of 5,443 float32 parameters (21,772 bytes): 16 -> 64 -> 64 -> 3.
const PARAM_BYTES: u64 = 4 * ((16 * 64 + 64) + (64 * 64 + 64) + (64 * 3 + 3));

fn spec(name: &str, batch: usize, extra: &str) -> String {
    format!(
        r#"[experiment]
name = "{name}"

[model]
hidden = 64
depth = 2

[data]
samples = 96
features = 16
classes = 3

[training]
optimizer = "adam"
batch_size = {batch}
steps = 4

[run]
device = "cpu"
{extra}"#
    )
}

/// Runs `text` and returns its folder's summary rows and trace records.
fn run(sb: &Sandbox, name: &str, text: &str) -> (Vec<SummaryRow>, Vec<PhaseRecord>) {
    let path = sb.spec(&format!("{name}.toml"), text);
    common::oomlab().args(["run", "-q", "--out"]).arg(sb.out()).arg(&path).assert().success();
    let dir = folder(sb, name);
    (common::read_csv(&dir.join("summary.csv")), common::read_csv(&dir.join("trace.csv")))
}

fn folder(sb: &Sandbox, name: &str) -> PathBuf {
    sb.out().join(oomlab::device::slug(&oomlab::device::cpu_name())).join(name)
}

type Key = (usize, usize, Phase);

/// Whether `got` bytes over one process are `want`: exactly from step 3 on; in the wrap and
/// steps 1 and 2, up to a flat copy of the parameters (the wrap's broadcast) and a few hundred
/// bytes of small tensors (the shape check's int64s, the rebuild's bucket order) more, which
/// gloo's thread may not have let go of yet. (PyTorch's DDP, without oomlab's barriers, once
/// held the broadcast's copy and the shape check's 144 bytes at the end of the wrap.)
fn settled(step: usize, got: i64, want: u64) -> bool {
    settled_within(step, got, want, PARAM_BYTES)
}

/// [`settled`] for a model of `params` bytes of parameters (and buffers).
fn settled_within(step: usize, got: i64, want: u64, params: u64) -> bool {
    let want = want as i64;
    match step {
        0..=2 => (want..=want + params as i64 + 512).contains(&got),
        _ => got == want,
    }
}

/// A rank's phases whose predicted peak is not the measured one (as [`settled`] allows):
/// (step, phase, measured, predicted).
fn mispredicted(rank: &[PhaseRecord]) -> Vec<(usize, Phase, u64, Option<u64>)> {
    rank.iter()
        .filter(|t| {
            let predicted = t.predicted_peak.expect("a prediction beside each phase");
            !settled(t.step, t.max_memory_allocated as i64 - predicted as i64, 0)
        })
        .map(|t| (t.step, t.phase, t.max_memory_allocated, t.predicted_peak))
        .collect()
}

/// One process's phases by (step, micro, phase): (allocated at the end, the phase's peak).
fn by_phase<'a>(records: impl Iterator<Item = &'a PhaseRecord>) -> HashMap<Key, (u64, u64)> {
    records.map(|r| ((r.step, r.micro, r.phase), (r.memory_allocated, r.max_memory_allocated))).collect()
}

/// Each rank's records of `trial`, rank by rank, and checks that every rank recorded the same
/// phases as one process does, with the wrap after the model.
fn ranks_of(
    trace: &[PhaseRecord],
    trial: usize,
    world: usize,
    one: &HashMap<Key, (u64, u64)>,
) -> Vec<Vec<PhaseRecord>> {
    let ranks: Vec<Vec<PhaseRecord>> = (0..world)
        .map(|r| trace.iter().filter(|t| t.trial == trial && t.rank == Some(r)).cloned().collect())
        .collect();
    assert_eq!(trace.iter().filter(|t| t.trial == trial).count(), ranks.iter().map(Vec::len).sum::<usize>());
    for (r, records) in ranks.iter().enumerate() {
        let phases: Vec<Phase> = records.iter().map(|t| t.phase).collect();
        assert_eq!(phases[..3], [Phase::Data, Phase::Model, Phase::Wrap], "trial {trial} rank {r}");
        assert_eq!(records.len(), one.len() + 1, "trial {trial} rank {r}: one process's phases and the wrap");
    }
    ranks
}

/// The difference, phase by phase from step `from` on, between a rank's bytes and one process's
/// (end and peak); every one must be `extra` (end) and `extra_peak` (peak), as given per phase.
fn differences(rank: &[PhaseRecord], one: &HashMap<Key, (u64, u64)>, from: usize) -> Vec<(Key, i64, i64)> {
    rank.iter()
        .filter(|t| t.step >= from)
        .map(|t| {
            let k = (t.step, t.micro, t.phase);
            let (end, peak) = one[&k];
            (k, t.memory_allocated as i64 - end as i64, t.max_memory_allocated as i64 - peak as i64)
        })
        .collect()
}

/// DDP does not shrink what a rank holds: at world sizes 1, 2 and 3, from the third step on
/// every phase's end and peak on every rank is one process's at the rank's batch plus the
/// buckets, exactly: one more copy of the gradients. In the first two steps (the wrap's
/// broadcast, the buckets' rebuild) gloo's thread may still hold a collective's tensors a moment
/// longer on a busy machine: at most one more flat copy of the parameters and the bucket order.
#[test]
fn a_rank_holds_one_process_at_its_batch_plus_one_copy_of_the_gradients() {
    let sb = Sandbox::new();
    let (_, one) = run(&sb, "one", &spec("one", 8, ""));
    let one = by_phase(one.iter());
    let sweep =
        "[parallel]\nstrategy = \"ddp\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [1, 2, 3]\n";
    let (rows, trace) = run(&sb, "ddp", &spec("ddp", 8, sweep));
    assert_eq!(rows.len(), 3);
    for (row, world) in rows.iter().zip([1, 2, 3]) {
        assert_eq!((row.status, row.world_size, row.batch_size), (Status::Ok, Some(world), 8), "{row:?}");
        assert!(row.rank.is_some_and(|r| r < world), "{row:?}");
        assert_eq!(row.trace_rows, Some(world * (one.len() + 1)));
        for (r, rank) in ranks_of(&trace, row.trial, world, &one).iter().enumerate() {
            let wrong: Vec<_> = differences(rank, &one, 1)
                .into_iter()
                .filter(|&((step, _, _), end, peak)| {
                    !settled(step, end, PARAM_BYTES) || !settled(step, peak, PARAM_BYTES)
                })
                .collect();
            assert!(
                wrong.is_empty(),
                "world {world} rank {r}: (phase, end, peak) over one process: {wrong:?}"
            );
            // The estimate predicts every rank's phases, the same way.
            let missed = mispredicted(rank);
            assert!(
                missed.is_empty(),
                "world {world} rank {r}: (step, phase, measured, predicted): {missed:?}"
            );
            // The wrap leaves the buckets, and may still hold the broadcast's flat copy that gloo's
            // thread lets go of a moment later.
            let (model, wrap) = (&rank[1], &rank[2]);
            assert!(wrap.memory_allocated >= model.memory_allocated + PARAM_BYTES, "world {world} rank {r}");
        }
        // The summary row is the rank with the highest peak.
        let peaks: Vec<u64> = (0..world)
            .map(|r| {
                trace
                    .iter()
                    .filter(|t| t.trial == row.trial && t.rank == Some(r))
                    .map(|t| t.max_memory_allocated)
                    .max()
                    .unwrap()
            })
            .collect();
        assert_eq!(row.max_memory_allocated, *peaks.iter().max().unwrap(), "{peaks:?}");
    }
}

/// PyTorch as the oracle, per rank: `scripts/reference/train.py` runs each trial with PyTorch's
/// own `DistributedDataParallel` on CPU processes over gloo (torch.distributed's Python, as a
/// user writes it), counted by the same allocator: for the MLP at world sizes 2 and 3, a
/// ResNet-18 (whose BatchNorm buffers DDP broadcasts every forward) at 2, and gradients as views
/// into small buckets over two micro-batches (the rebuild between them) at 2, every rank's phases
/// equal oomlab's, and the estimate's (exactly from the third step; in the first two within
/// one collective's tensors that a gloo thread may not yet have let go), and the ranks' mean
/// loss is oomlab's final loss.
#[test]
fn pytorchs_ddp_holds_every_rank_as_oomlab_does() {
    let sb = Sandbox::new();
    let sweep =
        "[parallel]\nstrategy = \"ddp\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [2, 3]\n";
    let mlp = run(&sb, "oracle", &spec("oracle", 8, sweep));
    let resnet = spec("resnet", 4, "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n")
        .replace("hidden = 64\ndepth = 2", "kind = \"cnn\"\narch = \"resnet18\"")
        .replace(
            "samples = 96\nfeatures = 16\nclasses = 3",
            "kind = \"images\"\nsamples = 32\nchannels = 3\nsize = 32\nclasses = 3",
        );
    let resnet = run(&sb, "resnet", &resnet);
    // Gradients as views into small buckets, rebuilt between two micro-batches.
    let views = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\nbucket_cap_mb = 0.01\ngradient_as_bucket_view = true\n";
    let views =
        run(&sb, "views", &spec("views", 8, views).replace("steps = 4", "steps = 4\naccumulation = 2"));
    let summary = |name: &str| folder(&sb, name).join("summary.csv");
    let (mlp_summary, resnet_summary, views_summary) =
        (summary("oracle"), summary("resnet"), summary("views"));
    let (mlp_ref, resnet_ref, views_ref) =
        (sb.path().join("mlp.csv"), sb.path().join("resnet.csv"), sb.path().join("views.csv"));
    let refs = common::pytorch_cpu_memory_each(&[
        (&mlp_summary, &mlp_ref),
        (&resnet_summary, &resnet_ref),
        (&views_summary, &views_ref),
    ]);
    // ResNet-18's buffers: 20 BatchNorms of 4,800 channels in all, a running mean and variance
    // each (float32) and a batch count (int64).
    let resnet_buffers = [4 * 2 * 4800, 8 * 20];
    let runs =
        [("mlp", mlp, &[][..]), ("resnet18", resnet, &resnet_buffers[..]), ("bucket views", views, &[][..])];
    for ((name, (rows, ours), buffers), (py, theirs)) in runs.into_iter().zip(refs) {
        assert_as_pytorch(name, &rows, &ours, &py, &theirs, true, buffers);
    }
}

/// The wrap first checks the parameters' shapes across ranks, gathering a count from every
/// rank: on a model too small for the broadcast to dominate, the wrap's peak grows by 8 bytes a
/// rank, as the estimate predicts (a model of 6 parameters; at most the check's own tensors
/// more where gloo's thread still held them).
#[test]
fn the_wraps_shape_check_grows_with_the_world_as_estimated() {
    let sb = Sandbox::new();
    let sweep =
        "[parallel]\nstrategy = \"ddp\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [1, 2, 3]\n";
    let text = spec("tiny", 2, sweep)
        .replace("hidden = 64\ndepth = 2", "hidden = 1\ndepth = 1")
        .replace("samples = 96\nfeatures = 16\nclasses = 3", "samples = 12\nfeatures = 1\nclasses = 2");
    let (rows, trace) = run(&sb, "tiny", &text);
    let mut predicted = Vec::new();
    for row in &rows {
        for t in trace.iter().filter(|t| t.trial == row.trial && t.phase == Phase::Wrap) {
            let p = t.predicted_peak.expect("a prediction");
            // Sizes and strides of 4 parameters (6 dimensions): 12 int64s, twice.
            assert!((p..=p + 2 * 96).contains(&t.max_memory_allocated), "trial {}: {t:?}", row.trial);
            predicted.push(p);
        }
    }
    predicted.dedup();
    let steps: Vec<i64> = predicted.windows(2).map(|w| w[1] as i64 - w[0] as i64).collect();
    assert_eq!(steps, [8, 8], "{predicted:?}");
    // `estimate --blocks` says which ranks make each event (all of them alike), and where the
    // world size enters: the wrap's one int64 from each rank.
    let blocks = sb.path().join("blocks.csv");
    let spec_path = sb.path().join("tiny.toml");
    common::oomlab()
        .args(["estimate", "--device", "cpu", "--blocks"])
        .arg(&blocks)
        .arg(&spec_path)
        .assert()
        .success();
    let mut csv = csv::Reader::from_path(&blocks).unwrap();
    let header = csv.headers().unwrap().clone();
    let col =
        |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    let (trial, phase, action, requested, ranks) =
        (col("trial"), col("phase"), col("action"), col("requested"), col("ranks"));
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    for (t, world) in [(1, 1), (2, 2), (3, 3)] {
        let of: Vec<&csv::StringRecord> = rows.iter().filter(|r| r[trial] == t.to_string()).collect();
        assert!(!of.is_empty() && of.iter().all(|r| r[ranks] == format!("0-{}", world - 1)), "trial {t}");
        let int64s = of
            .iter()
            .filter(|r| &r[phase] == "wrap" && &r[action] == "alloc" && &r[requested] == "8")
            .count();
        assert_eq!(int64s, world + 1, "trial {t}: the count, and one gathered from each rank");
    }
}

/// With `gradient_as_bucket_view` the gradients are views into the buckets: after each
/// backward a rank holds what one process holds; the buckets stay when zero_grad drops the
/// gradients (exact from the third step, as above).
#[test]
fn gradient_as_bucket_view_keeps_no_second_copy_after_the_backward_as_estimated() {
    let sb = Sandbox::new();
    let (_, one) = run(&sb, "one", &spec("one", 8, ""));
    let one = by_phase(one.iter());
    let parallel = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\ngradient_as_bucket_view = true\n";
    let (rows, trace) = run(&sb, "view", &spec("view", 8, parallel));
    for (r, rank) in ranks_of(&trace, rows[0].trial, 2, &one).iter().enumerate() {
        for ((step, _, phase), end, _) in differences(rank, &one, 1) {
            let want = match phase {
                Phase::Backward | Phase::OptimizerStep => 0,
                _ => PARAM_BYTES,
            };
            assert!(
                settled(step, end, want),
                "rank {r} step {step} {phase}: {:?}",
                differences(rank, &one, 1)
            );
        }
        // The estimate replays the views: every phase's end and peak as measured.
        let missed = mispredicted(rank);
        assert!(missed.is_empty(), "rank {r}: (step, phase, measured, predicted): {missed:?}");
    }
}

/// A global batch split over the ranks trains as one process on the whole batch: the ranks'
/// mean loss after three Adam steps equals one process's at world sizes 1, 2 and 4.
#[test]
fn a_global_batch_trains_to_one_processs_loss_at_any_world_size() {
    let sb = Sandbox::new();
    let (one, _) = run(&sb, "one", &spec("one", 24, ""));
    let want = one[0].final_loss.expect("a loss");
    let sweep = "[parallel]\nstrategy = \"ddp\"\nbatch = \"global\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [1, 2, 4]\n";
    let (rows, _) = run(&sb, "global", &spec("global", 24, sweep));
    let got: Vec<(usize, usize, f64)> =
        rows.iter().map(|r| (r.world_size.unwrap(), r.batch_size, r.final_loss.unwrap())).collect();
    assert_eq!(got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(), [(1, 24), (2, 12), (4, 6)]);
    for (world, _, loss) in got {
        assert!(((loss - want) / want).abs() < 1e-5, "world {world}: {loss} against one process's {want}");
    }
}

/// Ranks that run out of memory end their trial as data (which rank, which phase), the others'
/// with it; the next trial's ranks start from nothing, as the first's did.
#[test]
fn an_oom_ends_the_trial_on_every_rank_and_the_next_starts_clean() {
    let sb = Sandbox::new();
    let extra = "budget = \"64MiB\"\n\n[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n\n[sweep]\nfield = \"model.hidden\"\nvalues = [64, 8192, 63]\n";
    let (rows, trace) = run(&sb, "oom", &spec("oom", 8, extra));
    let statuses: Vec<Status> = rows.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Status::Ok, Status::Oom, Status::Ok], "{rows:#?}");
    let oom = &rows[1];
    assert!(oom.rank.is_some_and(|r| r < 2) && oom.phase.is_some() && oom.oom_requested.is_some(), "{oom:?}");
    // Every trial's ranks start from nothing: processes of their own, the OOM's gone with it.
    for row in &rows {
        assert_eq!(row.baseline_allocated, 0, "{row:?}");
    }
    let ranks = |trial| {
        trace.iter().filter(|t| t.trial == trial && t.phase == Phase::ZeroGrad).filter_map(|t| t.rank).max()
    };
    assert_eq!((ranks(1), ranks(3)), (Some(1), Some(1)), "both ranks trained trials 1 and 3");
}

/// More ranks than the machine hosts are refused before the run writes anything, naming the
/// key; the estimate answers for them.
#[test]
fn a_world_the_machine_cannot_host_is_refused_before_anything_is_written() {
    let sb = Sandbox::new();
    let path = sb.spec("big.toml", &spec("big", 8, "[parallel]\nstrategy = \"ddp\"\nworld_size = 1000\n"));
    let out = common::oomlab().args(["run", "-q", "--out"]).arg(sb.out()).arg(&path).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("asks for 1000 ranks") && err.contains("parallel.world_size"), "{err}");
    assert!(!folder(&sb, "big").exists(), "nothing written");
    // The estimate answers for that world without ranks.
    let out = common::oomlab().args(["estimate", "--device", "cpu"]).arg(&path).assert().success();
    let said = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(said.contains("one rank of 1000, at its batch of 8"), "{said}");
    // The refusal names the strategy as written.
    let path = sb.spec("bigz.toml", &spec("bigz", 8, "[parallel]\nstrategy = \"zero\"\nworld_size = 1000\n"));
    let out = common::oomlab().args(["run", "-q", "--out"]).arg(sb.out()).arg(&path).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("[parallel] strategy = \"zero\"") && err.contains("asks for 1000 ranks"), "{err}");
    assert!(!folder(&sb, "bigz").exists(), "nothing written");
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid ...: the command may hold spaces, so read after its ')'.
        let ppid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1));
        if ppid.and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Kills `pid` (one of `run`'s processes, or theirs), and waits for `run`: it must fail within
/// 30 s of the kill. Its stderr.
fn kill_and_wait(run: &mut std::process::Child, pid: u32) -> String {
    use std::time::{Duration, Instant};
    // SAFETY: a plain kill(2) of a process this test's run started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let status = run.wait().unwrap();
    assert!(killed.elapsed() < Duration::from_secs(30), "the run took {:?} to stop", killed.elapsed());
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    err
}

/// Every one of `pids` has ended (and been reaped).
fn assert_gone(pids: impl IntoIterator<Item = u32>) {
    for pid in pids {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(state.is_empty(), "process {pid} is still there: {state}");
    }
}

/// A rank killed mid-trial ends the run within moments with an error naming it, the other rank
/// stopped: no process is left behind, and the folder holds the trials before it.
#[test]
fn a_killed_rank_stops_the_others_and_the_run_says_which() {
    use std::time::{Duration, Instant};
    let sb = Sandbox::new();
    let extra = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n\n[sweep]\nfield = \"training.steps\"\nvalues = [1, 100000]\n";
    let path = sb.spec("killed.toml", &spec("killed", 8, extra));
    let mut run = std::process::Command::new(common::bin())
        .args(["run", "-q", "--out"])
        .arg(sb.out())
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Trial 2's two ranks: trial 1 is in summary.csv by then.
    let ranks = loop {
        let summary = folder(&sb, "killed").join("summary.csv");
        let done = std::fs::read_to_string(&summary).map(|s| s.lines().count() >= 2).unwrap_or(false);
        let ranks = children_of(run.id());
        if done && ranks.len() == 2 {
            break ranks;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "trial 2's ranks never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    let err = kill_and_wait(&mut run, ranks[1]);
    assert!(
        err.contains("of 2 was killed before it reported its trial")
            && err.contains("the other ranks were stopped"),
        "{err}"
    );
    assert_gone(ranks);
    let rows: Vec<SummaryRow> = common::read_csv(&folder(&sb, "killed").join("summary.csv"));
    assert_eq!(rows.len(), 1, "trial 1 kept");
}

/// DDP's other knobs, estimated as measured on every rank: a static graph, and unused
/// parameters looked for with small buckets (several from the wrap, never rebuilt); both keep
/// the reducer's map of used parameters (two int32s a parameter) from the wrap on.
#[test]
fn static_graphs_and_the_search_for_unused_parameters_are_estimated_per_rank() {
    let sb = Sandbox::new();
    let variants = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n\n[[variant]]\nname = \"static\"\nparallel = { strategy = \"ddp\", world_size = 2, static_graph = true }\n\n[[variant]]\nname = \"unused\"\nparallel = { strategy = \"ddp\", world_size = 2, find_unused_parameters = true, bucket_cap_mb = 0.01 }\n";
    let (rows, trace) = run(&sb, "knobs", &spec("knobs", 8, variants));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let mine: Vec<&PhaseRecord> = trace.iter().filter(|t| t.trial == row.trial).collect();
        assert_eq!(mine.iter().filter_map(|t| t.rank).max(), Some(1));
        for t in mine {
            let predicted = t.predicted_peak.expect("a prediction beside each phase");
            let d = t.max_memory_allocated as i64 - predicted as i64;
            assert!(
                settled(t.step, d, 0),
                "{} rank {:?} step {} {}: measured {}, predicted {predicted}",
                row.variant,
                t.rank,
                t.step,
                t.phase,
                t.max_memory_allocated
            );
        }
    }
}

/// `torchrun --standalone --nproc-per-node N --no-python oomlab run ...`: PyTorch's own launcher
/// starts the ranks, each an `oomlab run` of the same spec, told its place by torchrun's
/// variables and meeting the others at torchrun's store.
fn torchrun(nproc: usize) -> std::process::Command {
    let mut cmd = std::process::Command::new("python3");
    cmd.args([
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        &nproc.to_string(),
        "--no-python",
    ])
    .arg(common::bin())
    .env("PYTHONPATH", common::torch_site());
    cmd
}

/// A world torchrun starts measures what the ranks oomlab starts itself measure: rank 0 writes
/// the one results folder, with every rank's phases equal to the self-started run's (exactly
/// from the third step; before, within the collective's tensors a gloo thread may still hold),
/// the same summary rows and losses; the other rank says that it follows rank 0.
#[test]
fn a_world_torchrun_starts_measures_what_oomlabs_own_ranks_do() {
    let sb = Sandbox::new();
    let extra = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n\n[sweep]\nfield = \"training.lr\"\nvalues = [0.01, 0.02]\n";
    let text = spec("launched", 8, extra);
    let (own_rows, own_trace) = run(&sb, "launched", &text);
    let path = sb.spec("launched.toml", &text);
    let out = sb.path().join("torchrun");
    let done = torchrun(2).args(["run", "--out"]).arg(&out).arg(&path).output().unwrap();
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{said}");
    assert!(said.contains("rank 1 of 2 (started by torchrun): rank 0 runs the spec"), "{said}");
    let devices: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert_eq!(devices.len(), 1, "one results folder");
    let dir = out.join(oomlab::device::slug(&oomlab::device::cpu_name())).join("launched");
    let rows: Vec<SummaryRow> = common::read_csv(&dir.join("summary.csv"));
    let trace: Vec<PhaseRecord> = common::read_csv(&dir.join("trace.csv"));
    assert_eq!(rows.len(), 2);
    for (a, b) in own_rows.iter().zip(&rows) {
        assert_eq!(
            (a.status, a.world_size, a.batch_size, a.final_loss, a.trace_rows),
            (b.status, b.world_size, b.batch_size, b.final_loss, b.trace_rows)
        );
    }
    assert_eq!(own_trace.len(), trace.len());
    let key = |t: &PhaseRecord| (t.trial, t.rank, t.step, t.micro, t.phase);
    for (a, b) in own_trace.iter().zip(&trace) {
        assert_eq!(key(a), key(b));
        for (x, y) in
            [(a.memory_allocated, b.memory_allocated), (a.max_memory_allocated, b.max_memory_allocated)]
        {
            let (lo, hi) = (x.min(y), x.max(y));
            assert!(settled(a.step, hi as i64, lo), "{:?}: self-started {x}, torchrun's {y}", key(a));
        }
    }
}

/// A spec a launched world cannot run is refused on every rank before anything is written,
/// saying what to change: a world size other than the one torchrun started.
#[test]
fn a_launched_world_refuses_a_spec_of_another_size_on_every_rank() {
    let sb = Sandbox::new();
    let path = sb.spec("three.toml", &spec("three", 8, "[parallel]\nstrategy = \"ddp\"\nworld_size = 3\n"));
    let out = sb.path().join("torchrun");
    let done = torchrun(2).args(["run", "-q", "--out"]).arg(&out).arg(&path).output().unwrap();
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    let why = "[parallel] world_size = 3, and torchrun started 2 ranks: set world_size = 2, or start 3 ranks";
    assert!(said.contains(why), "rank 0: {said}");
    assert!(said.contains("rank 0's run failed, and so this rank's"), "rank 1: {said}");
    assert!(!out.exists(), "nothing written");
}

/// The environment of process `pid`, as `NAME=value` strings.
fn environ(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

/// In a world torchrun started, a rank's trial process killed as it starts ends the run within
/// moments: its rank tells the others, rank 0 names it, and no process is left behind. Killed
/// before it can join the others, it is the hardest case: rank 0's process would wait at the
/// rendezvous for the collective's timeout (300 s) if its rank's agent did not say it died.
#[test]
fn a_killed_rank_in_a_launched_world_ends_the_run_and_is_named() {
    use std::time::{Duration, Instant};
    let sb = Sandbox::new();
    let extra = "[parallel]\nstrategy = \"ddp\"\nworld_size = 2\n\n[sweep]\nfield = \"training.steps\"\nvalues = [1, 100000]\n";
    let path = sb.spec("killed.toml", &spec("killed", 8, extra));
    let out = sb.path().join("torchrun");
    let mut run = torchrun(2)
        .args(["run", "-q", "--out"])
        .arg(&out)
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = out.join(oomlab::device::slug(&oomlab::device::cpu_name())).join("killed");
    let started = Instant::now();
    // Rank 1's `oomlab run` (a child of torchrun's agent) and its process of trial 2.
    let (agents, trial) = loop {
        let done =
            std::fs::read_to_string(dir.join("summary.csv")).map(|s| s.lines().count() >= 2).unwrap_or(false);
        let agents = children_of(run.id());
        let rank1 = agents.iter().find(|&&p| environ(p).iter().any(|v| v == "RANK=1"));
        if let Some(trial) = rank1.filter(|_| done).and_then(|&p| children_of(p).first().copied()) {
            break (agents, trial);
        }
        assert!(started.elapsed() < Duration::from_secs(120), "trial 2 never started on rank 1");
        std::thread::sleep(Duration::from_millis(50));
    };
    let workers: Vec<u32> = agents.iter().flat_map(|&a| children_of(a)).collect();
    let err = kill_and_wait(&mut run, trial);
    assert!(err.contains("rank 1 of 2 was killed before it reported its trial"), "{err}");
    assert_gone(agents.into_iter().chain(workers));
    let rows: Vec<SummaryRow> = common::read_csv(&dir.join("summary.csv"));
    assert_eq!(rows.len(), 1, "trial 1 kept");
}

/// Holds oomlab's run (`rows`, `ours`) to PyTorch's DDP of the same trials (`py`, `theirs`):
/// the same phases on the same ranks, each one's end and peak (and, with `predicted`, the
/// estimate's peak) equal (exactly from the third step; before, within one collective's
/// tensors), and the ranks' mean loss oomlab's final loss.
fn assert_as_pytorch(
    name: &str,
    rows: &[SummaryRow],
    ours: &[PhaseRecord],
    py: &[common::PySummary],
    theirs: &[PhaseRecord],
    predicted: bool,
    buffer_flats: &[u64],
) {
    assert_eq!(theirs.len(), ours.len(), "{name}: the same phases on the same ranks");
    // What PyTorch's DDP may still hold after the early steps: the flat tensors (one a dtype) of
    // the buffers' broadcast before each forward, which gloo's thread lets go of a moment after
    // the broadcast ended (oomlab waits for it). Seen once in a CI run: 256 bytes, the
    // BatchNorm's 64 statistics, at the end of a step-4 forward. Only those exact sizes pass.
    let lingering: Vec<i64> = (1..1u32 << buffer_flats.len())
        .map(|set| {
            (0..buffer_flats.len()).filter(|i| set & (1 << i) != 0).map(|i| buffer_flats[i] as i64).sum()
        })
        .collect();
    // A collective's tensors that gloo's thread may still hold early on: at most the wrap's flat
    // copy of this model's parameters and buffers (a ResNet-18's are 45 MB, not the MLP's 21 KB).
    let flat = rows.iter().map(|r| r.param_bytes).max().unwrap_or(0) + (64 << 10);
    let key = |t: &PhaseRecord| (t.trial, t.rank, t.step, t.micro, t.phase);
    let ours: HashMap<_, _> = ours.iter().map(|t| (key(t), t)).collect();
    for t in theirs {
        let o = ours[&key(t)];
        let mut pairs = vec![
            ("end", o.memory_allocated, t.memory_allocated),
            ("peak", o.max_memory_allocated, t.max_memory_allocated),
        ];
        if predicted {
            let p = o.predicted_peak.expect("a prediction beside each phase");
            pairs.push(("predicted peak", p, t.max_memory_allocated));
        }
        for (what, mine, other) in pairs {
            let d = mine as i64 - other as i64;
            assert!(
                settled_within(t.step, d.abs(), 0, flat) || (t.step > 2 && lingering.contains(&-d)),
                "{name} {:?}: oomlab's {what} {mine}, PyTorch's {other}",
                key(t)
            );
        }
    }
    for row in rows {
        let losses: Vec<f64> = py.iter().filter(|p| p.trial == row.trial).map(|p| p.final_loss).collect();
        assert_eq!(losses.len(), row.world_size.unwrap());
        let mean = losses.iter().sum::<f64>() / losses.len() as f64;
        let ours = row.final_loss.unwrap();
        assert!(
            ((mean - ours) / ours).abs() < 1e-6,
            "{name} trial {}: PyTorch's {mean}, oomlab's {ours}",
            row.trial
        );
    }
}

/// ZeRO stage 1 (`strategy = "zero"`) against PyTorch's own `ZeroRedundancyOptimizer` over a
/// DDP model, per rank: an MLP with AdamW and weight decay at world sizes 2 and 3 (uneven shards:
/// the largest weight alone on rank 0), and a world of 5 over a model of 4 parameter tensors in
/// the foreach implementation, where rank 4 owns nothing and steps over nothing; and fp16
/// autocast with the grad scaler over a fused local optimizer. Every rank's phases, end and
/// peak, and its own prediction equal PyTorch's (from the third step exactly; under fp16 the
/// bytes, not the prediction), and the ranks' mean loss is oomlab's.
#[test]
fn pytorchs_zero_redundancy_optimizer_holds_every_rank_as_oomlab_does() {
    let sb = Sandbox::new();
    let sweep =
        "[parallel]\nstrategy = \"zero\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [2, 3]\n";
    let adamw =
        spec("zero", 8, sweep).replace("optimizer = \"adam\"", "optimizer = \"adamw\"\nweight_decay = 0.01");
    let mlp = run(&sb, "zero", &adamw);
    let empty = spec("empty", 4, "[parallel]\nstrategy = \"zero\"\nworld_size = 5\n")
        .replace("depth = 2", "depth = 1")
        .replace("steps = 4", "steps = 4\noptimizer_impl = \"foreach\"");
    let empty = run(&sb, "empty", &empty);
    // fp16 autocast with the grad scaler over a fused local optimizer: ZeroRedundancyOptimizer
    // takes no grad scale into its step, so the scaler unscales every gradient first and skips
    // the whole step (the broadcasts with it) on an overflow.
    let amp = spec("amp", 8, "[parallel]\nstrategy = \"zero\"\nworld_size = 2\n")
        .replace("steps = 4", "steps = 4\namp = \"fp16\"\noptimizer_impl = \"fused\"");
    let amp = run(&sb, "amp", &amp);
    let summary = |name: &str| folder(&sb, name).join("summary.csv");
    let (s1, s2, s3) = (summary("zero"), summary("empty"), summary("amp"));
    let (r1, r2, r3) = (sb.path().join("zero.csv"), sb.path().join("empty.csv"), sb.path().join("amp.csv"));
    let refs = common::pytorch_cpu_memory_each(&[(&s1, &r1), (&s2, &r2), (&s3, &r3)]);
    // fp16 on a CPU: oneDNN's matmul scratch, which the estimate leaves out (and says so), differs
    // between CPUs; PyTorch's and oomlab's bytes are held equal there, not the estimate's.
    let runs =
        [("zero adamw", mlp, true), ("zero, a rank with no shard", empty, true), ("zero fp16", amp, false)];
    for ((name, (rows, ours), predicted), (py, theirs)) in runs.into_iter().zip(refs) {
        assert_as_pytorch(name, &rows, &ours, &py, &theirs, predicted, &[]);
    }
}

/// What ZeRO stage 1 saves, held to what it must be: on every rank, from the third step on,
/// DDP's phases minus ZeRO's are what the rank's optimizer state would have held for the other
/// ranks' shards; over the world those savings add up to `world_size - 1` copies of Adam's
/// whole state (two moments of every parameter and a 4-byte step counter each), and no rank
/// ever holds more than under DDP.
#[test]
fn zero_saves_every_rank_the_other_shards_optimizer_state() {
    let sb = Sandbox::new();
    let sweep = "\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [2, 3]\n";
    let (_, ddp) = run(&sb, "ddp", &spec("ddp", 8, &format!("[parallel]\nstrategy = \"ddp\"{sweep}")));
    let (rows, zero) = run(&sb, "zero", &spec("zero", 8, &format!("[parallel]\nstrategy = \"zero\"{sweep}")));
    // An MLP 16 -> 64 -> 64 -> 3 has 6 parameter tensors.
    let state = 2 * PARAM_BYTES + 6 * 4;
    let key = |t: &PhaseRecord| (t.trial, t.rank, t.step, t.micro, t.phase);
    let ddp: HashMap<_, _> = ddp.iter().map(|t| (key(t), t)).collect();
    for row in &rows {
        let world = row.world_size.unwrap();
        let mut saved = 0;
        for z in zero.iter().filter(|t| t.trial == row.trial && t.step >= 3) {
            let d = ddp[&key(z)];
            assert!(z.max_memory_allocated <= d.max_memory_allocated, "{:?}: ZeRO above DDP", key(z));
            if z.step == 3 && z.phase == Phase::ZeroGrad {
                saved += d.memory_allocated - z.memory_allocated;
            }
        }
        assert_eq!(saved, (world as u64 - 1) * state, "trial {} (world {world})", row.trial);
    }
}

/// Under ZeRO the ranks differ by their shards: `estimate` predicts the rank with the largest
/// (rank 0 here, which owns the 64 x 64 weight alone), says so, and `--blocks` names that rank
/// beside each event, not the whole world as for DDP.
#[test]
fn zeros_estimate_names_the_rank_it_replays() {
    let sb = Sandbox::new();
    let path = sb.spec("z.toml", &spec("z", 8, "[parallel]\nstrategy = \"zero\"\nworld_size = 3\n"));
    let blocks = sb.path().join("blocks.csv");
    let out = common::oomlab()
        .args(["estimate", "--device", "cpu", "--blocks"])
        .arg(&blocks)
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("zero: rank 0 of 3, the one with the largest shard"), "{said}");
    let mut csv = csv::Reader::from_path(&blocks).unwrap();
    let ranks = csv.headers().unwrap().iter().position(|h| h == "ranks").expect("a ranks column");
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert!(!rows.is_empty() && rows.iter().all(|r| &r[ranks] == "0"), "{:?}", rows.first());
}

/// A TorchScript module of the user's with a BatchNorm, whose statistics DDP broadcasts from
/// rank 0 before every forward.
const BATCHNORM_MODULE: &str = r#"
import sys, torch, torch.nn as nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))
torch.jit.save(torch.jit.script(net), f"{sys.argv[1]}/bn.pt")
"#;

/// A TorchScript module under DDP trains as PyTorch's DDP trains the same module (loaded with
/// `torch.jit.load`, wrapped in `DistributedDataParallel`): its buffers (`module.buffers()`)
/// broadcast at the wrap and before every forward, every rank's phases equal at world sizes 2
/// and 3, the ranks' mean loss oomlab's. The estimate does not replay a TorchScript module under
/// DDP yet, and says so.
#[test]
fn a_torchscript_module_trains_under_ddp_as_pytorchs_ddp_trains_it() {
    let sb = Sandbox::new();
    common::export_modules(&sb, BATCHNORM_MODULE);
    let sweep =
        "[parallel]\nstrategy = \"ddp\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [2, 3]\n";
    let text = spec("script", 8, sweep)
        .replace("hidden = 64\ndepth = 2", "kind = \"torchscript\"\npath = \"bn.pt\"");
    let (rows, ours) = run(&sb, "script", &text);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.status == Status::Ok), "{rows:?}");
    let reference = sb.path().join("script.csv");
    let (py, theirs) =
        common::pytorch_cpu_memory_each(&[(&folder(&sb, "script").join("summary.csv"), &reference)])
            .remove(0);
    // Its buffers: the BatchNorm's 32 means and 32 variances, and its batch count.
    assert_as_pytorch("torchscript", &rows, &ours, &py, &theirs, false, &[4 * 64, 8]);
    // The wrap broadcast the buffers with the parameters: one float32 flat buffer of the 707
    // parameters and the 64 statistics (without the buffers, the wrap's peak would be the
    // parameters' 2,828 bytes over the model's).
    for row in &rows {
        for rank in 0..row.world_size.unwrap() {
            let phase = |p: Phase| {
                ours.iter().find(|t| t.trial == row.trial && t.rank == Some(rank) && t.phase == p).unwrap()
            };
            let (model, wrap) = (phase(Phase::Model), phase(Phase::Wrap));
            let broadcast = 4 * (707 + 64);
            assert!(
                wrap.max_memory_allocated >= model.memory_allocated + broadcast,
                "trial {} rank {rank}: the wrap's peak {} over the model's {}",
                row.trial,
                wrap.max_memory_allocated,
                model.memory_allocated
            );
        }
    }
}

/// The same TorchScript module under ZeRO stage 1 at world size 2 trains as PyTorch's
/// ZeroRedundancyOptimizer over its DDP trains it: the shards partitioned over the module's own
/// parameters (`module.parameters()`), every rank's phases PyTorch's, the ranks' mean loss
/// oomlab's.
#[test]
fn a_torchscript_module_trains_under_zero_as_pytorchs_zero_trains_it() {
    let sb = Sandbox::new();
    common::export_modules(&sb, BATCHNORM_MODULE);
    let text = spec("zscript", 8, "[parallel]\nstrategy = \"zero\"\nworld_size = 2\n")
        .replace("hidden = 64\ndepth = 2", "kind = \"torchscript\"\npath = \"bn.pt\"");
    let (rows, ours) = run(&sb, "zscript", &text);
    assert!(rows.iter().all(|r| r.status == Status::Ok), "{rows:?}");
    let reference = sb.path().join("zscript.csv");
    let (py, theirs) =
        common::pytorch_cpu_memory_each(&[(&folder(&sb, "zscript").join("summary.csv"), &reference)])
            .remove(0);
    assert_as_pytorch("torchscript under zero", &rows, &ours, &py, &theirs, false, &[4 * 64, 8]);
}
