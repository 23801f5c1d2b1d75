//! `oomlab advise` calibrated on a machine made busy on purpose. In `tests/quiet`, one test at a
//! time, because its load would make every other test's calibration busy too (cargo runs a
//! binary's tests at once, and binaries one after another).
use crate::common;

use common::advise::advise_json;
use common::{tiny_spec, Sandbox};
use serde_json::Value;

/// Whether this CPU has matrix instructions for bf16 (a CPU without them runs bf16 slower), as
/// advise's rules read it.
fn cpu_has_bf16() -> bool {
    oomlab::device::CpuCaps::here().bf16
}

/// The option's configuration with one technique put back as written (`None`: it had none).
fn twin(config: &Value, technique: &str, plain: Value) -> Option<Value> {
    let mut t = config.clone();
    let slot = &mut t["training"]["techniques"][technique];
    if *slot == plain {
        return None;
    }
    *slot = plain;
    Some(t)
}

/// Calibrated on a machine made busy (two threads spinning on its cores while it measures),
/// advise either says its timings cannot be trusted now, or ranks by times that keep the rules
/// no quiet machine breaks: a pass at a larger micro-batch is not faster, no checkpointed option
/// is faster than the same option without, and on a CPU without bf16 instructions no bf16
/// option is faster than its fp32 twin. (Before the rules, such a calibration ranked
/// "checkpoint every layer" fastest at 0.00x the time per sample.) "Faster" is by more than the
/// 10% the rules allow for noise.
#[test]
fn a_busy_machines_calibration_breaks_no_rule_or_is_not_used() {
    let _alone = common::alone();
    let sb = Sandbox::new();
    let text = tiny_spec("busy", "hidden = 256\ndepth = 4", None, "budget = \"4MiB\"\n")
        .replace("optimizer = \"sgd\"", "optimizer = \"adam\"")
        .replace("samples = 32", "samples = 512")
        .replace("batch_size = 4", "batch_size = 512");
    let spec = sb.spec("busy.toml", &text).display().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let a = advise_json(&sb, &[&spec, "--recalibrate", "--no-write"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinners.into_iter().for_each(|s| s.join().unwrap());

    assert_eq!(a["written"]["verdict"], "oom", "the spec as written must need advice");
    if a["timing"]["source"] == "none" {
        let why = a["timing"]["why"].as_str().unwrap();
        assert!(why.contains("not trustworthy") && why.contains("faster"), "{why}");
        assert!(a["options"].as_array().unwrap().iter().all(|o| o["relative_time"].is_null()));
        assert!(!a["calibration"]["untrusted"].as_array().unwrap().is_empty());
        return;
    }
    assert_eq!(a["timing"]["source"], "calibrated", "{}", a["timing"]);
    assert!(a["calibration"]["untrusted"].is_null(), "{}", a["calibration"]["untrusted"]);
    for cell in a["calibration"]["passes"].as_array().unwrap() {
        let mut points: Vec<(u64, f64)> = cell["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        points.sort_by_key(|p| p.0);
        for w in points.windows(2) {
            assert!(w[1].1 >= w[0].1 * 0.90, "a larger micro-batch measured faster: {cell}");
        }
    }
    let options: Vec<&Value> = a["options"].as_array().unwrap().iter().chain([&a["written"]]).collect();
    let step_of = |config: &Value| {
        options.iter().find(|o| o["candidate"]["config"] == *config).and_then(|o| o["step_seconds"].as_f64())
    };
    let (mut checked_ck, mut checked_bf16) = (0, 0);
    for o in &options {
        let (config, Some(step)) = (&o["candidate"]["config"], o["step_seconds"].as_f64()) else { continue };
        if let Some(plain) = twin(config, "checkpoint", Value::from("none")).as_ref().and_then(step_of) {
            assert!(
                step >= plain * 0.90,
                "{} at {step} s is faster than without checkpointing ({plain} s)",
                o["describe"]
            );
            checked_ck += 1;
        }
        if config["training"]["techniques"]["amp"]["dtype"] == "bf16" && !cpu_has_bf16() {
            let fp32 = twin(config, "amp", serde_json::json!({ "dtype": "off" }));
            if let Some(plain) = fp32.as_ref().and_then(step_of) {
                assert!(
                    step >= plain * 0.90,
                    "{} at {step} s is faster than fp32 ({plain} s) on a CPU without bf16",
                    o["describe"]
                );
                checked_bf16 += 1;
            }
        }
    }
    assert!(checked_ck > 0, "no checkpointed option had a plain twin to compare with");
    assert!(checked_bf16 > 0 || cpu_has_bf16(), "no bf16 option had an fp32 twin to compare with");
}
