//! The lesson's "how deep before out of memory" figure: peak allocated and peak reserved memory
//! against a swept value (depth, batch size, width, ...), with the trials that ran out of memory
//! marked where they would have needed to be, and the device's budget drawn across.
//!
//! An OOM is marked at what it would have needed at least (allocated + requested, from the
//! error message), or at the budget when the message did not say. The x axis turns
//! logarithmic (base 2) when the swept values span more than a factor of 64.
//!
//! When the summary carries the memory model's prediction (`predicted_peak`, from `oomlab
//! estimate`'s model), it is drawn too, as a thin dashed line through every trial, failed ones
//! included: where it crosses the budget is where the model says trials stop fitting, and how far
//! above the budget a failed trial's point sits is how much it would have needed.
//!
//! Rows that failed for another reason than memory (`Status::Error`) are kept and drawn as grey
//! rings on the x axis: they measured nothing, but hiding them would make a sweep look as if it
//! had never tried those values.
use super::legend::{densify, Glyph, Legend};
use super::scale::{format_bytes, format_tick, swept_key, ByteAxis, XScale};
use super::style::{
    budget_label, budget_style, error_style, house_style, label_style, oom_style, palette, predicted_style,
    series_style, OOM_LABEL, PREDICTED_LABEL,
};
use super::{header, Chart, Plot};
use crate::record::{Status, SummaryRow};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// The chart's data: one point per trial, sorted by the swept value.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPeak {
    pub title: String,
    /// Device, model, optimizer...: what the reader needs to read the numbers.
    pub subtitle: String,
    /// The swept key's last part: "depth" for `model.depth`.
    pub x_label: String,
    /// Sorted by `x`.
    pub points: Vec<SweepPoint>,
    /// The device's memory budget in bytes, drawn as a dashed line.
    pub budget: Option<u64>,
    /// Appended to the file stem, e.g. "-fp16" for one variant of a spec.
    pub stem_suffix: Option<String>,
}

/// One trial of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    /// The swept value.
    pub x: f64,
    pub status: Status,
    /// Peaks over the trial, in bytes (up to the failure for an OOM).
    pub max_allocated: u64,
    pub max_reserved: u64,
    /// For an OOM: what was allocated plus what was requested when it failed, the least the
    /// trial would have needed. None when the message did not give both.
    pub oom_need: Option<u64>,
    /// The memory model's peak for the whole trial (baseline included), when the summary has it.
    pub predicted: Option<u64>,
}

impl SweepPoint {
    fn from_row(row: &SummaryRow, x: f64) -> SweepPoint {
        let oom_need = match (row.status, row.oom_allocated, row.oom_requested) {
            (Status::Oom, Some(allocated), Some(requested)) => allocated.checked_add(requested),
            // Not run: the estimate's peak is what it would have needed.
            (Status::PredictedOom, _, _) => row.predicted_peak,
            _ => None,
        };
        // A predicted OOM is drawn with the OOMs, at its predicted need.
        let status = if row.status == Status::PredictedOom { Status::Oom } else { row.status };
        SweepPoint {
            x,
            status,
            max_allocated: row.max_memory_allocated,
            max_reserved: row.max_memory_reserved,
            oom_need,
            predicted: row.predicted_peak,
        }
    }
}

impl SweepPeak {
    /// The points of `rows` that have a swept value, sorted by it (a bisection runs them in
    /// another order: 1, 2, 4, ..., 64, 48, 40, ...). The x label is the last part of the
    /// first such row's `field`, or "value" when the field is empty.
    pub fn from_summary(
        rows: &[SummaryRow],
        title: impl Into<String>,
        subtitle: impl Into<String>,
        budget: Option<u64>,
    ) -> SweepPeak {
        let swept: Vec<(&SummaryRow, f64)> =
            rows.iter().filter_map(|row| row.value.filter(|v| v.is_finite()).map(|v| (row, v))).collect();
        let x_label = swept.first().map_or("value", |(row, _)| swept_key(&row.field)).to_string();
        let mut points: Vec<SweepPoint> =
            swept.into_iter().map(|(row, x)| SweepPoint::from_row(row, x)).collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        SweepPeak {
            title: title.into(),
            subtitle: subtitle.into(),
            x_label,
            points,
            budget,
            stem_suffix: None,
        }
    }

