//! The CUDA estimate against what an H200 measured (`tests/fixtures/h200`): for every trial of
//! every configuration of `experiments/gpu` (activation-heavy MLPs in fp32, fp16 and bf16,
//! batches across CUDA's reduction threshold, checkpointing, a budget where reserved memory
//! decides, ResNet-50 at 224, a Transformer at sequence 512, cuDNN attention under bf16 and fp16
//! at four shapes), PyTorch's own `max_memory_allocated` and `max_memory_reserved`
//! (scripts/reference/train.py, eager, on the same allocator) within 0.5% of the prediction,
//! reserved within 2% or under the bound (which widens reserved memory where a GPU saw the cache
//! grow more than the replay: cuDNN's transient convolution workspaces in ResNet-50, 5.2%), the
//! same trials out of memory, and the bound never below what PyTorch measured. `amp_models`
//! (ResNet-18 and a Transformer at batch 1024, fp32 and bf16) and five of the suite's own specs
//! (optimizers, accumulation, inference without grad, depthwise separable convolutions, a
//! checkpointed ResNet-50) ride along: each trial whose rules a GPU confirmed held to 0.5%, the
//! rest (convolutions at shapes whose cuDNN workspaces no GPU measured) to the bound. cuDNN's
//! workspaces come from a table read off two of these histories (ResNet-50 at 224, ResNet-18 at
//! batch 1024): the tests below hold the table to them and the replay to them block for block.
use crate::common;

use std::collections::HashMap;
use std::path::Path;

use oomlab::device::DeviceChoice;
use oomlab::estimate::{self, GpuArch};
use oomlab::run::plan::{Overrides, Plan};
use oomlab::spec;

const FIXTURES: &str = "tests/fixtures/h200";

/// The configurations the issue holds to 0.5% allocated (experiments/gpu); any other fixture is
/// held to the bound alone where a rule it uses is unconfirmed.
const VALIDATED: [&str; 8] = [
    "attention_half",
    "mlp_activations",
    "mlp_batches",
    "mlp_checkpointing",
    "reserved_decides",
    "resnet50_224",
    "transformer_rows",
    "transformer_seq512",
];

/// Where allocated is held to more than 0.5%, and why: (experiment, tolerance).
///
/// `attention_half`: the estimate's events are PyTorch's, but among free blocks of equal size
/// the allocator takes the lowest device address, and the driver picks addresses (upward from
/// the first segment, then downward into holes); the replay assumes the order made. Replaying
/// PyTorch's own history (train.py --history, with addresses) through the allocator's rules
/// gives its peak within 66 KB breaking ties by address and 5.4 MB (0.50%) over in the order
/// made: the fp16 trial's whole gap (+0.503%).
const TOLERANCE: [(&str, f64); 1] = [("attention_half", 0.006)];

/// Trials of other fixtures held to 0.5% allocated as well: (experiment, variant).
/// ResNet-18's take cuDNN's workspaces from the table the same history gave
/// (src/estimate/cudnn_workspaces.csv); ResNet-50 at 224 (`resnet50_224`) too.
const VALIDATED_VARIANTS: [(&str, &str); 5] = [
    ("amp_models", "transformer_fp32"),
    ("amp_models", "transformer_bf16"),
    ("amp_models", "resnet18_fp32"),
    ("amp_models", "resnet18_bf16"),
    ("own_model", ""),
];

/// A fixture's spec: experiments/gpu, else the suite's experiments/.
fn spec_of(name: &str) -> spec::Spec {
    let gpu = Path::new("experiments/gpu").join(format!("{name}.toml"));
    let path = if gpu.is_file() { gpu } else { Path::new("experiments").join(format!("{name}.toml")) };
    spec::load(&path).unwrap()
}

/// One trial as both sides ran it: oomlab's summary row names its variant and swept value,
/// PyTorch's its status and peaks.
struct Measured {
    trial: usize,
    variant: String,
    value: Option<f64>,
    status: String,
    allocated: u64,
    reserved: u64,
}

fn rows(path: &Path) -> Vec<HashMap<String, String>> {
    let mut rd = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let h = rd.headers().unwrap().clone();
    rd.records()
        .map(|r| h.iter().zip(r.unwrap().iter()).map(|(k, v)| (k.to_string(), v.to_string())).collect())
        .collect()
}

