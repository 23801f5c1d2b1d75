//! Where the memory goes: one stacked bar per variant, split into data, parameters, optimizer
//! state, gradients, batch and activations, each measured from the trace of the variant's
//! first training step, with the trial's measured peak marked across the bar.
//!
//! The categories are differences of `memory_allocated` at the ends of phases, clamped at 0:
//!
//! | category        | after                | minus                                   |
//! |-----------------|----------------------|-----------------------------------------|
//! | data            | `data` (step 0)      | the trial's baseline                    |
//! | parameters      | `model` (step 0)     | `data`                                  |
//! | optimizer state | first `zero_grad`    | `model`, and the loss kept (4 or 8 B)   |
//! | gradients       | first `optimizer_step` | first `zero_grad`                     |
//! | batch           | first `to_device`    | `model`                                 |
//! | activations     | first `forward`      | first `to_device`                       |
//!
//! The components are not all live at once (the batch and activations are gone when the
//! optimizer state appears), so the stack can be taller or shorter than the measured peak; the
//! peak line says what the trial really needed. Modes without backward have no optimizer step
//! nor zero_grad: their optimizer state and gradients are 0.
//!
//! The trial that stands for each variant is the one [`pick_trials`] picks.
use super::pick::{comparison, pick_trials};
use super::scale::{format_bytes, format_tick, ByteAxis};
use super::style::{house_style, label_style, palette};
use super::{footnotes, header, Chart};
use crate::record::{Phase, PhaseRecord, SummaryRow};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The categories, bottom to top of a bar.
pub const CATEGORY_NAMES: [&str; 6] =
    ["data", "parameters", "optimizer state", "gradients", "batch", "activations"];

/// The chart's data: one bar per picked trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Categories {
    pub title: String,
    pub subtitle: String,
    pub bars: Vec<CategoryBar>,
    /// Which swept value the bars stand at ([`comparison`]), None without a sweep.
    pub comparison: Option<String>,
}

/// One trial's memory by category.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryBar {
    /// The variant's name (or the trial's, without variants).
    pub label: String,
    pub trial: usize,
    /// Bytes per category, in the order of [`CATEGORY_NAMES`].
    pub bytes: [u64; 6],
    /// `max_memory_allocated` minus the baseline.
    pub peak: u64,
    /// Whether the trial ran under autocast, whose weight copies count as activations.
    pub autocast: bool,
}

