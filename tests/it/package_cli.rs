//! The real binary: package, sign and verify exit codes, files and messages.

use std::fs;

use crate::support::package::*;
use difypkg::{read_package, write_zip};

#[test]
fn generated_keys_sign_and_verify_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(&["keygen", "--out-dir", s(dir.path()), "--bits", "2048"]).status.success());
    let private = dir.path().join("stateful_tool_signing_key.private.pem");
    let public = dir.path().join("stateful_tool_signing_key.public.pem");
    let pkg = dir.path().join("stateful_tool.difypkg");
    fs::copy(vector("stateful_tool.difypkg"), &pkg).unwrap();
    let out = run(&["sign", s(&pkg), "--key", s(&private), "--time", "1700000000"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let signed = dir.path().join("stateful_tool.signed.difypkg");
    assert!(stdout(&out).contains(&format!("signed: {}", signed.display())));

    let ok = run(&["verify", s(&signed), "--key", s(&key2_public()), "--key", s(&public)]);
    assert_eq!(ok.status.code(), Some(0), "{}", all_output(&ok));
    let want = format!("verified (key: {}, category: community, time: 1700000000)", public.display());
    assert!(stdout(&ok).contains(&want), "{}", stdout(&ok));
    assert!(stdout(&ok).contains("checksum: 921d0a71b85f929ffdae33ccb55415733f0e33b5bfa6fe93b6e297217d37ce10"));

    let bad = run(&["verify", s(&signed), "--key", s(&key2_public()), "--official"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stdout(&bad).contains("not verified: signature does not match the content with any given key"));
}

#[test]
fn cli_signing_reproduces_the_vector_comment() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.difypkg");
    let out = run(&[
        "sign",
        s(&vector("stateful_tool.difypkg")),
        "--key",
        s(&key1_private()),
        "--category",
        "community",
        "--time",
        "1700000000",
        "--out",
        s(&out_path),
    ]);
    assert!(out.status.success(), "{}", all_output(&out));
    let zip = read_package(fs::read(&out_path).unwrap()).unwrap();
    let want = &expected()["stateful_tool.k1.t1700000000.community.signed.difypkg"];
    assert_eq!(zip.comment, want["zip_comment"].as_str().unwrap().as_bytes());
    let verified = run(&["verify", s(&out_path), "--key", s(&key1_public())]);
    assert!(stdout(&verified).contains("category: community, time: 1700000000)"), "{}", stdout(&verified));
}

#[test]
fn verify_names_each_kind_of_failure() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = key1_public();
    assert!(verify_reason(&vector("stateful_tool.difypkg"), &k1).contains("not signed: its zip comment is empty"));
    assert!(verify_reason(&vector("neg.with_directory_entries.difypkg"), &k1).contains("read _assets: is a directory"));
    for name in ["neg.tampered.difypkg", "neg.reordered.difypkg", "neg.bad_time.difypkg"] {
        assert!(verify_reason(&vector(name), &k1).ends_with("signature does not match the content with any given key"));
    }

    let garbage = dir.path().join("garbage.difypkg");
    fs::write(&garbage, b"this is not a zip").unwrap();
    assert!(verify_reason(&garbage, &k1).contains("cannot read the package as a difypkg (zip) archive"));

    let signed = read_package(vector_bytes("stateful_tool.k1.t1700000000.community.signed.difypkg")).unwrap();
    for (comment, needle) in [
        (&br#"{"signature":"abc","time":1700000000}"#[..], "not valid standard base64"),
        (br#"{"signature":"QUJD","time":"1700000000"}"#, "`time` must be an integer"),
        (b"{not json", "invalid JSON"),
    ] {
        let path = dir.path().join("c.difypkg");
        fs::write(&path, write_zip(&signed.entries, comment).unwrap()).unwrap();
        let reason = verify_reason(&path, &k1);
        assert!(reason.contains(needle), "{reason}");
    }
}

#[test]
fn package_cli_builds_deterministically_and_check_only_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bins = fake_bins(dir.path());
    let bin_args: Vec<String> = bins.iter().map(|(a, p)| format!("{a}={}", p.display())).collect();
    let mut outputs = Vec::new();
    for out_name in ["a", "b"] {
        let out_dir = dir.path().join(out_name);
        let out = run(&[
            "package",
            "--source",
            s(&fixture()),
            "--out",
            s(&out_dir),
            "--bin",
            &bin_args[0],
            "--bin",
            &bin_args[1],
        ]);
        assert!(out.status.success(), "{}", all_output(&out));
        let text = stdout(&out);
        assert!(text.contains("identifier: acme/stateful_tool:0.1.0@"), "{text}");
        assert!(text.contains("binary amd64: bin/stateful-tool-amd64 (38 bytes)"), "{text}");
        assert!(text.contains("binary arm64: bin/stateful-tool-arm64 (38 bytes)"), "{text}");
        outputs.push(fs::read(out_dir.join("stateful_tool-0.1.0.difypkg")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);

    let check_dir = dir.path().join("check");
    let out =
        run(&["package", "--source", s(&fixture()), "--out", s(&check_dir), "--bin", &bin_args[0], "--check-only"]);
    assert!(out.status.success(), "{}", all_output(&out));
    assert!(stdout(&out).contains("check passed"));
    assert!(stdout(&out).contains("meta.arch [amd64, arm64] written as [amd64]"), "{}", stdout(&out));
    assert!(!check_dir.exists());
}

#[test]
fn package_cli_defaults_to_the_running_binary_for_the_host_arch() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["package", "--source", s(&fixture()), "--out", s(dir.path()), "--check-only"]);
    let text = all_output(&out);
    // A debug build may exceed the 50 MiB limit; either way the host binary is the one used.
    let host = if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" };
    assert!(text.contains(&format!("bin/stateful-tool-{host}")), "{text}");
}

#[test]
fn package_cli_reports_problems_and_fails() {
    let (_tmp, source, bins) = fixture_copy();
    edit(&source, "manifest.yaml", "author: acme", "author: Acme");
    let bin = format!("amd64={}", bins[0].1.display());
    let out_dir = source.join("dist");
    let out = run(&["package", "--source", s(&source), "--out", s(&out_dir), "--bin", &bin]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: manifest.yaml: author: `Acme` must match"), "{err}");
    assert!(err.contains("nothing written"));
    assert!(!out_dir.exists());
}
