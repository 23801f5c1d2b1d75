//! One experiment's sweep from several folders (devices, budgets) overlaid: peak reserved memory
//! against the swept value, one line per folder, in bytes on the left and as a share of each
//! folder's budget (or capacity, without one) on the right, where devices of different sizes
//! line up: the line that reaches 100% first is the device that runs out first.
//!
//! Peak reserved is the figure drawn because it is what a budget caps (the caching allocator's
//! reservations; on the CPU reserved equals allocated). Trials that ran out of memory are
//! crosses in their folder's colour, at what they needed (allocated + requested) or at the
//! folder's limit when the message did not say.
use super::legend::{densify, Glyph, Legend};
use super::scale::{format_tick, swept_key, ByteAxis, XScale};
use super::style::{budget_style, house_style, label_style, palette, series_style, OOM_LABEL};
use super::{header, Chart, Plot, SweepPeak, SweepPoint};
use crate::compare::{Comparison, Side};
use crate::record::Status;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;

/// The chart's data: one series per folder, for one variant of one swept field.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSweep {
    pub title: String,
    pub subtitle: String,
    /// The swept key's last part: "depth".
    pub x_label: String,
    /// The variant, empty without variants; it goes into the file stem.
    pub variant: String,
    pub series: Vec<CompareSeries>,
}

/// One folder's sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSeries {
    /// "A: Tesla T4, budget 15.90 GiB".
    pub label: String,
    /// What shares are of: the budget, or the capacity.
    pub limit: u64,
    /// "budget" or "capacity".
    pub limit_name: String,
    /// Sorted by the swept value.
    pub points: Vec<SweepPoint>,
}

impl CompareSeries {
    fn from_side(side: &Side, field: &str, variant: &str) -> CompareSeries {
        let rows: Vec<_> =
            side.rows.iter().filter(|r| r.field == field && r.variant == variant).cloned().collect();
        CompareSeries {
            label: side.label(),
            limit: side.limit(),
            limit_name: side.limit_name().to_string(),
            points: SweepPeak::from_summary(&rows, "", "", None).points,
        }
    }

    fn ok(&self) -> impl Iterator<Item = &SweepPoint> {
        self.points.iter().filter(|p| p.status == Status::Ok)
    }

    fn ooms(&self) -> impl Iterator<Item = &SweepPoint> {
        self.points.iter().filter(|p| p.status == Status::Oom)
    }

    /// Where an OOM cross goes, in bytes: at what it needed, else at the limit.
    fn oom_marker(&self, p: &SweepPoint) -> u64 {
        p.oom_need.unwrap_or(self.limit)
    }

    fn share(&self, bytes: u64) -> f64 {
        if self.limit == 0 {
            0.0
        } else {
            100.0 * bytes as f64 / self.limit as f64
        }
    }
}

impl CompareSweep {
    /// One chart per (field, variant) with a sweep in `c`, in table order.
    pub fn from_comparison(c: &Comparison) -> Vec<CompareSweep> {
        let mut out = Vec::new();
        for t in c.tables.iter().filter(|t| !t.field.is_empty()) {
            let mut variants: Vec<&str> = Vec::new();
            for f in &t.rows {
                if !variants.contains(&f.variant.as_str()) {
                    variants.push(&f.variant);
                }
            }
            for v in variants {
                let x_label = swept_key(&t.field).to_string();
                let folders: Vec<String> = c.folders.iter().map(Side::label).collect();
                out.push(CompareSweep {
                    title: format!("{}: peak memory by {x_label}, compared", c.experiment),
                    subtitle: format!(
                        "{}{}{}",
                        folders.join("  vs  "),
                        if v.is_empty() { String::new() } else { format!(" · variant {v}") },
                        if c.spec_differs.is_empty() { "" } else { " · WARNING: the spec files differ" }
                    ),
                    x_label,
                    variant: v.to_string(),
                    series: c.folders.iter().map(|s| CompareSeries::from_side(s, &t.field, v)).collect(),
                });
            }
        }
        out
    }

