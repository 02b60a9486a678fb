//! Our own package from the fixture tree: determinism, layout, signing, tampering.

use std::io::{Cursor, Read};

use crate::fixtures::*;
use difypkg::{
    build_package, generate_pem_pair, load_private_key, load_public_key, private_key_from_pem, public_key_from_pem,
    read_package, sign_package, validate_package_bytes, validate_package_dir, validate_plugin_dir, verify_bytes,
    write_zip, Category, VerifyError,
};

const LAYOUT: [&str; 12] = [
    "PRIVACY.md",
    "README.md",
    "_assets/icon-dark.svg",
    "_assets/icon.svg",
    "bin/stateful-tool-amd64",
    "bin/stateful-tool-arm64",
    "main.py",
    "manifest.yaml",
    "provider/stateful_tool.yaml",
    "requirements.txt",
    "tools/event_ingest.yaml",
    "tools/event_status.yaml",
];

fn build_fixture() -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let bins = fake_bins(tmp.path());
    build_package(&fixture(), &bins).unwrap_or_else(|p| panic!("{p:?}")).bytes
}

#[test]
fn building_twice_gives_identical_bytes() {
    let first = build_fixture();
    let second = build_fixture();
    assert_eq!(first, second);
    // A copy of the tree elsewhere (other paths, other mtimes) gives the same bytes too.
    let (_tmp, source, bins) = fixture_copy();
    assert_eq!(build_package(&source, &bins).unwrap().bytes, first);
}

#[test]
fn the_package_unzips_to_the_declared_layout() {
    let bytes = build_fixture();
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes.clone())).unwrap();
    let mut names = Vec::new();
    for i in 0..zip.len() {
        let mut file = zip.by_index(i).unwrap();
        assert!(!file.is_dir(), "{} is a directory entry", file.name());
        let mut data = Vec::new();
        file.read_to_end(&mut data).unwrap();
        let name = file.name().to_string();
        if !name.starts_with("bin/") {
            assert_eq!(data, std::fs::read(fixture().join(&name)).unwrap(), "{name}");
        }
        assert_eq!(file.last_modified().map(|t| (t.year(), t.month(), t.day())), Some((1980, 1, 1)));
        names.push(name);
    }
    assert_eq!(names, LAYOUT);
    assert!(zip.comment().is_empty());
    let report = validate_package_bytes(bytes).unwrap_or_else(|p| panic!("{p:?}"));
    assert_eq!(
        (report.author.as_str(), report.name.as_str(), report.version.as_str()),
        ("acme", "stateful_tool", "0.1.0")
    );
}

#[test]
fn built_identifier_matches_the_daemon_checksum() {
    let tmp = tempfile::tempdir().unwrap();
    let built = build_package(&fixture(), &fake_bins(tmp.path())).unwrap();
    let outcome = verify_bytes(built.bytes.clone(), &[]);
    assert_eq!(outcome.checksum.unwrap(), built.checksum);
    assert_eq!(outcome.identifier.as_deref(), Some(built.identifier.as_str()));
    assert!(built.identifier.starts_with("acme/stateful_tool:0.1.0@"));
}

#[test]
fn signed_package_verifies_only_with_its_key() {
    let key = load_private_key(&key1_private()).unwrap();
    let (signed, _) = sign_package(build_fixture(), &key, Category::Community, 1_700_000_123).unwrap();
    let k1 = load_public_key(&key1_public()).unwrap();
    let k2 = load_public_key(&key2_public()).unwrap();
    assert!(verify_bytes(signed.clone(), &[k1]).result.is_ok());
    assert!(matches!(verify_bytes(signed.clone(), &[k2]).result, Err(VerifyError::Mismatch)));
    assert!(validate_package_bytes(signed).is_ok(), "the verification file is part of the layout");
}