    /// The trials that ran, in order.
    pub fn ok_points(&self) -> impl Iterator<Item = &SweepPoint> {
        self.points.iter().filter(|p| p.status == Status::Ok)
    }

    /// The trials that ran out of memory, in order.
    pub fn oom_points(&self) -> impl Iterator<Item = &SweepPoint> {
        self.points.iter().filter(|p| p.status == Status::Oom)
    }

    /// The trials with a predicted peak, in order.
    fn predicted_points(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.points.iter().filter_map(|p| p.predicted.map(|b| (p.x, b)))
    }

    /// The trial with the largest swept value that ran.
    pub fn largest_fit(&self) -> Option<&SweepPoint> {
        self.ok_points().last()
    }

    /// Where an OOM is marked: at what it needed; else at the budget; else at the peak it
    /// reached before failing (a lower bound too); else as high as anything measured, since it
    /// needed more than the trials that ran.
    fn oom_marker(&self, p: &SweepPoint) -> u64 {
        let reached = p.max_allocated.max(p.max_reserved);
        p.oom_need.or(self.budget).or((reached > 0).then_some(reached)).unwrap_or_else(|| self.measured_top())
    }

    /// The highest value measured: peaks of the trials that ran, and the known needs.
    fn measured_top(&self) -> u64 {
        let peaks = self.ok_points().map(|p| p.max_allocated.max(p.max_reserved));
        let needs = self.oom_points().filter_map(|p| p.oom_need);
        peaks.chain(needs).max().unwrap_or(0)
    }

    /// The highest value drawn: peaks, OOM markers, predictions and budget.
    fn top(&self) -> u64 {
        let ooms = self.oom_points().map(|p| self.oom_marker(p)).max();
        let predicted = self.predicted_points().map(|(_, b)| b).max();
        [Some(self.measured_top()), ooms, predicted, self.budget].into_iter().flatten().max().unwrap_or(0)
    }
}

/// What the drawing functions share: the mapping from data to the plot's coordinates.
struct Frame {
    scale: XScale,
    x: Range<f64>,
    y_top: f64,
    axis: ByteAxis,
}

impl Frame {
    fn new(chart: &SweepPeak) -> Frame {
        let xs: Vec<f64> = chart.points.iter().map(|p| p.x).collect();
        let scale = XScale::for_values(&xs);
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
        let x_desc = frame.scale.desc(&self.x_label);
        let y_desc = frame.axis.desc("peak memory");
        let scale = frame.scale;
        let x_fmt = move |t: &f64| scale.tick(*t);
        let y_fmt = |v: &f64| format_tick(*v);
        house_style(
            plot.configure_mesh()
                .x_labels(frame.scale.tick_count(&frame.x, integral))
                .y_labels(10)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc(x_desc)
                .y_desc(y_desc),
        )
        .draw()?;
        Ok(())
    }

    fn draw_budget<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let y = frame.axis.value(budget);
        plot.draw_series(DashedLineSeries::new(
            [(frame.x.start, y), (frame.x.end, y)],
            12,
            8,
            budget_style(),
        ))?;
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

