//! Memory sizes as people write them: "15.90GiB", "512 MiB", "16GB", "1024".
//!
//! Parsing is our own rather than `bytesize`'s `FromStr`: that one truncates instead of rounding
//! ("15.90GiB" would lose a byte), accepts fractional bytes ("1.5" as 1) and reads a bare "G" as
//! 10^9, which is 7% away from what someone who means GiB expects. Display goes through
//! `bytesize`, which formats IEC units correctly.

/// Units we accept (in any case), spelt as [`typed_size`] writes them, with their size in bytes.
/// Single letters ("G") are left out on purpose: they are ambiguous between GB and GiB, and a
/// budget off by 7% is a silent error.
const UNITS: [(&str, u64); 10] = [
    ("B", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("PiB", 1 << 50),
];

/// How a size should be written, appended to every parse error.
const HOW: &str = r#"write it like "15.90GiB", "512MiB" or "16GB""#;

/// Parses a size into bytes: a number, optional spaces, then an optional unit (B, KB, MB, GB,
/// TB decimal; KiB, MiB, GiB, TiB, PiB binary; any case). A bare number counts bytes and must be
/// whole. Fractional sizes round to the nearest byte. The error is one sentence that says what
/// is wrong and how to write it instead.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = |why: &str| format!("{text:?} is not a size{why}; {HOW}");
    if t.starts_with('-') {
        return Err(bad(": sizes cannot be negative"));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim_start());
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return Err(bad(""));
    }
    let factor = unit_factor(unit).ok_or_else(|| {
        bad(&format!(": unknown unit `{unit}` (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or PiB)"))
    })?;
    let too_large = || format!("{text:?} is too large: sizes go up to 16 EiB");
    // Whole numbers are multiplied exactly: f64 would round byte counts above 2^53.
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(factor).ok_or_else(too_large);
    }
    let value: f64 = number.parse().map_err(|_| bad(""))?;
    if factor == 1 && value.fract() != 0.0 {
        return Err(format!(
            "{text:?} is not a size: bytes are whole; write {:?} or use a unit, e.g. \"1.5KiB\"",
            value.round() as u64
        ));
    }
    let bytes = (value * factor as f64).round();
    // 2^64 is exactly representable; anything at or above it does not fit in a u64.
    if !bytes.is_finite() || bytes >= 18_446_744_073_709_551_616.0 {
        return Err(too_large());
    }
    Ok(bytes as u64)
}

/// A budget typed on the command line (`--budget`): as [`parse_budget`], but a number without a
/// unit is refused, with the unit it most likely meant: `--budget 2` is a typo for 2 GiB far
/// more often than a cap of 2 bytes. (A spec's `run.budget` is a string in a file, where bytes
/// are written on purpose.)
pub fn parse_budget_arg(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!(
            "{text:?} has no unit: write \"{t}GiB\" (or \"{t}MiB\"; \"{t}B\" if you mean bytes)"
        ));
    }
    parse_budget(text)
}

/// A budget as the command line gives it (`--budget`): a size of more than 0 bytes, the rule
/// a spec's `run.budget` follows.
pub fn parse_budget(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        // A zero cap makes every allocation fail, which measures nothing.
        0 => Err(format!("{text:?} is not a budget: it must be more than 0 bytes, e.g. \"512MiB\"")),
        bytes => Ok(bytes),
    }
}

/// The size in bytes of a unit as written ("" means bytes), ignoring case.
fn unit_factor(unit: &str) -> Option<u64> {
    if unit.is_empty() {
        return Some(1);
    }
    UNITS.iter().find(|(name, _)| name.eq_ignore_ascii_case(unit)).map(|&(_, f)| f)
}

/// A size for messages, in IEC units with two decimals: "15.90 GiB", "512.00 MiB", "100 B" (the
/// one formatter, `units::format_bytes`).
pub use crate::units::format_bytes as format_size;

/// Every byte, with thousands separated: "33,554,944 B".
pub fn exact_bytes(bytes: u64) -> String {
    let digits = bytes.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out + " B"
}

/// A size as a person types it and [`parse_size`] reads it back to the byte: the unit that writes
/// it as the smallest whole number ("2GiB", "24GB", "1536MiB"), else bytes ("1000001B"). For
/// commands printed to be pasted (the resume hint).
pub fn typed_size(bytes: u64) -> String {
    UNITS
        .iter()
        .filter(|(_, f)| bytes > 0 && bytes.is_multiple_of(*f))
        .map(|(u, f)| (bytes / f, *u))
        .min_by_key(|(n, _)| *n)
        .map_or_else(|| format!("{bytes}B"), |(n, u)| format!("{n}{u}"))
}

