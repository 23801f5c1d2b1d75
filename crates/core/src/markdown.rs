//! Markdown tables, for the reports oomlab writes (`COMPARE.md`, `CLAIMS.md`, `advice.md`):
//! comfy-table's Markdown preset, the cells escaped so that a `|` or a line break in a name
//! cannot break the table.
use comfy_table::{presets, Table};

/// A cell's text as one Markdown table cell: `|` escaped, line breaks as spaces.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A table of `head` over `rows`, one line each, columns padded to their widest cell. The
/// cells are written as they are: escape text that may hold a `|` with [`cell`].
pub fn table<H, R, C>(head: H, rows: R) -> String
where
    H: IntoIterator,
    H::Item: Into<comfy_table::Cell>,
    R: IntoIterator<Item = C>,
    C: IntoIterator,
    C::Item: Into<comfy_table::Cell>,
{
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    t.set_header(head);
    for row in rows {
        t.add_row(row);
    }
    t.to_string()
}

/// A report with its tables' padding squeezed out (`| a | b |`, rules as `|---|---|`), for
/// tests that hold a report's lines to what they should say, not to how wide the columns are.
pub fn squeezed(md: &str) -> String {
    let squeeze = |line: &str| {
        if !line.starts_with('|') {
            return line.to_string();
        }
        if line.chars().all(|c| matches!(c, '|' | '-' | ':')) {
            return format!("|{}", "---|".repeat(line.matches('|').count() - 1));
        }
        line.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
    };
    md.lines().map(squeeze).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_a_header_a_rule_and_a_line_per_row_with_pipes_escaped() {
        let t = table(["name", "bytes"], [vec![cell("a|b"), "1".into()], vec!["c".into(), "22".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("| name") && lines[0].ends_with('|'), "{t}");
        assert!(lines[1].chars().all(|c| matches!(c, '|' | '-' | ':')), "{t}");
        assert!(lines[2].contains("a\\|b") && lines[3].contains("22"), "{t}");
        // Every line is as wide as the others: the columns line up in the text too.
        assert!(lines.iter().all(|l| l.chars().count() == lines[0].chars().count()), "{t}");
        assert_eq!(squeezed(&t), "| name | bytes |\n|---|---|\n| a\\|b | 1 |\n| c | 22 |");
    }
}
