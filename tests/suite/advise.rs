//! `oomlab advise` end to end on the CPU: its refusals, sweeps, other model kinds, and the claim
//! that matters (its files and calibration cache are in `advise_calibrated.rs`): every option predicted to fit trains and every one predicted not to runs
//! out of memory, for randomized configurations, trained for real under the budget.
use crate::common;

use std::path::Path;

use common::advise::{advise_json, spec, stderr_of};
use common::rng::Rng;
use common::{tiny_spec, Sandbox};
use serde_json::Value;

#[test]
fn bad_requests_say_what_to_do() {
    let sb = Sandbox::new();
    let spec = spec(&sb, "150KiB");
    let cases: [(&[&str], &str); 5] = [
        (&["--variant", "fast"], "has no [[variant]]"),
        (&["--at", "3"], "has no [sweep]"),
        (&["--calibration", "nope.json"], "--calibration nope.json"),
        (&["--budget", "0"], "--budget"),
        (&["--no-calibrate", "--recalibrate"], "cannot be used with"),
    ];
    for (args, want) in cases {
        let mut all = vec![spec.as_str(), "--no-write"];
        all.extend_from_slice(args);
        let err = stderr_of(&sb, &all);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A calibration file is input: one from another kind of device, or with a time that no
    // machine measures, is refused naming the key (a committed CPU calibration, edited).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cal = std::fs::read_to_string(root.join("results/cpu-amd-epyc/depth_sweep/advice/calibration.json"))
        .unwrap();
    let cal: Value = serde_json::from_str(&cal).unwrap();
    let edited = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut c = cal.clone();
        edit(&mut c);
        let path = sb.path().join(name);
        std::fs::write(&path, c.to_string()).unwrap();
        path.display().to_string()
    };
    let negative = edited("neg.json", &|c| c["passes"][0]["alpha"] = (-1.0).into());
    let gpu = edited("gpu.json", &|c| c["device"] = "NVIDIA H200".into());
    let zero = edited("zero.json", &|c| c["updates"][0]["params"] = 0.into());
    for (file, want) in [
        (&negative, "passes[0].alpha is -1"),
        (&gpu, "made on NVIDIA H200 (`device`), which is a GPU"),
        (&zero, "updates[0].params is 0"),
    ] {
        let err = stderr_of(&sb, &[spec.as_str(), "--no-write", "--calibration", file]);
        assert!(err.contains(want), "{file}: {err}");
    }
    let cuda = stderr_of(
        &sb,
        &[spec.as_str(), "--no-write", "--device", "cuda", "--calibration", &edited("cpu.json", &|_| {})],
    );
    assert!(cuda.contains("its times do not rank options for a CUDA device"), "{cuda}");

    let none = sb.spec("none.toml", &tiny_spec("none", "hidden = 8\ndepth = 1", None, ""));
    let err = stderr_of(&sb, &[none.to_str().unwrap(), "--no-write"]);
    assert!(err.contains("needs a budget") && err.contains("--budget"), "{err}");
}

