//! `compare`'s charts from a comparison: one per swept field and variant, a series per folder
//! (the chart itself, `chart::CompareSweep`, knows nothing of folders).
use super::{Comparison, Side};
use crate::chart::scale::swept_key;
use crate::chart::{CompareSeries, CompareSweep, SeriesOf, SweepPeak};
use crate::spec::Field;

/// One chart per (field, variant) with a sweep in `c`, in table order.
pub fn sweeps(c: &Comparison) -> Vec<CompareSweep> {
    let mut out = Vec::new();
    for t in c.tables.iter().filter(|t| t.field.is_some()) {
        let mut variants: Vec<&str> = Vec::new();
        for f in &t.rows {
            if !variants.contains(&f.variant.as_str()) {
                variants.push(&f.variant);
            }
        }
        for v in variants {
            let x_label = swept_key(t.field).to_string();
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
                series_of: SeriesOf::Folders,
                series: c.folders.iter().map(|s| series(s, t.field, v)).collect(),
            });
        }
    }
    out
}

/// One folder's sweep of `field` for `variant`.
fn series(side: &Side, field: Option<Field>, variant: &str) -> CompareSeries {
    let rows: Vec<_> =
        side.rows.iter().filter(|r| r.field == field && r.variant == variant).cloned().collect();
    CompareSeries {
        label: side.label(),
        limit: side.limit(),
        limit_name: side.limit_name().to_string(),
        points: SweepPeak::from_summary(&rows, "", "", None).points,
    }
}

#[cfg(test)]
#[path = "chart_tests.rs"]
mod tests;
