//! Drawing the sweep chart: the budget, the prediction, the peaks, the OOM crosses and error
//! rings, the note on the largest value that fit, and the legend where it hides none of them.
use super::data::{PeakPoint, SweepPeak};
use crate::chart::legend::{densify, Glyph, Legend};
use crate::chart::scale::{ByteAxis, XScale};
use crate::chart::style::{
    across, budget_label, budget_style, drop_to_axis, error_style, label_style, oom_style, palette,
    predicted_style, series_style, OOM_LABEL, PREDICTED_LABEL,
};
use crate::chart::{header, Chart, Plot};
use crate::schema::Status;
use crate::units::{format_bytes, format_tick};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// What the drawing functions share: the mapping from data to the plot's coordinates.
struct Frame {
    scale: XScale,
    x: Range<f64>,
    y_top: f64,
    axis: ByteAxis,
}

impl Frame {
    fn new(chart: &SweepPeak) -> Frame {
        // The trials' values decide the scale; the curve widens the range to show its course.
        let trials: Vec<f64> = chart.points.iter().map(|p| p.x).collect();
        let scale = XScale::for_values(&trials);
        let xs: Vec<f64> =
            trials.into_iter().chain(chart.predicted_line().into_iter().map(|(x, _)| x)).collect();
        let top_bytes = chart.top();
        let axis = ByteAxis::for_max(top_bytes);
        let top = axis.value(top_bytes);
        Frame { scale, x: scale.range(&xs), y_top: if top > 0.0 { top * 1.1 } else { 1.0 }, axis }
    }

    fn at(&self, x: f64, bytes: u64) -> (f64, f64) {
        (self.scale.map(x), self.axis.value(bytes))
    }

    /// `(x, y)` in plot coordinates as fractions of the plot, (0, 0) bottom left.
    fn fraction(&self, (x, y): (f64, f64)) -> (f64, f64) {
        ((x - self.x.start) / (self.x.end - self.x.start), y / self.y_top)
    }
}

impl Chart for SweepPeak {
    fn file_stem(&self) -> String {
        let x: String =
            self.x_label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        format!("peak_vs_{x}{}", self.stem_suffix.as_deref().unwrap_or_default())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let frame = Frame::new(self);
        let mut plot = ChartBuilder::on(&area)
            .margin_left(20)
            .margin_right(40)
            .margin_top(10)
            .margin_bottom(20)
            .x_label_area_size(60)
            .y_label_area_size(78)
            .build_cartesian_2d(frame.x.clone(), 0.0..frame.y_top)?;
        self.draw_mesh(&mut plot, &frame)?;
        self.draw_budget(&mut plot, &frame)?;
        self.draw_predicted(&mut plot, &frame)?;
        self.draw_peaks(&mut plot, &frame)?;
        self.draw_ooms(&mut plot, &frame)?;
        self.draw_errors(&mut plot, &frame)?;
        self.annotate_fit(&mut plot, &frame)?;
        self.legend().draw_where_free(&mut plot, &self.drawn_fractions(&frame))?;
        Ok(())
    }
}

