//! Memory through one trial: what was allocated and reserved at the end of every phase, and the
//! peaks within it, step after step, so that a reader sees the pattern of a training step
//! (forward builds activations up, backward frees them for gradients, the first optimizer step
//! adds its state) and where an out-of-memory struck.
//!
//! The x axis counts phases, one unit each, in the order they ran: a 50 µs `zero_grad` gets
//! as much room as a 2 s `backward`, since what matters here is the memory pattern, not time
//! (the phase times are in the Chrome trace). Each phase is a column:
//!
//! - a light blue bar up to the peak allocated within the phase;
//! - an orange dash at the peak reserved within it;
//! - solid lines through the allocated and reserved memory at the end of each phase, with a dot
//!   at the column's right edge (the end of the phase);
//! - the memory the device reports as used (NVML) when the trace has it;
//! - when given, the memory model's predicted peak of each phase (`oomlab estimate`), as a
//!   green tick across the column: where it sits on the bar's top, the model saw that phase.
//!
//! Steps are shaded alternately and numbered under the plot; a band of colours there names the
//! phase of each column. An OOM is a red cross in the column of the phase it struck, at what it
//! needed (allocated + requested), or at the budget when its message did not say.
use super::legend::{free_position, Glyph, Legend, UPPER_HALF};
use super::scale::{format_bytes, format_tick, ByteAxis};
use super::style::{
    axis_desc_style, budget_label, budget_style, house_style, label_style, oom_style, palette, phase_colour,
    predicted_style, series_style, OOM_LABEL, PREDICTED_LABEL,
};
use super::{header, Chart, Plot};
use crate::record::{Phase, PhaseRecord, Status, SummaryRow};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The chart's data: the phases of one trial, in the order they ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub title: String,
    pub subtitle: String,
    pub trial: usize,
    /// The `[[variant]]` name, empty without variants; it goes into the file stem.
    pub variant: String,
    pub status: Status,
    /// In the order of the trace.
    pub points: Vec<TimelinePoint>,
    /// The device's memory budget in bytes, drawn as a dashed line.
    pub budget: Option<u64>,
    /// Where the trial ran out of memory, when it did.
    pub oom: Option<OomMark>,
}

/// One phase of the trial.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelinePoint {
    pub step: usize,
    pub micro: usize,
    pub phase: Phase,
    /// At the end of the phase.
    pub allocated: u64,
    pub reserved: u64,
    /// Within the phase.
    pub max_allocated: u64,
    pub max_reserved: u64,
    /// What the device reported as used (NVML), at the end of the phase.
    pub device_used: Option<u64>,
    /// When the phase started and how long it ran, in seconds since the trial started.
    pub start_seconds: f64,
    pub seconds: f64,
    /// The memory model's peak for the phase (baseline included), when known.
    pub predicted_peak: Option<u64>,
}

/// The out-of-memory that ended a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct OomMark {
    /// The index in `points` of the phase it struck in; None when the trace has no such phase.
    pub index: Option<usize>,
    pub phase: Option<Phase>,
    pub step: Option<usize>,
    /// What the failed allocation asked for.
    pub requested: Option<u64>,
    /// Allocated + requested when it failed: the least the phase needed.
    pub need: Option<u64>,
}

impl TimelinePoint {
    fn from_record(r: &PhaseRecord) -> TimelinePoint {
        TimelinePoint {
            step: r.step,
            micro: r.micro,
            phase: r.phase,
            allocated: r.memory_allocated,
            reserved: r.memory_reserved,
            max_allocated: r.max_memory_allocated,
            max_reserved: r.max_memory_reserved,
            device_used: r.device_used,
            start_seconds: (r.elapsed_seconds - r.phase_seconds).max(0.0),
            seconds: r.phase_seconds,
            predicted_peak: None,
        }
    }

