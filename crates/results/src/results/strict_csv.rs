//! A results CSV read strictly, as untrusted input: the file through [`fsio::read_limited`]
//! (regular, bounded), a header of columns oomlab writes (each once, the required ones there),
//! no NUL byte anywhere, and every row parsed or refused with its row number and column.
//!
//! Older files may lack columns added since (they read as their defaults); a column oomlab never
//! wrote, or a header garbled so that columns would silently fall back to defaults, is refused.
//! A last row cut short (a run killed while writing) is left out and said to be.
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::de::{self, DeserializeOwned, Visitor};

use crate::fsio;
use crate::schema::rules::{check_cell, rule_for, Device, Rule};

/// The rows of a CSV file, and whether a last row cut short was left out.
/// Each cell is also checked against its column's rule (`rules`: the file's table in
/// `schema::rules`) before the row is parsed, so that a value no run writes is refused naming
/// its column, whatever its type.
pub(super) fn read<T: DeserializeOwned>(
    path: &Path,
    limit: u64,
    required: &[&str],
    rules: &[(&str, Rule)],
    device: Device,
) -> Result<(Vec<T>, bool)> {
    let bytes = fsio::read_limited(path, limit)?;
    // Writers flush as their buffers fill, so a kill can leave half a row: everything up to
    // the last line break is read, and that half row dropped.
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let cut = whole < bytes.len();
    let body = &bytes[..whole];
    if body.is_empty() {
        return Ok((Vec::new(), cut));
    }
    let mut rd = csv::ReaderBuilder::new().from_reader(body);
    let headers = rd.byte_headers().with_context(|| format!("{}: row 1", path.display()))?.clone();
    let known = field_names::<T>();
    let mut names: Vec<String> = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        let name = std::str::from_utf8(h).ok().filter(|n| !n.contains('\0')).ok_or_else(|| {
            anyhow::anyhow!("{}: row 1 (the header), column {}: not a column name", path.display(), i + 1)
        })?;
        if !known.contains(&name) {
            bail!(
                "{}: row 1 (the header), column {}: `{}` is not a column oomlab writes; the file is damaged or \
                 not oomlab's",
                path.display(),
                i + 1,
                name.escape_debug()
            );
        }
        if names.iter().any(|n| n == name) {
            bail!("{}: row 1 (the header): column `{name}` appears twice", path.display());
        }
        names.push(name.to_string());
    }
    if let Some(missing) = required.iter().find(|r| !names.iter().any(|n| n == *r)) {
        bail!(
            "{}: row 1 (the header): no `{missing}` column; the file is damaged or not oomlab's",
            path.display()
        );
    }
    let mut rows = Vec::new();
    for (i, record) in rd.byte_records().enumerate() {
        let at = i + 2;
        let record = record.with_context(|| format!("{}: row {at}", path.display()))?;
        if let Some(col) = record.iter().position(|f| f.contains(&0)) {
            bail!("{}: row {at}, column `{}`: a NUL byte", path.display(), names.get(col).map_or("?", |n| n));
        }
        for (name, cell) in names.iter().zip(record.iter()) {
            let Some(rule) = rule_for(rules, name) else { continue };
            if let Err(why) = check_cell(rule, &String::from_utf8_lossy(cell), device) {
                bail!("{}: row {at}, column `{name}`: {why}; the file is damaged", path.display());
            }
        }
        let row: T = record.deserialize(Some(&headers)).map_err(|e| {
            anyhow::anyhow!("{}: row {at}: {}", path.display(), describe(&e, &names, &record))
        })?;
        rows.push(row);
    }
    Ok((rows, cut))
}

/// A row's parse error, naming the column: where the reader knows it, else the column whose
/// value the error quotes (serde names an unknown word, `bogus`, but not where it stood).
fn describe(e: &csv::Error, names: &[String], record: &csv::ByteRecord) -> String {
    let csv::ErrorKind::Deserialize { err, .. } = e.kind() else { return e.to_string() };
    let what = err.kind().to_string();
    let column = err.field().map(|i| i as usize).or_else(|| {
        record.iter().position(|v| {
            let v = String::from_utf8_lossy(v);
            !v.is_empty() && what.contains(&format!("`{v}`"))
        })
    });
    match column {
        Some(i) => format!("column `{}`: {what}", names.get(i).map_or("?", |n| n)),
        None => what,
    }
}

