//! Draws the advice chart: options as points, the budget as a vertical dashed line.
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::{AdviceChart, Mark};
use crate::chart::legend::{Glyph, Legend};
use crate::chart::scale::ByteAxis;
use crate::chart::style::{budget_label, budget_style, house_style, label_style, palette};
use crate::chart::{footnotes, header, Chart, Plot};
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
        let y_max = self.points.iter().map(|p| p.y).fold(0.0, f64::max);
        let y_top = if y_max > 0.0 { y_max * 1.12 } else { 1.0 };
        let tick = |v: &f64| format_tick(*v);
        let mut plot: Plot<DB> = ChartBuilder::on(&area)
            .margin_left(20)
            .margin_right(40)
            .margin_top(10)
            .margin_bottom(10)
            .x_label_area_size(60)
            .y_label_area_size(78)
            .build_cartesian_2d(0.0..x_end, 0.0..y_top)?;
        let y_desc = if self.timed { "predicted step time (s)" } else { "rank (fewest changes first)" };
        house_style(
            plot.configure_mesh()
                .x_labels(10)
                .y_labels(10)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .x_desc(axis.desc("predicted peak"))
                .y_desc(y_desc),
        )
        .draw()?;
        let b = axis.value(self.budget);
        plot.draw_series(DashedLineSeries::new([(b, 0.0), (b, y_top)], 12, 8, budget_style()))?;
        // Misses first, so that what fits is drawn on top.
        for mark in [Mark::Oom, Mark::Borderline, Mark::Fits, Mark::Written] {
            for p in self.points.iter().filter(|p| p.mark == mark) {
                let at = (axis.value(p.peak), p.y);
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
        let (w, _) = plot.plotting_area().dim_in_pixel();
        let x_per_px = x_end / f64::from(w.max(1));
        for p in self.points.iter().filter(|p| !p.label.is_empty()) {
            let at = (axis.value(p.peak), p.y);
            let width = plot.plotting_area().estimate_text_size(&p.label, &label_style())?.0;
            let right = at.0 + (14.0 + f64::from(width)) * x_per_px <= x_end;
            let (x, h) = if right {
                (at.0 + 14.0 * x_per_px, HPos::Left)
            } else {
                (at.0 - 14.0 * x_per_px, HPos::Right)
            };
            let style = label_style().pos(Pos::new(h, VPos::Center));
            plot.draw_series(std::iter::once(Text::new(p.label.clone(), (x, at.1), style)))?;
        }
        let mut legend = Legend::default();
        legend.add("fits", Glyph::Bar(FITS.filled()));
        legend.add("borderline", Glyph::Ring(BORDER.stroke_width(2)));
        legend.add("does not fit", Glyph::Cross(palette::MUTED.stroke_width(1)));
        legend.add("as written", Glyph::Ring(WRITTEN.stroke_width(3)));
        legend.add(budget_label(self.budget), Glyph::Dashed(budget_style()));
        // As fractions of the plot, which is what the placer weighs.
        let drawn: Vec<(f64, f64)> =
            self.points.iter().map(|p| (axis.value(p.peak) / x_end, p.y / y_top)).collect();
        legend.draw_where_free(&mut plot, &drawn)
    }
}