impl CategoryBar {
    pub fn total(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

impl CategoryBar {
    /// The categories of `row`'s trial, from its rows of `trace`. Phases missing from the trace
    /// count as not having allocated anything.
    pub fn from_trace(label: impl Into<String>, row: &SummaryRow, trace: &[PhaseRecord]) -> CategoryBar {
        let mine: Vec<&PhaseRecord> = trace.iter().filter(|r| r.trial == row.trial).collect();
        let first = |phase: Phase| mine.iter().find(|r| r.phase == phase).map(|r| r.memory_allocated);
        let baseline = row.baseline_allocated;
        let data = first(Phase::Data).unwrap_or(baseline);
        let model = first(Phase::Model).unwrap_or(data);
        let loss = if row.dtype == "float64" { 8 } else { 4 };
        let optimizer = first(Phase::ZeroGrad).map_or(0, |z| z.saturating_sub(model).saturating_sub(loss));
        let gradients = match (first(Phase::OptimizerStep), first(Phase::ZeroGrad)) {
            (Some(step), Some(zero)) => step.saturating_sub(zero),
            _ => 0,
        };
        let to_device = first(Phase::ToDevice);
        let batch = to_device.map_or(0, |t| t.saturating_sub(model));
        let activations = match (first(Phase::Forward), to_device) {
            (Some(f), Some(t)) => f.saturating_sub(t),
            _ => 0,
        };
        CategoryBar {
            label: label.into(),
            trial: row.trial,
            bytes: [
                data.saturating_sub(baseline),
                model.saturating_sub(data),
                optimizer,
                gradients,
                batch,
                activations,
            ],
            peak: row.max_memory_allocated.saturating_sub(baseline),
            autocast: !matches!(row.amp.as_str(), "" | "off"),
        }
    }
}

impl Categories {
    /// One bar per trial [`pick_trials`] picks.
    pub fn from_results(
        rows: &[SummaryRow],
        trace: &[PhaseRecord],
        title: impl Into<String>,
        subtitle: impl Into<String>,
    ) -> Categories {
        let bars = pick_trials(rows)
            .into_iter()
            .map(|(label, row)| CategoryBar::from_trace(label, row, trace))
            .collect();
        Categories { title: title.into(), subtitle: subtitle.into(), bars, comparison: comparison(rows) }
    }

    fn autocast(&self) -> bool {
        self.bars.iter().any(|b| b.autocast)
    }

    /// The highest value drawn: a stack or a peak.
    fn top(&self) -> u64 {
        self.bars.iter().map(|b| b.total().max(b.peak)).max().unwrap_or(0)
    }

    fn notes(&self) -> Vec<String> {
        let mut notes =
            vec!["Each category is measured at the first training step; they are not all live at once, \
             so the stack is not the peak: the black line marks the trial's measured peak."
                .to_string()];
        if self.autocast() {
            notes.push(
                "Under autocast, activations include autocast's cached half-precision copies of the weights."
                    .to_string(),
            );
        }
        notes
    }
}

const PEAK_LABEL: &str = "measured peak";
/// Width of the legend's column, right of the plot: outside it, so that it never hides a bar.
const LEGEND_WIDTH: u32 = 200;
const LEGEND_ROW: i32 = 28;

impl Chart for Categories {
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
        let labels: Vec<String> = self.bars.iter().map(|b| b.label.clone()).collect();
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
        let mut plot = ChartBuilder::on(&area)
            .margin_left(20)
            .margin_right(10)
            .margin_top(10)
            .margin_bottom(10)
            .x_label_area_size(60)
            .y_label_area_size(78)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y_top)?;
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
        let (_, plot_h) = plot.plotting_area().dim_in_pixel();
        let px_per_unit = f64::from(plot_h) / y_top;
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
                if h * px_per_unit >= 22.0 && (peak - centre).abs() * px_per_unit >= 13.0 {
                    let style = label_style().color(&WHITE).pos(Pos::new(HPos::Center, VPos::Center));
                    plot.draw_series(std::iter::once(Text::new(format_bytes(bytes), (x, centre), style)))?;
                }
                base += h;
            }
            plot.draw_series(std::iter::once(PathElement::new(
                [(x - HALF - 0.06, peak), (x + HALF + 0.06, peak)],
                BLACK.stroke_width(3),
            )))?;
            // The peak's size above whichever is higher, the stack or the line.
            let style = label_style().pos(Pos::new(HPos::Center, VPos::Bottom));
            plot.draw_series(std::iter::once(Text::new(
                format!("peak {}", format_bytes(bar.peak)),
                (x, peak.max(base) + 8.0 / px_per_unit),
                style,
            )))?;
        }
        self.draw_legend(&legend_area)
    }
}

