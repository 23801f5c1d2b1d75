//! How the charts look, in one place so that they look alike: the font, the colours, the text
//! styles, the mesh, the styles of the marks that mean the same on every chart (budget, OOM,
//! prediction, error), and the legend labels those marks share.
use crate::schema::Phase;
use plotters::chart::MeshStyle;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::ops::Range;

use crate::units::format_bytes;

/// The font family every chart uses; the embedded DejaVu Sans is registered under this name.
pub const FONT: &str = "sans-serif";

/// Colours shared by the charts, so that "allocated" is the same blue everywhere. Based on
/// the tableau palette matplotlib uses, which readers of the lesson's figures know.
pub mod palette {
    use plotters::style::RGBColor;

    /// Memory held by live tensors (`memory_allocated`).
    pub const ALLOCATED: RGBColor = RGBColor(31, 119, 180);
    /// Memory held by the caching allocator (`memory_reserved`).
    pub const RESERVED: RGBColor = RGBColor(255, 127, 14);
    /// What the device reports as used (NVML's "used").
    pub const DEVICE_USED: RGBColor = RGBColor(148, 103, 189);
    /// Out of memory.
    pub const OOM: RGBColor = RGBColor(214, 39, 40);
    /// The memory model's prediction (`oomlab estimate`).
    pub const PREDICTED: RGBColor = RGBColor(44, 160, 44);
    /// The device's budget and other reference lines.
    pub const BUDGET: RGBColor = RGBColor(70, 70, 70);
    /// Axes and frames.
    pub const AXIS: RGBColor = RGBColor(70, 70, 70);
    /// Trials that failed for another reason than memory, and secondary text.
    pub const MUTED: RGBColor = RGBColor(127, 127, 127);
    /// Grid lines.
    pub const GRID: RGBColor = RGBColor(225, 225, 225);
    /// Categories (parameters, gradients, optimizer state, activations, ...), in order; the
    /// first two are not [`ALLOCATED`] and [`RESERVED`], so that a category is never read as
    /// one of those.
    pub const CATEGORIES: [RGBColor; 8] = [
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(23, 190, 207),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(188, 189, 34),
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
    ];

    /// The colour of the `i`th category, cycling.
    pub fn category(i: usize) -> RGBColor {
        CATEGORIES[i % CATEGORIES.len()]
    }
}

/// The colour of a phase in the timeline's band: greys for the set-up, then a colour per
/// training phase (none of them the blue and orange of allocated and reserved).
pub fn phase_colour(phase: Phase) -> RGBColor {
    const COLOURS: [(Phase, RGBColor); 7] = [
        (Phase::Data, RGBColor(199, 199, 199)),
        (Phase::Model, RGBColor(140, 140, 140)),
        (Phase::ToDevice, RGBColor(23, 190, 207)),
        (Phase::Forward, RGBColor(44, 160, 44)),
        (Phase::Backward, RGBColor(227, 119, 194)),
        (Phase::OptimizerStep, RGBColor(140, 86, 75)),
        (Phase::ZeroGrad, RGBColor(188, 189, 34)),
    ];
    COLOURS.iter().find(|(p, _)| *p == phase).map(|(_, c)| *c).unwrap_or(palette::MUTED)
}

/// Text style of a chart's title at `size`: titles shrink to fit the width (see
/// [`super::header`]).
pub fn title_style(size: f64) -> TextStyle<'static> {
    (FONT, size, FontStyle::Bold).into_font().color(&BLACK)
}

/// Text style of a chart's subtitle (device, model, ...).
pub fn subtitle_style(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&palette::MUTED)
}

/// Text style of axis descriptions ("peak memory (GiB)").
pub fn axis_desc_style() -> TextStyle<'static> {
    (FONT, 22).into_font().color(&BLACK)
}

/// Text style of tick labels, legends and annotations.
pub fn label_style() -> TextStyle<'static> {
    (FONT, 18).into_font().color(&BLACK)
}

/// The mesh every chart shares: its label and description styles, major grid lines only (minor
/// lines at every unit of a depth axis are only noise), and the axis colour.
pub fn house_style<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    mesh.axis_desc_style(axis_desc_style())
        .label_style(label_style())
        .bold_line_style(palette::GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(palette::AXIS)
}

/// A measured series: the line through its points, thick enough to stay on top of the grid,
/// the references and the prediction.
pub fn series_style(colour: RGBColor) -> ShapeStyle {
    colour.stroke_width(3)
}

/// The device's budget, drawn dashed across the plot.
pub fn budget_style() -> ShapeStyle {
    palette::BUDGET.stroke_width(2)
}

/// An out-of-memory's cross.
pub fn oom_style() -> ShapeStyle {
    palette::OOM.stroke_width(3)
}

/// The memory model's prediction, on every chart that draws it.
pub fn predicted_style() -> ShapeStyle {
    palette::PREDICTED.stroke_width(2)
}

/// A trial that failed for another reason than memory: a grey ring.
pub fn error_style() -> ShapeStyle {
    palette::MUTED.stroke_width(2)
}

/// A straight dashed line between two points of the plot.
pub type Dashes = DashedLineSeries<std::array::IntoIter<(f64, f64), 2>, i32>;

/// A reference across the plot at height `y` over `x` (a budget, 100% of one): in long dashes,
/// so that it does not read as data.
pub fn across(x: &Range<f64>, y: f64, style: ShapeStyle) -> Dashes {
    DashedLineSeries::new([(x.start, y), (x.end, y)], 12, 8, style)
}

/// A dotted line from `(x, y)` down to the axis, tying a note to the x value it is about.
pub fn drop_to_axis((x, y): (f64, f64), style: ShapeStyle) -> Dashes {
    DashedLineSeries::new([(x, 0.0), (x, y)], 4, 5, style)
}

/// An OOM's legend label: its cross stands at what it needed, when the message said.
pub const OOM_LABEL: &str = "OOM (allocated + requested)";

/// The prediction's legend label.
pub const PREDICTED_LABEL: &str = "predicted peak (oomlab estimate)";

/// The budget line's legend label, which says the budget too, since no tick falls on it.
pub fn budget_label(budget: u64) -> String {
    format!("budget {}", format_bytes(budget))
}