    /// The highest of the numbers drawn for this phase.
    fn top(&self) -> u64 {
        [
            self.allocated,
            self.reserved,
            self.max_allocated,
            self.max_reserved,
            self.device_used.unwrap_or(0),
            self.predicted_peak.unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

impl Timeline {
    /// The records of `row`'s trial in `trace` (which may hold every trial of a run), in the
    /// order they were written, and the OOM that ended it if it did: in the last phase that
    /// matches the row's phase and step, or the last phase of all when none does.
    pub fn from_trace(
        trace: &[PhaseRecord],
        row: &SummaryRow,
        title: impl Into<String>,
        subtitle: impl Into<String>,
        budget: Option<u64>,
    ) -> Timeline {
        let points: Vec<TimelinePoint> =
            trace.iter().filter(|r| r.trial == row.trial).map(TimelinePoint::from_record).collect();
        let oom = (row.status == Status::Oom).then(|| {
            let at = |p: &TimelinePoint| Some(p.phase) == row.phase && Some(p.step) == row.step;
            let index = points.iter().rposition(at).or(points.len().checked_sub(1));
            let need = match (row.oom_allocated, row.oom_requested) {
                (Some(a), Some(r)) => a.checked_add(r),
                _ => None,
            };
            OomMark { index, phase: row.phase, step: row.step, requested: row.oom_requested, need }
        });
        Timeline {
            title: title.into(),
            subtitle: subtitle.into(),
            trial: row.trial,
            variant: row.variant.clone(),
            status: row.status,
            points,
            budget,
            oom,
        }
    }

    /// Sets each phase's predicted peak from `predicted(step, micro, phase)`; the caller owns
    /// the model, so that the chart only draws.
    pub fn set_predicted(&mut self, predicted: impl Fn(usize, usize, Phase) -> Option<u64>) {
        for p in &mut self.points {
            p.predicted_peak = predicted(p.step, p.micro, p.phase);
        }
    }

    /// Whether any phase has a predicted peak.
    pub fn has_predicted(&self) -> bool {
        self.points.iter().any(|p| p.predicted_peak.is_some())
    }

    /// Whether the trace has NVML's numbers.
    pub fn has_device_used(&self) -> bool {
        self.points.iter().any(|p| p.device_used.is_some())
    }

    /// Whether reserved memory differs from allocated anywhere (it does not on the CPU, which
    /// has no caching allocator; then the reserved series would only hide the allocated one).
    pub fn reserved_differs(&self) -> bool {
        self.points.iter().any(|p| p.reserved != p.allocated || p.max_reserved != p.max_allocated)
    }

    /// The steps as `(step, first index, end index)`, in order: consecutive phases of one step.
    pub fn step_spans(&self) -> Vec<(usize, usize, usize)> {
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for (i, p) in self.points.iter().enumerate() {
            match spans.last_mut() {
                Some((step, _, end)) if *step == p.step => *end = i + 1,
                _ => spans.push((p.step, i, i + 1)),
            }
        }
        spans
    }

    /// Where the OOM cross is drawn: at what the phase needed; else the budget; else the peak
    /// the phase reached.
    fn oom_marker(&self, oom: &OomMark) -> u64 {
        let reached = oom.index.and_then(|i| self.points.get(i)).map(|p| p.top()).unwrap_or(0);
        oom.need.or(self.budget).unwrap_or(reached)
    }

    /// The highest value drawn.
    fn top(&self) -> u64 {
        let data = self.points.iter().map(TimelinePoint::top).max().unwrap_or(0);
        let oom = self.oom.as_ref().map(|o| self.oom_marker(o));
        [Some(data), oom, self.budget].into_iter().flatten().max().unwrap_or(0)
    }

    /// The phases in the order they first appear, for the band's key.
    fn phases(&self) -> Vec<Phase> {
        let mut seen = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.phase) {
                seen.push(p.phase);
            }
        }
        seen
    }

    fn trial_seconds(&self) -> f64 {
        self.points.iter().map(|p| p.start_seconds + p.seconds).fold(0.0, f64::max)
    }
}

/// Height of the band of phase colours, step numbers and phase key under the plot, in pixels.
const BAND_AREA: u32 = 138;
const BAND_HEIGHT: i32 = 18;

/// An OOM's cross is drawn no higher than this fraction of the plot, to leave room for its note.
const OOM_HEIGHT: f64 = 0.85;

/// Steps narrower than this, in pixels, are not shaded.
const MIN_SHADED_STEP: f64 = 24.0;

/// The narrowest column, in pixels: below it, phases are grouped into columns.
const MIN_COLUMN: f64 = 3.0;

/// Above this many phases, the end-of-phase dots are left out: they would be a smear.
const MAX_DOTS: usize = 80;

const ALLOCATED_LABEL: &str = "allocated at end of phase";
const PEAK_ALLOCATED_LABEL: &str = "peak allocated in phase";
const RESERVED_LABEL: &str = "reserved at end of phase";
const PEAK_RESERVED_LABEL: &str = "peak reserved in phase";
const SAME_RESERVED_LABEL: &str = "reserved = allocated here";
const DEVICE_USED_LABEL: &str = "device used (NVML)";

impl Chart for Timeline {
    fn file_stem(&self) -> String {
        let variant: String = self
            .variant
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        if variant.is_empty() {
            format!("timeline_trial{}", self.trial)
        } else {
            format!("timeline_trial{}-{variant}", self.trial)
        }
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
            plot.draw_series(DashedLineSeries::new([(0.0, y), (n, y)], 12, 8, budget_style()))?;
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
        plot.draw_series(DashedLineSeries::new([(x, 0.0), (x, y)], 4, 5, palette::OOM.stroke_width(2)))?;
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

    /// Under the plot: the phase of each column as a colour, the step numbers, what the x axis
    /// is, and the key to the colours.
    fn draw_band<DB: DrawingBackend>(
        &self,
        lower: &DrawingArea<DB, Shift>,
        n: f64,
        group: usize,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let band = ChartBuilder::on(lower)
            .margin_left(20)
            .margin_right(40)
            .margin_top(0)
            .margin_bottom(BAND_AREA - BAND_HEIGHT as u32)
            .y_label_area_size(78)
            .build_cartesian_2d(0.0..n, 0.0..1.0)?;
        let area = band.plotting_area();
        let cells = self.points.iter().enumerate().map(|(i, p)| {
            Rectangle::new([(i as f64, 0.0), ((i + 1) as f64, 1.0)], phase_colour(p.phase).filled())
        });
        area.draw(&Rectangle::new([(0.0, 0.0), (n, 1.0)], palette::GRID.filled()))?;
        for cell in cells {
            area.draw(&cell)?;
        }
        // Step boundaries as white gaps, when the columns are wide enough to show them.
        let (plot_w, _) = area.dim_in_pixel();
        let px_per_phase = f64::from(plot_w) / n;
        let spans = self.step_spans();
        if px_per_phase >= 4.0 {
            for &(_, a, _) in spans.iter().skip(1) {
                let x = a as f64;
                area.draw(&PathElement::new([(x, 0.0), (x, 1.0)], WHITE.stroke_width(2)))?;
            }
        }

        // Step numbers, centred under their steps, thinned so that they do not collide.
        let style = label_style();
        let widest = spans
            .iter()
            .map(|&(s, _, _)| area.estimate_text_size(&step_label(s), &style).map(|(w, _)| w))
            .collect::<Result<Vec<u32>, _>>()?
            .into_iter()
            .max()
            .unwrap_or(0);
        let training: Vec<usize> = spans.iter().map(|&(_, a, b)| b - a).filter(|&len| len > 0).collect();
        let typical = training.iter().copied().max().unwrap_or(1) as f64 * px_per_phase;
        let stride = stride_for(typical, f64::from(widest) + 14.0);
        let centred = Pos::new(HPos::Center, VPos::Top);
        for &(step, a, b) in &spans {
            let setup_fits = step == 0 && (b - a) as f64 * px_per_phase >= f64::from(widest) + 8.0;
            if (step == 0 && !setup_fits) || (step > 0 && step % stride != 0 && stride > 1) {
                continue;
            }
            let centre = ((a + b) as f64 / 2.0, 0.0);
            area.draw(&(EmptyElement::at(centre) + Text::new(step_label(step), (0, 6), style.pos(centred))))?;
        }

        let seconds = self.trial_seconds();
        let columns = if group == 1 {
            "one column each".to_string()
        } else {
            format!("lines as ranges over {group} phases at a time")
        };
        let desc = format!(
            "step: {} phases in the order they ran, {columns} ({} s in all)",
            self.points.len(),
            format_seconds(seconds)
        );
        let middle = (n / 2.0, 0.0);
        area.draw(&(EmptyElement::at(middle) + Text::new(desc, (0, 34), axis_desc_style().pos(centred))))?;

        // The key: a swatch and a name per phase present, centred in one row.
        let phases = self.phases();
        let mut widths = Vec::new();
        for p in &phases {
            widths.push(area.estimate_text_size(p.as_str(), &style)?.0 as i32 + 22 + 22);
        }
        let total: i32 = widths.iter().sum();
        let mut x = -total / 2;
        let key_y = 76;
        for (p, w) in phases.iter().zip(widths) {
            let swatch = Rectangle::new([(x, key_y - 1), (x + 16, key_y + 15)], phase_colour(*p).filled());
            let name = Text::new(p.as_str(), (x + 22, key_y), style.pos(Pos::new(HPos::Left, VPos::Top)));
            area.draw(&(EmptyElement::at(middle) + swatch + name))?;
            x += w;
        }
        Ok(())
    }
}

/// How many phases share a column of the plot: one while a phase gets [`MIN_COLUMN`] pixels,
/// else as many as make a column that wide.
fn phases_per_column(px_per_phase: f64) -> usize {
    if px_per_phase >= MIN_COLUMN || px_per_phase <= 0.0 {
        1
    } else {
        (MIN_COLUMN / px_per_phase).ceil() as usize
    }
}

fn step_label(step: usize) -> String {
    if step == 0 {
        "setup".to_string()
    } else {
        step.to_string()
    }
}

/// Label every `stride`th step, `stride` a round number (1, 2, 5, 10, 20, 50, ...), so that
/// labels `label_px` wide fit under steps `step_px` wide.
fn stride_for(step_px: f64, label_px: f64) -> usize {
    let mut base = 1;
    loop {
        for m in [1, 2, 5] {
            let stride = base * m;
            if step_px * stride as f64 >= label_px || stride >= 1_000_000 {
                return stride;
            }
        }
        base *= 10;
    }
}

fn format_seconds(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.0}")
    } else if s >= 0.1 {
        format!("{s:.2}")
    } else {
        format!("{s:.4}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::test_support::{out_dir, png_size, svg_texts};

    const MIB: u64 = 1 << 20;

    /// One training trial as the trainer writes it: data and model, then `steps` steps of the
    /// five phases; activations (`act`) built in forward and freed in backward, gradients and
    /// (from the first optimizer step) Adam's state, with a caching allocator that keeps a
    /// little more than it hands out.
    pub(crate) fn trace(trial: usize, steps: usize, params: u64, act: u64) -> Vec<PhaseRecord> {
        let mut out = Vec::new();
        let mut t = 0.0;
        let mut push = |step, phase, allocated: u64, peak: u64, secs: f64| {
            t += secs;
            out.push(PhaseRecord {
                trial,
                step,
                micro: 0,
                phase,
                memory_allocated: allocated,
                memory_reserved: allocated + allocated / 8,
                max_memory_allocated: peak,
                max_memory_reserved: peak + peak / 8,
                device_used: None,
                phase_seconds: secs,
                elapsed_seconds: t,
            });
        };
        push(0, Phase::Data, MIB, MIB, 0.01);
        push(0, Phase::Model, MIB + params, MIB + params, 0.02);
        let base = MIB + params;
        for step in 1..=steps {
            let state = if step == 1 { 0 } else { 2 * params };
            push(step, Phase::ToDevice, base + state + MIB / 4, base + state + MIB / 4, 0.001);
            push(step, Phase::Forward, base + state + act, base + state + act + act / 4, 0.05);
            push(step, Phase::Backward, base + state + params, base + state + act + params, 0.1);
            push(step, Phase::OptimizerStep, base + 3 * params, base + 3 * params + params / 2, 0.03);
            push(step, Phase::ZeroGrad, base + 2 * params, base + 3 * params, 0.0001);
        }
        out
    }

    fn summary(trial: usize, status: Status) -> SummaryRow {
        SummaryRow { trial, status, field: "model.depth".into(), value: Some(4.0), ..SummaryRow::default() }
    }

    #[test]
    fn from_trace_keeps_the_trial_in_order_and_finds_the_oom() {
        let mut all = trace(1, 2, 100 * MIB, 50 * MIB);
        let mut second = trace(2, 2, 100 * MIB, 50 * MIB);
        second.truncate(5); // data, model, to_device, forward, backward: OOM in backward
        all.extend(second);
        let mut row = summary(2, Status::Oom);
        row.phase = Some(Phase::Backward);
        row.step = Some(1);
        row.oom_allocated = Some(300 * MIB);
        row.oom_requested = Some(20 * MIB);
        let chart = Timeline::from_trace(&all, &row, "t", "s", Some(GIB));
        assert_eq!(chart.points.len(), 5);
        assert_eq!(chart.points[3].phase, Phase::Forward);
        assert!((chart.points[3].start_seconds - 0.031).abs() < 1e-9);
        let oom = chart.oom.clone().expect("an OOM");
        assert_eq!(oom.index, Some(4));
        assert_eq!(oom.need, Some(320 * MIB));
        assert_eq!(chart.oom_marker(&oom), 320 * MIB);
        assert_eq!(chart.step_spans(), [(0, 0, 2), (1, 2, 5)]);
        assert_eq!(chart.file_stem(), "timeline_trial2");
        assert_eq!(
            chart.phases(),
            [Phase::Data, Phase::Model, Phase::ToDevice, Phase::Forward, Phase::Backward]
        );

        let ok = Timeline::from_trace(&all, &summary(1, Status::Ok), "t", "s", None);
        assert_eq!(ok.points.len(), 12);
        assert!(ok.oom.is_none());
        assert!(ok.reserved_differs());
        assert!(!ok.has_device_used());

        // Without a matching phase, the OOM goes to the last phase; without a need, the budget.
        let mut row = summary(2, Status::Oom);
        row.variant = "fp16 amp".into();
        let chart = Timeline::from_trace(&all, &row, "t", "s", Some(GIB));
        assert_eq!(chart.oom.as_ref().and_then(|o| o.index), Some(4));
        assert_eq!(chart.oom_marker(chart.oom.as_ref().unwrap()), GIB);
        assert_eq!(chart.file_stem(), "timeline_trial2-fp16_amp");
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn dense_traces_share_columns() {
        assert_eq!(phases_per_column(50.0), 1);
        assert_eq!(phases_per_column(3.0), 1);
        assert_eq!(phases_per_column(1.0), 3);
        assert_eq!(phases_per_column(0.6), 5);
    }

    #[test]
    fn step_labels_are_thinned_to_round_strides() {
        assert_eq!(stride_for(200.0, 30.0), 1);
        assert_eq!(stride_for(20.0, 30.0), 2);
        assert_eq!(stride_for(7.0, 30.0), 5);
        assert_eq!(stride_for(1.0, 30.0), 50);
    }

    #[test]
    fn renders_png_and_svg_with_series_and_axis_labels() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let mut records = trace(7, 3, 300 * MIB, 200 * MIB);
        for (i, r) in records.iter_mut().enumerate() {
            r.device_used = Some(r.memory_reserved + 500 * MIB + i as u64 * MIB);
        }
        let row = summary(7, Status::Ok);
        let chart = Timeline::from_trace(
            &records,
            &row,
            "Memory through trial 7: depth 4",
            "depth_sweep on Tesla T4 (cuda:0)",
            Some(3 * GIB),
        );
        let out = render(&chart, &dir).expect("rendered");
        assert_eq!(out.png, dir.join("timeline_trial7.png"));
        assert_eq!(png_size(&out.png), (1280, 800));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        for text in [
            ALLOCATED_LABEL,
            PEAK_ALLOCATED_LABEL,
            RESERVED_LABEL,
            PEAK_RESERVED_LABEL,
            DEVICE_USED_LABEL,
            "budget 3.00 GiB",
            "memory (GiB)",
            "setup",
            "1",
            "3",
            "forward",
            "optimizer_step",
            "Memory through trial 7: depth 4",
        ] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
        assert!(texts.iter().any(|t| t.starts_with("step: 17 phases")), "{texts:?}");
    }

    /// Predictions are matched to the phases by step, micro-batch and phase, raise the axis
    /// when above everything measured, and get a legend entry; without them, no entry.
    #[test]
    fn predicted_peaks_are_set_per_phase_and_drawn() {
        let temp = tempfile::tempdir().expect("temp dir");
        let records = trace(3, 2, 100 * MIB, 50 * MIB);
        let row = summary(3, Status::Ok);
        let mut chart = Timeline::from_trace(&records, &row, "t", "s", None);
        let plain = render(&chart, &temp.path().join("plain")).expect("rendered");
        let texts = svg_texts(&std::fs::read_to_string(&plain.svg).expect("svg readable"));
        assert!(!texts.iter().any(|t| t == PREDICTED_LABEL), "no prediction, no entry");

        let high = 10 * GIB;
        chart.set_predicted(|step, _, phase| (step == 2 && phase == Phase::Backward).then_some(high));
        let marked: Vec<(usize, Phase)> =
            chart.points.iter().filter(|p| p.predicted_peak.is_some()).map(|p| (p.step, p.phase)).collect();
        assert_eq!(marked, [(2, Phase::Backward)]);
        assert_eq!(chart.top(), high);
        let out = render(&chart, &temp.path().join("predicted")).expect("rendered");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == PREDICTED_LABEL), "{texts:?}");
    }