impl SweepPeak {
    fn draw_mesh<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let integral = self.points.iter().all(|p| p.x.fract() == 0.0);
        let y_desc = frame.axis.desc("peak memory");
        frame.scale.draw_mesh(plot, &frame.x, integral, usize::MAX, &self.x_label, y_desc)
    }

    fn draw_budget<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let y = frame.axis.value(budget);
        plot.draw_series(across(&frame.x, y, budget_style()))?;
        Ok(())
    }

    /// The peaks of the trials that ran: a line with a dot per trial, reserved first so that
    /// allocated, the one the lesson reasons about, is on top where the two meet.
    fn draw_peaks<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        for (peak, colour) in [(Peak::Reserved, palette::RESERVED), (Peak::Allocated, palette::ALLOCATED)] {
            let points: Vec<(f64, f64)> = self.ok_points().map(|p| frame.at(p.x, peak.of(p))).collect();
            plot.draw_series(LineSeries::new(points.iter().copied(), series_style(colour)))?;
            plot.draw_series(points.into_iter().map(|c| Circle::new(c, 5, colour.filled())))?;
        }
        Ok(())
    }

    /// The model's prediction: a thin dashed line (the run's curve over every value, or through
    /// the trials) with a ring per trial, under the measurements so that where the two agree the
    /// measurement shows.
    fn draw_predicted<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        frame: &Frame,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let line: Vec<(f64, f64)> = self.predicted_line().into_iter().map(|(x, b)| frame.at(x, b)).collect();
        plot.draw_series(DashedLineSeries::new(line, 10, 6, predicted_style()))?;
        let rings = self.predicted_points().map(|(x, b)| Circle::new(frame.at(x, b), 8, predicted_style()));
        plot.draw_series(rings)?;
        Ok(())
    }

    fn draw_ooms<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let crosses =
            self.oom_points().map(|p| Cross::new(frame.at(p.x, self.oom_marker(p)), 8, oom_style()));
        plot.draw_series(crosses)?;
        Ok(())
    }

    fn draw_errors<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let rings = self
            .points
            .iter()
            .filter(|p| p.status == Status::Error)
            .map(|p| Circle::new(frame.at(p.x, 0), 7, error_style()));
        plot.draw_series(rings)?;
        Ok(())
    }

    /// Marks the largest value that ran, when some did not: a dotted drop from its peak to the
    /// axis, and a note beside it. Larger values ran out of memory, so their markers sit near
    /// the budget or above, and the space to the lower right of that peak is free; when the
    /// note does not fit there, it goes to the left of the dotted line, at the bottom.
    fn annotate_fit<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        if self.oom_points().next().is_none() {
            return Ok(());
        }
        let Some(fit) = self.largest_fit() else {
            return self.note_nothing_fit(plot, frame);
        };
        let top = frame.at(fit.x, fit.max_reserved.max(fit.max_allocated));
        let muted = palette::MUTED.stroke_width(2);
        plot.draw_series(drop_to_axis(top, muted))?;

        let lines = [
            format!("largest {} that fit: {}", self.x_label, format_tick(fit.x)),
            format!("peak reserved {}", format_bytes(fit.max_reserved)),
        ];
        let style = label_style();
        let area = plot.plotting_area();
        let width = lines
            .iter()
            .map(|l| area.estimate_text_size(l, &style).map(|(w, _)| w))
            .collect::<Result<Vec<u32>, _>>()?
            .into_iter()
            .max()
            .unwrap_or(0);
        let plot_width = area.dim_in_pixel().0;
        let room_right = (1.0 - frame.fraction(top).0) * f64::from(plot_width);
        let (anchor, origin, dx, dy) = if f64::from(width) + 30.0 < room_right {
            (HPos::Left, top, 16, 18)
        } else {
            (HPos::Right, (top.0, 0.0), -10, -54)
        };
        let style = style.pos(Pos::new(anchor, VPos::Top));
        for (i, line) in lines.into_iter().enumerate() {
            let shift = (dx, dy + 24 * i as i32);
            plot.draw_series(std::iter::once(
                EmptyElement::at(origin) + Text::new(line, shift, style.clone()),
            ))?;
        }
        Ok(())
    }

    /// When every trial ran out of memory, says so in the plot, where the lines would be.
    fn note_nothing_fit<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        frame: &Frame,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let text = format!("no {} fit: every trial ran out of memory", self.x_label);
        let centre = ((frame.x.start + frame.x.end) / 2.0, frame.y_top * 0.1);
        let style = label_style().pos(Pos::new(HPos::Center, VPos::Center));
        plot.draw_series(std::iter::once(Text::new(text, centre, style)))?;
        Ok(())
    }

    /// The legend's entries in reading order (allocated, reserved, OOM, error, prediction,
    /// budget); it goes wherever it hides no marker nor line.
    fn legend(&self) -> Legend {
        let has = |status| self.points.iter().any(|p| p.status == status);
        let mut legend = Legend::default();
        if has(Status::Ok) {
            for (peak, colour) in [(Peak::Allocated, palette::ALLOCATED), (Peak::Reserved, palette::RESERVED)]
            {
                legend.add(peak.name(), Glyph::line(colour, 5));
            }
        }
        if has(Status::Oom) {
            legend.add(OOM_LABEL, Glyph::Cross(oom_style()));
        }
        if has(Status::Error) {
            legend.add(ERROR_LABEL, Glyph::Ring(error_style()));
        }
        if self.predicted_points().next().is_some() {
            legend.add(PREDICTED_LABEL, Glyph::DashedRing(predicted_style()));
        }
        if let Some(budget) = self.budget {
            legend.add(budget_label(budget), Glyph::Dashed(budget_style()));
        }
        legend
    }

    /// Where the lines and markers are, as fractions of the plot, for placing the legend.
    fn drawn_fractions(&self, frame: &Frame) -> Vec<(f64, f64)> {
        let mut drawn = Vec::new();
        for peak in [Peak::Allocated, Peak::Reserved] {
            let line: Vec<(f64, f64)> =
                self.ok_points().map(|p| frame.fraction(frame.at(p.x, peak.of(p)))).collect();
            drawn.extend(densify(&line, 20));
        }
        drawn.extend(self.oom_points().map(|p| frame.fraction(frame.at(p.x, self.oom_marker(p)))));
        let predicted: Vec<(f64, f64)> =
            self.predicted_line().into_iter().map(|(x, b)| frame.fraction(frame.at(x, b))).collect();
        drawn.extend(densify(&predicted, 20));
        if let Some(budget) = self.budget {
            let y = frame.axis.value(budget) / frame.y_top;
            drawn.extend(densify(&[(0.0, y), (1.0, y)], 50));
        }
        drawn.extend(self.fit_note_fractions(frame));
        drawn
    }

    /// Where the "largest ... that fit" note and its dotted line go (see `draw_fit`), so that the
    /// legend keeps clear of them. The note is about a quarter of the plot wide and sits right of
    /// the line near its top, or left of it near the axis when there is no room on the right.
    fn fit_note_fractions(&self, frame: &Frame) -> Vec<(f64, f64)> {
        let Some(fit) = self.largest_fit().filter(|_| self.oom_points().next().is_some()) else {
            return Vec::new();
        };
        let (x, y) = frame.fraction(frame.at(fit.x, fit.max_reserved.max(fit.max_allocated)));
        let mut out = densify(&[(x, 0.0), (x, y)], 20);
        let (x0, y0, y1) = if x + 0.3 < 1.0 { (x, y - 0.12, y) } else { (x - 0.3, 0.0, 0.14) };
        for i in 0..=10 {
            for j in 0..=4 {
                out.push((x0 + 0.3 * f64::from(i) / 10.0, y0 + (y1 - y0) * f64::from(j) / 4.0));
            }
        }
        out
    }
}

/// Which of a trial's two peaks.
#[derive(Debug, Clone, Copy)]
enum Peak {
    Allocated,
    Reserved,
}

impl Peak {
    fn of(self, p: &PeakPoint) -> u64 {
        match self {
            Peak::Allocated => p.max_allocated,
            Peak::Reserved => p.max_reserved,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Peak::Allocated => "peak allocated",
            Peak::Reserved => "peak reserved",
        }
    }
}

const ERROR_LABEL: &str = "error (not memory)";
