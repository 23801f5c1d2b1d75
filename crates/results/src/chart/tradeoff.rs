//! What memory costs in time: one point per variant, its peak memory across, its mean step time
//! up, so that a trade (checkpointing: less memory, more time) reads as a move up and to the
//! left. The trial standing for each variant is the one the category chart picks
//! (`figures::compared`). Step times are wall-clock on the machine that ran the experiment: compare
//! them within one chart, not across machines.
use super::scale::{ByteAxis, XScale};
use super::style::{house_style, label_style, palette};
use super::{footnotes, framed, header, Chart, Compared, Plot};
use crate::units::{format_bytes, format_tick};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The chart's data: one point per variant that has a step time.
#[derive(Debug, Clone, PartialEq)]
pub struct Tradeoff {
    pub title: String,
    pub subtitle: String,
    pub points: Vec<TradeoffPoint>,
    /// Which swept value the points stand at (`Compared::note`), None without a sweep.
    pub comparison: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TradeoffPoint {
    pub label: String,
    pub trial: usize,
    /// `max_memory_allocated`, in bytes.
    pub peak: u64,
    /// Mean wall-clock seconds of a training step.
    pub step_seconds: f64,
}

const NOTE: &str =
    "Step time: mean wall-clock time of a training step (the first excluded), on the machine that ran it.";

impl Tradeoff {
    /// One point per trial picked (`figures::compared` picks them) that has a step time.
    pub fn from_picked(picked: &Compared, title: impl Into<String>, subtitle: impl Into<String>) -> Tradeoff {
        let points = picked
            .trials
            .iter()
            .filter_map(|(label, r)| {
                let s = r.step_seconds.filter(|s| s.is_finite() && *s >= 0.0)?;
                Some(TradeoffPoint {
                    label: label.clone(),
                    trial: r.trial,
                    peak: r.max_memory_allocated,
                    step_seconds: s,
                })
            })
            .collect();
        Tradeoff { title: title.into(), subtitle: subtitle.into(), points, comparison: picked.note.clone() }
    }
}

impl Chart for Tradeoff {
    fn file_stem(&self) -> String {
        "time_vs_memory".to_string()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let notes: Vec<String> =
            self.comparison.iter().map(|c| format!("Points: {c}.")).chain([NOTE.to_string()]).collect();
        let area = footnotes(area, &notes)?;

        let max_peak = self.points.iter().map(|p| p.peak).max().unwrap_or(0);
        let axis = ByteAxis::for_max(max_peak);
        let xs: Vec<f64> = self.points.iter().map(|p| axis.value(p.peak)).collect();
        let mut x_range = XScale::Linear.range(&xs);
        // From 0, so that distances read as ratios, and wide enough for the labels at the right.
        x_range.start = 0.0;
        x_range.end = x_range.end.max(1e-9) * 1.08;
        let max_s = self.points.iter().map(|p| p.step_seconds).fold(0.0, f64::max);
        let y_top = if max_s > 0.0 { max_s * 1.15 } else { 1.0 };
        let tick = |v: &f64| format_tick(*v);
        let mut plot: Plot<DB> = framed(&area, 40).build_cartesian_2d(x_range.clone(), 0.0..y_top)?;
        house_style(
            plot.configure_mesh()
                .x_labels(10)
                .y_labels(10)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .x_desc(axis.desc("peak memory allocated"))
                .y_desc("step time (s, wall-clock)"),
        )
        .draw()?;

        if self.points.is_empty() {
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Center));
            let centre = ((x_range.start + x_range.end) / 2.0, y_top / 2.0);
            plot.draw_series(std::iter::once(Text::new("no step times".to_string(), centre, style)))?;
            return Ok(());
        }
        let (plot_w, plot_h) = plot.plotting_area().dim_in_pixel();
        let x_per_px = (x_range.end - x_range.start) / f64::from(plot_w.max(1));
        let y_per_px = y_top / f64::from(plot_h.max(1));
        // Each label beside its point, in the first place that hides no other label or point.
        let texts: Vec<String> = self
            .points
            .iter()
            .map(|p| format!("{}: {}, {} s", p.label, format_bytes(p.peak), format_tick(p.step_seconds)))
            .collect();
        let sizes = texts
            .iter()
            .map(|t| plot.plotting_area().estimate_text_size(t, &label_style()))
            .collect::<Result<Vec<_>, _>>()?;
        let at: Vec<(f64, f64)> = self.points.iter().map(|p| (axis.value(p.peak), p.step_seconds)).collect();
        let to_px = |(x, y): (f64, f64)| {
            (((x - x_range.start) / x_per_px).round() as i32, ((y_top - y) / y_per_px).round() as i32)
        };
        let pixels: Vec<(i32, i32)> = at.iter().map(|&a| to_px(a)).collect();
        let placed = super::labels::place(&pixels, &sizes, (plot_w, plot_h), &pixels);
        for (i, ((text, &point), spot)) in texts.into_iter().zip(&at).zip(placed).enumerate() {
            plot.draw_series(std::iter::once(Circle::new(point, 8, palette::category(i).filled())))?;
            let x = x_range.start + f64::from(spot.x) * x_per_px;
            let y = y_top - f64::from(spot.y) * y_per_px;
            let h = if spot.left_anchored { HPos::Left } else { HPos::Right };
            let style = label_style().pos(Pos::new(h, VPos::Center));
            plot.draw_series(std::iter::once(Text::new(text, (x, y), style)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::test_support::{out_dir, picked, png_size, summary, svg_texts};
    use crate::schema::{Status, SummaryRow};

    fn timed(trial: usize, variant: &str, peak: u64, seconds: Option<f64>) -> SummaryRow {
        let mut r = summary(trial, variant, None, Status::Ok);
        r.max_memory_allocated = peak;
        r.step_seconds = seconds;
        r
    }

    #[test]
    fn one_point_per_trial_picked_with_a_step_time() {
        let rows = [
            timed(1, "none", 200 << 20, Some(1.5)),
            timed(2, "sqrt", 150 << 20, Some(2.0)),
            timed(3, "every1", 140 << 20, None),
        ];
        let chart = Tradeoff::from_picked(&picked(&rows, Some("each variant at its first trial")), "t", "s");
        assert_eq!(
            chart.points,
            [
                TradeoffPoint { label: "none".into(), trial: 1, peak: 200 << 20, step_seconds: 1.5 },
                TradeoffPoint { label: "sqrt".into(), trial: 2, peak: 150 << 20, step_seconds: 2.0 },
            ]
        );
        assert_eq!(chart.comparison.as_deref(), Some("each variant at its first trial"));
        assert_eq!(chart.file_stem(), "time_vs_memory");
    }

    #[test]
    fn renders_png_and_svg_with_labels() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let rows = [
            timed(1, "none", 211 << 20, Some(1.25)),
            timed(2, "every1", 211 << 20, Some(1.5)),
            timed(3, "sqrt", 163 << 20, Some(1.75)),
        ];
        let chart = Tradeoff::from_picked(&picked(&rows, None), "Time against memory", "fake device");
        let out = render(&chart, &dir.join("tradeoff")).expect("rendered");
        assert_eq!(png_size(&out.png), (1280, 800));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        for text in [
            "none: 211.00 MiB, 1.25 s",
            "sqrt: 163.00 MiB, 1.75 s",
            "peak memory allocated (MiB)",
            "step time (s, wall-clock)",
            NOTE,
        ] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
    }

    #[test]
    fn renders_empty_and_single_inputs() {
        let temp = tempfile::tempdir().expect("temp dir");
        render(&Tradeoff::from_picked(&picked(&[], None), "empty", ""), &temp.path().join("empty"))
            .expect("empty");
        let untimed = [timed(1, "a", 10, None), timed(2, "b", 10, None)];
        let chart = Tradeoff::from_picked(&picked(&untimed, None), "untimed", "");
        assert!(chart.points.is_empty());
        render(&chart, &temp.path().join("untimed")).expect("untimed");
        let one = [timed(1, "", 3 << 30, Some(0.5))];
        let one = Tradeoff::from_picked(&picked(&one, None), "one", "");
        assert_eq!(one.points.len(), 1);
        render(&one, &temp.path().join("one")).expect("one");
    }
}
