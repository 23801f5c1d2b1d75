//! The band under the timeline's plot: the phase of each column as a colour, the step
//! numbers, what the x axis is, and the key to the colours.
use super::data::Timeline;
use crate::chart::style::{axis_desc_style, label_style, palette, phase_colour};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Height of the band of phase colours, step numbers and phase key under the plot, in pixels.
pub(super) const BAND_AREA: u32 = 138;
const BAND_HEIGHT: i32 = 18;

impl Timeline {
    /// Under the plot: the phase of each column as a colour, the step numbers, what the x axis
    /// is, and the key to the colours.
    pub(super) fn draw_band<DB: DrawingBackend>(
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

fn step_label(step: usize) -> String {
    if step == 0 {
        "setup".to_string()
    } else {
        step.to_string()
    }
}

/// Label every `stride`th step, `stride` a round number (1, 2, 5, 10, 20, 50, ...), so that
/// labels `label_px` wide fit under steps `step_px` wide.
pub(super) fn stride_for(step_px: f64, label_px: f64) -> usize {
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
