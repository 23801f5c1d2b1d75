//! Charts drawn with plotters, to PNG and SVG, with a font embedded in the binary.
//!
//! As in criterion.rs, preparing the data is kept apart from drawing it: each chart is a plain
//! struct built from records (`SweepPeak::from_summary`, ...), which can be tested on its own,
//! and which implements [`Chart`] to draw itself on any plotters backend. [`render`] then writes
//! the same drawing as `<stem>.png` and `<stem>.svg`.
//!
//! The font is DejaVu Sans from the `dejavu` crate, registered with plotters' `ab_glyph` text
//! engine as the `sans-serif` family, so that no system font (nor fontconfig) is needed, and PNGs
//! look the same on every machine. SVGs name `sans-serif` and leave the font to the viewer.
//!
//! Shared pieces later charts reuse: [`ByteAxis`] (bytes to a readable unit on an axis),
//! [`format_bytes`], [`format_tick`], the colours in [`palette`], [`header`] (title and
//! subtitle), the text styles, and [`free_position`] (where a legend hides no data).
mod categories;
mod compare;
mod sweep_peak;
#[cfg(test)]
mod test_support;
mod timeline;
mod tradeoff;

pub use categories::{pick_trials, Categories, CategoryBar, CATEGORY_NAMES};
pub use compare::{CompareSeries, CompareSweep};
pub use sweep_peak::{SweepPeak, SweepPoint};
pub use timeline::{phase_colour, OomMark, Timeline, TimelinePoint};
pub use tradeoff::{Tradeoff, TradeoffPoint};

use anyhow::{anyhow, Context, Result};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The font family every chart uses; the embedded DejaVu Sans is registered under this name.
pub const FONT: &str = "sans-serif";

/// Size of the PNG, in pixels; the SVG uses the same user units.
pub const SIZE: (u32, u32) = (1280, 800);

/// Height of the band [`header`] takes for the title and subtitle, in pixels.
const HEADER_HEIGHT: u32 = 88;

/// A chart: prepared data that knows how to draw itself.
pub trait Chart {
    /// File stem, e.g. "peak_vs_depth".
    fn file_stem(&self) -> String;

    /// Draws the whole chart on `root`, which is already filled with white.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

/// The files [`render`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub png: PathBuf,
    pub svg: PathBuf,
}

/// Writes `dir/<stem>.png` (1280x800) and `dir/<stem>.svg`, creating `dir` if needed.
pub fn render(chart: &impl Chart, dir: &Path) -> Result<Rendered> {
    register_fonts()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem = chart.file_stem();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw_into(chart, BitMapBackend::new(&png, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", png.display()))?;
    draw_into(chart, SVGBackend::new(&svg, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", svg.display()))?;
    Ok(Rendered { png, svg })
}

/// Fills, draws and writes out one backend. `present` is called explicitly because a backend
/// dropped without it writes its file too, but swallows the error.
fn draw_into<DB: DrawingBackend>(chart: &impl Chart, root: DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    chart.draw(&root)?;
    root.present()?;
    Ok(())
}

/// Registers the embedded DejaVu Sans (regular and bold) as [`FONT`], once per process.
/// plotters' font table is global, so once is enough, and registering again would only redo
/// the parsing.
pub fn register_fonts() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let faces =
                [(FontStyle::Normal, dejavu::sans::regular()), (FontStyle::Bold, dejavu::sans::bold())];
            for (style, bytes) in faces {
                plotters::style::register_font(FONT, style, bytes).map_err(|_| {
                    format!("the embedded DejaVu Sans ({}) is not a valid font", style.as_str())
                })?;
            }
            Ok(())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Colours shared by the charts, so that "allocated" is the same blue everywhere. Based on
/// the tableau palette matplotlib uses, which readers of the lesson's figures know.
pub mod palette {
    use plotters::style::RGBColor;

    /// Memory held by live tensors (`memory_allocated`).
    pub const ALLOCATED: RGBColor = RGBColor(31, 119, 180);
    /// Memory held by the caching allocator (`memory_reserved`).
    pub const RESERVED: RGBColor = RGBColor(255, 127, 14);
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

/// Text style of a chart's title.
pub fn title_style() -> TextStyle<'static> {
    (FONT, 30, FontStyle::Bold).into_font().color(&BLACK)
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

/// Text style of a chart's subtitle (device, model, ...).
pub fn subtitle_style() -> TextStyle<'static> {
    (FONT, 19).into_font().color(&palette::MUTED)
}

/// Text style of axis descriptions ("peak memory (GiB)").
pub fn axis_desc_style() -> TextStyle<'static> {
    (FONT, 22).into_font().color(&BLACK)
}

/// Text style of tick labels, legends and annotations.
pub fn label_style() -> TextStyle<'static> {
    (FONT, 18).into_font().color(&BLACK)
}

/// Draws `title` and `subtitle` (skipped when empty) centred at the top of `root`, and returns
/// the area below them for the plot.
pub fn header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    let (width, _) = root.dim_in_pixel();
    let centre = width as i32 / 2;
    let top = Pos::new(HPos::Center, VPos::Top);
    // A long title shrinks until it fits the width, rather than running off both edges.
    let mut size = 30.0;
    let fits = |size: f64| {
        let style: TextStyle = (FONT, size, FontStyle::Bold).into_font().into();
        root.estimate_text_size(title, &style).map(|(w, _)| w + 40 <= width).unwrap_or(true)
    };
    while size > 14.0 && !fits(size) {
        size -= 1.0;
    }
    let style = (FONT, size, FontStyle::Bold).into_font().color(&BLACK).pos(top);
    root.draw_text(title, &style, (centre, 14))?;
    if !subtitle.is_empty() {
        root.draw_text(subtitle, &subtitle_style().pos(top), (centre, 54))?;
    }
    Ok(root.split_vertically(HEADER_HEIGHT).1)
}

const KIB: f64 = 1024.0;

/// A byte unit chosen for an axis so that its ticks read as small numbers: GiB for the GPU
/// runs, MiB or KiB for small CPU models, rather than 0.0001 GiB.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByteAxis {
    /// "GiB", "MiB", "KiB" or "B".
    pub unit: &'static str,
    /// Bytes per unit.
    pub divisor: f64,
}