    fn xs(&self) -> Vec<f64> {
        self.series.iter().flat_map(|s| s.points.iter().map(|p| p.x)).collect()
    }

    /// The highest byte value drawn: peaks, OOM markers, limits.
    fn top_bytes(&self) -> u64 {
        self.series
            .iter()
            .flat_map(|s| {
                let peaks = s.ok().map(|p| p.max_reserved.max(p.max_allocated));
                let ooms = s.ooms().map(|p| s.oom_marker(p));
                peaks.chain(ooms).chain([s.limit])
            })
            .max()
            .unwrap_or(0)
    }

    /// The highest share drawn, in percent, at least 100.
    fn top_share(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|s| {
                let peaks = s.ok().map(|p| s.share(p.max_reserved));
                let ooms = s.ooms().map(|p| s.share(s.oom_marker(p)));
                peaks.chain(ooms).collect::<Vec<f64>>()
            })
            .fold(100.0, f64::max)
    }
}

/// Which of the two panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panel {
    Bytes,
    Share,
}

/// The mapping from data to a panel's coordinates.
struct Frame {
    panel: Panel,
    scale: XScale,
    x: Range<f64>,
    y_top: f64,
    axis: ByteAxis,
}

impl Frame {
    fn y(&self, s: &CompareSeries, bytes: u64) -> f64 {
        match self.panel {
            Panel::Bytes => self.axis.value(bytes),
            Panel::Share => s.share(bytes),
        }
    }

    fn fraction(&self, (x, y): (f64, f64)) -> (f64, f64) {
        ((x - self.x.start) / (self.x.end - self.x.start), y / self.y_top)
    }
}

impl Chart for CompareSweep {
    fn file_stem(&self) -> String {
        let clean = |s: &str| -> String {
            s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
        };
        let suffix =
            if self.variant.is_empty() { String::new() } else { format!("-{}", clean(&self.variant)) };
        format!("compare_peak_vs_{}{suffix}", clean(&self.x_label))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = header(root, &self.title, &self.subtitle)?;
        let width = area.dim_in_pixel().0;
        let (left, right) = area.split_horizontally(width / 2);
        let xs = self.xs();
        let scale = XScale::for_values(&xs);
        let top = self.top_bytes();
        let axis = ByteAxis::for_max(top);
        let bytes_top = if top > 0 { axis.value(top) * 1.1 } else { 1.0 };
        for (panel, area, y_top) in
            [(Panel::Bytes, &left, bytes_top), (Panel::Share, &right, self.top_share() * 1.1)]
        {
            let frame = Frame { panel, scale, x: scale.range(&xs), y_top, axis };
            self.draw_panel(area, &frame)?;
        }
        Ok(())
    }
}

impl CompareSweep {
    fn draw_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let caption = match frame.panel {
            Panel::Bytes => "in bytes; dashed: each folder's budget".to_string(),
            Panel::Share => "as a share of each folder's budget (or capacity)".to_string(),
        };
        let mut plot = ChartBuilder::on(area)
            .caption(caption, label_style())
            .margin_left(16)
            .margin_right(30)
            .margin_top(4)
            .margin_bottom(16)
            .x_label_area_size(60)
            .y_label_area_size(74)
            .build_cartesian_2d(frame.x.clone(), 0.0..frame.y_top)?;
        let integral = self.xs().iter().all(|x| x.fract() == 0.0);
        let x_desc = frame.scale.desc(&self.x_label);
        let y_desc = match frame.panel {
            Panel::Bytes => frame.axis.desc("peak reserved"),
            Panel::Share => "peak reserved (% of budget)".to_string(),
        };
        let scale = frame.scale;
        let x_fmt = move |t: &f64| scale.tick(*t);
        let y_fmt = |v: &f64| format_tick(*v);
        house_style(
            plot.configure_mesh()
                .x_labels(frame.scale.tick_count(&frame.x, integral).min(8))
                .y_labels(10)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc(x_desc)
                .y_desc(y_desc),
        )
        .draw()?;

