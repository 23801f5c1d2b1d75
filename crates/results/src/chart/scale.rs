//! Axes: the byte unit of a memory axis ([`ByteAxis`]) and the linear or base-2 logarithmic
//! mapping of a swept value ([`XScale`]). How numbers read is [`crate::units`]'.
use anyhow::Result;
use plotters::prelude::*;
use std::ops::Range;

use super::style::house_style;
use super::Plot;
use crate::spec::Field;
use crate::units::{format_tick, unit_for, KIB};

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

/// What a swept field is called on an axis and in labels: its last part, "depth" for
/// `model.depth`, since the section it is in says nothing a reader of the chart needs; "value"
/// without a sweep.
pub fn swept_key(field: Option<Field>) -> &'static str {
    field.map_or("value", Field::column)
}

/// How x values map to the axis: as they are, or as their base-2 logarithm when they span
/// more than [`LOG_RATIO`] (batch sizes 1 to 4096 would crowd everything on the left) or step
/// by one factor (16, 32, ..., 8192; world sizes 1, 2, 4), where a linear axis bunches the small
/// values and equal spacing shows the sweep as it was made. The
/// axis itself stays linear over the mapped values, so one chart type serves both, and the
/// ticks of a log axis, at whole log2 steps, read as powers of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    Linear,
    Log2,
}

/// Above this max/min ratio of the x values, the x axis is logarithmic.
const LOG_RATIO: f64 = 64.0;

/// Whether the distinct values, sorted, are three or more that each multiply the one before by
/// the same factor, 2 or more (within 1%): a sweep made geometric, as `values = [16, 32, ...]`
/// or a search's doubling writes them.
fn geometric(xs: &[f64]) -> bool {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite() && *x > 0.0).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    let ratios: Vec<f64> = v.windows(2).map(|w| w[1] / w[0]).collect();
    let Some(&first) = ratios.first() else { return false };
    ratios.len() >= 2 && first >= 2.0 && ratios.iter().all(|r| (r / first - 1.0).abs() < 0.01)
}

impl XScale {
    pub fn for_values(xs: &[f64]) -> XScale {
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if min > 0.0 && (max / min > LOG_RATIO || geometric(xs)) {
            XScale::Log2
        } else {
            XScale::Linear
        }
    }

    pub fn map(self, x: f64) -> f64 {
        match self {
            XScale::Linear => x,
            XScale::Log2 => x.log2(),
        }
    }

    /// The axis range over the mapped values, with a margin so that no marker sits on the
    /// frame; a linear axis of non-negative values starts at 0 rather than below it.
    pub fn range(self, xs: &[f64]) -> Range<f64> {
        let mapped: Vec<f64> = xs.iter().map(|&x| self.map(x)).collect();
        let lo = mapped.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = mapped.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() || !hi.is_finite() {
            return 0.0..1.0;
        }
        let span = hi - lo;
        let margin = if span > 0.0 { span * 0.05 } else { (lo.abs() * 0.1).max(1.0) };
        let start = lo - margin;
        let start = if self == XScale::Linear && lo >= 0.0 && start < 0.0 { 0.0 } else { start };
        start..hi + margin
    }

    /// How many ticks to ask plotters for: with whole-number values (depths, batch sizes) or a
    /// log axis, no more than one per unit, so that no tick falls between two whole values.
    pub fn tick_count(self, range: &Range<f64>, integral: bool) -> usize {
        let per_unit = (range.end - range.start).floor() as usize + 1;
        match self {
            XScale::Log2 => per_unit.clamp(2, 14),
            XScale::Linear if integral => per_unit.clamp(2, 10),
            XScale::Linear => 10,
        }
    }

    pub fn tick(self, t: f64) -> String {
        match self {
            XScale::Linear => format_tick(t),
            XScale::Log2 => format_tick(t.exp2()),
        }
    }

    /// Draws the mesh of a plot whose x axis is the swept `key` over `x` (`integral`: its
    /// values are whole numbers), with at most `max_ticks` ticks across, read as this scale
    /// reads them, and `y_desc` up.
    pub fn draw_mesh<'a, DB>(
        self,
        plot: &mut Plot<'a, DB>,
        x: &Range<f64>,
        integral: bool,
        max_ticks: usize,
        key: &str,
        y_desc: String,
    ) -> Result<()>
    where
        DB: DrawingBackend + 'a,
        DB::ErrorType: 'static,
    {
        let x_fmt = move |t: &f64| self.tick(*t);
        let y_fmt = |v: &f64| format_tick(*v);
        house_style(
            plot.configure_mesh()
                .x_labels(self.tick_count(x, integral).min(max_ticks))
                .y_labels(10)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc(self.desc(key))
                .y_desc(y_desc),
        )
        .draw()?;
        Ok(())
    }

    /// The axis description: the swept key, and on a log axis a warning that equal steps are
    /// factors, not differences.
    pub fn desc(self, key: &str) -> String {
        match self {
            XScale::Linear => key.to_string(),
            XScale::Log2 => format!("{key} (log scale)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn x_axis_is_logarithmic_only_over_a_wide_span() {
        assert_eq!(XScale::for_values(&[1.0, 64.0]), XScale::Linear);
        assert_eq!(XScale::for_values(&[1.0, 4096.0]), XScale::Log2);
        assert_eq!(XScale::for_values(&[0.0, 4096.0]), XScale::Linear);
        // Stepped by one factor: log, whatever the span; a search's trials near the answer are not.
        assert_eq!(XScale::for_values(&[1.0, 2.0, 4.0, 2.0]), XScale::Log2);
        assert_eq!(XScale::for_values(&[64.0, 256.0, 1024.0, 4096.0]), XScale::Log2);
        assert_eq!(XScale::for_values(&[1.0, 2.0]), XScale::Linear);
        assert_eq!(XScale::for_values(&[35.0, 36.0, 34.0]), XScale::Linear);
        assert_eq!(XScale::for_values(&[1.0, 2.0, 4.0, 5.0]), XScale::Linear);
        assert_eq!(XScale::for_values(&[10.0, 15.0, 22.5]), XScale::Linear);
        assert_eq!(XScale::Log2.tick(10.0), "1024");
        assert_eq!(XScale::Linear.range(&[1.0, 41.0]), 0.0..43.0);
        assert_eq!(XScale::Log2.desc("batch_size"), "batch_size (log scale)");
        assert_eq!(swept_key(Some(Field::BatchSize)), "batch_size");
        assert_eq!(swept_key(None), "value");
    }
}
