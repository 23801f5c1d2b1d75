//! The legend of every chart that has one inside its plot: its entries (a label and a small
//! drawing of the mark it names), its size, the one placer that finds where it hides no data
//! ([`free_position`]), and how it looks.
//!
//! A chart lists its entries in a [`Legend`] apart from drawing its data, so that their order
//! is the reading order whatever order the data was drawn in; plotters takes an entry as an
//! empty series that carries the label.
use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use SeriesLabelPosition::*;

use super::style::{label_style, palette, series_style};
use super::Plot;

/// The legend's layout in pixels, as plotters draws it: its margin from the plot's edges, the
/// glyph's width, and the height of an entry.
const MARGIN: u32 = 16;
const GLYPH: u32 = 30;
const ROW: u32 = 23;

/// Where a legend may go, in the order it is looked for: corners first, where a reader looks
/// for a legend, then the middles of the sides, then the centre.
pub const ANYWHERE: [SeriesLabelPosition; 9] = [
    UpperLeft,
    UpperRight,
    LowerRight,
    LowerLeft,
    MiddleLeft,
    MiddleRight,
    UpperMiddle,
    LowerMiddle,
    MiddleMiddle,
];

/// Where a legend may go over bars that rise from the axis in every column (the timeline's):
/// only the upper half can be free, and a chart that finds none of it free makes room above
/// its data instead.
pub const UPPER_HALF: [SeriesLabelPosition; 4] = [UpperRight, UpperLeft, MiddleRight, MiddleLeft];

/// What stands beside a label: a drawing of the mark, 22 pixels wide, as the chart draws it.
#[derive(Debug, Clone, Copy)]
pub enum Glyph {
    /// A measured series: its line, with a dot of `dot` pixels as at each point.
    Line { colour: RGBColor, dot: i32 },
    /// A reference line across the plot (a budget): two dashes.
    Dashed(ShapeStyle),
    /// An out-of-memory's cross.
    Cross(ShapeStyle),
    /// A trial that failed another way: a ring.
    Ring(ShapeStyle),
    /// A prediction drawn as a dashed line with a ring at each point.
    DashedRing(ShapeStyle),
    /// A prediction drawn as a tick across a column with a ring in the middle.
    Tick(ShapeStyle),
    /// A bar, filled.
    Bar(ShapeStyle),
    /// A dash across a column.
    Dash(ShapeStyle),
    /// No mark: the label is a note ("reserved = allocated here").
    Blank,
}

impl Glyph {
    /// A measured series as the charts draw it: [`series_style`] and its dot.
    pub fn line(colour: RGBColor, dot: i32) -> Glyph {
        Glyph::Line { colour, dot }
    }

    /// Adds an empty series labelled `label` whose legend entry is this glyph.
    fn add<'a, DB>(self, plot: &mut Plot<'a, DB>, label: &str) -> Result<()>
    where
        DB: DrawingBackend + 'a,
        DB::ErrorType: 'static,
    {
        match self {
            Glyph::Line { colour, dot } => entry(plot, label, move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(0, 0), (22, 0)], series_style(colour))
                    + Circle::new((11, 0), dot, colour.filled())
            }),
            Glyph::Dashed(style) => entry(plot, label, move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(0, 0), (8, 0)], style)
                    + PathElement::new([(14, 0), (22, 0)], style)
            }),
            Glyph::Cross(style) => entry(plot, label, move |(x, y)| Cross::new((x + 11, y), 8, style)),
            Glyph::Ring(style) => entry(plot, label, move |(x, y)| Circle::new((x + 11, y), 7, style)),
            Glyph::DashedRing(style) => entry(plot, label, move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(0, 0), (6, 0)], style)
                    + Circle::new((11, 0), 5, style)
                    + PathElement::new([(16, 0), (22, 0)], style)
            }),
            Glyph::Tick(style) => entry(plot, label, move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(5, 0), (17, 0)], style)
                    + Circle::new((11, 0), 3, style)
            }),
            Glyph::Bar(style) => {
                entry(plot, label, move |(x, y)| Rectangle::new([(x + 3, y - 7), (x + 19, y + 7)], style))
            }
            Glyph::Dash(style) => {
                entry(plot, label, move |(x, y)| PathElement::new([(x + 3, y), (x + 19, y)], style))
            }
            Glyph::Blank => entry(plot, label, |(x, y)| EmptyElement::at((x, y))),
        }
    }
}

/// Adds a legend entry without drawing anything: an empty series carries the label.
fn entry<'a, DB, E, F>(plot: &mut Plot<'a, DB>, label: &str, glyph: F) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    E: IntoDynElement<'a, DB, (i32, i32)>,
    F: Fn((i32, i32)) -> E + 'a,
{
    plot.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?.label(label).legend(glyph);
    Ok(())
}

/// A legend's entries, in the order they are listed.
#[derive(Debug, Clone, Default)]
pub struct Legend {
    entries: Vec<(String, Glyph)>,
}

impl Legend {
    pub fn add(&mut self, label: impl Into<String>, glyph: Glyph) {
        self.entries.push((label.into(), glyph));
    }

    /// The legend's box as a fraction of `area`, with the margin around it, so that
    /// [`free_position`] keeps that margin clear too.
    pub fn size_in<DB>(
        &self,
        area: &DrawingArea<DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    ) -> Result<(f64, f64)>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
    {
        let style = label_style();
        let mut widest = 0;
        for (label, _) in &self.entries {
            widest = widest.max(area.estimate_text_size(label, &style)?.0);
        }
        let rows = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        let width = 2 * MARGIN + GLYPH + widest + 20;
        let height = 2 * MARGIN + ROW.saturating_mul(rows) + 20;
        let (w, h) = area.dim_in_pixel();
        Ok((f64::from(width) / f64::from(w.max(1)), f64::from(height) / f64::from(h.max(1))))
    }

