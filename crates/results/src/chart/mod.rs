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
//! The kit the charts share, so that they look alike: [`style`] (font, colours, text and mark
//! styles, and the legend labels of marks that mean the same on every chart), [`scale`] (byte
//! units, linear or logarithmic x, tick labels), [`legend`] (entries, and the one placer that
//! keeps a legend off the data), and here the frame of a figure: [`header`] (title and subtitle)
//! and [`footnotes`]. The charts choose nothing: `figures` picks which charts a folder gets and
//! the trial that stands for each variant ([`Compared`]), and hands them in.
mod advice;
mod bench;
mod categories;
mod compare;
mod labels;
pub mod legend;
pub mod scale;
pub mod style;
mod sweep_peak;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod text_check;
mod timeline;
mod tradeoff;

pub use advice::{AdviceChart, AdvicePoint, Mark};
pub use bench::{BenchBar, BenchChart, BenchGroup, BenchSeries};
pub use categories::{CategoryBar, CategoryBars, CATEGORY_NAMES};
pub use compare::{CompareSeries, CompareSweep, SeriesOf};
pub use style::phase_colour;
pub use sweep_peak::{PeakPoint, SweepPeak};
pub use timeline::{OomMark, Timeline, TimelinePoint};
pub use tradeoff::{Tradeoff, TradeoffPoint};