        // Limits: one dashed line per folder in bytes, in its colour; one at 100% in shares.
        let dashed = |y: f64, colour: RGBColor| {
            DashedLineSeries::new([(frame.x.start, y), (frame.x.end, y)], 12, 8, colour.stroke_width(2))
        };
        match frame.panel {
            Panel::Bytes => {
                for (i, s) in self.series.iter().enumerate() {
                    plot.draw_series(dashed(frame.axis.value(s.limit), palette::category(i)))?;
                }
            }
            Panel::Share => {
                plot.draw_series(dashed(100.0, palette::BUDGET))?;
            }
        }
        // The last folder first, so that A, the reference, is on top where lines meet.
        for (i, s) in self.series.iter().enumerate().rev() {
            let colour = palette::category(i);
            let points: Vec<(f64, f64)> =
                s.ok().map(|p| (frame.scale.map(p.x), frame.y(s, p.max_reserved))).collect();
            plot.draw_series(LineSeries::new(points.iter().copied(), series_style(colour)))?;
            plot.draw_series(points.into_iter().map(|c| Circle::new(c, 5, colour.filled())))?;
            let crosses = s.ooms().map(|p| {
                Cross::new((frame.scale.map(p.x), frame.y(s, s.oom_marker(p))), 8, colour.stroke_width(3))
            });
            plot.draw_series(crosses)?;
        }
        if frame.panel == Panel::Share {
            self.draw_legend(&mut plot, frame)?;
        }
        Ok(())
    }

    fn draw_legend<'a, DB: DrawingBackend + 'a>(&self, plot: &mut Plot<'a, DB>, frame: &Frame) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut legend = Legend::default();
        for (i, s) in self.series.iter().enumerate() {
            legend.add(&s.label, Glyph::line(palette::category(i), 5));
        }
        if self.series.iter().any(|s| s.ooms().next().is_some()) {
            // One entry stands for every folder's crosses, so it takes none of their colours.
            legend.add(OOM_LABEL, Glyph::Cross(palette::AXIS.stroke_width(3)));
        }
        legend.add("100% of budget", Glyph::Dashed(budget_style()));

        let mut drawn = densify(&[(0.0, 100.0 / frame.y_top), (1.0, 100.0 / frame.y_top)], 50);
        for s in &self.series {
            let line: Vec<(f64, f64)> =
                s.ok().map(|p| frame.fraction((frame.scale.map(p.x), s.share(p.max_reserved)))).collect();
            drawn.extend(densify(&line, 20));
            drawn.extend(s.ooms().map(|p| frame.fraction((frame.scale.map(p.x), s.share(s.oom_marker(p))))));
        }
        legend.draw_where_free(plot, &drawn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::test_support::{out_dir, png_size, svg_texts};
    use crate::compare::{compare, tests::two_devices};

    #[test]
    fn overlays_one_line_per_folder_in_bytes_and_shares() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let c = compare(&two_devices()).unwrap();
        let charts = CompareSweep::from_comparison(&c);
        assert_eq!(charts.len(), 1);
        let chart = &charts[0];
        assert_eq!(chart.file_stem(), "compare_peak_vs_depth");
        assert_eq!(chart.series.len(), 2);
        assert_eq!(chart.series[1].points.len(), 6);
        assert_eq!(chart.series[1].limit, 2 << 30);
        assert!(chart.top_share() > 100.0);

        let out = render(chart, &dir).expect("rendered");
        assert_eq!(png_size(&out.png), (1280, 800));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).unwrap());
        for text in [
            "A: Tesla T4, budget 15.90 GiB",
            "B: CPU (AMD EPYC), budget 2.00 GiB",
            OOM_LABEL,
            "100% of budget",
            "peak reserved (GiB)",
            "peak reserved (% of budget)",
            "depth",
            "depth_sweep: peak memory by depth, compared",
        ] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
    }
}
