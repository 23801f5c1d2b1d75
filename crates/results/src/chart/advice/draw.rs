//! Draws the advice chart: options as points, the budget as a vertical dashed line.
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::{AdviceChart, AdvicePoint, Mark};
use crate::chart::legend::{Glyph, Legend};
use crate::chart::scale::ByteAxis;
use crate::chart::style::{budget_label, budget_style, house_style, label_style, palette};
use crate::chart::{footnotes, framed, header, Chart, Plot};
use crate::units::format_tick;

const FITS: RGBColor = RGBColor(44, 160, 44);
const BORDER: RGBColor = RGBColor(255, 127, 14);
const WRITTEN: RGBColor = RGBColor(214, 39, 40);

impl Chart for AdviceChart {
    fn file_stem(&self) -> String {
        "advice".into()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let area = footnotes(area, &self.notes)?;
        let max_peak = self.points.iter().map(|p| p.peak).max().unwrap_or(0).max(self.budget);
        let axis = ByteAxis::for_max(max_peak);
        let x_end = axis.value(max_peak) * 1.08;
        // Times relative to the spec as written span 0.5x to 50x: on a log2 scale, so that the
        // options near 1x stay apart; ranks are drawn as they are.
        let y_of = |y: f64| if self.timed { y.max(1e-3).log2() } else { y };
        let ys: Vec<f64> = self.points.iter().map(|p| y_of(p.y)).collect();
        let (lo, hi) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| (a.min(y), b.max(y)));
        let y_range = match (self.timed, lo.is_finite()) {
            (true, true) => (lo.min(0.0) - 0.3)..(hi.max(0.0) + 0.4),
            (true, false) => -1.0..1.0,
            (false, _) => 0.0..(hi.max(1.0) * 1.08),
        };
        let timed = self.timed;
        let y_tick =
            move |v: &f64| if timed { format!("{}x", format_tick(2f64.powf(*v))) } else { format_tick(*v) };
        let tick = |v: &f64| format_tick(*v);
        let mut plot: Plot<DB> = framed(&area, 40).build_cartesian_2d(0.0..x_end, y_range.clone())?;
        let y_desc = if self.timed {
            "predicted time per sample (x the spec as written, log scale)"
        } else {
            "rank (fewest changes first)"
        };
        house_style(
            plot.configure_mesh()
                .x_labels(10)
                .y_labels(10)
                .x_label_formatter(&tick)
                .y_label_formatter(&y_tick)
                .x_desc(axis.desc("predicted peak"))
                .y_desc(y_desc),
        )
        .draw()?;
        let b = axis.value(self.budget);
        plot.draw_series(DashedLineSeries::new(
            [(b, y_range.start), (b, y_range.end)],
            12,
            8,
            budget_style(),
        ))?;
        // Misses first, so that what fits is drawn on top.
        for mark in [Mark::Oom, Mark::Borderline, Mark::Fits, Mark::Written] {
            for p in self.points.iter().filter(|p| p.mark == mark) {
                let at = (axis.value(p.peak), y_of(p.y));
                match mark {
                    Mark::Oom => {
                        plot.draw_series(std::iter::once(Cross::new(at, 4, palette::MUTED.stroke_width(1))))?
                    }
                    Mark::Borderline => {
                        plot.draw_series(std::iter::once(Circle::new(at, 5, BORDER.stroke_width(2))))?
                    }
                    Mark::Fits => plot.draw_series(std::iter::once(Circle::new(at, 5, FITS.filled())))?,
                    Mark::Written => {
                        plot.draw_series(std::iter::once(Circle::new(at, 9, WRITTEN.stroke_width(3))))?
                    }
                };
            }
        }
        let (w, h) = plot.plotting_area().dim_in_pixel();
        let x_per_px = x_end / f64::from(w.max(1));
        let y_per_px = (y_range.end - y_range.start) / f64::from(h.max(1));
        let to_px = |(x, y): (f64, f64)| {
            ((x / x_per_px).round() as i32, ((y_range.end - y) / y_per_px).round() as i32)
        };
        // The spec as written first: it stands alone, the others take places beside it; each in
        // the first place that hides no other label and no point, labelled or not.
        let labelled = self.points.iter().filter(|p| p.mark == Mark::Written && !p.label.is_empty());
        let others = self.points.iter().filter(|p| p.mark != Mark::Written && !p.label.is_empty());
        let labelled: Vec<&AdvicePoint> = labelled.chain(others).collect();
        let markers: Vec<(i32, i32)> =
            self.points.iter().map(|p| to_px((axis.value(p.peak), y_of(p.y)))).collect();
        let pixels: Vec<(i32, i32)> =
            labelled.iter().map(|p| to_px((axis.value(p.peak), y_of(p.y)))).collect();
        let sizes = labelled
            .iter()
            .map(|p| plot.plotting_area().estimate_text_size(&p.label, &label_style()))
            .collect::<Result<Vec<_>, _>>()?;
        let placed = crate::chart::labels::place(&pixels, &sizes, (w, h), &markers);
        for (p, spot) in labelled.iter().zip(placed) {
            let (x, y) = (f64::from(spot.x) * x_per_px, y_range.end - f64::from(spot.y) * y_per_px);
            let hpos = if spot.left_anchored { HPos::Left } else { HPos::Right };
            let style = label_style().pos(Pos::new(hpos, VPos::Center));
            plot.draw_series(std::iter::once(Text::new(p.label.clone(), (x, y), style)))?;
        }
        let mut legend = Legend::default();
        legend.add("fits", Glyph::Bar(FITS.filled()));
        legend.add("borderline", Glyph::Ring(BORDER.stroke_width(2)));
        legend.add("does not fit", Glyph::Cross(palette::MUTED.stroke_width(1)));
        legend.add("as written", Glyph::Ring(WRITTEN.stroke_width(3)));
        legend.add(budget_label(self.budget), Glyph::Dashed(budget_style()));
        // As fractions of the plot, which is what the placer weighs.
        let drawn: Vec<(f64, f64)> = self
            .points
            .iter()
            .map(|p| {
                (axis.value(p.peak) / x_end, (y_of(p.y) - y_range.start) / (y_range.end - y_range.start))
            })
            .collect();
        legend.draw_where_free(&mut plot, &drawn)
    }
}
