//! The rules a calibration must pass before its times rank anything. Each states something no
//! quiet machine can measure otherwise; a busy one (another process on the cores, a VM whose
//! host is busy) can, and a ranking built on such times is wrong in ways a reader cannot see
//! (checkpointing every layer "fastest" at 0.00x the time per sample):
//!
//! - a larger micro-batch is not faster per pass than a smaller one of the same configuration;
//! - recomputation is not faster than none: a checkpointed pass is not faster than the same
//!   pass without, at any micro-batch the options use;
//! - on a CPU without instructions for a low precision (bf16: AVX512-BF16 or AMX; fp16:
//!   AVX512-FP16 or AMX-FP16), that precision's pass is not faster than fp32's.
//!
//! A pass's time is a line in the micro-batch (`PassCell`), so comparing two at a micro-batch
//! of 1 and at the largest both were measured at compares them everywhere between. Beyond that
//! the lines are extrapolated, and two fitted at small batches may cross far out: the ranking
//! then floors a checkpointed pass at its plain twin's time (`Calibration::step_seconds`).
use crate::estimate::timing::{Calibration, PassCell, PassKey};
use crate::spec::{AmpKind, Named};

/// Within this, two passes count as equally fast: timing noise on the same work. A tiny model's
/// pass hardly grows with the micro-batch, and two rounds of it differ by a few percent on a
/// quiet machine; what a busy one measures is off by far more (5x in the case that made these
/// rules), and a real cost the rules stand for (recomputation, bf16 without its instructions)
/// is larger still.
const TOLERANCE: f64 = 0.10;

use crate::device::CpuCaps;

/// The rules `cal` breaks, in words (empty: it passes).
pub fn check(cal: &Calibration, caps: Option<CpuCaps>) -> Vec<String> {
    let mut broken = Vec::new();
    for cell in &cal.passes {
        let mut points = cell.points.clone();
        points.sort_by_key(|p| p.0);
        for pair in points.windows(2) {
            let ((m1, t1), (m2, t2)) = (pair[0], pair[1]);
            if m2 > m1 && t2 < t1 * (1.0 - TOLERANCE) {
                broken.push(format!(
                    "a pass ({}) at micro-batch {m2} measured faster than at {m1} ({t2:.4} s against {t1:.4} s)",
                    describe(&cell.key)
                ));
            }
        }
    }
    // Compared where both were measured: at a micro-batch of 1 and at the largest both reached.
    // Beyond, the times are the lines' extrapolation, which the ranking floors instead
    // (`Calibration::step_seconds`).
    let range = |a: &PassCell, b: &PassCell| {
        let top = |c: &PassCell| c.points.iter().map(|p| p.0).max().unwrap_or(1);
        [1, top(a).min(top(b)).max(1)]
    };
    let find = |key: &PassKey| cal.passes.iter().find(|c| c.key == *key);
    let mut slower = |slow: &PassCell, fast: &PassCell, what: &str| {
        for m in range(slow, fast) {
            let (s, f) = (slow.seconds(m, slow.shape), fast.seconds(m, fast.shape));
            if s < f * (1.0 - TOLERANCE) {
                broken.push(format!(
                    "{what}: {} at micro-batch {m} would take {s:.4} s against {:.4} s for {}",
                    describe(&slow.key),
                    f,
                    describe(&fast.key)
                ));
                break;
            }
        }
    };
    for ck in cal.passes.iter().filter(|c| c.key.checkpointed) {
        if let Some(plain) = find(&PassKey { checkpointed: false, ..ck.key.clone() }) {
            slower(ck, plain, "recomputation measured faster than none");
        }
    }
    if let Some(caps) = caps {
        for (amp, has) in [(AmpKind::Bf16, caps.bf16), (AmpKind::Fp16, caps.fp16)] {
            if has {
                continue;
            }
            for low in cal.passes.iter().filter(|c| c.key.amp == amp) {
                if let Some(full) = find(&PassKey { amp: AmpKind::Off, ..low.key.clone() }) {
                    slower(
                        low,
                        full,
                        &format!(
                            "{0} measured faster than fp32 on a CPU without {0} instructions",
                            amp.as_str()
                        ),
                    );
                }
            }
        }
    }
    broken
}

