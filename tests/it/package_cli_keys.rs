//! The real binary: keygen output files and the key-file rules of `verify`.

use std::fs;

use crate::support::package::*;

#[test]
fn keygen_writes_pkcs1_pems_with_safe_modes_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["keygen", "--out-dir", s(dir.path()), "--name", "k", "--bits", "2048"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let private = dir.path().join("k.private.pem");
    let public = dir.path().join("k.public.pem");
    assert_eq!(mode(&private), 0o600);
    assert_eq!(mode(&public), 0o644);
    for (path, label) in [(&private, "RSA PRIVATE KEY"), (&public, "RSA PUBLIC KEY")] {
        let text = fs::read_to_string(path).unwrap();
        assert!(text.starts_with(&format!("-----BEGIN {label}-----\n")), "{text}");
        assert!(text.ends_with(&format!("-----END {label}-----\n")) && !text.ends_with("\n\n"));
        assert!(text.lines().all(|l| l.len() <= 64 || l.starts_with("-----")));
    }
    let before = fs::read(&private).unwrap();
    let again = run(&["keygen", "--out-dir", s(dir.path()), "--name", "k", "--bits", "2048"]);
    assert!(!again.status.success());
    assert!(all_output(&again).contains("already exists; refusing to overwrite"), "{}", all_output(&again));
    assert_eq!(fs::read(&private).unwrap(), before);
}

#[test]
fn keygen_creates_a_missing_out_dir_0700_and_writes_nothing_into_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    // A fresh clone has no keys/ directory: the README's command must work there.
    let keys = dir.path().join("keys");
    let out = run(&["keygen", "--out-dir", s(&keys), "--name", "k", "--bits", "2048"]);
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(mode(&keys), 0o700);
    assert_eq!(mode(&keys.join("k.private.pem")), 0o600);
    assert!(keys.join("k.public.pem").is_file());

    // A destination that cannot be a directory fails up front, leaving nothing behind.
    let file = dir.path().join("file");
    fs::write(&file, "x").unwrap();
    let out = run(&["keygen", "--out-dir", s(&file), "--bits", "2048"]);
    assert!(!out.status.success());
    assert!(all_output(&out).contains("that path is a file, not a directory"), "{}", all_output(&out));
    let under_file = file.join("keys");
    let out = run(&["keygen", "--out-dir", s(&under_file), "--bits", "2048"]);
    assert!(!out.status.success());
    assert!(all_output(&out).contains("cannot create the directory"), "{}", all_output(&out));
    let mut left: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["file", "keys"]);
    assert_eq!(fs::read_dir(&keys).unwrap().count(), 2, "no probe file left in keys/");
}

#[test]
fn verify_rejects_key_files_the_daemon_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let signed = vector("stateful_tool.k1.t1700000000.community.signed.difypkg");
    let pem = fs::read_to_string(key1_public()).unwrap();
    let cases = [
        ("spki.pem", pem.replace("RSA PUBLIC KEY", "PUBLIC KEY"), "SPKI"),
        (
            "pkcs8.pem",
            fs::read_to_string(key1_private()).unwrap().replace("RSA PRIVATE KEY", "PRIVATE KEY"),
            "`PRIVATE KEY`",
        ),
        ("trailing.pem", format!("{}\n", pem.trim_end()) + "\n", "extra data included in the PEM block"),
        ("empty.pem", String::new(), "no PEM block found"),
    ];
    for (file, text, needle) in cases {
        let path = dir.path().join(file);
        fs::write(&path, text).unwrap();
        let reason = verify_reason(&signed, &path);
        assert!(reason.contains(needle) && reason.contains(file), "{file}: {reason}");
    }
    let missing = dir.path().join("missing.pem");
    assert!(verify_reason(&signed, &missing).contains("missing.pem"));
    // One good key file with CRLF line ends and no final newline is fine.
    let crlf = dir.path().join("crlf.pem");
    fs::write(&crlf, pem.trim_end().replace('\n', "\r\n")).unwrap();
    assert!(run(&["verify", s(&signed), "--key", s(&crlf)]).status.success());
    // Without any key there is nothing to trust.
    assert!(!run(&["verify", s(&signed)]).status.success());
}

#[test]
fn keygen_refuses_sizes_the_signer_cannot_use_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for bits in ["1024", "2047", "2056", "3071", "4097", "8192", "16384"] {
        let out = run(&["keygen", "--out-dir", s(dir.path()), "--name", "k", "--bits", bits]);
        assert!(!out.status.success(), "--bits {bits} accepted");
        let text = all_output(&out);
        assert!(text.contains(&format!("--bits {bits}: choose 2048, 2560, 3072, 3584 or 4096")), "{text}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "--bits {bits} left files behind");
    }
}