fn measured(experiment: &str) -> Vec<Measured> {
    let dir = Path::new(FIXTURES).join(experiment);
    let ours = rows(&dir.join("summary.csv"));
    let theirs = rows(&dir.join("pytorch-summary.csv"));
    theirs
        .iter()
        .map(|p| {
            let trial: usize = p["trial"].parse().unwrap();
            let o =
                ours.iter().find(|o| o["trial"] == p["trial"]).expect("the same trial in oomlab's summary");
            Measured {
                trial,
                variant: o["variant"].clone(),
                value: o["value"].parse().ok(),
                status: p["status"].clone(),
                allocated: p["max_memory_allocated"].parse().unwrap(),
                reserved: p["max_memory_reserved"].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn every_validation_trial_within_half_a_percent_allocated_and_two_percent_reserved() {
    let _in_process = common::in_process();
    let mut experiments: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    experiments.sort();
    assert!(
        experiments.len() >= 6,
        "the fixtures hold experiments/gpu's six configurations: {experiments:?}"
    );
    let mut failures = Vec::new();
    for name in &experiments {
        let spec = spec_of(name);
        let plan = Plan::new(spec, Overrides { device: Some(DeviceChoice::Cuda(0)), budget: None }, true);
        let options = plan.estimate_options(GpuArch::Hopper, 1);
        for m in measured(name) {
            let config =
                plan.spec.trial_config(&m.variant, m.value).expect("the fixture's trial is the spec's");
            let shape = estimate::data_shape(&config.data).unwrap();
            let p = estimate::predict_with(&config, shape, &options).unwrap();
            let budget_oom = plan.budget.is_some_and(|b| !p.fits(b));
            let what = format!("{name} trial {} ({} {:?})", m.trial, m.variant, m.value);
            if m.status != "ok" {
                if !budget_oom {
                    failures.push(format!("{what}: PyTorch ran out of memory, the estimate predicts a fit"));
                }
                continue;
            }
            if budget_oom {
                failures.push(format!("{what}: PyTorch fitted, the estimate predicts out of memory"));
            }
            let a = estimate::relative_error(p.peak_allocated(), m.allocated);
            let r = estimate::relative_error(p.peak_reserved(), m.reserved);
            eprintln!(
                "{what}: allocated {} predicted, {} measured ({:+.3}%); reserved {} / {} ({:+.3}%)",
                p.peak_allocated(),
                m.allocated,
                100.0 * a,
                p.peak_reserved(),
                m.reserved,
                100.0 * r
            );
            let held = VALIDATED.contains(&name.as_str())
                || VALIDATED_VARIANTS.contains(&(name.as_str(), m.variant.as_str()))
                || p.bound.margin == 0.0;
            let tolerance = TOLERANCE.iter().find(|t| t.0 == name).map_or(0.005, |t| t.1);
            if held && a.abs() > tolerance {
                failures.push(format!(
                    "{what}: allocated {} predicted, {} measured ({:+.3}%)",
                    p.peak_allocated(),
                    m.allocated,
                    100.0 * a
                ));
            }
            // Reserved within 2%, or, where the cache grew in ways the replay does not have, under
            // the bound that says so.
            if r.abs() > 0.02 && p.bound.reserved < m.reserved {
                failures.push(format!(
                    "{what}: reserved {} predicted ({:+.3}%), bound {}, {} measured",
                    p.peak_reserved(),
                    100.0 * r,
                    p.bound.reserved,
                    m.reserved
                ));
            }
            if p.bound.allocated < m.allocated {
                failures.push(format!(
                    "{what}: the bound {} is below the measured {}",
                    p.bound.allocated, m.allocated
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Your own model on CUDA: the hand-written ViT of experiments/own_model.toml (TorchScript,
/// recorded on this CPU) at batch 1024, its estimate against PyTorch's own run of the same file
/// on the H200 (`own_model/pytorch-phases.csv`), phase by phase: allocated and reserved, at
/// each phase's end and peak, to the byte. It needs CUDA's softmax backward temporary, layer
/// norm's partial sums past 64 Ki rows (66,560 here) and the engine's gradient adds inside a
/// norm's span; without any of them it parts.
#[test]
fn the_scripted_vits_cuda_estimate_is_pytorchs_at_every_phase() {
    let _in_process = common::in_process();
    let plan = Plan::new(
        spec_of("own_model"),
        Overrides { device: Some(DeviceChoice::Cuda(0)), budget: None },
        true,
    );
    let options = plan.estimate_options(GpuArch::Hopper, 1);
    let config = plan.spec.trial_config("", Some(1024.0)).unwrap();
    let p = estimate::predict_with(&config, estimate::data_shape(&config.data).unwrap(), &options).unwrap();
    let (a0, r0) = (p.baseline_allocated, p.baseline_reserved);
    let measured = rows(&Path::new(FIXTURES).join("own_model/pytorch-phases.csv"));
    assert_eq!(p.phases.len(), measured.len(), "a phase for each of PyTorch's");
    for (e, m) in p.phases.iter().zip(&measured) {
        let n = |k: &str| m[k].parse::<u64>().unwrap();
        assert_eq!(
            (a0 + e.allocated_end, a0 + e.peak, r0 + e.reserved_end, r0 + e.reserved_peak),
            (
                n("memory_allocated"),
                n("max_memory_allocated"),
                n("memory_reserved"),
                n("max_memory_reserved")
            ),
            "step {} {}",
            m["step"],
            m["phase"]
        );
    }
}

/// compare.py's block report: `spec`'s every predicted allocation, free and segment on an H200
/// (`estimate --blocks`, written in `sb`) against PyTorch's `history`.
fn compare_blocks(spec: &Path, history: &Path, sb: &common::Sandbox) -> String {
    let blocks = sb.path().join("blocks.csv");
    let est = std::process::Command::new(common::bin())
        .arg("estimate")
        .arg(spec)
        .args(["--device", "cuda", "--gpu", "h200", "--brief", "--blocks"])
        .arg(&blocks)
        .output()
        .unwrap();
    assert!(est.status.success(), "{}", String::from_utf8_lossy(&est.stderr));
    common::compare_blocks_py(&blocks, history)
}

/// The bf16 Transformer of `amp_models` (trial 4: 4 layers of 256, 4 heads, batch 1024 over 64
/// tokens) block by block: the estimate's sequence (`estimate --blocks`, CUDA, an H200) against
/// PyTorch's own history from the H200 (`pytorch-history.csv`), aligned by compare.py. Every
/// allocation and free of step 1's forward (cuDNN attention, autocast's casts, the loss) and of
/// its backward through the encoder is PyTorch's; the first to part is the embedding's backward
/// (CUDA sorts the token ids with cub's scratch buffers, whose sizes depend on the tokens: not
/// modelled, and after the peak).
#[test]
fn the_bf16_transformers_blocks_are_pytorchs_up_to_the_embeddings_backward() {
    let sb = common::Sandbox::new();
    let spec = sb.spec(
        "transformer_bf16.toml",
        "[experiment]\nname = \"transformer_bf16\"\n[model]\nkind = \"transformer\"\nd_model = 256\nnhead = 4\n\
         num_layers = 4\ndim_feedforward = 1024\n[data]\nkind = \"tokens\"\nsamples = 1024\nseq_len = 64\n\
         vocab = 1000\nclasses = 10\nseed = 0\n[training]\noptimizer = \"adam\"\nlr = 0.001\nsteps = 2\n\
         batch_size = 1024\namp = \"bf16\"\n",
    );
    // Trial 4's events, numbered as the estimate's one trial.
    let history =
        std::fs::read_to_string(Path::new(FIXTURES).join("amp_models/pytorch-history.csv")).unwrap();
    let mut lines = history.lines();
    let mut trial: Vec<String> = vec![lines.next().unwrap().to_string()];
    trial.extend(lines.filter_map(|l| l.strip_prefix("4,").map(|rest| format!("1,{rest}"))));
    assert!(trial.len() > 1000, "trial 4's history is in the fixture");
    let history = sb.path().join("history.csv");
    std::fs::write(&history, trial.join("\n") + "\n").unwrap();

    let report = compare_blocks(&spec, &history, &sb);
    let line = report.lines().find(|l| l.starts_with("- trial 1:")).unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains("first parts in backward, step 1.0")
            && line.contains("estimate alloc 1,024,000 B")
            && line.contains("reference alloc 524,288 B"),
        "the first difference is the embedding's backward (its weight's gradient against the sort's \
         index buffers): {line}"
    );
}

/// A float32 encoder at 81,920 tokens a batch (`transformer_rows` trial 1, heads of 32) block
/// by block against PyTorch's history on the H200 (trial 1's first step, `pytorch-history.csv`):
/// memory-efficient attention's k32 kernel and its workspace, each layer norm backward's
/// partial sums and their reductions, all PyTorch's events; the first to part is the
/// embedding's backward (cub's sort scratch, as in `amp_models`), after them all.
#[test]
fn an_encoder_past_64ki_tokens_is_pytorchs_block_for_block_up_to_the_embeddings_backward() {
    let history = Path::new(FIXTURES).join("transformer_rows/pytorch-history.csv");
    let sb = common::Sandbox::new();
    let report = compare_blocks(Path::new("experiments/gpu/transformer_rows.toml"), &history, &sb);
    let line = report.lines().find(|l| l.starts_with("- trial 1:")).unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains("first parts in backward, step 1.0")
            && line.contains("estimate alloc 512,000 B")
            && line.contains("reference alloc 655,360 B"),
        "the first difference is the embedding's backward: {line}"
    );
}

/// The allocator's rules against PyTorch's own events: `attention_half`'s history (with device
/// addresses and the cache each trial started from) replayed by
/// scripts/reference/replay_history.py, the rules of src/estimate/caching.rs. Breaking ties
/// among equal free blocks by address, as the allocator does, gives PyTorch's reserved peak to
/// the byte and its allocated peak within what the loop frees between phases (not in this
/// history: at most 0.02%); in the order the segments were made, as the estimate must assume, no
/// lower. The gap `TOLERANCE` allows is that assumption's.
#[test]
fn pytorchs_own_events_give_its_peaks_when_ties_follow_device_addresses() {
    let dir = Path::new(FIXTURES).join("attention_half");
    let out = std::process::Command::new("python3")
        .arg("scripts/reference/replay_history.py")
        .arg(dir.join("pytorch-history.csv"))
        .arg("--phases")
        .arg(dir.join("pytorch-phases.csv"))
        .output()
        .expect("python3 runs replay_history.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 10, "five trials, two orders each: {text}");
    let num = |s: &str| s.parse::<u64>().unwrap();
    for pair in rows.chunks(2) {
        let (address, made) = (&pair[0], &pair[1]);
        assert_eq!((address[1], made[1]), ("address", "made"), "{text}");
        let (measured, measured_reserved) = (num(address[4]), num(address[5]));
        let a = estimate::relative_error(num(address[2]), measured);
        assert!(
            (0.0..0.0002).contains(&a),
            "trial {}: by address {a:+.5} off PyTorch's peak\n{text}",
            address[0]
        );
        assert_eq!(num(address[3]), measured_reserved, "trial {}: reserved by address\n{text}", address[0]);
        assert!(num(made[2]) >= num(address[2]), "trial {}: the order made\n{text}", made[0]);
    }
}

/// Reserved memory's gaps named by their segment: `amp_models` as a whole (`estimate --blocks`,
/// an H200) against PyTorch's history of the same four trials, through compare.py. The bf16
/// Transformer makes PyTorch's segments, every one; so does the fp32 ResNet-18, with cuDNN's
/// workspaces from the table (src/estimate/cudnn_workspaces.csv: each convolution's forward,
/// data and filter workspace at the moment PyTorch takes it). The bf16 ResNet-18 makes
/// PyTorch's every allocation and free, and its segments part in the backward: a 67 MB
/// workspace that PyTorch fits in a free block and the replay in a new segment. That is the
/// allocator's address tie-break (the estimate assumes segments in the order made): PyTorch's
/// own events replayed in that order (scripts/reference/replay_history.py) reserve exactly the
/// estimate's bytes.
#[test]
fn a_reserved_gap_is_named_by_the_first_segment_where_the_two_part() {
    let history = Path::new(FIXTURES).join("amp_models/pytorch-history.csv");
    let report = compare_blocks(Path::new("experiments/amp_models.toml"), &history, &common::Sandbox::new());
    // Each trial's line, then its segments' line.
    let lines = |trial: usize| -> (&str, &str) {
        let mut lines = report.lines().skip_while(|l| !l.starts_with(&format!("- trial {trial}:")));
        let events = lines.next().unwrap_or_else(|| panic!("{report}"));
        (events, lines.next().filter(|l| l.starts_with("  - segments")).unwrap_or_else(|| panic!("{report}")))
    };
    assert!(lines(4).1.starts_with("  - segments: the same "), "{}", lines(4).1);
    let (events, segments) = lines(1);
    assert!(
        events.contains("the same") && segments.starts_with("  - segments: the same 42 "),
        "ResNet-18 in fp32 is PyTorch's block for block and segment for segment:\n{events}\n{segments}"
    );
    let (events, segments) = lines(2);
    assert!(
        events.contains("the same")
            && segments.contains("estimate 69,206,016 B in backward, step 1.0")
            && segments.contains("reference 134,217,728 B in backward, step 1.0"),
        "bf16: the same events, segments parting at a workspace PyTorch placed in a free block:\n{events}\n{segments}"
    );
    let out = std::process::Command::new("python3")
        .arg("scripts/reference/replay_history.py")
        .arg(&history)
        .args(["--trial", "2"])
        .output()
        .expect("python3 runs replay_history.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let made = text.lines().find(|l| l.starts_with("2,made,")).unwrap_or_else(|| panic!("{text}"));
    let made_reserved: u64 = made.split(',').nth(3).unwrap().parse().unwrap();
    let _in_process = common::in_process();
    let spec = spec_of("amp_models");
    let plan = Plan::new(spec, Overrides { device: Some(DeviceChoice::Cuda(0)), budget: None }, true);
    let config = plan.spec.trial_config("resnet18_bf16", Some(1024.0)).unwrap();
    let shape = estimate::data_shape(&config.data).unwrap();
    let p = estimate::predict_with(&config, shape, &plan.estimate_options(GpuArch::Hopper, 1)).unwrap();
    assert_eq!(
        p.peak_reserved(),
        made_reserved,
        "PyTorch's events in the order made reserve the estimate's\n{text}"
    );
}

/// ResNet-50 at 224 x 224 and batch 32 (`resnet50_224`) against PyTorch's history on the H200
/// (`resnet50_224/pytorch-history.csv`): with cuDNN's workspaces from the table, every
/// allocation and free of both steps is PyTorch's, and so is every segment (reserved memory to
/// the byte). Without them it parts at the first convolution's forward workspace.
#[test]
fn resnet50_at_224_is_pytorchs_block_for_block_and_segment_for_segment() {
    let history = Path::new(FIXTURES).join("resnet50_224/pytorch-history.csv");
    let sb = common::Sandbox::new();
    let report = compare_blocks(Path::new("experiments/gpu/resnet50_224.toml"), &history, &sb);
    assert!(report.contains("- trial 1: the same 3988 events in 11 phases"), "{report}");
    assert!(report.contains("  - segments: the same 121 (3,625,975,808 B)"), "{report}");
}

/// The shipped table of cuDNN's workspaces (src/estimate/cudnn_workspaces.csv) is exactly what
/// scripts/reference/cudnn_workspaces.py reads off the two fixture histories it names, through
/// the estimate's own marks: no row edited by hand, none left over, none missing, and every
/// call of those runs measured once at one size.
#[test]
fn the_cudnn_table_is_what_the_fixture_histories_give() {
    let sb = common::Sandbox::new();
    let mut read = Vec::new();
    for (spec, fixture) in
        [("experiments/gpu/resnet50_224.toml", "resnet50_224"), ("experiments/amp_models.toml", "amp_models")]
    {
        let blocks = sb.path().join(format!("{fixture}.blocks.csv"));
        let est = std::process::Command::new(common::bin())
            .args(["estimate", spec, "--device", "cuda", "--gpu", "h200", "--brief", "--blocks"])
            .arg(&blocks)
            .output()
            .unwrap();
        assert!(est.status.success(), "{}", String::from_utf8_lossy(&est.stderr));
        let out = std::process::Command::new("python3")
            .arg("scripts/reference/cudnn_workspaces.py")
            .arg("--blocks")
            .arg(&blocks)
            .arg("--history")
            .arg(Path::new(FIXTURES).join(fixture).join("pytorch-history.csv"))
            .args(["--gpu", "h200", "--source", fixture])
            .output()
            .expect("python3 runs cudnn_workspaces.py");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "every phase read, every call at one size:\n{stderr}"
        );
        let text = String::from_utf8(out.stdout).unwrap();
        read.extend(text.lines().skip(1).map(|l| l.rsplit_once(',').unwrap().0.to_string()));
    }
    let shipped: Vec<String> = std::fs::read_to_string("crates/estimate/src/estimate/cudnn_workspaces.csv")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.rsplit_once(',').unwrap().0.to_string())
        .collect();
    let mut shipped = shipped;
    read.sort();
    shipped.sort();
    shipped.windows(2).for_each(|w| assert!(w[0] < w[1], "each call once: {}", w[0]));
    assert!(read.len() > 100, "both runs' convolutions: {}", read.len());
    assert_eq!(read, shipped);
}

/// The CNN's note says how many of its distinct cuDNN calls the table holds: all of ResNet-50's
/// at the measured shape, none at a batch no GPU measured (there the estimate is a lower bound).
#[test]
fn the_estimate_says_how_many_cudnn_calls_a_gpu_measured() {
    let _in_process = common::in_process();
    let spec = spec_of("resnet50_224");
    let plan = Plan::new(spec, Overrides { device: Some(DeviceChoice::Cuda(0)), budget: None }, true);
    let options = plan.estimate_options(GpuArch::Hopper, 1);
    let note = |batch: usize| {
        let mut config = plan.spec.base.clone();
        config.training.batch_size = batch;
        let shape = estimate::data_shape(&config.data).unwrap();
        let p = estimate::predict_with(&config, shape, &options).unwrap();
        p.notes.into_iter().find(|n| n.contains("cuDNN calls")).unwrap_or_default()
    };
    assert!(note(32).contains("for each of its 68 cuDNN calls"), "{}", note(32));
    assert!(note(16).contains("none of its 68 cuDNN calls"), "{}", note(16));
}

/// Your own CNN as TorchScript on CUDA: torchvision's ResNet-50 scripted, its step recorded on
/// this CPU at small batches (oneDNN's scratch left out, as CUDA has none), each convolution's
/// cuDNN calls read off the ops' arguments and given the table's workspaces, replayed at batch
/// 32 on 224 x 224: PyTorch's `max_memory_allocated` and `max_memory_reserved` on the H200
/// (`resnet50_224/pytorch-summary.csv`), to the byte. (The table was read from that run. Which
/// batches of the ladder fit is this CPU's oneDNN's to decide, so it is not asserted: on a
/// 2-core AMD EPYC they are 4, 6 and 8, where they were 16, 24 and 32 with the scratch.)
#[test]
fn a_scripted_resnet50_at_224_gets_the_h200s_peaks() {
    // Minutes of recording a ResNet-50 at 224 x 224: in a process of its own, beside the others.
    common::in_own_process(|| {
        let sb = common::Sandbox::new();
        common::export_modules(
            &sb,
            "import sys, torch, torchvision\ntorch.manual_seed(0)\n\
             torch.jit.save(torch.jit.script(torchvision.models.resnet50(num_classes=10)), f\"{sys.argv[1]}/resnet50.pt\")\n",
        );
        let text = std::fs::read_to_string("experiments/gpu/resnet50_224.toml")
            .unwrap()
            .replace("kind = \"cnn\"\narch = \"resnet50\"", "kind = \"torchscript\"\npath = \"resnet50.pt\"");
        assert!(text.contains("resnet50.pt"), "the fixture's spec names its model as this test reads it");
        let _in_process = common::in_process();
        let config = spec::load(&sb.spec("resnet50_224.toml", &text)).unwrap().base;
        let options = estimate::Options::cuda(GpuArch::Hopper, [&config]);
        let p =
            estimate::predict_with(&config, estimate::data_shape(&config.data).unwrap(), &options).unwrap();
        let measured = &measured("resnet50_224")[0];
        assert_eq!((p.peak_allocated(), p.peak_reserved()), (measured.allocated, measured.reserved));
        assert!(p.notes.iter().any(|n| n.contains("each of its 68 cuDNN calls")), "{:?}", p.notes);
    })
}
