//! What the chart tests read back from a rendered figure: the PNG's size and the SVG's texts.

/// The text of each `<text>` element of an SVG, trimmed (plotters puts it on a line of its own).
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("</text>")
        .filter_map(|chunk| chunk.rsplit_once('>').map(|(_, text)| text.trim().to_string()))
        .collect()
}

/// Width and height from a PNG's IHDR chunk, after checking the signature and the chunk.
pub fn png_size(path: &std::path::Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("png readable");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().expect("four bytes"));
    (be(16..20), be(20..24))
}
