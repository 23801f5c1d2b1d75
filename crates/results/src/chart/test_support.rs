//! What the chart tests share: where they draw, a summary row to build on, and what they read
//! back from a rendered figure (the PNG's size, the SVG's size and texts).
use crate::schema::{Status, SummaryRow};
use std::path::{Path, PathBuf};

/// Where to draw: `OOMLAB_CHART_DIR` when set, to keep the figures and look at them, else
/// `temp`.
pub fn out_dir(temp: &tempfile::TempDir) -> PathBuf {
    std::env::var_os("OOMLAB_CHART_DIR").map(PathBuf::from).unwrap_or_else(|| temp.path().to_path_buf())
}

/// A trial of `variant` at `value` of `training.batch_size` (None: no sweep), in float32
/// without autocast, that measured nothing.
pub fn summary(trial: usize, variant: &str, value: Option<f64>, status: Status) -> SummaryRow {
    SummaryRow {
        trial,
        variant: variant.to_string(),
        field: value.map(|_| crate::spec::Field::BatchSize),
        value,
        status,
        dtype: Some(crate::spec::Dtype::Float32),
        amp: Some(crate::spec::AmpKind::Off),
        ..SummaryRow::default()
    }
}

/// The text of each `<text>` element of an SVG, trimmed (plotters puts it on a line of its own).
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("</text>")
        .filter_map(|chunk| chunk.rsplit_once('>').map(|(_, text)| text.trim().to_string()))
        .collect()
}

/// Width and height from a PNG's IHDR chunk, after checking the signature and the chunk.
pub fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("png readable");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().expect("four bytes"));
    (be(16..20), be(20..24))
}

/// Width and height from an SVG's root element, after checking that the document is one
/// `<svg>` element, closed.
pub fn svg_size(path: &Path) -> (u32, u32) {
    let svg = std::fs::read_to_string(path).expect("svg readable");
    assert!(svg.starts_with("<svg "), "not an SVG: {}", &svg[..svg.len().min(80)]);
    assert!(svg.trim_end().ends_with("</svg>"), "SVG not closed");
    let root = &svg[..svg.find('>').expect("root element closed")];
    let attr = |name: &str| -> u32 {
        let value = root.split(&format!(" {name}=\"")).nth(1).and_then(|rest| rest.split('"').next());
        value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {name} in {root}"))
    };
    (attr("width"), attr("height"))
}

/// Each row standing for itself, labelled by its variant ("trial N" without one), with `note`:
/// the compared charts' tests hand their picks in as `figures::compared` would.
pub fn picked<'a>(rows: &'a [SummaryRow], note: Option<&str>) -> super::Compared<'a> {
    let label =
        |r: &SummaryRow| if r.variant.is_empty() { format!("trial {}", r.trial) } else { r.variant.clone() };
    super::Compared { trials: rows.iter().map(|r| (label(r), r)).collect(), note: note.map(str::to_string) }
}