    #[test]
    fn renders_an_oom_a_cpu_trial_a_long_trial_and_an_empty_one() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let mut records = trace(3, 2, 2 * GIB, 3 * GIB);
        records.truncate(10); // OOM in step 2's backward
        let mut row = summary(3, Status::Oom);
        row.variant = "fp16".into();
        row.phase = Some(Phase::Backward);
        row.step = Some(2);
        row.oom_allocated = Some(records[9].memory_allocated);
        row.oom_requested = Some(4 * GIB);
        let chart = Timeline::from_trace(&records, &row, "oom", "", Some(14 * GIB));
        let out = render(&chart, &dir).expect("OOM renders");
        assert_eq!(out.png, dir.join("timeline_trial3-fp16.png"));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        for text in [OOM_LABEL, "OOM in backward, step 2: tried to allocate 4.00 GiB"] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }

        // The CPU: reserved is allocated, so it is said rather than drawn.
        let mut cpu = trace(4, 2, 30 * MIB, 10 * MIB);
        for r in &mut cpu {
            r.memory_reserved = r.memory_allocated;
            r.max_memory_reserved = r.max_memory_allocated;
        }
        let chart = Timeline::from_trace(&cpu, &summary(4, Status::Ok), "cpu", "", None);
        assert!(!chart.reserved_differs());
        let out = render(&chart, &dir).expect("CPU trial renders");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == SAME_RESERVED_LABEL), "{texts:?}");
        assert!(texts.iter().any(|t| t == "memory (MiB)"), "{texts:?}");
        assert!(!texts.iter().any(|t| t == RESERVED_LABEL), "{texts:?}");

        let long = trace(5, 200, 64 * MIB, 32 * MIB);
        let chart = Timeline::from_trace(&long, &summary(5, Status::Ok), "long", "", Some(GIB));
        let out = render(&chart, &dir).expect("long trial renders");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == "180"), "every so many steps labelled: {texts:?}");
        assert!(texts.iter().any(|t| t.contains("lines as ranges over 3 phases at a time")), "{texts:?}");
        assert!(!texts.iter().any(|t| t == "190"), "not every step labelled");

        let empty = Timeline::from_trace(&[], &summary(6, Status::Error), "empty", "", None);
        render(&empty, &dir).expect("empty trial renders");
    }
}
