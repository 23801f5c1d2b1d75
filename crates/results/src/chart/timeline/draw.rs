//! Drawing the timeline's plot: the steps' grounds, the budget, the peak bars and dashes, the
//! end-of-phase lines, the predictions, the OOM and its note, and the legend, above the data
//! when it finds no free place in the upper half.
use super::band::BAND_AREA;
use super::data::{Timeline, TimelinePoint};
use crate::chart::legend::{free_position, Glyph, Legend, UPPER_HALF};
use crate::chart::scale::ByteAxis;
use crate::chart::style::{
    across, budget_label, budget_style, drop_to_axis, house_style, label_style, oom_style, palette,
    predicted_style, series_style, OOM_LABEL, PREDICTED_LABEL,
};
use crate::chart::{header, variant_suffix, Chart, Plot};
use crate::units::{format_bytes, format_tick};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// An OOM's cross is drawn no higher than this fraction of the plot, to leave room for its note.
const OOM_HEIGHT: f64 = 0.85;

/// Steps narrower than this, in pixels, are not shaded.
const MIN_SHADED_STEP: f64 = 24.0;

/// The narrowest column, in pixels: below it, phases are grouped into columns.
const MIN_COLUMN: f64 = 3.0;

/// Above this many phases, the end-of-phase dots are left out: they would be a smear.
const MAX_DOTS: usize = 80;

pub(super) const ALLOCATED_LABEL: &str = "allocated at end of phase";
pub(super) const PEAK_ALLOCATED_LABEL: &str = "peak allocated in phase";
pub(super) const RESERVED_LABEL: &str = "reserved at end of phase";
pub(super) const PEAK_RESERVED_LABEL: &str = "peak reserved in phase";
pub(super) const SAME_RESERVED_LABEL: &str = "reserved = allocated here";
pub(super) const DEVICE_USED_LABEL: &str = "device used (NVML)";

impl Chart for Timeline {
    fn file_stem(&self) -> String {
        format!("timeline_trial{}{}", self.trial, variant_suffix(&self.variant))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let height = area.dim_in_pixel().1;
        let (upper, lower) = area.split_vertically(height.saturating_sub(BAND_AREA));
        let n = self.points.len().max(1) as f64;
        let axis = ByteAxis::for_max(self.top());
        let data_top = axis.value(self.top());
        let data_top = if data_top > 0.0 { data_top * 1.08 } else { 1.0 };
        // An OOM's note goes above its cross: room for it.
        let oom_top = self.oom.as_ref().map_or(0.0, |o| axis.value(self.oom_marker(o)) / OOM_HEIGHT);
        let data_top = data_top.max(oom_top);

        // Room for the legend: above the data when no corner of the plot is free.
        let build = |y_top: f64| {
            ChartBuilder::on(&upper)
                .margin_left(20)
                .margin_right(40)
                .margin_top(10)
                .margin_bottom(0)
                .x_label_area_size(0)
                .y_label_area_size(78)
                .build_cartesian_2d(0.0..n, 0.0..y_top)
        };
        let plot = build(data_top)?;
        let legend = self.legend();
        let (w, h) = legend.size_in(plot.plotting_area())?;
        let drawn = self.drawn_fractions(&axis, n, data_top);
        let (position, y_top) = match free_position(&drawn, (w, h), &UPPER_HALF) {
            Some(pos) => (pos, data_top),
            None => (SeriesLabelPosition::UpperRight, data_top / (1.0 - h).max(0.3)),
        };
        let mut plot = if y_top == data_top { plot } else { build(y_top)? };

        self.draw_mesh(&mut plot, &axis)?;
        let plot_width = f64::from(plot.plotting_area().dim_in_pixel().0);
        self.shade_steps(&mut plot, y_top, plot_width / n)?;
        self.draw_budget(&mut plot, &axis, n)?;
        let group = phases_per_column(plot_width / n);
        self.draw_peaks(&mut plot, &axis, group)?;
        self.draw_lines(&mut plot, &axis, group)?;
        self.draw_predicted(&mut plot, &axis, group)?;
        self.draw_oom(&mut plot, &axis, y_top)?;
        legend.draw(&mut plot, position)?;
        self.draw_band(&lower, n, group)?;
        Ok(())
    }
}