#[test]
fn a_freshly_generated_key_signs_and_verifies() {
    let (private_pem, public_pem) = generate_pem_pair(2048).unwrap();
    let key = private_key_from_pem(private_pem.as_bytes()).unwrap();
    let public = public_key_from_pem(public_pem.as_bytes()).unwrap();
    let (signed, _) = sign_package(build_fixture(), &key, Category::Community, 42).unwrap();
    assert_eq!(verify_bytes(signed.clone(), &[public]).result.unwrap().time, 42);
    let k1 = load_public_key(&key1_public()).unwrap();
    assert!(matches!(verify_bytes(signed, &[k1]).result, Err(VerifyError::Mismatch)));
}

#[test]
fn flipping_any_content_byte_breaks_the_signature() {
    let key = load_private_key(&key1_private()).unwrap();
    let k1 = load_public_key(&key1_public()).unwrap();
    let (signed, _) = sign_package(build_fixture(), &key, Category::Community, 1_700_000_000).unwrap();
    let package = read_package(signed).unwrap();
    let last = package.entries.len() - 1;
    // (entry index, byte position): first, middle and last bytes of several entries,
    // including a binary, the manifest and the verification file itself.
    for (entry, pos) in [(0, 0), (4, 3), (7, usize::MAX), (last, 10), (last, usize::MAX)] {
        let mut entries = package.entries.clone();
        let data = &mut entries[entry].data;
        let at = pos.min(data.len() - 1);
        data[at] ^= 0x01;
        let tampered = write_zip(&entries, &package.comment).unwrap();
        let outcome = verify_bytes(tampered, std::slice::from_ref(&k1));
        assert!(matches!(outcome.result, Err(VerifyError::Mismatch)), "{} byte {at}", entries[entry].name);
    }
    // Unchanged entries rewritten the same way still verify: only content matters.
    let same = write_zip(&package.entries, &package.comment).unwrap();
    assert!(verify_bytes(same, &[k1]).result.is_ok());
}

#[test]
fn reordering_entries_breaks_the_signature() {
    let key = load_private_key(&key1_private()).unwrap();
    let (signed, _) = sign_package(build_fixture(), &key, Category::Community, 7).unwrap();
    let mut package = read_package(signed).unwrap();
    package.entries.swap(0, 1);
    let reordered = write_zip(&package.entries, &package.comment).unwrap();
    let k1 = load_public_key(&key1_public()).unwrap();
    assert!(matches!(verify_bytes(reordered, &[k1]).result, Err(VerifyError::Mismatch)));
}

#[test]
fn an_unzipped_package_validates_as_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let package = read_package(build_fixture()).unwrap();
    for entry in &package.entries {
        let path = tmp.path().join(&entry.name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &entry.data).unwrap();
    }
    validate_package_dir(tmp.path()).unwrap_or_else(|p| panic!("{p:?}"));
    std::fs::write(tmp.path().join("notes.txt"), "stray").unwrap();
    let problems = validate_package_dir(tmp.path()).unwrap_err().into_problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].file, "notes.txt");
    assert!(validate_plugin_dir(&fixture()).is_ok());
}

#[test]
fn a_single_binary_narrows_meta_arch_in_the_package_only() {
    let (_tmp, source, bins) = fixture_copy();
    let built = build_package(&source, &bins[..1]).unwrap();
    assert_eq!(built.plan.notes.len(), 1, "{:?}", built.plan.notes);
    let package = read_package(built.bytes.clone()).unwrap();
    let manifest = package.entries.iter().find(|e| e.name == "manifest.yaml").unwrap();
    let text = String::from_utf8(manifest.data.clone()).unwrap();
    assert!(text.contains("  arch:\n    - amd64\n  runner:"), "{text}");
    let source_text = std::fs::read_to_string(source.join("manifest.yaml")).unwrap();
    assert_eq!(text, source_text.replace("    - arm64\n", ""));
    assert!(validate_package_bytes(built.bytes).is_ok());
}
