//! Drawing the bench chart: a group of bars per configuration, whiskers for the spread, a
//! target across the bar that carries one, PyTorch's 1 dashed across the plot, and the legend in a
//! column of its own right of the plot.
use super::data::BenchChart;
use crate::chart::legend::{self, Mark};
use crate::chart::style::{across, budget_style, house_style, label_style, palette};
use crate::chart::{footnotes, framed, header, Chart};
use crate::units::format_tick;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Width of the legend's column, right of the plot: outside it, so that it never hides a bar.
const LEGEND_WIDTH: u32 = 230;
/// The share of a group's slot its bars take; the rest separates the groups.
const GROUP_WIDTH: f64 = 0.84;
const REFERENCE_LABEL: &str = "PyTorch = 1";

impl Chart for BenchChart {
    fn file_stem(&self) -> String {
        self.stem.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let width = area.dim_in_pixel().0;
        let area = footnotes(area, &self.notes)?;
        let (area, legend_area) = area.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
        let n = self.groups.len().max(1);
        let cut = self.top();
        let y_top = cut * 1.15;
        let labels: Vec<String> = self.groups.iter().map(|g| g.label.clone()).collect();
        let x_fmt = move |x: &f64| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            labels.get(i as usize).cloned().unwrap_or_default()
        };
        let y_fmt = |v: &f64| format_tick(*v);
        let x_range = -0.5..n as f64 - 0.5;
        let mut plot = framed(&area, 10).build_cartesian_2d(x_range.clone(), 0.0..y_top)?;
        house_style(
            plot.configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .y_labels(10)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc("configuration")
                .y_desc("step time / PyTorch's median"),
        )
        .draw()?;
        if self.groups.is_empty() {
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Center));
            plot.draw_series(std::iter::once(Text::new(
                "no configuration ran PyTorch's loop",
                (0.0, y_top / 2.0),
                style,
            )))?;
            return Ok(());
        }
        plot.draw_series(across(&x_range, 1.0, budget_style()))?;
        let (_, plot_h) = plot.plotting_area().dim_in_pixel();
        let px = y_top / f64::from(plot_h.max(1));
        for (i, g) in self.groups.iter().enumerate() {
            let w = GROUP_WIDTH / g.bars.len().max(1) as f64;
            let left = i as f64 - GROUP_WIDTH / 2.0;
            let mut highest: f64 = 1.0;
            for (j, b) in g.bars.iter().enumerate() {
                let (x0, x1) = (left + w * j as f64 + w * 0.08, left + w * (j + 1) as f64 - w * 0.08);
                let xc = (x0 + x1) / 2.0;
                plot.draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, b.median)],
                    palette::category(b.colour).filled(),
                )))?;
                // The spread: a whisker from p10 to p90, capped; one past the plot's top is cut
                // there, without its cap, and says where it ends.
                let cap = (x1 - x0) / 4.0;
                let whisker = BLACK.stroke_width(2);
                let (p10, p90) = (b.p10.min(cut), b.p90.min(cut));
                plot.draw_series([
                    PathElement::new([(xc, p10), (xc, p90)], whisker),
                    PathElement::new([(xc - cap, p10), (xc + cap, p10)], whisker),
                ])?;
                if b.p90 <= cut {
                    plot.draw_series(std::iter::once(PathElement::new(
                        [(xc - cap, p90), (xc + cap, p90)],
                        whisker,
                    )))?;
                } else {
                    let style = label_style().pos(Pos::new(HPos::Left, VPos::Center));
                    plot.draw_series(std::iter::once(Text::new(
                        format!("p90 {:.1}", b.p90),
                        (xc + cap, cut),
                        style,
                    )))?;
                }
                if let Some(t) = b.target {
                    let d = (x1 - x0) * 0.35;
                    plot.draw_series(std::iter::once(PathElement::new(
                        [(x0 - d, t), (x1 + d, t)],
                        BLACK.stroke_width(4),
                    )))?;
                    highest = highest.max(t);
                }
                highest = highest.max(p90).max(b.median);
            }
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Bottom));
            plot.draw_series(std::iter::once(Text::new(
                g.reference_label.clone(),
                (i as f64, highest + 10.0 * px),
                style,
            )))?;
        }
        self.draw_legend(&legend_area)
    }
}

impl BenchChart {
    /// The contenders' colours, then the target's dash and PyTorch's line.
    fn draw_legend<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut rows: Vec<(&str, Mark)> = self
            .series
            .iter()
            .map(|s| (s.name.as_str(), Mark::Swatch(palette::category(s.colour))))
            .collect();
        if self.groups.iter().any(|g| g.bars.iter().any(|b| b.target.is_some())) {
            rows.push((self.target_label.as_str(), Mark::Line(BLACK.stroke_width(4))));
        }
        rows.push((REFERENCE_LABEL, Mark::Dashed(budget_style())));
        legend::column(area, &rows)
    }
}
