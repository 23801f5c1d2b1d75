//! `oomlab advise` calibrated, its files written, its calibration cached and read back. In
//! `tests/quiet`, one test at a time: cargo runs a binary's tests at once, and the suite's
//! trainings would make this calibration's machine busy (a busy machine's calibration is refused,
//! rightly, and then nothing is cached to read back); binaries run one after another.
use crate::common;

use common::advise::{advise_json, spec, stderr_of};
use common::Sandbox;
use serde_json::Value;

#[test]
fn advice_names_what_fits_writes_its_files_and_keeps_them() {
    let _alone = common::alone();
    let sb = Sandbox::new();
    let spec = spec(&sb, "150KiB");
    let out = sb.out().display().to_string();
    let mut a = advise_json(&sb, &[&spec, "--out", &out]);
    // A calibration that a busy machine (this binary's other tests) made implausible is refused
    // and not cached; measured again, as a user would.
    for _ in 0..3 {
        if a["timing"]["source"] != "none" {
            break;
        }
        assert!(a["timing"]["why"].as_str().unwrap().contains("not trustworthy"), "{}", a["timing"]);
        a = advise_json(&sb, &[&spec, "--out", &out, "--force"]);
    }
    assert_eq!(a["written"]["verdict"], "oom", "the spec as written must not fit: {}", a["written"]);
    let options = a["options"].as_array().unwrap();
    assert!(options.len() > 50, "{}", options.len());
    let smallest = a["smallest"].as_u64().expect("something fits") as usize;
    assert_eq!(options[smallest - 1]["verdict"], "fits");
    // Ranked: what fits first, fastest per sample first.
    let per_sample = |o: &Value| {
        o["step_seconds"].as_f64().unwrap()
            / (o["candidate"]["config"]["training"]["batch_size"].as_f64().unwrap()
                * o["candidate"]["config"]["training"]["techniques"]["accumulation"].as_f64().unwrap())
    };
    let fits: Vec<&Value> = options.iter().take_while(|o| o["verdict"] == "fits").collect();
    assert!(fits.windows(2).all(|w| per_sample(w[0]) <= per_sample(w[1])), "not ranked by time");
    assert_eq!(a["timing"]["source"], "calibrated");
    assert!(a["timing"]["runs"].as_u64().unwrap() > 0);

    let md_path =
        common::walk(&sb.out()).into_iter().find(|p| p.ends_with("adv/advice/advice.md")).expect("advice.md");
    let dir = md_path.parent().unwrap().to_path_buf();
    for f in ["advice.md", "advice.json", "calibration.json", "advice.png", "advice.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
    let md = std::fs::read_to_string(dir.join("advice.md")).unwrap();
    assert!(md.contains("Smallest change that fits") && md.contains("![") && md.contains("git"), "{md}");

    // Again: refused without --force; with it, the calibration comes from the cache.
    let err = stderr_of(&sb, &[&spec, "--out", &out, "-q"]);
    assert!(err.contains("--force"), "{err}");
    let again = advise_json(&sb, &[&spec, "--out", &out, "--force"]);
    assert_eq!(again["timing"]["runs"], 0, "{}", again["timing"]);
    assert!(again["timing"]["cached"].as_u64().unwrap() > 0);
    // And from the file the first one wrote.
    let cal = dir.join("calibration.json").display().to_string();
    let from_file = advise_json(&sb, &[&spec, "--calibration", &cal, "--no-write"]);
    assert_eq!(from_file["timing"]["source"], "file");
    assert_eq!(from_file["options"][0]["step_seconds"], again["options"][0]["step_seconds"]);
}