impl ByteAxis {
    /// The largest unit in which `max_bytes` is at least 1.
    pub fn for_max(max_bytes: u64) -> ByteAxis {
        let (unit, divisor) = unit_for(max_bytes as f64);
        ByteAxis { unit, divisor }
    }

    /// Always GiB, whatever the values.
    pub fn gib() -> ByteAxis {
        ByteAxis { unit: "GiB", divisor: KIB * KIB * KIB }
    }

    /// `bytes` in this unit.
    pub fn value(&self, bytes: u64) -> f64 {
        bytes as f64 / self.divisor
    }

    /// The axis description, e.g. "peak memory (GiB)".
    pub fn desc(&self, what: &str) -> String {
        format!("{what} ({})", self.unit)
    }
}

/// The largest binary unit in which `bytes` is at least 1.
fn unit_for(bytes: f64) -> (&'static str, f64) {
    const UNITS: [(&str, f64); 3] = [("GiB", KIB * KIB * KIB), ("MiB", KIB * KIB), ("KiB", KIB)];
    UNITS.into_iter().find(|(_, d)| bytes >= *d).unwrap_or(("B", 1.0))
}

/// `bytes` with two decimals in the largest unit in which it is at least 1: "15.90 GiB".
pub fn format_bytes(bytes: u64) -> String {
    let (unit, divisor) = unit_for(bytes as f64);
    if unit == "B" {
        return format!("{bytes} B");
    }
    format!("{:.2} {unit}", bytes as f64 / divisor)
}

/// A tick label without trailing zeros: 0, 2.5, 10, 0.25. Ticks are round numbers, so three
/// decimals are plenty and the zeros after them only add noise.
pub fn format_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Where a legend of `width` x `height` (fractions of the plot) hides none of `points`, given
/// as fractions of the plot too ((0, 0) bottom left). Corners first, where a legend is looked
/// for, then the middles of the sides, then the centre; upper left when nothing is free.
pub fn free_position(points: &[(f64, f64)], width: f64, height: f64) -> SeriesLabelPosition {
    use SeriesLabelPosition::*;
    let (left, centre, right) = (0.0, (1.0 - width) / 2.0, 1.0 - width);
    let (top, middle, bottom) = (1.0 - height, (1.0 - height) / 2.0, 0.0);
    let candidates = [
        (UpperLeft, left, top),
        (UpperRight, right, top),
        (LowerRight, right, bottom),
        (LowerLeft, left, bottom),
        (MiddleLeft, left, middle),
        (MiddleRight, right, middle),
        (UpperMiddle, centre, top),
        (LowerMiddle, centre, bottom),
        (MiddleMiddle, centre, middle),
    ];
    candidates
        .into_iter()
        .find(|&(_, x0, y0)| {
            !points.iter().any(|&(x, y)| x >= x0 && x <= x0 + width && y >= y0 && y <= y0 + height)
        })
        .map(|(pos, _, _)| pos)
        .unwrap_or(UpperLeft)
}

/// Samples the segments between consecutive `points` (fractions of the plot), so that
/// [`free_position`] also avoids the lines drawn between markers, not only the markers.
pub fn densify(points: &[(f64, f64)], per_segment: usize) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = points.first().copied().into_iter().collect();
    for pair in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        for i in 1..=per_segment {
            let t = i as f64 / per_segment as f64;
            out.push((x0 + (x1 - x0) * t, y0 + (y1 - y0) * t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_formatted_in_the_largest_unit() {
        assert_eq!(format_bytes(17_072_495_001), "15.90 GiB");
        assert_eq!(format_bytes(512 * 1024 * 1024), "512.00 MiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(12), "12 B");
    }

    #[test]
    fn byte_axis_picks_a_unit_with_readable_ticks() {
        let gib = ByteAxis::for_max(20 << 30);
        assert_eq!(gib.unit, "GiB");
        assert_eq!(gib.value(3 << 29), 1.5);
        assert_eq!(gib.desc("peak memory"), "peak memory (GiB)");
        assert_eq!(ByteAxis::for_max(300 << 20).unit, "MiB");
        assert_eq!(ByteAxis::for_max(0).unit, "B");
    }

    #[test]
    fn ticks_lose_their_trailing_zeros() {
        assert_eq!(format_tick(10.0), "10");
        assert_eq!(format_tick(2.5), "2.5");
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(-0.0001), "0");
    }

    #[test]
    fn legend_goes_to_a_corner_without_data() {
        let rising = [(0.0, 0.0), (0.5, 0.5), (1.0, 0.95)];
        assert_eq!(free_position(&densify(&rising, 10), 0.3, 0.3), SeriesLabelPosition::UpperLeft);
        let falling = [(0.0, 0.95), (0.5, 0.5), (1.0, 0.0)];
        assert_eq!(free_position(&densify(&falling, 10), 0.3, 0.3), SeriesLabelPosition::UpperRight);
        // A budget line across the top and a curve along the bottom leave the middle free.
        let mut both = densify(&[(0.0, 0.9), (1.0, 0.9)], 20);
        both.extend(densify(&[(0.0, 0.0), (0.8, 0.05), (1.0, 0.5)], 20));
        assert_eq!(free_position(&both, 0.3, 0.3), SeriesLabelPosition::MiddleLeft);
    }
}
