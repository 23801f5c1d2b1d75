//! `advice.png`'s data from an advice: the chart draws plain points (`chart::AdviceChart`), and
//! this is where an option's verdict becomes a mark and its rank or time a height.
use super::{Advice, Evaluated, Verdict};
use crate::chart::{AdviceChart, AdvicePoint, Mark};
use crate::spec::format_size;

/// The chart of `a`: every option weighed, the spec as written, the options the advice names.
pub fn chart(a: &Advice) -> AdviceChart {
    let timed = a.written.step_seconds.is_some() && a.options.iter().any(|o| o.relative_time.is_some());
    let first_fit = a.options.iter().find(|o| o.verdict == Verdict::Fits).map(|o| o.rank);
    let named = |o: &Evaluated| {
        let mut tags = Vec::new();
        if Some(o.rank) == a.smallest {
            tags.push("smallest change");
        }
        if Some(o.rank) == first_fit && timed {
            tags.push("fastest");
        }
        (!tags.is_empty()).then(|| format!("{}: #{} {}", tags.join(", "), o.rank, o.describe))
    };
    let y = |o: &Evaluated| if timed { o.relative_time } else { Some(o.rank as f64) };
    let mut points: Vec<AdvicePoint> = a
        .options
        .iter()
        .filter(|o| o.verdict != Verdict::Unknown)
        .filter_map(|o| {
            Some(AdvicePoint {
                label: named(o).unwrap_or_default(),
                peak: o.peak,
                y: y(o)?,
                mark: match o.verdict {
                    Verdict::Fits => Mark::Fits,
                    Verdict::Borderline => Mark::Borderline,
                    _ => Mark::Oom,
                },
            })
        })
        .collect();
    if let Some(wy) = if timed { Some(1.0) } else { Some(0.0) } {
        points.push(AdvicePoint {
            label: format!("as written: {}", format_size(a.written.peak)),
            peak: a.written.peak,
            y: wy,
            mark: Mark::Written,
        });
    }
    let at = a.point.as_ref().map(|p| format!(", {} = {}", p.field, p.value)).unwrap_or_default();
    let variant = a.variant.as_ref().map(|v| format!(" [{v}]")).unwrap_or_default();
    let source = match a.timing {
        super::TimingSource::File { .. } => "a calibration file",
        _ => "calibration runs on the device",
    };
    let mut notes = vec![format!(
        "Time: per sample (an epoch's), relative to the spec as written, predicted from {source} (advice.md says how)."
    )];
    if !timed {
        notes = vec!["No step times: the options are placed by rank (fewest changes first).".into()];
    }
    notes.push("Peak: as the budget counts it (allocated on the CPU, reserved on CUDA), predicted by oomlab's estimate.".into());
    AdviceChart {
        title: format!("What fits in {}: {}{variant}{at}", format_size(a.budget), a.experiment),
        subtitle: format!("{} options on {}", a.options.len(), a.device),
        budget: a.budget,
        timed,
        points,
        notes,
    }
}