fn describe(k: &PassKey) -> String {
    let ck = if k.checkpointed { ", checkpointed" } else { "" };
    format!("{} amp {}{ck}", k.dtype.as_str(), k.amp.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::timing::ModelShape;
    use crate::spec::{DataLocation, Dtype, Mode};

    const SHAPE: ModelShape = ModelShape { layers: 2, macs_per_sample: 1000.0, params: 100 };

    fn key(amp: &str, checkpointed: bool) -> PassKey {
        PassKey {
            mode: Mode::Train,
            dtype: Dtype::Float32,
            amp: AmpKind::from_name(amp).expect("an amp word"),
            checkpointed,
            location: DataLocation::Host,
        }
    }

    fn cell(amp: &str, checkpointed: bool, points: &[(usize, f64)]) -> PassCell {
        PassCell::fit(key(amp, checkpointed), SHAPE, points.to_vec())
    }

    fn cal(passes: Vec<PassCell>) -> Calibration {
        Calibration {
            device: "cpu".into(),
            oomlab: "0".into(),
            libtorch: "2.11.0".into(),
            passes,
            updates: Vec::new(),
            failed: Vec::new(),
            load_average: None,
            untrusted: Vec::new(),
        }
    }

    const NO_LOW: Option<CpuCaps> = Some(CpuCaps { bf16: false, fp16: false });

    #[test]
    fn a_quiet_machines_calibration_passes() {
        let c = cal(vec![
            cell("off", false, &[(1, 0.010), (64, 0.50)]),
            cell("off", true, &[(1, 0.012), (64, 0.65)]),
            cell("bf16", false, &[(1, 0.030), (64, 2.50)]),
        ]);
        assert_eq!(check(&c, NO_LOW), Vec::<String>::new());
        // Flat in the batch, and a few percent of noise: not a broken rule.
        let flat = cal(vec![cell("off", false, &[(1, 0.010), (64, 0.0096)])]);
        assert_eq!(check(&flat, NO_LOW), Vec::<String>::new());
    }

    /// What a busy machine measured: a checkpointed pass at batch 44 faster than at batch 1.
    #[test]
    fn what_a_busy_machine_measures_is_caught() {
        let c = cal(vec![
            cell("off", false, &[(1, 0.010), (44, 0.30)]),
            cell("off", true, &[(1, 0.020), (44, 0.015)]),
        ]);
        let broken = check(&c, NO_LOW);
        assert!(
            broken.iter().any(|b| b.contains("at micro-batch 44 measured faster than at 1")),
            "{broken:?}"
        );
        assert!(
            broken.iter().any(|b| b.starts_with("recomputation measured faster than none")),
            "{broken:?}"
        );
    }

    #[test]
    fn low_precision_faster_than_fp32_is_caught_only_without_its_instructions() {
        let c = cal(vec![
            cell("off", false, &[(1, 0.010), (64, 0.50)]),
            cell("bf16", false, &[(1, 0.005), (64, 0.20)]),
        ]);
        let broken = check(&c, NO_LOW);
        assert!(broken.iter().any(|b| b.starts_with("bf16 measured faster than fp32")), "{broken:?}");
        assert!(check(&c, Some(CpuCaps { bf16: true, fp16: false })).is_empty());
        assert!(check(&c, None).is_empty(), "a GPU has its own");
    }

    /// Measured alike where both were measured, the lines cross only far beyond (at a batch of a
    /// million): the fit's doing, which the ranking floors; not a broken rule.
    #[test]
    fn lines_crossing_beyond_the_measurements_are_not_a_broken_rule() {
        let plain = cell("off", false, &[(1, 0.010), (64, 0.50)]);
        let checkpointed = cell("off", true, &[(1, 0.012), (256, 1.90)]);
        assert!(checkpointed.seconds(1_000_000, SHAPE) < plain.seconds(1_000_000, SHAPE));
        assert_eq!(check(&cal(vec![plain, checkpointed]), NO_LOW), Vec::<String>::new());
    }
}
