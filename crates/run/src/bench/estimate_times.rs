//! The estimate's own speed: `oomlab estimate SPEC --brief` of every committed spec, timed as a
//! user runs it, against issue #31's target of 2 s of wall time on 2 quiet cores. Each spec runs
//! twice in a process of its own: cold, with a kernel-profile cache of its own and empty (what a
//! first call on a new machine pays: the CPU kernels of CNNs and Transformers measured once), and
//! warm, with the cache the first left (every call after).
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};

/// The target: wall seconds for a warm call.
pub const TARGET_SECONDS: f64 = 2.0;

/// One spec's times.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateTime {
    pub spec: String,
    pub cold: f64,
    pub warm: f64,
    /// Why the estimate failed, if it did (its last line).
    pub error: Option<String>,
}

impl EstimateTime {
    pub fn met(&self) -> bool {
        self.error.is_none() && self.warm <= TARGET_SECONDS
    }
}

/// The committed specs (`experiments/*.toml` of the source tree this binary was built from), by
/// name; with `quick`, the lesson's depth sweep alone.
pub fn committed_specs(quick: bool) -> Result<Vec<PathBuf>> {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("experiments");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| {
            format!("reading {} (the bench needs the source tree it was built from)", dir.display())
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    specs.sort();
    if quick {
        specs.retain(|p| p.file_stem().is_some_and(|s| s == "depth_sweep"));
    }
    Ok(specs)
}

/// Times `oomlab estimate SPEC --brief --device DEVICE` for each spec, cold then warm.
pub fn time_all(
    oomlab: &Path,
    specs: &[PathBuf],
    device: &str,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<EstimateTime>> {
    let mut out = Vec::new();
    for spec in specs {
        let cache = tempfile::tempdir().context("a temporary kernel-profile cache")?;
        let run = || -> (f64, Option<String>) {
            let t0 = Instant::now();
            let done = Command::new(oomlab)
                .arg("estimate")
                .arg(spec)
                .args(["--brief", "--device", device])
                .env("OOMLAB_CACHE", cache.path())
                .output();
            let seconds = t0.elapsed().as_secs_f64();
            let error = match done {
                Ok(o) if o.status.success() => None,
                Ok(o) => {
                    Some(String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("failed").to_string())
                }
                Err(e) => Some(format!("could not start {}: {e}", oomlab.display())),
            };
            (seconds, error)
        };
        let (cold, e1) = run();
        let (warm, e2) = run();
        let name = spec.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        say(&format!("estimate {name}: {cold:.2} s cold, {warm:.2} s warm"));
        out.push(EstimateTime { spec: name, cold, warm, error: e1.or(e2) });
    }
    Ok(out)
}

/// BENCH.md's section.
pub fn markdown(times: &[EstimateTime], device: &str) -> String {
    let mut s = String::new();
    let met = times.iter().filter(|t| t.met()).count();
    let _ = writeln!(
        s,
        "## estimate\n\n`oomlab estimate SPEC --brief --device {device}` of every committed spec, each in a \
         process of its own, as a user runs it: cold (a new, empty kernel-profile cache) and warm (the cache \
         the first call left). Target: at most {TARGET_SECONDS} s warm; {met} of {} met.\n",
        times.len()
    );
    s += "| spec | cold s | warm s | target |\n| --- | ---: | ---: | --- |\n";
    for t in times {
        let verdict = match (&t.error, t.met()) {
            (Some(e), _) => format!("failed: {}", e.replace('|', "\\|")),
            (None, true) => "met".into(),
            (None, false) => format!("missed by {:.1} s", t.warm - TARGET_SECONDS),
        };
        let _ = writeln!(s, "| {} | {:.2} | {:.2} | {verdict} |", t.spec, t.cold, t.warm);
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_which_met_the_target() {
        let t = |spec: &str, warm, error: Option<&str>| EstimateTime {
            spec: spec.into(),
            cold: 3.0,
            warm,
            error: error.map(str::to_string),
        };
        let md = markdown(&[t("a", 0.5, None), t("b", 2.5, None), t("c", 0.1, Some("bad | spec"))], "cpu");
        assert!(md.contains("1 of 3 met"), "{md}");
        assert!(md.contains("| a | 3.00 | 0.50 | met |"));
        assert!(md.contains("| b | 3.00 | 2.50 | missed by 0.5 s |"));
        assert!(md.contains("| c | 3.00 | 0.10 | failed: bad \\| spec |"));
    }

    #[test]
    fn every_committed_spec_or_the_lessons_alone() {
        let all = committed_specs(false).unwrap();
        assert!(all.len() >= 20 && all.iter().all(|p| p.extension().unwrap() == "toml"));
        let quick = committed_specs(true).unwrap();
        assert_eq!(quick.len(), 1);
        assert!(quick[0].ends_with("experiments/depth_sweep.toml"));
    }
}
