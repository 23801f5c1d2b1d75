//! Drawing the category chart: the stacked bars with their sizes, the measured peak across
//! each, and the legend in a column of its own right of the plot.
use super::data::{CategoryBars, CATEGORY_NAMES};
use crate::chart::legend::{self, Mark};
use crate::chart::scale::ByteAxis;
use crate::chart::style::{house_style, label_style, palette};
use crate::chart::{footnotes, framed, header, Chart};
use crate::units::{format_bytes, format_tick};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const PEAK_LABEL: &str = "measured peak";
/// Width of the legend's column, right of the plot: outside it, so that it never hides a bar.
const LEGEND_WIDTH: u32 = 200;

impl Chart for CategoryBars {
    fn file_stem(&self) -> String {
        "categories".to_string()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let width = area.dim_in_pixel().0;
        let area = footnotes(area, &self.notes())?;
        let (area, legend_area) = area.split_horizontally(width.saturating_sub(LEGEND_WIDTH));

        let top_bytes = self.top();
        let axis = ByteAxis::for_max(top_bytes);
        let top = axis.value(top_bytes);
        let y_top = if top > 0.0 { top * 1.12 } else { 1.0 };
        let n = self.bars.len().max(1);
        // A bar's name wider than its slot would run into the next one's: it is said shorter
        // (the swept value without its key, then cut), as the peak labels are. The slot is the
        // plot's width (the area less the y axis's labels and the margins, as `framed` lays it).
        let slot = f64::from(area.dim_in_pixel().0.saturating_sub(78 + 20 + 10)) / n as f64 - 12.0;
        let measure =
            |t: &str| root.estimate_text_size(t, &label_style()).map_or(f64::INFINITY, |(w, _)| f64::from(w));
        let labels: Vec<String> = self.bars.iter().map(|b| fit_label(&b.label, slot, measure)).collect();
        let x_fmt = move |x: &f64| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            labels.get(i as usize).cloned().unwrap_or_default()
        };
        let y_fmt = |v: &f64| format_tick(*v);
        let x_what =
            if self.bars.iter().all(|b| b.label.starts_with("trial ")) { "trial" } else { "variant" };
        let x_desc = match &self.comparison {
            Some(c) => format!("{x_what}: {c}"),
            None => x_what.to_string(),
        };
        let mut plot = framed(&area, 10).build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y_top)?;
        house_style(
            plot.configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .y_labels(10)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc(x_desc)
                .y_desc(axis.desc("memory")),
        )
        .draw()?;

        if self.bars.is_empty() {
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Center));
            plot.draw_series(std::iter::once(Text::new(
                "no trial ran".to_string(),
                (0.0, y_top / 2.0),
                style,
            )))?;
            return Ok(());
        }
        let (plot_w, plot_h) = plot.plotting_area().dim_in_pixel();
        let px_per_unit = f64::from(plot_h) / y_top;
        // A label wider than its room would cross the next bar or be cut at the plot's edge
        // ("10.31 MiB" read "0.31 MiB" on a narrow first bar): it is shortened or left out.
        let slot_px = f64::from(plot_w) / n as f64;
        let width_of = |text: &str, style: &TextStyle| {
            root.estimate_text_size(text, style).map_or(f64::INFINITY, |(w, _)| f64::from(w))
        };
        const HALF: f64 = 0.3;
        for (i, bar) in self.bars.iter().enumerate() {
            let x = i as f64;
            let peak = axis.value(bar.peak);
            let mut base = 0.0;
            for (c, &bytes) in bar.bytes.iter().enumerate() {
                let h = axis.value(bytes);
                if h <= 0.0 {
                    continue;
                }
                let corners = [(x - HALF, base), (x + HALF, base + h)];
                plot.draw_series(std::iter::once(Rectangle::new(corners, palette::category(c).filled())))?;
                plot.draw_series(std::iter::once(Rectangle::new(corners, WHITE.stroke_width(1))))?;
                // The size inside the segment, when it is tall enough to hold it and the peak
                // line does not cross it.
                let centre = base + h / 2.0;
                let style = label_style().color(&WHITE).pos(Pos::new(HPos::Center, VPos::Center));
                let text = format_bytes(bytes);
                let room = 2.0 * HALF * slot_px - 4.0;
                if h * px_per_unit >= 22.0
                    && (peak - centre).abs() * px_per_unit >= 13.0
                    && width_of(&text, &style) <= room
                {
                    plot.draw_series(std::iter::once(Text::new(text, (x, centre), style)))?;
                }
                base += h;
            }
            plot.draw_series(std::iter::once(PathElement::new(
                [(x - HALF - 0.06, peak), (x + HALF + 0.06, peak)],
                BLACK.stroke_width(3),
            )))?;
            // The peak's size above whichever is higher, the stack or the line.
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Bottom));
            let texts = [format!("peak {}", format_bytes(bar.peak)), format_bytes(bar.peak)];
            if let Some(text) = first_fitting(&texts, slot_px - 4.0, |t| width_of(t, &style)) {
                let at = (x, peak.max(base) + 8.0 / px_per_unit);
                plot.draw_series(std::iter::once(Text::new(text.clone(), at, style)))?;
            }
        }
        self.draw_legend(&legend_area)
    }
}

impl CategoryBars {
    /// The legend, in its own column right of the plot, top to bottom as the segments stack;
    /// categories that are 0 in every bar are left out.
    fn draw_legend<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut rows = vec![(PEAK_LABEL, Mark::Line(BLACK.stroke_width(3)))];
        for c in (0..CATEGORY_NAMES.len()).rev() {
            if self.bars.iter().any(|b| b.bytes[c] > 0) {
                rows.push((CATEGORY_NAMES[c], Mark::Swatch(palette::category(c))));
            }
        }
        legend::column(area, &rows)
    }
}

/// `label` as it fits `room` pixels: whole; or `name (value)` for `name (key value)`; or cut,
/// with an ellipsis, to what fits.
pub(super) fn fit_label(label: &str, room: f64, width: impl Fn(&str) -> f64) -> String {
    if width(label) <= room {
        return label.to_string();
    }
    let short = match label.rsplit_once(" (") {
        Some((name, inside)) => match inside.strip_suffix(')').and_then(|i| i.rsplit_once(' ')) {
            Some((_, value)) => format!("{name} ({value})"),
            None => label.to_string(),
        },
        None => label.to_string(),
    };
    if width(&short) <= room {
        return short;
    }
    let chars: Vec<char> = short.chars().collect();
    (1..chars.len())
        .rev()
        .map(|k| chars[..k].iter().collect::<String>() + "…")
        .find(|t| width(t) <= room)
        .unwrap_or_else(|| "…".to_string())
}

/// The first of `texts` (longest first) no wider than `room` pixels.
pub(super) fn first_fitting(texts: &[String], room: f64, width: impl Fn(&str) -> f64) -> Option<&String> {
    texts.iter().find(|t| width(t) <= room)
}
