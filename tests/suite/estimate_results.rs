//! The memory model against every committed CPU result: each trial of every experiment under
//! `results/<cpu device>/`, predicted from the spec text its manifest recorded and compared with
//! what oomlab's counting allocator measured in that run, at the experiments' full sizes (the
//! depth sweep's 15.9 GiB included). `tests/suite/estimate_accuracy.rs` checks the same model phase by
//! phase on small trials it runs itself; this one checks it on the runs the claims rest on.
//!
//! - A trial that ran: predicted peak equal to the measured one, to the byte (issue 5 asked for
//!   2% on fp32); bf16 may fall short by oneDNN's matmul workspace, which the model leaves out,
//!   up to [`BF16_SHORTFALL`] of the peak, and never over.
//! - A trial that ran out of memory: the model predicts it would not fit in what the budget
//!   left it, and fail in the same phase of the same step.
//! - Trials whose allocations depend on the CPU's kernels (convolutions, whose oneDNN buffers
//!   the model measures on the machine it runs on, and fp16, which oneDNN runs on CPUs with
//!   AVX512-FP16 only) are checked against results from a CPU of the same name and the same
//!   vector and matrix extensions (a virtual machine's "AMD EPYC" is Zen 2 with AVX2 or Zen 4
//!   with AVX-512 and bf16), and counted as skipped otherwise, and where the result predates the
//!   manifest's `cpu_isa`.
//!
//! When the trainer changes what it allocates, this fails until the results are regenerated
//! (`scripts/regenerate-figures cpu`): results that no longer describe the code are stale.
use crate::common;
use std::path::{Path, PathBuf};

use oomlab::estimate::{self, relative_error, Options};
use oomlab::results::{ExperimentDir, Manifest};
use oomlab::schema::Status;
use oomlab::spec::{self, Amp, ModelSpec};

/// How far under the measurement a bf16 prediction may fall: the workspace, relative to the
/// peak (3.3% measured at batch 1024 of the `amp` experiment).
const BF16_SHORTFALL: f64 = 0.05;

/// Every experiment folder of a CPU run under `results/`.
fn cpu_result_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut dirs = Vec::new();
    for device in std::fs::read_dir(&root).expect("results/ exists").flatten() {
        let Ok(experiments) = std::fs::read_dir(device.path()) else { continue };
        for dir in experiments.flatten().map(|e| e.path()) {
            if dir.join("manifest.json").is_file() {
                let m = Manifest::read(&dir).expect("a readable manifest");
                if m.device.resolved == oomlab::device::RunDevice::Cpu {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs.sort();
    dirs
}

#[test]
fn every_committed_cpu_trial_is_predicted() {
    let _in_process = common::in_process();
    let dirs = cpu_result_dirs();
    let mut failures = Vec::new();
    let (mut ran, mut ooms, mut skipped, mut worst) = (0, 0, 0, 0f64);
    let (here, isa) = (oomlab::device::cpu_name(), oomlab::device::cpu_isa());
    for dir in &dirs {
        let exp = ExperimentDir::read(dir).unwrap();
        let manifest = &exp.manifest;
        let spec = spec::parse(&manifest.spec_source, Path::new(&manifest.spec_path))
            .unwrap_or_else(|e| panic!("{}: the recorded spec no longer parses: {e}", dir.display()));
        // The run's thread count: a split CPU reduction takes a buffer per thread.
        let threads = usize::try_from(manifest.host.torch_threads).unwrap_or(1).max(1);
        let options = Options { threads, ..Options::default() };
        let name = dir.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(dir).display().to_string();
        for row in exp.rows.iter().cloned() {
            let config = spec
                .trial_config(&row.variant, row.value)
                .unwrap_or_else(|| panic!("{name}: no config for trial {} in the recorded spec", row.trial));
            let what = format!("{name} trial {} ({} {:?})", row.trial, row.variant, row.value);
            let amp = &config.training.techniques.amp;
            let kernels = matches!(config.model, ModelSpec::Cnn(_)) || matches!(amp, Amp::Fp16 { .. });
            let same_cpu = manifest.device.name == here && manifest.host.cpu_isa.as_deref() == Some(&isa);
            if kernels && !same_cpu {
                skipped += 1;
                continue;
            }
            let shape = estimate::data_shape(&config.data).unwrap();
            let p = estimate::predict_with(&config, shape, &options)
                .unwrap_or_else(|e| panic!("{what}: no prediction: {e:#}"));
            match row.status {
                Status::Ok | Status::Diverged => {
                    ran += 1;
                    let measured = row.max_memory_allocated - row.baseline_allocated;
                    let err = relative_error(p.peak, measured);
                    // Low precision in oneDNN (bf16; fp16 on CPUs with AVX512-FP16).
                    let shortfall = if estimate::onednn::lowp_matmul(amp) { BF16_SHORTFALL } else { 0.0 };
                    worst = worst.max(err.abs());
                    if p.peak > measured || err < -shortfall {
                        failures.push(format!(
                            "{what}: predicted {}, measured {measured} ({:+.2}%)",
                            p.peak,
                            100.0 * err
                        ));
                    }
                }
                Status::Oom => {
                    ooms += 1;
                    let budget = manifest.device.budget_bytes.expect("an OOM on the CPU needs a budget");
                    let left = budget - row.baseline_allocated;
                    let predicted = p.first_over(left).map(|f| (f.phase, f.step));
                    let measured = row.phase.zip(row.step);
                    if predicted != measured {
                        failures.push(format!(
                            "{what}: OOM measured at {measured:?}, predicted at {predicted:?} (peak {} vs {left} left)",
                            p.peak
                        ));
                    }
                    // Under the budget's cap, the replay names the allocation the run's OOM
                    // message names, and what was allocated then (both as the message rounds).
                    let capped = estimate::predict_with(&config, shape, &options.under(Some(left))).unwrap();
                    let said = |b: Option<u64>| b.map(oomlab::spec::format_size);
                    let asked = capped.oom.map(|o| (o.requested, o.reserved + row.baseline_allocated));
                    let told = (said(row.oom_requested), said(row.oom_allocated));
                    if (said(asked.map(|a| a.0)), said(asked.map(|a| a.1))) != told {
                        failures.push(format!("{what}: the OOM asked for {told:?}, predicted {asked:?}"));
                    }
                }
                Status::PredictedOom | Status::Error => {}
            }
        }
    }
    println!(
        "{} experiments, {ran} trials that ran (worst error {:.3}%), {ooms} OOMs, {skipped} skipped \
         (their kernels depend on the CPU, and they ran on another than this {here} with {isa})",
        dirs.len(),
        100.0 * worst
    );
    assert!(ran >= 50 && ooms >= 5, "too few committed trials to check: {ran} ran, {ooms} OOMs in {dirs:?}");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
