//! Drawing the comparison chart: two panels on one x axis, bytes on the left and shares of
//! each folder's limit on the right, the legend on the right one; where every folder has the
//! same limit the shares would repeat the bytes, and the bytes panel is drawn alone, full width,
//! with the legend.
use super::data::{CompareSeries, CompareSweep, SeriesOf};
use crate::chart::legend::{densify, Glyph, Legend};
use crate::chart::scale::{ByteAxis, XScale};
use crate::chart::style::{across, budget_style, label_style, palette, series_style, OOM_LABEL};
use crate::chart::{file_safe, header, variant_suffix, Chart, Plot};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;

/// Which of the two panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panel {
    Bytes,
    Share,
}

/// The mapping from data to a panel's coordinates.
struct Frame {
    panel: Panel,
    scale: XScale,
    x: Range<f64>,
    y_top: f64,
    axis: ByteAxis,
    /// The limit every folder shares, where the bytes panel is drawn alone.
    shared: Option<u64>,
}

impl Frame {
    fn y(&self, s: &CompareSeries, bytes: u64) -> f64 {
        match self.panel {
            Panel::Bytes => self.axis.value(bytes),
            Panel::Share => s.share(bytes),
        }
    }

    fn fraction(&self, (x, y): (f64, f64)) -> (f64, f64) {
        ((x - self.x.start) / (self.x.end - self.x.start), y / self.y_top)
    }
}

impl Chart for CompareSweep {
    fn file_stem(&self) -> String {
        match self.series_of {
            SeriesOf::Folders => {
                format!("compare_peak_vs_{}{}", file_safe(&self.x_label), variant_suffix(&self.variant))
            }
            SeriesOf::Variants => format!("peak_vs_{}-variants", file_safe(&self.x_label)),
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let xs = self.xs();
        let scale = XScale::for_values(&xs);
        let top = self.top_bytes();
        let axis = ByteAxis::for_max(top);
        let bytes_top = if top > 0 { axis.value(top) * 1.1 } else { 1.0 };
        let shared = self.shared_limit();
        if shared.is_some() {
            let frame =
                Frame { panel: Panel::Bytes, scale, x: scale.range(&xs), y_top: bytes_top, axis, shared };
            return self.draw_panel(&area, &frame);
        }
        let width = area.dim_in_pixel().0;
        let (left, right) = area.split_horizontally(width / 2);
        for (panel, area, y_top) in
            [(Panel::Bytes, &left, bytes_top), (Panel::Share, &right, self.top_share() * 1.1)]
        {
            let frame = Frame { panel, scale, x: scale.range(&xs), y_top, axis, shared };
            self.draw_panel(area, &frame)?;
        }
        Ok(())
    }
}

impl CompareSweep {
    fn draw_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let of = self.series_of.word();
        let caption = match (frame.panel, frame.shared) {
            (Panel::Bytes, Some(0)) => format!("in bytes; no budget, so no line for one; a line per {of}"),
            (Panel::Bytes, Some(limit)) => format!(
                "in bytes; dashed: the {} every {of} has ({}), so shares of it would draw the same lines",
                self.shared_limit_name(),
                crate::units::format_bytes(limit)
            ),
            (Panel::Bytes, None) => format!("in bytes; dashed: each {of}'s budget"),
            (Panel::Share, _) => format!("as a share of each {of}'s budget (or capacity)"),
        };
        let mut plot = ChartBuilder::on(area)
            .caption(caption, label_style())
            .margin_left(16)
            .margin_right(30)
            .margin_top(4)
            .margin_bottom(16)
            .x_label_area_size(60)
            .y_label_area_size(74)
            .build_cartesian_2d(frame.x.clone(), 0.0..frame.y_top)?;
        let integral = self.xs().iter().all(|x| x.fract() == 0.0);
        let y_desc = match frame.panel {
            Panel::Bytes => frame.axis.desc("peak reserved"),
            Panel::Share => "peak reserved (% of budget)".to_string(),
        };
        // At most 8 ticks where a panel has half the width of a chart.
        let ticks = if frame.shared.is_some() { 12 } else { 8 };
        frame.scale.draw_mesh(&mut plot, &frame.x, integral, ticks, &self.x_label, y_desc)?;

