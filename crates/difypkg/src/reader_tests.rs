//! The daemon's way of reading an archive, below the public API: raw central-directory
//! records, the by-name view, the checksum and the signed data, against the spec's vectors.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::archive::{read_package, write_zip, PackageFile};
use crate::checksum::{checksum_of_hashes, checksum_of_zip};
use crate::error::{ArchiveError, EntryRefusal};
use crate::gofs::DaemonView;
use crate::sign::signed_data;
use crate::zipread::RawZip;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vectors");

fn vector_bytes(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(VECTORS).join(name)).unwrap_or_else(|e| panic!("read vector {name}: {e}"))
}

#[test]
fn entries_and_signed_data_match_expected_json() {
    let expected: Value = serde_json::from_slice(&vector_bytes("expected.json")).unwrap();
    let vectors = expected.as_object().unwrap();
    assert_eq!(vectors.len(), 11, "expected.json lists 11 packages");
    for (name, want) in vectors {
        let zip = RawZip::parse(vector_bytes(name)).unwrap();
        let listed = want["entries_in_central_directory_order"].as_array().unwrap();
        assert_eq!(zip.entries.len(), listed.len(), "{name}");
        let mut contents = Vec::new();
        for (i, (raw, item)) in zip.entries.iter().zip(listed).enumerate() {
            assert_eq!(raw.name, item["name"].as_str().unwrap(), "{name}");
            let data = zip.content(i).unwrap();
            assert_eq!(data.len() as u64, item["size"].as_u64().unwrap(), "{name} {}", raw.name);
            assert_eq!(hex::encode(Sha256::digest(&data)), item["sha256"].as_str().unwrap());
            contents.push(data);
        }
        assert_eq!(String::from_utf8_lossy(&zip.comment), want["zip_comment"].as_str().unwrap(), "{name}");
        if let Some(hex_d) = want["signed_data_hex"].as_str() {
            let d = signed_data(contents.iter().map(Vec::as_slice), want["time"].as_i64().unwrap());
            assert_eq!(hex::encode(&d), hex_d, "{name}");
            assert_eq!(hex::encode(Sha256::digest(&d)), want["signed_data_sha256"].as_str().unwrap());
        }
    }
}

#[test]
fn duplicated_names_read_the_first_copy_like_the_daemon() {
    // Two entries whose names have the same length; renaming the second in both its
    // local header and the central directory yields a zip with a duplicated name.
    let zip = write_zip(&[PackageFile::new("one.txt", "AAAA"), PackageFile::new("two.txt", "BBBB")], b"").unwrap();
    let mut bytes = zip.clone();
    let mut renamed = 0;
    for i in 0..bytes.len() - 7 {
        if &bytes[i..i + 7] == b"two.txt" {
            bytes[i..i + 7].copy_from_slice(b"one.txt");
            renamed += 1;
        }
    }
    assert_eq!(renamed, 2);
    let raw = RawZip::parse(bytes.clone()).unwrap();
    assert_eq!(raw.entries.len(), 2, "both records are visible");
    let first: [u8; 32] = Sha256::digest(b"AAAA").into();
    let hashes = DaemonView::new(&raw).walk_hashes().unwrap();
    assert_eq!(hashes, vec![("one.txt".to_string(), first), ("one.txt".to_string(), first)]);
    assert_eq!(checksum_of_zip(&raw).unwrap(), checksum_of_hashes([("one.txt", first)]));
    match read_package(bytes).err().unwrap() {
        ArchiveError::Refused(refused) => {
            assert!(matches!(&refused[..], [EntryRefusal::Duplicate { name }] if name == "one.txt"), "{refused:?}")
        }
        other => panic!("{other}"),
    }
}
