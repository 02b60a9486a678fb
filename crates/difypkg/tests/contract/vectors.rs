//! The spec's vectors: verdicts, checksums, signed bytes and byte-exact signing.

use crate::fixtures::*;
use difypkg::{
    load_private_key, load_public_key, official_public_key, read_package, sign_package, verify_bytes, Category,
    CategoryInfo, ChecksumError, ReadError, SignError, VerifyError, OFFICIAL_PUBLIC_KEY_PEM,
};
use serde_json::Value;

const T: i64 = 1_700_000_000;

fn vectors_in(expected: &Value) -> Vec<(&String, &Value)> {
    let all: Vec<_> = expected.as_object().unwrap().iter().collect();
    assert_eq!(all.len(), 11, "expected.json lists 11 packages");
    all
}

#[test]
fn every_vector_gets_its_expected_verdict_per_key() {
    let expected = expected();
    let keys = [
        ("test_key_pair_1", load_public_key(&key1_public()).unwrap()),
        ("test_key_pair_2", load_public_key(&key2_public()).unwrap()),
        ("official", official_public_key()),
    ];
    for (name, want) in vectors_in(&expected) {
        for (key_name, key) in &keys {
            let outcome = verify_bytes(vector_bytes(name), std::slice::from_ref(key));
            match &want["verify"][key_name] {
                Value::Bool(true) => assert!(outcome.result.is_ok(), "{name} with {key_name}: {:?}", outcome.result),
                // Unsigned vectors fail on the empty comment, signed ones cryptographically.
                Value::Bool(false) if want["zip_comment"] == "" => assert!(
                    matches!(outcome.result, Err(VerifyError::NotSigned)),
                    "{name} with {key_name}: {:?}",
                    outcome.result
                ),
                Value::Bool(false) => {
                    assert!(matches!(outcome.result, Err(VerifyError::Mismatch)), "{name} with {key_name}")
                }
                Value::String(err) => {
                    assert!(err.contains("read _assets: is a directory"), "{err}");
                    let failure = outcome.result.unwrap_err();
                    assert!(
                        matches!(&failure, VerifyError::DirectoryEntry(dir) if dir == "_assets"),
                        "{name}: {failure}"
                    );
                }
                other => panic!("{name}: unexpected verdict {other}"),
            }
        }
    }
}

#[test]
fn the_daemon_tries_official_then_the_configured_key() {
    // The Go harness ran "official + key N"; a match with either key is a pass.
    let expected = expected();
    let k1 = load_public_key(&key1_public()).unwrap();
    for (name, want) in vectors_in(&expected) {
        let outcome = verify_bytes(vector_bytes(name), &[official_public_key(), k1.clone()]);
        match &want["verify"]["test_key_pair_1"] {
            Value::Bool(true) => assert_eq!(outcome.result.unwrap().key_index, 1, "{name}"),
            _ => assert!(outcome.result.is_err(), "{name}"),
        }
    }
}