impl Timeline {
    fn draw_mesh<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, axis: &ByteAxis) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let y_fmt = |v: &f64| format_tick(*v);
        house_style(
            plot.configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .y_labels(10)
                .y_label_formatter(&y_fmt)
                .y_desc(axis.desc("memory")),
        )
        .draw()?;
        Ok(())
    }

    /// Every other step on a light grey ground, so that the eye finds the steps; not when the
    /// steps are so narrow that the grounds would be a pattern of stripes.
    fn shade_steps<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        y_top: f64,
        px_per_phase: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let shade = RGBColor(245, 245, 245).filled();
        let spans = self.step_spans();
        let widest = spans.iter().map(|&(_, a, b)| b - a).max().unwrap_or(0);
        if widest as f64 * px_per_phase < MIN_SHADED_STEP {
            return Ok(());
        }
        let grounds = spans
            .iter()
            .enumerate()
            .filter(|(k, _)| k % 2 == 1)
            .map(|(_, &(_, a, b))| Rectangle::new([(a as f64, 0.0), (b as f64, y_top)], shade));
        plot.draw_series(grounds)?;
        Ok(())
    }

    fn draw_budget<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        axis: &ByteAxis,
        n: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        if let Some(budget) = self.budget {
            let y = axis.value(budget);
            plot.draw_series(across(&(0.0..n), y, budget_style()))?;
        }
        Ok(())
    }

    /// The peaks within each column: a bar for allocated, a dash for reserved.
    fn draw_peaks<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        axis: &ByteAxis,
        group: usize,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let gap = if self.points.len() <= MAX_DOTS { 0.12 } else { 0.0 };
        let columns =
            || self.points.chunks(group).enumerate().map(|(c, ps)| (c * group, c * group + ps.len(), ps));
        let max = |ps: &[TimelinePoint], f: fn(&TimelinePoint) -> u64| ps.iter().map(f).max().unwrap_or(0);
        let bars = columns().map(|(a, b, ps)| {
            Rectangle::new(
                [(a as f64 + gap, 0.0), (b as f64 - gap, axis.value(max(ps, |p| p.max_allocated)))],
                palette::ALLOCATED.mix(0.22).filled(),
            )
        });
        plot.draw_series(bars)?;
        if self.reserved_differs() {
            let dashes = columns().map(|(a, b, ps)| {
                let y = axis.value(max(ps, |p| p.max_reserved));
                PathElement::new(
                    [(a as f64 + gap, y), (b as f64 - gap, y)],
                    palette::RESERVED.stroke_width(3),
                )
            });
            plot.draw_series(dashes)?;
        }
        Ok(())
    }

    /// The predicted peak of each column: a green tick across it with a ring in the middle.
    fn draw_predicted<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        axis: &ByteAxis,
        group: usize,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let style = predicted_style();
        let ticks = self.points.chunks(group).enumerate().filter_map(|(c, ps)| {
            let y = axis.value(ps.iter().filter_map(|p| p.predicted_peak).max()?);
            let (a, b) = ((c * group) as f64, (c * group + ps.len()) as f64);
            Some(
                EmptyElement::at(((a + b) / 2.0, y))
                    + PathElement::new([(-12, 0), (12, 0)], style)
                    + Circle::new((0, 0), 3, style),
            )
        });
        plot.draw_series(ticks)?;
        Ok(())
    }

    /// The end-of-phase series: device used, reserved, then allocated on top. One phase a
    /// column: lines through the ends of the columns. Several: a band from the lowest to the
    /// highest value in each column, since a line through every phase would be a solid smear.
    fn draw_lines<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        axis: &ByteAxis,
        group: usize,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        type Get = fn(&TimelinePoint) -> Option<u64>;
        let mut series: Vec<(Get, RGBColor)> = Vec::new();
        if self.has_device_used() {
            series.push((|p| p.device_used, palette::DEVICE_USED));
        }
        if self.reserved_differs() {
            series.push((|p| Some(p.reserved), palette::RESERVED));
        }
        series.push((|p| Some(p.allocated), palette::ALLOCATED));
        for (get, colour) in series {
            if group == 1 {
                let points: Vec<(f64, f64)> = self
                    .points
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| get(p).map(|v| ((i + 1) as f64, axis.value(v))))
                    .collect();
                plot.draw_series(LineSeries::new(points.iter().copied(), series_style(colour)))?;
                if self.points.len() <= MAX_DOTS {
                    plot.draw_series(points.into_iter().map(|c| Circle::new(c, 4, colour.filled())))?;
                }
                continue;
            }
            let mut upper = Vec::new();
            let mut lower = Vec::new();
            for (c, ps) in self.points.chunks(group).enumerate() {
                let values: Vec<u64> = ps.iter().filter_map(get).collect();
                if let (Some(lo), Some(hi)) = (values.iter().min(), values.iter().max()) {
                    let x = (c * group) as f64 + ps.len() as f64 / 2.0;
                    upper.push((x, axis.value(*hi)));
                    lower.push((x, axis.value(*lo)));
                }
            }
            let outline: Vec<(f64, f64)> = upper.iter().chain(lower.iter().rev()).copied().collect();
            plot.draw_series(std::iter::once(Polygon::new(outline, colour.mix(0.45).filled())))?;
            plot.draw_series(LineSeries::new(upper, colour.stroke_width(2)))?;
            plot.draw_series(LineSeries::new(lower, colour.stroke_width(2)))?;
        }
        Ok(())
    }

    /// A red cross where the OOM struck, a dotted line down to its phase, and what it asked for.
    fn draw_oom<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        axis: &ByteAxis,
        y_top: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let Some(oom) = &self.oom else {
            return Ok(());
        };
        let n = self.points.len();
        let x = oom.index.map_or(n as f64, |i| i as f64 + 0.5);
        let y = axis.value(self.oom_marker(oom));
        plot.draw_series(drop_to_axis((x, y), palette::OOM.stroke_width(2)))?;
        plot.draw_series(std::iter::once(Cross::new((x, y), 9, oom_style())))?;

        let mut text = "OOM".to_string();
        if let Some(phase) = oom.phase {
            text += &format!(" in {phase}");
        }
        if let Some(step) = oom.step {
            text += &format!(", step {step}");
        }
        if let Some(requested) = oom.requested {
            text += &format!(": tried to allocate {}", format_bytes(requested));
        }
        // Above the cross (the plot leaves room there), towards the side with more room, on a
        // white ground in case a bar or the budget line runs behind it.
        let right_half = x > n.max(1) as f64 / 2.0;
        let style = label_style().color(&palette::OOM);
        let (w, h) = plot.plotting_area().estimate_text_size(&text, &style)?;
        let (w, h) = (w as i32, h as i32);
        let left = if right_half { 12 - w } else { -12 };
        let top = if y > y_top * 0.95 { 14 } else { -18 - h };
        let ground =
            Rectangle::new([(left - 4, top - 3), (left + w + 4, top + h + 3)], WHITE.mix(0.85).filled());
        let note = Text::new(text, (left, top), style.pos(Pos::new(HPos::Left, VPos::Top)));
        plot.draw_series(std::iter::once(EmptyElement::at((x, y)) + ground + note))?;
        Ok(())
    }

    /// The legend's entries, in the order the eye meets the marks: allocated, then reserved,
    /// then what the device, the budget, the OOM and the model add.
    fn legend(&self) -> Legend {
        let mut legend = Legend::default();
        legend.add(ALLOCATED_LABEL, Glyph::line(palette::ALLOCATED, 4));
        legend.add(PEAK_ALLOCATED_LABEL, Glyph::Bar(palette::ALLOCATED.mix(0.22).filled()));
        if self.reserved_differs() {
            legend.add(RESERVED_LABEL, Glyph::line(palette::RESERVED, 4));
            legend.add(PEAK_RESERVED_LABEL, Glyph::Dash(palette::RESERVED.stroke_width(3)));
        } else if !self.points.is_empty() {
            legend.add(SAME_RESERVED_LABEL, Glyph::Blank);
        }
        if self.has_device_used() {
            legend.add(DEVICE_USED_LABEL, Glyph::line(palette::DEVICE_USED, 4));
        }
        if let Some(budget) = self.budget {
            legend.add(budget_label(budget), Glyph::Dashed(budget_style()));
        }
        if self.oom.is_some() {
            legend.add(OOM_LABEL, Glyph::Cross(oom_style()));
        }
        if self.has_predicted() {
            legend.add(PREDICTED_LABEL, Glyph::Tick(predicted_style()));
        }
        legend
    }

    /// Where lines, bars and markers are, as fractions of the plot, for placing the legend.
    fn drawn_fractions(&self, axis: &ByteAxis, n: f64, y_top: f64) -> Vec<(f64, f64)> {
        let mut drawn = Vec::new();
        for (i, p) in self.points.iter().enumerate() {
            let top = axis.value(p.top()) / y_top;
            // The column, from the bar's top down to the axis, both edges.
            for k in 0..=10 {
                let y = top * f64::from(k) / 10.0;
                drawn.push((i as f64 / n, y));
                drawn.push(((i + 1) as f64 / n, y));
            }
        }
        if let Some(budget) = self.budget {
            let y = axis.value(budget) / y_top;
            drawn.extend((0..=50).map(|k| (f64::from(k) / 50.0, y)));
        }
        if let Some(oom) = &self.oom {
            let x = oom.index.map_or(1.0, |i| (i as f64 + 0.5) / n);
            let y = axis.value(self.oom_marker(oom)) / y_top;
            // The cross and its note above it, about half the plot wide, on the side it goes.
            let side = if x > 0.5 { -0.5 } else { 0.5 };
            for dy in [0.0, 0.04, 0.08] {
                drawn.extend((0..=10).map(|k| (x + side * f64::from(k) / 10.0, y + dy)));
            }
        }
        drawn
    }
}

/// How many phases share a column of the plot: one while a phase gets [`MIN_COLUMN`] pixels,
/// else as many as make a column that wide.
pub(super) fn phases_per_column(px_per_phase: f64) -> usize {
    if px_per_phase >= MIN_COLUMN || px_per_phase <= 0.0 {
        1
    } else {
        (MIN_COLUMN / px_per_phase).ceil() as usize
    }
}
