//! Numbers as people read them, in charts, tables and messages: bytes in the largest binary
//! unit that keeps them at least 1 ("15.90 GiB"), and tick values without trailing zeros.
//! Shared by the charts and the comparison's tables, so neither imports the other for them.

/// Bytes in a KiB, as a float for scaling.
pub const KIB: f64 = 1024.0;

/// The largest binary unit in which `bytes` is at least 1.
pub fn unit_for(bytes: f64) -> (&'static str, f64) {
    const UNITS: [(&str, f64); 3] = [("GiB", KIB * KIB * KIB), ("MiB", KIB * KIB), ("KiB", KIB)];
    UNITS.into_iter().find(|(_, d)| bytes >= *d).unwrap_or(("B", 1.0))
}

/// `bytes` with two decimals in the largest IEC unit in which it is at least 1: "15.90 GiB",
/// "512.00 MiB", "100 B" (bytesize's): what reports, claims and specs' messages
/// (`spec::format_size`) write; progress lines and probes' short sizes use bytesize's own.
pub fn format_bytes(bytes: u64) -> String {
    format!("{:.2}", bytesize::ByteSize(bytes).display().iec())
}

/// A tick label without trailing zeros: 0, 2.5, 10, 0.25. Ticks are round numbers, so three
/// decimals are plenty and the zeros after them only add noise.
pub fn format_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// `n` and the noun, plural unless one: "1 trial", "3 trials", "0 probes". (The nouns here
/// all take an s.)
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_formatted_in_the_largest_unit() {
        assert_eq!(format_bytes(17_072_495_001), "15.90 GiB");
        assert_eq!(format_bytes(512 * 1024 * 1024), "512.00 MiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(12), "12 B");
    }

    #[test]
    fn ticks_lose_their_trailing_zeros() {
        assert_eq!(format_tick(10.0), "10");
        assert_eq!(format_tick(2.5), "2.5");
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(-0.0001), "0");
    }

    #[test]
    fn one_is_singular() {
        assert_eq!(
            (count(1, "trial"), count(0, "probe"), count(3, "chart")),
            ("1 trial".into(), "0 probes".into(), "3 charts".into())
        );
    }
}
