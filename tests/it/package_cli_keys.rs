//! The real binary: keygen output files and the key-file rules of `verify`.

use std::fs;

use crate::support::package::*;

#[test]
fn keygen_writes_pkcs1_pems_with_safe_modes_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["keygen", "--out-dir", s(dir.path()), "--name", "k", "--bits", "1024"]);
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
    let again = run(&["keygen", "--out-dir", s(dir.path()), "--name", "k", "--bits", "1024"]);
    assert!(!again.status.success());
    assert!(all_output(&again).contains("already exists; refusing to overwrite"), "{}", all_output(&again));
    assert_eq!(fs::read(&private).unwrap(), before);
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