        // Limits: one dashed line per folder in bytes, in its colour; one at 100% in shares.
        let dashed = |y: f64, colour: RGBColor| across(&frame.x, y, colour.stroke_width(2));
        match (frame.panel, frame.shared) {
            (Panel::Bytes, Some(0)) => {}
            (Panel::Bytes, Some(limit)) => {
                plot.draw_series(dashed(frame.axis.value(limit), palette::BUDGET))?;
            }
            (Panel::Bytes, None) => {
                for (i, s) in self.series.iter().enumerate() {
                    plot.draw_series(dashed(frame.axis.value(s.limit), palette::category(i)))?;
                }
            }
            (Panel::Share, _) => {
                plot.draw_series(dashed(100.0, palette::BUDGET))?;
            }
        }
        // The last folder first, so that A, the reference, is on top where lines meet.
        for (i, s) in self.series.iter().enumerate().rev() {
            let colour = palette::category(i);
            let points: Vec<(f64, f64)> =
                s.ok().map(|p| (frame.scale.map(p.x), frame.y(s, p.max_reserved))).collect();
            plot.draw_series(LineSeries::new(points.iter().copied(), series_style(colour)))?;
            // A's points are dots; each later folder's are rings a size larger, so that where
            // two folders measured the same (two CPUs often do, to the byte) the later shows
            // around A's dot instead of hidden under it.
            let marks = points.into_iter().map(|c| match i {
                0 => Circle::new(c, DOT, colour.filled()),
                _ => Circle::new(c, ring(i), colour.stroke_width(2)),
            });
            plot.draw_series(marks)?;
            let crosses = s.ooms().map(|p| {
                Cross::new((frame.scale.map(p.x), frame.y(s, s.oom_marker(p))), 8, colour.stroke_width(3))
            });
            plot.draw_series(crosses)?;
        }
        if frame.panel == Panel::Share || frame.shared.is_some() {
            self.draw_legend(&mut plot, frame)?;
        }
        Ok(())
    }

    fn draw_legend<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut legend = Legend::default();
        for (i, s) in self.series.iter().enumerate() {
            legend.add(&s.label, Glyph::line(palette::category(i), if i == 0 { DOT } else { ring(i) }));
        }
        if self.series.iter().any(|s| s.ooms().next().is_some()) {
            // One entry stands for every folder's crosses, so it takes none of their colours.
            legend.add(OOM_LABEL, Glyph::Cross(palette::AXIS.stroke_width(3)));
        }
        let limit_y = match (frame.panel, frame.shared) {
            (Panel::Bytes, Some(0)) => 0.0,
            (Panel::Bytes, Some(limit)) => {
                legend.add(
                    format!("{} of every {}", self.shared_limit_name(), self.series_of.word()),
                    Glyph::Dashed(budget_style()),
                );
                frame.axis.value(limit)
            }
            _ => {
                legend.add("100% of budget", Glyph::Dashed(budget_style()));
                100.0
            }
        };

        let mut drawn = densify(&[(0.0, limit_y / frame.y_top), (1.0, limit_y / frame.y_top)], 50);
        for s in &self.series {
            let line: Vec<(f64, f64)> =
                s.ok().map(|p| frame.fraction((frame.scale.map(p.x), frame.y(s, p.max_reserved)))).collect();
            drawn.extend(densify(&line, 20));
            drawn.extend(
                s.ooms().map(|p| frame.fraction((frame.scale.map(p.x), frame.y(s, s.oom_marker(p))))),
            );
        }
        legend.draw_where_free(plot, &drawn)
    }
}

/// The radius of A's dots, in pixels.
const DOT: i32 = 5;

/// The radius of folder `i`'s rings (B's 8, C's 11, ...): each larger than the one before.
fn ring(i: usize) -> i32 {
    DOT + 3 * i.min(8) as i32
}
