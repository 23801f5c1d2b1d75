//! A TorchScript file's declared sizes, checked before libtorch inflates anything.
//!
//! A `.pt` is a zip archive, and libtorch's loader reads each record whole into memory, sized
//! as the archive's directory says. PyTorch writes its tensors' records stored (uncompressed)
//! and only its code deflated, so a real module's records together are about the file's size.
//! A file whose records declare far more than it holds (a "zip bomb": a megabyte that inflates
//! to a gibibyte) would be loaded whole, and a large enough one would take the machine; so the
//! archive's directory, read alone (no record is inflated), is held to what a saved module can
//! be: no record inflating past [`MAX_RATIO`] times its compressed bytes, and all of them
//! together within this host's memory. Refused with the file and the record named, in
//! milliseconds.
use std::path::Path;

/// The most a record of a saved module inflates, per byte it takes in the file. Deflated
/// Python source compresses about 2-10 times; a tensor's record is stored, 1 to 1. Deflate
/// itself can reach about 1000.
pub const MAX_RATIO: u64 = 64;

/// What slack a small record has: a tiny code file of repeated lines may compress past
/// [`MAX_RATIO`] and still be nothing to fear.
const SMALL: u64 = 1 << 20;

/// What the archive's directory says: its records' bytes, inflated, in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    pub records: usize,
    pub bytes: u64,
}

/// Reads the directory of the archive at `path` and checks it: `Err` says why, in words that
/// follow the file's name. `host` is this machine's memory, when known.
pub fn check(path: &Path, host: Option<u64>) -> Result<Declared, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| {
        format!(
            "is not a TorchScript module: not the zip archive torch.jit.save writes ({e}); save one with \
                 torch.jit.save(torch.jit.script(model), path), or with scripts/export-model"
        )
    })?;
    let mut declared = Declared { records: zip.len(), bytes: 0 };
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(|e| format!("has a damaged directory ({e})"))?;
        let (size, packed) = (entry.size(), entry.compressed_size());
        if size > packed.saturating_mul(MAX_RATIO).saturating_add(SMALL) {
            return Err(format!(
                "has a record, {}, that declares {size} bytes from {packed} in the file: more than {MAX_RATIO} \
                 times, which no saved module's record inflates (a zip bomb, or not a file torch.jit.save wrote)",
                entry.name().map(|n| n.into_owned()).unwrap_or_else(|_| format!("record {i}"))
            ));
        }
        declared.bytes = declared.bytes.saturating_add(size);
    }
    if let Some(host) = host.filter(|&h| declared.bytes > h) {
        return Err(format!(
            "declares {} bytes in its records, more than this machine's memory ({host} bytes): loading it would \
             take the machine",
            declared.bytes
        ));
    }
    Ok(declared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn archive(entries: &[(&str, &[u8], bool)]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut z = zip::ZipWriter::new(file.reopen().unwrap());
        for (name, bytes, _) in entries {
            let options =
                zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            z.start_file(*name, options).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap();
        file
    }

    #[test]
    fn a_stored_module_passes_and_its_bytes_are_counted() {
        let _alone = crate::probe::cpu_alone();
        let a = archive(&[("m/data/0", &[0u8; 4000], false), ("m/data.pkl", b"pickle", false)]);
        let d = check(a.path(), Some(1 << 30)).unwrap();
        assert_eq!(d, Declared { records: 2, bytes: 4006 });
        let err = check(a.path(), Some(1000)).unwrap_err();
        assert!(err.contains("more than this machine's memory"), "{err}");
        let not_zip = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_zip.path(), b"not a zip").unwrap();
        assert!(check(not_zip.path(), None).unwrap_err().contains("is not a TorchScript module"));
    }
}