impl Categories {
    /// The legend, in its own column right of the plot, top to bottom as the segments stack;
    /// categories that are 0 in every bar are left out.
    fn draw_legend<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let text = label_style().pos(Pos::new(HPos::Left, VPos::Center));
        let mut y = 30;
        area.draw(&PathElement::new([(4, y), (28, y)], BLACK.stroke_width(3)))?;
        area.draw_text(PEAK_LABEL, &text, (38, y))?;
        for c in (0..CATEGORY_NAMES.len()).rev() {
            if self.bars.iter().all(|b| b.bytes[c] == 0) {
                continue;
            }
            y += LEGEND_ROW;
            area.draw(&Rectangle::new([(6, y - 9), (26, y + 9)], palette::category(c).filled()))?;
            area.draw_text(CATEGORY_NAMES[c], &text, (38, y))?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::test_support::{out_dir, png_size, summary, svg_texts};
    use crate::record::Status;

    pub(crate) fn rec(trial: usize, step: usize, micro: usize, phase: Phase, allocated: u64) -> PhaseRecord {
        PhaseRecord {
            trial,
            step,
            micro,
            phase,
            memory_allocated: allocated,
            memory_reserved: allocated,
            max_memory_allocated: allocated,
            max_memory_reserved: allocated,
            device_used: None,
            phase_seconds: 0.1,
            elapsed_seconds: 0.1,
        }
    }

    /// A training trial: baseline 100, data 1000, parameters 4000, batch 64, activations 500,
    /// gradients 4000, optimizer state 8000, loss 4; two steps.
    pub(crate) fn train_trace(trial: usize) -> Vec<PhaseRecord> {
        let (base, data, params, batch, act, grads, state) = (100, 1000, 4000, 64, 500, 4000, 8000);
        let model = base + data + params;
        let mut t = vec![rec(trial, 0, 0, Phase::Data, base + data), rec(trial, 0, 0, Phase::Model, model)];
        for step in 1..=2 {
            let kept = if step == 1 { 0 } else { state + 4 };
            t.extend([
                rec(trial, step, 0, Phase::ToDevice, model + kept + batch),
                rec(trial, step, 0, Phase::Forward, model + kept + batch + act + 4),
                rec(trial, step, 0, Phase::Backward, model + kept + grads + 4),
                rec(trial, step, 0, Phase::OptimizerStep, model + state + grads + 4),
                rec(trial, step, 0, Phase::ZeroGrad, model + state + 4),
            ]);
        }
        t
    }

    #[test]
    fn categories_are_differences_at_phase_ends() {
        let mut row = summary(1, "adam", None, Status::Ok);
        row.baseline_allocated = 100;
        row.max_memory_allocated = 100 + 1000 + 4000 + 8000 + 4000 + 4;
        let bar = CategoryBar::from_trace("adam", &row, &train_trace(1));
        assert_eq!(bar.bytes, [1000, 4000, 8000, 4000, 64, 504]);
        assert_eq!(bar.peak, 1000 + 4000 + 8000 + 4000 + 4);
        assert!(!bar.autocast);

        // float64 keeps an 8-byte loss: the optimizer state is 4 bytes less than with 4.
        row.dtype = "float64".into();
        assert_eq!(CategoryBar::from_trace("adam", &row, &train_trace(1)).bytes[2], 7996);
    }

    #[test]
    fn forward_only_trials_have_no_optimizer_state_nor_gradients() {
        let t = vec![
            rec(2, 0, 0, Phase::Data, 1000),
            rec(2, 0, 0, Phase::Model, 5000),
            rec(2, 1, 0, Phase::ToDevice, 5064),
            rec(2, 1, 0, Phase::Forward, 5068),
            rec(2, 2, 0, Phase::ToDevice, 5068),
            rec(2, 2, 0, Phase::Forward, 5072),
        ];
        let mut row = summary(2, "no_grad", None, Status::Ok);
        row.mode = "forward_no_grad".into();
        row.max_memory_allocated = 7000;
        let bar = CategoryBar::from_trace("no_grad", &row, &t);
        assert_eq!(bar.bytes, [1000, 4000, 0, 0, 64, 4]);
        assert_eq!(bar.peak, 7000);
        // Nothing in the trace: all zero, no panic.
        assert_eq!(CategoryBar::from_trace("x", &row, &[]).bytes, [0; 6]);
    }

    #[test]
    fn renders_png_and_svg_with_names_and_categories() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = out_dir(&temp);
        let mut rows = Vec::new();
        let mut trace = Vec::new();
        for (trial, name) in [(1, "sgd"), (2, "adam"), (3, "adam_amp")] {
            let mut row = summary(trial, name, None, Status::Ok);
            row.max_memory_allocated = (17_104 + trial as u64 * 300) << 10;
            row.amp = if name == "adam_amp" { "bf16".into() } else { "off".into() };
            rows.push(row);
            trace.extend(train_trace(trial).into_iter().map(|mut r| {
                r.memory_allocated <<= 10;
                r
            }));
        }
        let chart = Categories::from_results(&rows, &trace, "Memory by category", "fake device");
        let out = render(&chart, &dir.join("categories")).expect("rendered");
        assert_eq!(png_size(&out.png), (1280, 800));
        assert!(out.png.ends_with("categories.png"));
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        for text in
            ["sgd", "adam", "adam_amp", "memory (MiB)", "variant", "measured peak", "Memory by category"]
                .into_iter()
                .chain(CATEGORY_NAMES)
        {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
        assert!(texts.iter().any(|t| t.contains("autocast")), "{texts:?}");
    }

    #[test]
    fn renders_empty_and_single_inputs() {
        let temp = tempfile::tempdir().expect("temp dir");
        let empty = Categories::from_results(&[], &[], "empty", "");
        render(&empty, &temp.path().join("empty")).expect("empty renders");
        let row = summary(1, "", None, Status::Ok);
        let one = Categories::from_results(&[row], &train_trace(1), "one", "");
        assert_eq!(one.bars.len(), 1);
        let out = render(&one, &temp.path().join("one")).expect("one renders");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        assert!(texts.iter().any(|t| t == "trial 1"), "{texts:?}");

        // A sweep says where the bars stand.
        let rows = [summary(1, "fp32", Some(64.0), Status::Ok), summary(2, "bf16", Some(64.0), Status::Ok)];
        let trace: Vec<PhaseRecord> = train_trace(1).into_iter().chain(train_trace(2)).collect();
        let out = render(&Categories::from_results(&rows, &trace, "swept", ""), &temp.path().join("swept"))
            .expect("sweep renders");
        let texts = svg_texts(&std::fs::read_to_string(&out.svg).expect("svg readable"));
        let desc = "variant: each variant at batch_size 64, the largest every variant ran";
        assert!(texts.iter().any(|t| t == desc), "{texts:?}");
    }
}
