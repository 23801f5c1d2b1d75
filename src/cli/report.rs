//! What `run` says at the end: the answer to the spec's question, and the charts it drew.
use std::path::PathBuf;

use anyhow::Result;
use bytesize::ByteSize;

use crate::chart::{self, SweepPeak};
use crate::record::Status;
use crate::run::{describe, RunReport};
use crate::spec::Spec;

/// Draws the run's charts into its results folder; returns the files written.
pub fn charts(spec: &Spec, report: &RunReport) -> Result<Vec<PathBuf>> {
    if spec.sweep.is_none() {
        return Ok(Vec::new());
    }
    let m = &report.manifest;
    let subtitle = format!(
        "{} on {} ({}), libtorch {}, {}",
        spec.name,
        m.device.name,
        m.device.resolved,
        m.versions.libtorch,
        m.git.revision.as_deref().map_or("no git revision", |r| &r[..r.len().min(10)])
    );
    let chart =
        SweepPeak::from_summary(&report.rows, spec.description.clone(), subtitle, m.device.budget_bytes);
    let files = chart::render(&chart, &report.dir)?;
    Ok(vec![files.png, files.svg])
}

pub fn print(spec: &Spec, report: &RunReport, charts: &[PathBuf]) {
    let m = &report.manifest;
    let budget = m
        .device
        .budget_bytes
        .map(|b| format!(", budget {}", ByteSize::b(b).display().iec()))
        .unwrap_or_default();
    println!("{} on {}{budget}: {} trials", spec.name, m.device.name, report.rows.len());
    if let (Some(sweep), Some(a)) = (&spec.sweep, &m.answer) {
        let name = sweep.field.column();
        match a
            .largest_fit
            .and_then(|v| report.rows.iter().find(|r| r.status == Status::Ok && r.value == Some(v as f64)))
        {
            Some(row) => println!(
                "  largest {name} that fits: {}  ({})",
                a.largest_fit.unwrap_or_default(),
                describe(row).trim_start_matches("ok").trim()
            ),
            None => println!("  largest {name} that fits: none"),
        }
        match a
            .first_oom
            .and_then(|v| report.rows.iter().find(|r| r.status == Status::Oom && r.value == Some(v as f64)))
        {
            Some(row) => println!(
                "  first OOM: {name} {}  ({})",
                a.first_oom.unwrap_or_default(),
                describe(row).trim_start_matches("OOM").trim()
            ),
            None => println!("  first OOM: none up to the sweep's end"),
        }
    } else {
        for row in &report.rows {
            println!("  {}", describe(row));
        }
    }
    println!("  results: {}", report.dir.display());
    for c in charts {
        println!("  chart:   {}", c.display());
    }
}