    /// The model's prediction for every trial: a thin dashed line with a ring per trial, under
    /// the measurements so that where the two agree the measurement shows.
    fn draw_predicted<'a, DB: DrawingBackend + 'a>(
        &self,
        plot: &mut Plot<'a, DB>,
        frame: &Frame,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let points: Vec<(f64, f64)> = self.predicted_points().map(|(x, b)| frame.at(x, b)).collect();
        plot.draw_series(DashedLineSeries::new(points.iter().copied(), 10, 6, predicted_style()))?;
        plot.draw_series(points.into_iter().map(|c| Circle::new(c, 8, predicted_style())))?;
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
        plot.draw_series(DashedLineSeries::new([(top.0, 0.0), top], 4, 5, muted))?;

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
            self.predicted_points().map(|(x, b)| frame.fraction(frame.at(x, b))).collect();
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
    fn of(self, p: &SweepPoint) -> u64 {
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::test_support::{out_dir, png_size, svg_size, svg_texts};
    use crate::record::Phase;

    const GIB: u64 = 1 << 30;

    fn row(field: &str, value: Option<f64>, status: Status) -> SummaryRow {
        SummaryRow {
            trial: 0,
            field: field.to_string(),
            value,
            status,
            phase: (status != Status::Ok).then_some(Phase::Forward),
            step: (status != Status::Ok).then_some(1),
            depth: value.unwrap_or(1.0) as usize,
            hidden: 4096,
            batch_size: 64,
            samples: 1024,
            features: 4096,
            classes: 10,
            optimizer: "adam".to_string(),
            dtype: "float32".to_string(),
            max_memory_allocated: 0,
            max_memory_reserved: 0,
            baseline_allocated: 0,
            after_allocated: 0,
            param_count: 0,
            param_bytes: 0,
            step_seconds: None,
            final_loss: None,
            oom_requested: None,
            oom_total_capacity: None,
            oom_free: None,
            oom_allocated: None,
            oom_reserved: None,
            message: String::new(),
            ..SummaryRow::default()
        }
    }

    /// The lesson's sweep: depth 1 to 64 in bisection order, about 0.37 GiB a layer, out of
    /// memory from 41 layers on a 15.90 GiB budget.
    fn depth_sweep() -> (Vec<SummaryRow>, u64) {
        let budget = (15.90 * GIB as f64) as u64;
        let per_layer = (0.37 * GIB as f64) as u64;
        let base = (0.6 * GIB as f64) as u64;
        let rows = [1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]
            .into_iter()
            .enumerate()
            .map(|(trial, depth)| {
                let need = base + per_layer * depth;
                let mut r = if depth <= 40 {
                    let mut r = row("model.depth", Some(depth as f64), Status::Ok);
                    r.max_memory_allocated = need;
                    r.max_memory_reserved = need + need / 50;
                    r
                } else {
                    let mut r = row("model.depth", Some(depth as f64), Status::Oom);
                    // Fails asking for its last layer's activations.
                    let allocated = need - per_layer;
                    r.max_memory_allocated = allocated;
                    r.max_memory_reserved = allocated + allocated / 50;
                    r.oom_allocated = Some(allocated);
                    r.oom_requested = Some(need - allocated);
                    r
                };
                r.trial = trial;
                r
            })
            .collect();
        (rows, budget)
    }

    #[test]
    fn from_summary_sorts_and_computes_what_an_oom_needed() {
        let mut rows = vec![
            row("model.depth", Some(8.0), Status::Ok),
            row("model.depth", Some(2.0), Status::Ok),
            row("model.depth", Some(16.0), Status::Oom),
            row("model.depth", Some(12.0), Status::Oom),
            row("model.depth", None, Status::Ok),
            row("model.depth", Some(10.0), Status::Error),
        ];
        rows[2].oom_allocated = Some(10 * GIB);
        rows[2].oom_requested = Some(GIB / 2);
        rows[3].oom_allocated = Some(9 * GIB); // no requested size: need unknown
        rows[0].max_memory_allocated = 3 * GIB;
        rows[0].max_memory_reserved = 4 * GIB;

        let chart = SweepPeak::from_summary(&rows, "t", "s", Some(15 * GIB));
        let xs: Vec<f64> = chart.points.iter().map(|p| p.x).collect();
        assert_eq!(xs, [2.0, 8.0, 10.0, 12.0, 16.0]);
        assert_eq!(chart.x_label, "depth");
        assert_eq!(chart.file_stem(), "peak_vs_depth");
        assert_eq!(chart.points[4].oom_need, Some(10 * GIB + GIB / 2));
        assert_eq!(chart.points[3].oom_need, None);
        assert_eq!(chart.points[1].oom_need, None);
        assert_eq!(chart.points[1].max_allocated, 3 * GIB);
        assert_eq!(chart.points[1].max_reserved, 4 * GIB);
        assert_eq!(chart.points[2].status, Status::Error);
        assert_eq!(chart.largest_fit().map(|p| p.x), Some(8.0));
        assert_eq!(chart.budget, Some(15 * GIB));
        // Unknown need: marked at the budget.
        assert_eq!(chart.oom_marker(&chart.points[3]), 15 * GIB);
    }

    #[test]
    fn from_summary_labels_x_with_the_last_part_of_the_field() {
        let rows = [row("data.batch_size", Some(64.0), Status::Ok)];
        let chart = SweepPeak::from_summary(&rows, "", "", None);
        assert_eq!(chart.x_label, "batch_size");
        assert_eq!(chart.file_stem(), "peak_vs_batch_size");
        let rows = [row("", Some(1.0), Status::Ok)];
        assert_eq!(SweepPeak::from_summary(&rows, "", "", None).x_label, "value");
    }

    /// The lesson's figure, drawn where `out_dir` says (`OOMLAB_CHART_DIR` keeps it to look at).
    #[test]
    fn renders_the_lesson_figure_with_its_labels() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let (rows, budget) = depth_sweep();
        let subtitle = "Tesla T4 (15.90 GiB) · MLP, hidden 4096, batch 64 · float32 · Adam";
        let chart = SweepPeak::from_summary(&rows, "How deep before out of memory", subtitle, Some(budget));
        let out = render(&chart, &dir).expect("rendered");
        assert_eq!(out.png, dir.join("peak_vs_depth.png"));
        assert_eq!(out.svg, dir.join("peak_vs_depth.svg"));
        assert_eq!(png_size(&out.png), (1280, 800));
        assert_eq!(svg_size(&out.svg), (1280, 800));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(!texts.iter().any(|t| t == PREDICTED_LABEL), "no prediction in these rows");
        for text in [
            "peak allocated",
            "peak reserved",
            "OOM (allocated + requested)",
            "peak memory (GiB)",
            "depth",
            "budget 15.90 GiB",
            "largest depth that fit: 40",
            "How deep before out of memory",
            subtitle,
        ] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
    }

    /// Predictions come from the rows, for failed trials too, raise the axis to the highest
    /// one, and get a legend entry.
    #[test]
    fn predictions_are_kept_and_drawn() {
        let (mut rows, budget) = depth_sweep();
        for r in &mut rows {
            r.predicted_peak = Some((0.6 * GIB as f64) as u64 + (0.37 * GIB as f64) as u64 * r.depth as u64);
        }
        let chart = SweepPeak::from_summary(&rows, "t", "s", Some(budget));
        let at_64 = chart.points.iter().find(|p| p.x == 64.0).unwrap();
        assert_eq!(at_64.status, Status::Oom);
        assert_eq!(at_64.predicted, rows[6].predicted_peak);
        assert_eq!(chart.top(), at_64.predicted.unwrap(), "the highest prediction sets the axis");
        let dir = tempfile::tempdir().expect("temp dir");
        let out = render(&chart, dir.path()).expect("rendered");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == PREDICTED_LABEL), "{texts:?}");
    }

    #[test]
    fn renders_all_oom_single_point_wide_and_empty_sweeps() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let mut oom = row("model.depth", Some(4.0), Status::Oom);
        oom.oom_allocated = Some(GIB);
        oom.oom_requested = Some(GIB);
        let unknown = row("model.depth", Some(8.0), Status::Oom);
        let all_oom = SweepPeak::from_summary(&[oom, unknown], "all oom", "", None);
        render(&all_oom, &dir.join("all_oom")).expect("all-OOM sweep renders");

        let mut one = row("model.hidden", Some(512.0), Status::Ok);
        one.max_memory_allocated = 3 << 20;
        one.max_memory_reserved = 4 << 20;
        let single = SweepPeak::from_summary(&[one], "one", "", None);
        let out = render(&single, &dir.join("single")).expect("single point renders");
        let texts = svg_texts(&std::fs::read_to_string(out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == "peak memory (MiB)"), "{texts:?}");

        let wide: Vec<SummaryRow> = (0..13)
            .map(|i| {
                let mut r = row("data.batch_size", Some(f64::from(1 << i)), Status::Ok);
                r.max_memory_allocated = (1 << i) * (1 << 20);
                r.max_memory_reserved = (1 << i) * (1 << 20) * 2;
                r
            })
            .chain([row("data.batch_size", Some(8192.0), Status::Error)])
            .collect();
        let wide = SweepPeak::from_summary(&wide, "wide", "", Some(16 * GIB));
        let out = render(&wide, &dir.join("wide")).expect("log axis renders");
        let texts = svg_texts(&std::fs::read_to_string(out.svg).expect("svg readable"));
        for text in ["batch_size (log scale)", "1", "64", "4096", "error (not memory)"] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }

        let empty = SweepPeak::from_summary(&[], "empty", "", None);
        render(&empty, &dir.join("empty")).expect("empty sweep renders");
    }
}
