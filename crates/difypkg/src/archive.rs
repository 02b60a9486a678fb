//! Deterministic `.difypkg` writer (via the `zip` crate) and a strict reader for packages.

use std::collections::HashSet;
use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use super::error::{ArchiveError, EntryRefusal, NameError};
use super::zipread::RawZip;

/// Producer rules for an entry name (spec §3.1): relative, `/`-separated, printable
/// ASCII, no empty/`.`/`..` elements, no backslash, and never a directory.
pub(crate) fn check_entry_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(NameError::NotPrintable);
    }
    if name.contains('\\') {
        return Err(NameError::Backslash);
    }
    if name.starts_with('/') {
        return Err(NameError::Absolute);
    }
    if name.ends_with('/') {
        return Err(NameError::Directory);
    }
    if name.split('/').any(|e| e.is_empty() || e == "." || e == "..") {
        return Err(NameError::BadElement);
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
pub fn write_zip(entries: &[PackageFile], comment: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let base = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(DEFLATE_LEVEL))
        .last_modified_time(DateTime::default())
        .large_file(false);
    for entry in entries {
        check_entry_name(&entry.name).map_err(|source| ArchiveError::Name { name: entry.name.clone(), source })?;
        // The daemon extracts everything 0644 anyway; 0755 on binaries only helps people
        // who unzip the package by hand.
        let mode = if entry.name.starts_with("bin/") { 0o755 } else { 0o644 };
        writer
            .start_file(entry.name.as_str(), base.unix_permissions(mode))
            .and_then(|()| writer.write_all(&entry.data).map_err(Into::into))
            .map_err(|source| ArchiveError::Add { name: entry.name.clone(), source })?;
    }
    writer.set_raw_comment(comment.to_vec().into_boxed_slice());
    let cursor = writer.finish().map_err(ArchiveError::Finish)?;
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
pub fn read_package(bytes: Vec<u8>) -> Result<Package, ArchiveError> {
    let zip = RawZip::parse(bytes).map_err(ArchiveError::Zip)?;
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(zip.entries.len());
    for (i, raw) in zip.entries.iter().enumerate() {
        let name = raw.name.as_str();
        if raw.is_dir() {
            problems.push(EntryRefusal::Directory { name: name.to_string() });
            continue;
        }
        if let Err(source) = check_entry_name(name) {
            problems.push(EntryRefusal::Name { name: name.to_string(), source });
            continue;
        }
        if !seen.insert(name.to_string()) {
            problems.push(EntryRefusal::Duplicate { name: name.to_string() });
            continue;
        }
        match zip.content(i) {
            Ok(data) => entries.push(PackageFile::new(name, data)),
            Err(source) => problems.push(EntryRefusal::Data { name: name.to_string(), source }),
        }
    }
    if problems.is_empty() {
        Ok(Package { entries, comment: zip.comment.clone() })
    } else {
        Err(ArchiveError::Refused(problems))
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