#[test]
fn a_sweep_is_advised_at_its_first_failing_value() {
    let sb = Sandbox::new();
    let sweep = "[sweep]\nfield = \"model.depth\"\nsearch = { start = 1, factor = 2, max = 64 }\n";
    let text = tiny_spec("deep", "hidden = 64", Some(300 << 10), sweep)
        .replace("optimizer = \"sgd\"", "optimizer = \"adam\"");
    let spec = sb.spec("deep.toml", &text).display().to_string();
    let a = advise_json(&sb, &[&spec, "--no-write", "--no-calibrate"]);
    let depth = a["point"]["value"].as_f64().unwrap();
    assert_eq!(a["written"]["candidate"]["config"]["model"]["depth"].as_f64(), Some(depth));
    assert_eq!(a["written"]["verdict"], "oom");
    let below =
        advise_json(&sb, &[&spec, "--no-write", "--no-calibrate", "--at", &(depth - 1.0).to_string()]);
    assert_eq!(below["written"]["verdict"], "fits", "depth {} should fit", depth - 1.0);
    assert_eq!(below["smallest"], Value::Null, "a spec that fits needs no change");
    assert_eq!(a["timing"]["source"], "none");
    // Without step times, nothing is said to be left out for its time: the lesson's depth
    // sweep on an H100, where most options that fit add a change to one that fits.
    let lesson = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/depth_sweep.toml");
    let text = common::advise::oomlab(&sb)
        .arg("advise")
        .arg(&lesson)
        .args(["--device", "cuda", "--gpu", "h100", "--no-write", "--no-calibrate", "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("with no step time to weigh it: not listed") && !text.contains("% of the time"),
        "{text}"
    );
}

/// A training's real length (thousands of steps) is past what the estimate replays; advise
/// evaluates every option at the step its peak is reached by, says so, and gets the peak that
/// a 2-step estimate gets.
#[test]
fn a_real_trainings_step_count_is_advised_at_its_steady_state() {
    let sb = Sandbox::new();
    let text = tiny_spec("long", "hidden = 64\ndepth = 2", Some(64 << 20), "")
        .replace("optimizer = \"sgd\"", "optimizer = \"adam\"")
        .replace("steps = 1\n", "steps = 25000\n");
    assert!(text.contains("steps = 25000"), "{text}");
    let path = sb.spec("long.toml", &text);
    let spec = path.display().to_string();
    let a = advise_json(&sb, &[&spec, "--no-write", "--no-calibrate"]);
    assert_eq!(a["written"]["error"], Value::Null, "{}", a["written"]);
    assert_eq!(a["written"]["verdict"], "fits", "{}", a["written"]);
    let two = oomlab::spec::parse(&text.replace("steps = 25000", "steps = 2"), &path).unwrap();
    let peak = {
        let _in_process = common::in_process();
        oomlab::estimate::predict(&two.base).unwrap().peak
    };
    assert_eq!(a["written"]["peak"].as_u64(), Some(peak));
    let notes = a["notes"].to_string();
    assert!(notes.contains("evaluated over 2 steps, not the spec's 25000"), "{notes}");
}

/// A calibration made for another spec (the committed depth sweep's: Adam and SGD) has no run
/// for an AdamW update: the options it cannot time are counted and what is missing named.
#[test]
fn a_calibration_without_an_options_runs_says_what_it_lacks() {
    let sb = Sandbox::new();
    let text = tiny_spec("adamw", "hidden = 64\ndepth = 2", Some(64 << 20), "")
        .replace("optimizer = \"sgd\"", "optimizer = \"adamw\"");
    let spec = sb.spec("adamw.toml", &text).display().to_string();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cal = root.join("results/cpu-amd-epyc/depth_sweep/advice/calibration.json");
    let a = advise_json(&sb, &[&spec, "--no-write", "--calibration", cal.to_str().unwrap()]);
    let notes = a["notes"].to_string();
    assert!(
        notes.contains("the calibration has no run for") && notes.contains("the adamw update"),
        "{notes}"
    );
    assert_eq!(a["written"]["step_seconds"], Value::Null);
    let options = a["options"].as_array().unwrap();
    let untimed = options.iter().filter(|o| o["step_seconds"].is_null() && o["error"].is_null()).count() + 1;
    let weighed = options.len() + 1;
    assert!(notes.contains(&format!("{untimed} of the {weighed} configurations weighed")), "{notes}");
}

/// A random small configuration and a budget between 55% and 95% of its
/// predicted peak, so that the spec as written runs out of memory and some options fit.
fn random_spec(rng: &mut Rng, i: usize) -> (String, u64) {
    let depth = 1 + rng.below(4);
    let hidden = rng.pick(&[16, 48, 96, 160]);
    let batch = rng.pick(&[12, 16, 24, 32, 40]);
    let optimizer = rng.pick(&["adam", "adamw", "sgd"]);
    let momentum = if optimizer == "sgd" { rng.pick(&["", "momentum = 0.9\n"]) } else { "" };
    let amp = rng.pick(&["off", "off", "fp16", "bf16"]);
    let checkpoint = rng.pick(&["\"none\"", "\"none\"", "1"]);
    let text = format!(
        "[experiment]\nname = \"r{i}\"\n[model]\nhidden = {hidden}\ndepth = {depth}\n[data]\nsamples = 64\nfeatures = {}\nclasses = {}\n\
         [training]\noptimizer = \"{optimizer}\"\n{momentum}lr = 0.01\nbatch_size = {batch}\nsteps = 2\namp = \"{amp}\"\ncheckpoint = {checkpoint}\n\
         [run]\ndevice = \"cpu\"\n",
        8 + rng.below(40),
        2 + rng.below(6)
    );
    let spec = oomlab::spec::parse(&text, Path::new("r.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let peak = {
        let _in_process = common::in_process();
        oomlab::estimate::predict(&spec.base).unwrap().peak
    };
    let budget = (peak as f64 * (0.55 + 0.4 * rng.unit())) as u64;
    (text, budget)
}

#[test]
fn every_verified_option_does_as_predicted_for_random_configurations() {
    let sb = Sandbox::new();
    let mut rng = Rng(0x5eed_ad71_5e00_0017);
    let (mut fits, mut ooms) = (0, 0);
    for i in 0..12 {
        let (text, budget) = random_spec(&mut rng, i);
        let spec = sb.spec(&format!("r{i}.toml"), &text).display().to_string();
        let budget = format!("{budget}B");
        let a =
            advise_json(&sb, &[&spec, "--budget", &budget, "--verify", "4", "--no-calibrate", "--no-write"]);
        for v in a["verified"].as_array().unwrap() {
            let what = format!("{text}budget {budget}: {v}");
            match v["predicted"].as_str().unwrap() {
                "fits" => {
                    assert_eq!(v["status"], "ok", "{what}");
                    fits += 1;
                }
                "oom" => {
                    assert_eq!(v["status"], "oom", "{what}");
                    ooms += 1;
                }
                other => panic!("verified a {other} option: {what}"),
            }
            assert_eq!(v["agrees"], true, "{what}");
            // Exact on the CPU, but for the scratch buffer of products in oneDNN (bf16's, and
            // fp16's on CPUs with AVX512-FP16).
            let describe = v["describe"].as_str().unwrap();
            let runs = |amp: &str| {
                describe.contains(&format!("amp {amp}"))
                    || (text.contains(&format!("amp = \"{amp}\"")) && !describe.contains("amp "))
            };
            let fp16 = oomlab::spec::Amp::Fp16 { scaler: Default::default() };
            let onednn = runs("bf16") || (runs("fp16") && oomlab::estimate::onednn::lowp_matmul(&fp16));
            if v["status"] == "ok" && !onednn {
                assert_eq!(v["measured_peak"], v["predicted_peak"], "{what}");
            }
        }
    }
    assert!(fits >= 15 && ooms >= 30, "too few verified: {fits} fit, {ooms} ran out");
}

/// A CNN and a Transformer under a budget their spec runs out of: the options `--verify` trains
/// (the two listed that fit, the two nearest misses) do as predicted, the peaks to the byte; the
/// step times are not calibrated for them, and the advice says so.
#[test]
fn other_model_kinds_are_advised_and_verified() {
    let sb = Sandbox::new();
    let specs = [
        ("cnn", "kind = \"cnn\"\narch = \"resnet18\"", "channels = 3\nsize = 16", 24),
        (
            "tf",
            "kind = \"transformer\"\nd_model = 32\nnhead = 4\nnum_layers = 3\ndim_feedforward = 64",
            "seq_len = 16\nvocab = 64",
            32,
        ),
    ];
    for (name, model, data, batch) in specs {
        let text = format!(
            "[experiment]\nname = \"{name}\"\n[model]\n{model}\n[data]\n{data}\nsamples = 64\nclasses = 4\n\
             [training]\noptimizer = \"adam\"\nbatch_size = {batch}\nsteps = 2\n[run]\ndevice = \"cpu\"\n"
        );
        let spec = oomlab::spec::parse(&text, Path::new("k.toml")).unwrap();
        let peak = {
            let _in_process = common::in_process();
            oomlab::estimate::predict(&spec.base).unwrap().peak
        };
        let budget = (peak as f64 * 0.97) as u64;
        let path = sb.spec(&format!("{name}.toml"), &text).display().to_string();
        let a = advise_json(&sb, &[&path, "--budget", &format!("{budget}B"), "--verify", "2", "--no-write"]);
        assert_eq!(a["written"]["verdict"], "oom", "{name}");
        assert_eq!(a["timing"]["source"], "none", "{name}: {}", a["timing"]);
        assert!(a["timing"]["why"].as_str().unwrap().contains("calibrated for MLPs"), "{name}");
        let verified = a["verified"].as_array().unwrap();
        assert!(verified.len() >= 3, "{name}: {verified:?}");
        for v in verified {
            assert_eq!(v["agrees"], true, "{name}: {v}");
            if v["status"] == "ok" {
                assert_eq!(v["measured_peak"], v["predicted_peak"], "{name}: {v}");
            }
        }
    }
}

/// The lesson's depth sweep, advised for an H100, lists the same training on 2, 4 and 8 GPUs
/// with DDP and ZeRO stage 1: each GPU's peak and what a step sends. ZeRO's GPU holds less than
/// DDP's at every count and less the more GPUs share Adam's state; DDP's holds what one GPU at
/// its share of the batch holds plus its buckets, so at the depth one GPU runs out, DDP's run
/// out too.
#[test]
fn the_lessons_depth_sweep_is_offered_more_gpus_with_ddp_and_zero() {
    let sb = Sandbox::new();
    let lesson = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/depth_sweep.toml");
    let lesson = lesson.to_str().unwrap();
    let a = advise_json(&sb, &[lesson, "--device", "cuda", "--gpu", "h100", "--no-write", "--no-calibrate"]);
    assert_eq!(a["written"]["verdict"], "oom");
    let options = a["gpus"]["options"].as_array().expect("options on more GPUs");
    let got: Vec<(u64, &str)> =
        options.iter().map(|o| (o["gpus"].as_u64().unwrap(), o["strategy"].as_str().unwrap())).collect();
    assert_eq!(got, [(2, "ddp"), (2, "zero"), (4, "ddp"), (4, "zero"), (8, "ddp"), (8, "zero")]);
    let peak = |o: &Value| o["peak"].as_u64().unwrap();
    for pair in options.chunks(2) {
        assert!(peak(&pair[1]) < peak(&pair[0]), "ZeRO below DDP: {pair:?}");
        assert_eq!(pair[0]["verdict"], "oom", "DDP over the budget where one GPU is: {pair:?}");
        assert!(pair[1]["communicated"].as_u64() > pair[0]["communicated"].as_u64(), "ZeRO also broadcasts");
    }
    let zero: Vec<u64> = options.iter().skip(1).step_by(2).map(peak).collect();
    assert!(zero.windows(2).all(|w| w[1] < w[0]), "more GPUs, less of Adam's state each: {zero:?}");
    let text = common::advise::oomlab(&sb)
        .arg("advise")
        .arg(lesson)
        .args(["--device", "cuda", "--gpu", "h100", "--no-write", "--no-calibrate", "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("on more GPUs") && text.contains("ZeRO stage 1"), "{text}");
}