/// The field names a struct's `Deserialize` asks for, in order: the columns a CSV of it may
/// have. Asked of serde's derive directly (it hands them to `deserialize_struct`), so that the
/// list can never drift from the struct.
pub(super) fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Names(&'static [&'static str]);
    #[derive(Debug)]
    struct Got;
    impl std::fmt::Display for Got {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names read")
        }
    }
    impl std::error::Error for Got {}
    impl de::Error for Got {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Got
        }
    }
    impl<'de> de::Deserializer<'de> for &mut Names {
        type Error = Got;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Got> {
            Err(Got)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Got> {
            self.0 = fields;
            Err(Got)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = Names(&[]);
    let _ = T::deserialize(&mut names);
    names.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{PhaseRecord, SummaryRow};

    #[test]
    fn the_columns_are_the_structs_fields() {
        let summary = field_names::<SummaryRow>();
        assert_eq!(summary.first(), Some(&"trial"));
        assert!(summary.contains(&"max_memory_allocated") && summary.contains(&"message"));
        assert!(field_names::<PhaseRecord>().contains(&"predicted_peak"));
    }

    fn read_str(text: &[u8]) -> Result<(Vec<SummaryRow>, bool)> {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("summary.csv");
        std::fs::write(&p, text).unwrap();
        read(&p, 1 << 20, &["trial", "status"], crate::schema::rules::SUMMARY, Device::default())
    }

    #[test]
    fn a_garbled_header_a_nul_and_a_bad_value_are_refused_with_row_and_column() {
        let err = read_str(b"trial,sta\0tus\n1,ok\n").unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("column 2"), "{err}");
        let err = read_str(b"trial,status,bogus\n1,ok,3\n").unwrap_err().to_string();
        assert!(err.contains("`bogus` is not a column"), "{err}");
        let err = read_str(b"trial,status,trial\n1,ok,1\n").unwrap_err().to_string();
        assert!(err.contains("appears twice"), "{err}");
        let err = read_str(b"trial,variant\n1,a\n").unwrap_err().to_string();
        assert!(err.contains("no `status` column"), "{err}");
        let err = read_str(b"trial,status,variant\n1,ok,a\n2,ok,b\0\n").unwrap_err().to_string();
        assert!(err.contains("row 3, column `variant`: a NUL byte"), "{err}");
        let err = read_str(b"trial,status\n1,bogus\n").unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("column `status`"), "{err}");
        let err = read_str(b"trial,status\n-1,ok\n").unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("column `trial`"), "{err}");
    }

    /// `oom_phase` and `oom_step` were written `phase` and `step` before 2026-11-26: a committed
    /// file of then reads as it did, a file of now in the new names, and one naming both is
    /// refused (the two are one column).
    #[test]
    fn the_oom_columns_read_in_their_old_names_and_their_new() {
        use crate::results::{Exporter, SummaryCsv};
        use crate::schema::{Phase, Status};
        let committed = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("results/cpu-intel-r-xeon-r-processor/resnet_checkpointing/summary.csv");
        let text = std::fs::read_to_string(&committed).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        assert!(header.contains(&"phase") && !header.contains(&"oom_phase"), "an old header: {header:?}");
        let (old, _) = read::<SummaryRow>(
            &committed,
            1 << 20,
            &["trial", "status"],
            crate::schema::rules::SUMMARY,
            Device::default(),
        )
        .unwrap();
        let oom = old.iter().find(|r| r.status == Status::Oom).expect("the file has an OOM");
        assert_eq!((oom.phase, oom.step), (Some(Phase::Backward), Some(2)));
        assert!(old.iter().filter(|r| r.status == Status::Ok).all(|r| r.phase.is_none() && r.step.is_none()));

        let tmp = tempfile::tempdir().unwrap();
        let mut out = SummaryCsv::create(tmp.path()).unwrap();
        for r in &old {
            out.trial(r).unwrap();
        }
        drop(out);
        let path = tmp.path().join(crate::results::SUMMARY);
        let written = std::fs::read_to_string(&path).unwrap();
        let header: Vec<&str> = written.lines().next().unwrap().split(',').collect();
        assert!(header.contains(&"oom_phase") && header.contains(&"oom_step"), "{header:?}");
        assert!(!header.contains(&"phase") && !header.contains(&"step"), "{header:?}");
        let (new, _) = read::<SummaryRow>(
            &path,
            1 << 20,
            &["trial", "status"],
            crate::schema::rules::SUMMARY,
            Device::default(),
        )
        .unwrap();
        assert_eq!(new, old, "the same rows in the new names");

        let err = read_str(b"trial,status,phase,oom_phase\n1,oom,forward,forward\n").unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("duplicate field"), "{err}");
    }

    #[test]
    fn an_empty_file_has_no_rows_and_a_torn_last_row_is_left_out() {
        assert_eq!(read_str(b"").unwrap(), (Vec::new(), false));
        let (rows, cut) = read_str(b"trial,status\n1,ok\n2,o").unwrap();
        assert_eq!((rows.len(), cut), (1, true));
    }
}
