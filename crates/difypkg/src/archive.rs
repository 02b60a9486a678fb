//! Deterministic `.difypkg` writer (via the `zip` crate) and a strict reader for packages.

use std::collections::HashSet;
use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use super::zipread::RawZip;

/// Producer rules for an entry name (spec §3.1): relative, `/`-separated, printable
/// ASCII, no empty/`.`/`..` elements, no backslash, and never a directory.
pub(crate) fn check_entry_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err("names must be printable ASCII".into());
    }
    if name.contains('\\') {
        return Err("names must use `/` as separator, never `\\`".into());
    }
    if name.starts_with('/') {
        return Err("names must be relative (no leading `/`)".into());
    }
    if name.ends_with('/') {
        return Err("the name denotes a directory; only file entries are allowed".into());
    }
    if name.split('/').any(|e| e.is_empty() || e == "." || e == "..") {
        return Err("names must not contain empty, `.` or `..` path elements".into());
    }
    Ok(())
}

/// One file of a package: its entry name and uncompressed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageFile {
    pub name: String,
    pub data: Vec<u8>,
}

impl PackageFile {
    pub fn new(name: impl Into<String>, data: impl Into<Vec<u8>>) -> PackageFile {
        PackageFile { name: name.into(), data: data.into() }
    }
}

/// Fixed deflate level: any level is valid for the daemon, a fixed one keeps output stable.
const DEFLATE_LEVEL: i64 = 6;

/// Writes `entries` in the given order, file entries only, with a fixed timestamp
/// (1980-01-01 00:00, the DOS epoch), fixed permissions and fixed compression, so the
/// same input always gives the same bytes. `comment` becomes the EOCD comment.
pub fn write_zip(entries: &[PackageFile], comment: &[u8]) -> Result<Vec<u8>, String> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let base = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(DEFLATE_LEVEL))
        .last_modified_time(DateTime::default())
        .large_file(false);
    for entry in entries {
        check_entry_name(&entry.name).map_err(|e| format!("entry `{}`: {e}", entry.name))?;
        // The daemon extracts everything 0644 anyway; 0755 on binaries only helps people
        // who unzip the package by hand.
        let mode = if entry.name.starts_with("bin/") { 0o755 } else { 0o644 };
        writer
            .start_file(entry.name.as_str(), base.unix_permissions(mode))
            .and_then(|()| writer.write_all(&entry.data).map_err(Into::into))
            .map_err(|e| format!("cannot add `{}` to the archive: {e}", entry.name))?;
    }
    writer.set_raw_comment(comment.to_vec().into_boxed_slice());
    let cursor = writer.finish().map_err(|e| format!("cannot finish the archive: {e}"))?;
    Ok(cursor.into_inner())
}

/// An existing package whose entries all follow the producer rules.
pub struct Package {
    pub entries: Vec<PackageFile>,
    pub comment: Vec<u8>,
}

/// Reads a package for re-writing (signing): entries in central-directory order. Refuses
/// what the daemon cannot install — directory entries, duplicate or unsafe names —
/// listing every offending entry.
pub fn read_package(bytes: Vec<u8>) -> Result<Package, String> {
    let zip = RawZip::parse(bytes).map_err(|e| format!("cannot read the archive: {e}"))?;
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(zip.entries.len());
    for (i, raw) in zip.entries.iter().enumerate() {
        let name = raw.name.as_str();
        if raw.is_dir() {
            let dir = name.trim_end_matches('/');
            problems
                .push(format!("`{name}` is a directory entry (the daemon fails with \"read {dir}: is a directory\")"));
            continue;
        }
        if let Err(e) = check_entry_name(name) {
            problems.push(format!("entry `{name}`: {e}"));
            continue;
        }
        if !seen.insert(name.to_string()) {
            problems
                .push(format!("entry `{name}` appears more than once (the daemon would read the first copy twice)"));
            continue;
        }
        match zip.content(i) {
            Ok(data) => entries.push(PackageFile::new(name, data)),
            Err(e) => problems.push(format!("entry `{name}` cannot be read: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(Package { entries, comment: zip.comment.clone() })
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_order_content_and_comment() {
        let entries = vec![PackageFile::new("b.txt", "second"), PackageFile::new("a/x.txt", vec![0u8; 1000])];
        let bytes = write_zip(&entries, b"{\"x\":1}").unwrap();
        let back = read_package(bytes.clone()).unwrap();
        assert_eq!(back.entries, entries);
        assert_eq!(back.comment, b"{\"x\":1}");
        assert_eq!(write_zip(&entries, b"{\"x\":1}").unwrap(), bytes);
    }

    #[test]
    fn unsafe_names_are_refused() {
        assert!(write_zip(&[PackageFile::new("../x", "")], b"").is_err());
        assert!(write_zip(&[PackageFile::new("dir/", "")], b"").is_err());
    }
}