#[test]
fn unsigned_vectors_fail_for_the_empty_comment() {
    for name in ["dummy_plugin.difypkg", "stateful_tool.difypkg"] {
        let outcome = verify_bytes(vector_bytes(name), &[official_public_key()]);
        match outcome.result {
            Err(failure @ VerifyError::NotSigned) => assert!(failure.to_string().contains("comment is empty")),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn checksums_match_for_every_vector() {
    let expected = expected();
    for (name, want) in vectors_in(&expected) {
        let outcome = verify_bytes(vector_bytes(name), &[]);
        let want = want["checksum"].as_str().unwrap();
        match outcome.checksum {
            Err(ChecksumError::Read(ReadError::IsDirectory(dir))) if want.starts_with("ERROR") => {
                assert_eq!(dir, "_assets", "{name}")
            }
            Ok(sum) => assert_eq!(sum, want, "{name}"),
            Err(e) => panic!("{name}: {e}, want {want}"),
        }
    }
}

fn assert_signing_reproduces(unsigned: &str, signed: &str, category: Category) {
    let key = load_private_key(&key1_private()).unwrap();
    let want = &expected()[signed];
    let (zip, result) = sign_package(vector_bytes(unsigned), &key, category, T).unwrap();
    assert_eq!(result.comment, want["zip_comment"].as_str().unwrap());
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &result.signature);
    assert_eq!(b64, want["signature_b64"].as_str().unwrap());
    assert_eq!(result.entries.last().unwrap().data, want["verification_file"].as_str().unwrap().as_bytes());
    // The archive written around it carries the same comment and verifies.
    assert_eq!(read_package(zip.clone()).unwrap().comment, want["zip_comment"].as_str().unwrap().as_bytes());
    let outcome = verify_bytes(zip, &[load_public_key(&key1_public()).unwrap()]);
    assert_eq!(outcome.checksum.unwrap(), want["checksum"].as_str().unwrap());
    assert!(matches!(outcome.result.unwrap().category, CategoryInfo::Declared(c) if c == category));
}

#[test]
fn signing_stateful_tool_reproduces_the_vector_comment() {
    assert_signing_reproduces(
        "stateful_tool.difypkg",
        "stateful_tool.k1.t1700000000.community.signed.difypkg",
        Category::Community,
    );
    // The daemon's own signer wrote the same comment.
    let go = &expected()["stateful_tool.k1.t1700000000.community.go-signer.signed.difypkg"];
    let ours = &expected()["stateful_tool.k1.t1700000000.community.signed.difypkg"];
    assert_eq!(go["zip_comment"], ours["zip_comment"]);
}

#[test]
fn signing_dummy_plugin_reproduces_the_vector_comment() {
    assert_signing_reproduces(
        "dummy_plugin.difypkg",
        "dummy_plugin.k1.t1700000000.langgenius.signed.difypkg",
        Category::Langgenius,
    );
}

#[test]
fn resigning_replaces_the_verification_file() {
    let key = load_private_key(&key1_private()).unwrap();
    let signed = vector_bytes("stateful_tool.k1.t1700000000.community.signed.difypkg");
    let (zip, result) = sign_package(signed, &key, Category::Partner, T + 5).unwrap();
    let entries = read_package(zip.clone()).unwrap().entries;
    assert_eq!(entries.len(), 12);
    let count = entries.iter().filter(|e| e.name == ".verification.dify.json").count();
    assert_eq!(count, 1);
    assert_eq!(entries.last().unwrap().data, br#"{"authorized_category":"partner"}"#);
    assert_eq!(result.entries, entries);
    let outcome = verify_bytes(zip, &[load_public_key(&key1_public()).unwrap()]);
    let verified = outcome.result.unwrap();
    assert_eq!(verified.time, T + 5);
    assert!(matches!(verified.category, CategoryInfo::Declared(Category::Partner)), "{:?}", verified.category);
}

#[test]
fn a_package_without_verification_file_reports_the_daemon_default() {
    let name = "stateful_tool.k1.t1700000000.noverification.signed.difypkg";
    let outcome = verify_bytes(vector_bytes(name), &[load_public_key(&key1_public()).unwrap()]);
    assert!(matches!(outcome.result.unwrap().category, CategoryInfo::Missing));
}

#[test]
fn the_embedded_official_key_is_the_vector_key() {
    assert_eq!(OFFICIAL_PUBLIC_KEY_PEM.as_bytes(), vector_bytes("official_marketplace.public.pem"));
}

#[test]
fn directory_entries_are_refused_for_signing() {
    let key = load_private_key(&key1_private()).unwrap();
    let err =
        sign_package(vector_bytes("neg.with_directory_entries.difypkg"), &key, Category::Community, T).err().unwrap();
    let SignError::Refused(cause) = err else { panic!("{err}") };
    assert!(cause.to_string().starts_with("`_assets/` is a directory entry"), "{cause}");
}