use anyhow::{anyhow, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use style::{label_style, palette, subtitle_style, title_style, FONT};

/// Size of the PNG, in pixels; the SVG uses the same user units.
pub const SIZE: (u32, u32) = (1280, 800);

/// Height of the band [`header`] takes for the title and subtitle, in pixels.
const HEADER_HEIGHT: u32 = 88;

/// The plot every chart draws its data on: f64 on both axes, a swept value or a column
/// index across, bytes in the axis's unit (or seconds, or a share) up.
pub type Plot<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart: prepared data that knows how to draw itself.
pub trait Chart {
    /// File stem, e.g. "peak_vs_depth".
    fn file_stem(&self) -> String;

    /// Draws the whole chart on `root`, which is already filled with white.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

/// `name` with what is not an ASCII letter, digit or `-` as `_`, for a file stem: a variant
/// called "fp16 amp" or "a/b" must still name one file in the results folder.
fn file_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// The end of a file stem for `variant`: "-<variant>", file-safe, or nothing without variants.
fn variant_suffix(variant: &str) -> String {
    if variant.is_empty() {
        String::new()
    } else {
        format!("-{}", file_safe(variant))
    }
}

/// The files [`render`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub png: PathBuf,
    pub svg: PathBuf,
}

/// The files [`render`] writes for `chart` in `dir`, without drawing it: what a results folder
/// lists as its own before they are made.
pub fn files(chart: &impl Chart, dir: &Path) -> Rendered {
    // The stem is the chart's, from names read back from files: only file-safe characters.
    let stem = file_safe(&chart.file_stem());
    Rendered { png: dir.join(format!("{stem}.png")), svg: dir.join(format!("{stem}.svg")) }
}

/// Writes `dir/<stem>.png` (1280x800) and `dir/<stem>.svg`, creating `dir` if needed. Each is
/// drawn into a new temporary file beside it and renamed over it, so a chart is whole or not
/// there (a full disk leaves the old one), and a link of its name is replaced, not followed.
pub fn render(chart: &impl Chart, dir: &Path) -> Result<Rendered> {
    register_fonts()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let Rendered { png, svg } = files(chart, dir);
    let tmp = crate::fsio::temp_beside(&png)?;
    draw_into(chart, BitMapBackend::new(&tmp, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", png.display()))?;
    crate::fsio::persist(tmp, &png)?;
    let tmp = crate::fsio::temp_beside(&svg)?;
    draw_into(chart, SVGBackend::new(&tmp, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", svg.display()))?;
    crate::fsio::persist(tmp, &svg)?;
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

/// The frame of a plot with its x axis below and its y axis at the left, as the house draws it:
/// room for the tick labels and axis titles, and `right` pixels past the plot (for labels beside
/// the last points, or little beside a legend column).
pub fn framed<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    right: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_left(20)
        .margin_right(right)
        .margin_top(10)
        .margin_bottom(10)
        .x_label_area_size(60)
        .y_label_area_size(78);
    builder
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
    let fits = |text: &str, style: &TextStyle| {
        root.estimate_text_size(text, style).map(|(w, _)| w + 40 <= width).unwrap_or(true)
    };
    // A long title shrinks until it fits the width; one that does not fit at 18 points is set
    // in two lines, and a subtitle likewise, so that nothing runs off either edge.
    let (size, lines) = fit_lines(title, (30.0, 18.0), (20.0, 11.0), |t, size| fits(t, &title_style(size)));
    for (i, line) in lines.iter().enumerate() {
        let y = if lines.len() == 1 { 14 } else { 4 + i as i32 * (size as i32 + 4) };
        root.draw_text(line, &title_style(size).pos(top), (centre, y))?;
    }
    if !subtitle.is_empty() {
        let (size, lines) =
            fit_lines(subtitle, (19.0, 14.0), (14.0, 10.0), |t, size| fits(t, &subtitle_style(size)));
        for (i, line) in lines.iter().enumerate() {
            let y = if lines.len() == 1 { 54 } else { 50 + i as i32 * (size as i32 + 3) };
            root.draw_text(line, &subtitle_style(size).pos(top), (centre, y))?;
        }
    }
    Ok(root.split_vertically(HEADER_HEIGHT).1)
}

/// `text` as the largest size in `one` (from its first size down to its last, a point at a
/// time) at which it fits on one line, else split in two at the space that balances them, at
/// the largest size in `two` at which both fit (the smallest, if none does).
fn fit_lines(
    text: &str,
    one: (f64, f64),
    two: (f64, f64),
    fits: impl Fn(&str, f64) -> bool,
) -> (f64, Vec<String>) {
    let sizes = |(from, to): (f64, f64)| {
        std::iter::successors(Some(from), |s| Some(s - 1.0)).take_while(move |s| *s >= to)
    };
    if let Some(size) = sizes(one).find(|&s| fits(text, s)) {
        return (size, vec![text.to_string()]);
    }
    let middle = text.len() / 2;
    let split = text
        .match_indices(' ')
        .map(|(i, _)| i)
        .min_by_key(|&i| i.abs_diff(middle))
        .map(|i| vec![text[..i].to_string(), text[i + 1..].to_string()])
        .unwrap_or_else(|| vec![text.to_string()]);
    let size = sizes(two).find(|&s| split.iter().all(|l| fits(l, s))).unwrap_or(two.1);
    (size, split)
}

/// Draws `notes` (what a reader must know to read the chart right) one a row in muted text
/// at the bottom of `area`, and returns the area above them for the plot.
pub fn footnotes<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    notes: &[String],
) -> Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    const ROW: u32 = 24;
    let height = area.dim_in_pixel().1;
    let band = ROW * notes.len() as u32 + 12;
    let (plot, below) = area.split_vertically(height.saturating_sub(band));
    let style = label_style().color(&palette::MUTED).pos(Pos::new(HPos::Left, VPos::Top));
    for (i, note) in notes.iter().enumerate() {
        below.draw_text(note, &style, (30, (ROW * i as u32) as i32))?;
    }
    Ok(plot)
}

/// The trials that stand for the variants on the charts that compare them (memory by category,
/// time against memory), as `figures` picks them.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared<'a> {
    /// The trial that stands for each variant, with its label, in the order the variants first
    /// appear. Only trials that ran count. In a sweep, at the largest swept value at which every
    /// variant ran; when there is none, each variant's largest value that ran. Without variants
    /// (all names empty), every trial that ran, labelled "trial N" or "<key> <value>".
    pub trials: Vec<(String, &'a crate::schema::SummaryRow)>,
    /// Which swept value they are compared at, for the reader: "each variant at batch_size 8192,
    /// the largest every variant ran", or None without a sweep or variants.
    pub note: Option<String>,
}
