//! The package fixtures: the spec's signed and tampered vectors and a small plugin tree.
//!
//! Also included by path in the root crate's CLI tests (`tests/it/support/package.rs`);
//! each includer names the fixtures folder as `super::FIXTURES`.

use std::fs;
use std::path::{Path, PathBuf};

use difypkg::Arch;

/// The signed and tampered package vectors (copied from the package spec; see fixtures/README.md).
pub(crate) fn vectors() -> PathBuf {
    Path::new(super::FIXTURES).join("vectors")
}

pub(crate) fn vector(name: &str) -> PathBuf {
    vectors().join(name)
}

pub(crate) fn vector_bytes(name: &str) -> Vec<u8> {
    fs::read(vector(name)).unwrap_or_else(|e| panic!("read vector {name}: {e}"))
}

/// What the daemon's verifier and decoder said of each vector.
pub(crate) fn expected() -> serde_json::Value {
    let text = fs::read_to_string(vector("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

pub(crate) fn key1_private() -> PathBuf {
    vector("test_key_pair_1.private.pem")
}

pub(crate) fn key1_public() -> PathBuf {
    vector("test_key_pair_1.public.pem")
}

pub(crate) fn key2_public() -> PathBuf {
    vector("test_key_pair_2.public.pem")
}

/// The checked-in fixture plugin tree.
pub(crate) fn fixture() -> PathBuf {
    Path::new(super::FIXTURES).join("plugin")
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for item in fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.file_type().unwrap().is_dir() {
            copy_tree(&item.path(), &target);
        } else {
            fs::copy(item.path(), &target).unwrap();
        }
    }
}

/// A writable copy of the fixture (for tests that break it) plus two small fake
/// binaries; returns (tempdir guard, source dir, binaries).
pub(crate) fn fixture_copy() -> (tempfile::TempDir, PathBuf, Vec<(Arch, PathBuf)>) {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("plugin");
    copy_tree(&fixture(), &source);
    let bins = fake_bins(tmp.path());
    (tmp, source, bins)
}

/// Two small stand-in binaries; the packager never executes them.
pub(crate) fn fake_bins(dir: &Path) -> Vec<(Arch, PathBuf)> {
    let amd = dir.join("fake-amd64");
    let arm = dir.join("fake-arm64");
    fs::write(&amd, b"\x7fELF fake amd64 build of stateful-tool").unwrap();
    fs::write(&arm, b"\x7fELF fake arm64 build of stateful-tool").unwrap();
    vec![(Arch::Amd64, amd), (Arch::Arm64, arm)]
}

/// Replaces `from` with `to` in a file of the tree (the text must occur).
pub(crate) fn edit(root: &Path, name: &str, from: &str, to: &str) {
    let path = root.join(name);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{name} does not contain {from:?}");
    fs::write(&path, text.replacen(from, to, 1)).unwrap();
}