/// `bytes` beside a `budget` it is measured against, so that the two are never mistaken for
/// each other: the usual size where the two read apart, else every byte and by how much it is
/// over or under ("33,554,944 B, 512 B over the 32.00 MiB budget").
pub fn format_against(bytes: u64, budget: u64) -> String {
    match against(bytes, budget) {
        (text, Some(by)) => format!("{text}, {by}"),
        (text, None) => text,
    }
}

/// [`format_against`] in two parts, for a sentence that puts a word between them: the size
/// ("33,554,944 B") and, where it rounds like the budget, by how much it is over or under
/// ("512 B over the 32.00 MiB budget").
pub fn against(bytes: u64, budget: u64) -> (String, Option<String>) {
    let (text, limit) = (format_size(bytes), format_size(budget));
    if text != limit || bytes == budget {
        return (text, None);
    }
    let (by, side) = if bytes > budget { (bytes - budget, "over") } else { (budget - bytes, "under") };
    (exact_bytes(bytes), Some(format!("{} {side} the {limit} budget", exact_bytes(by))))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_typed_size_is_the_smallest_whole_number_and_reads_back_exactly() {
        for (bytes, typed) in [
            (2u64 << 30, "2GiB"),
            (24_000_000_000, "24GB"),
            (1536 << 20, "1536MiB"),
            (1024, "1KiB"),
            (1_000_001, "1000001B"),
            (0, "0B"),
            (3 << 40, "3TiB"),
        ] {
            assert_eq!(super::typed_size(bytes), typed);
            assert_eq!(super::parse_size(typed), Ok(bytes), "{typed}");
        }
    }

    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    #[test]
    fn sizes_that_round_alike_are_told_apart() {
        assert_eq!(exact_bytes(33_554_944), "33,554,944 B");
        assert_eq!(exact_bytes(512), "512 B");
        assert_eq!(exact_bytes(1_000), "1,000 B");
        let budget = 32 << 20;
        assert_eq!(format_against(budget + 512, budget), "33,554,944 B, 512 B over the 32.00 MiB budget");
        assert_eq!(format_against(budget - 512, budget), "33,553,920 B, 512 B under the 32.00 MiB budget");
        assert_eq!(format_against(budget, budget), "32.00 MiB");
        assert_eq!(format_against(16 << 20, budget), "16.00 MiB");
    }

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!(parse_size("15.90GiB"), Ok((15.90 * GIB).round() as u64));
        assert_eq!(parse_size("15.90 GiB"), Ok((15.90 * GIB).round() as u64));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("16GB"), Ok(16_000_000_000));
        assert_eq!(parse_size("1.5TiB"), Ok(3 << 39));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("1024 B"), Ok(1024));
        assert_eq!(parse_size("2gib"), Ok(2 << 30));
        assert_eq!(parse_size(" 1.0 "), Ok(1));
    }

    #[test]
    fn rounds_to_the_nearest_byte() {
        // 0.0009765625 KiB = 1 byte exactly; a little more must still round, not truncate.
        assert_eq!(parse_size("0.0015KiB"), Ok(2)); // 1.536 bytes
        assert_eq!(parse_size("0.0012KiB"), Ok(1)); // 1.2288 bytes
        assert_eq!(parse_size("15.90GiB"), Ok(17_072_495_002)); // 17072495001.6
    }

    #[test]
    fn whole_numbers_are_exact_above_2_pow_53() {
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
    }

    #[test]
    fn rejects_what_is_not_a_size() {
        for bad in ["", "   ", "abc", "GiB", ".", "1..5GiB", "NaN", "nan GiB", "inf"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("is not a size") && e.contains("15.90GiB"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn rejects_negative_sizes() {
        let e = parse_size("-1GiB").unwrap_err();
        assert!(e.contains("cannot be negative"), "{e}");
    }

    #[test]
    fn rejects_fractional_bytes() {
        let e = parse_size("1.5").unwrap_err();
        assert!(e.contains("bytes are whole"), "{e}");
        assert!(parse_size("1.5B").is_err());
    }

    #[test]
    fn rejects_unknown_and_ambiguous_units() {
        let e = parse_size("16 gigs").unwrap_err();
        assert!(e.starts_with("\"16 gigs\" is not a size: unknown unit `gigs`"), "{e}");
        assert!(parse_size("16G").unwrap_err().contains("unknown unit `G`"));
    }

    #[test]
    fn rejects_overflow() {
        assert!(parse_size("16384PiB").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999999999999").unwrap_err().contains("too large"));
        assert!(parse_size("16383.99PiB").is_ok());
    }

    #[test]
    fn formats_in_iec_with_two_decimals() {
        assert_eq!(format_size((15.90 * GIB).round() as u64), "15.90 GiB");
        assert_eq!(format_size(512 << 20), "512.00 MiB");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(100), "100 B");
    }
}