    /// Draws the legend at `position`, on a light ground that lets the grid show through;
    /// nothing when it has no entries.
    pub fn draw<'a, DB>(&self, plot: &mut Plot<'a, DB>, position: SeriesLabelPosition) -> Result<()>
    where
        DB: DrawingBackend + 'a,
        DB::ErrorType: 'static,
    {
        if self.entries.is_empty() {
            return Ok(());
        }
        for (label, glyph) in &self.entries {
            glyph.add(plot, label)?;
        }
        plot.configure_series_labels()
            .position(position)
            .margin(MARGIN)
            .legend_area_size(GLYPH)
            .label_font(label_style())
            .background_style(WHITE.mix(0.9))
            .border_style(palette::GRID.stroke_width(1))
            .draw()?;
        Ok(())
    }

    /// Draws the legend where it hides none of `drawn` (fractions of the plot, see
    /// [`free_position`]), looking [`ANYWHERE`]; upper left when nothing is free.
    pub fn draw_where_free<'a, DB>(&self, plot: &mut Plot<'a, DB>, drawn: &[(f64, f64)]) -> Result<()>
    where
        DB: DrawingBackend + 'a,
        DB::ErrorType: 'static,
    {
        if self.entries.is_empty() {
            return Ok(());
        }
        let size = self.size_in(plot.plotting_area())?;
        self.draw(plot, free_position(drawn, size, &ANYWHERE).unwrap_or(UpperLeft))
    }
}

/// The first of `candidates` where a legend of `width` x `height` (fractions of the plot)
/// hides none of `points`, given as fractions of the plot too ((0, 0) bottom left); None when
/// every candidate hides some.
pub fn free_position(
    points: &[(f64, f64)],
    (width, height): (f64, f64),
    candidates: &[SeriesLabelPosition],
) -> Option<SeriesLabelPosition> {
    candidates
        .iter()
        .find(|&pos| {
            let x0 = match pos {
                UpperLeft | MiddleLeft | LowerLeft => 0.0,
                UpperRight | MiddleRight | LowerRight => 1.0 - width,
                _ => (1.0 - width) / 2.0,
            };
            let y0 = match pos {
                UpperLeft | UpperMiddle | UpperRight => 1.0 - height,
                LowerLeft | LowerMiddle | LowerRight => 0.0,
                _ => (1.0 - height) / 2.0,
            };
            !points.iter().any(|&(x, y)| x >= x0 && x <= x0 + width && y >= y0 && y <= y0 + height)
        })
        .cloned()
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
    fn legend_goes_to_a_corner_without_data() {
        let free = |points: &[(f64, f64)]| free_position(points, (0.3, 0.3), &ANYWHERE);
        let rising = [(0.0, 0.0), (0.5, 0.5), (1.0, 0.95)];
        assert_eq!(free(&densify(&rising, 10)), Some(UpperLeft));
        let falling = [(0.0, 0.95), (0.5, 0.5), (1.0, 0.0)];
        assert_eq!(free(&densify(&falling, 10)), Some(UpperRight));
        // A budget line across the top and a curve along the bottom leave the middle free.
        let mut both = densify(&[(0.0, 0.9), (1.0, 0.9)], 20);
        both.extend(densify(&[(0.0, 0.0), (0.8, 0.05), (1.0, 0.5)], 20));
        assert_eq!(free(&both), Some(MiddleLeft));
    }

    #[test]
    fn over_bars_only_the_upper_half_is_looked_at() {
        let bars: Vec<(f64, f64)> = (0..=10).map(|i| (f64::from(i) / 10.0, 0.4)).collect();
        assert_eq!(free_position(&bars, (0.3, 0.3), &UPPER_HALF), Some(UpperRight));
        let full: Vec<(f64, f64)> = (0..=10).map(|i| (f64::from(i) / 10.0, 0.9)).collect();
        let mut tall = densify(&full, 1);
        tall.extend(full.iter().map(|&(x, _)| (x, 0.5)));
        assert_eq!(free_position(&tall, (0.3, 0.3), &UPPER_HALF), None);
        assert_eq!(free_position(&tall, (0.3, 0.3), &ANYWHERE), Some(LowerRight));
    }
}

/// A legend row's mark in a [`column`].
#[derive(Debug, Clone, Copy)]
pub enum Mark {
    /// A filled square: a bar's or a segment's colour.
    Swatch(RGBColor),
    /// A line across the glyph's width.
    Line(ShapeStyle),
    /// Two dashes: a reference across the plot.
    Dashed(ShapeStyle),
}

/// Pixels between a legend column's rows.
pub const COLUMN_ROW: i32 = 28;

/// Draws `rows` top to bottom in `area`, a column of its own right of a plot (where a legend
/// never hides a bar): the mark, then its label.
pub fn column<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rows: &[(&str, Mark)]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let text = label_style().pos(Pos::new(HPos::Left, VPos::Center));
    let mut y = 30;
    for (label, mark) in rows {
        match *mark {
            Mark::Swatch(colour) => area.draw(&Rectangle::new([(6, y - 9), (26, y + 9)], colour.filled()))?,
            Mark::Line(style) => area.draw(&PathElement::new([(4, y), (28, y)], style))?,
            Mark::Dashed(style) => {
                area.draw(&PathElement::new([(4, y), (12, y)], style))?;
                area.draw(&PathElement::new([(18, y), (28, y)], style))?;
            }
        }
        area.draw_text(label, &text, (38, y))?;
        y += COLUMN_ROW;
    }
    Ok(())
}
