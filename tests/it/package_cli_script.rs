//! `make package`'s script (scripts/package.sh) on the real binary: amd64 only unless asked,
//! saying so before it builds; each identifier said once; one key-pair hint everywhere.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::package::*;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");
const HINT: &str = "keygen --out-dir keys";
const SIGNING_KEY: &str = "SIGNING_KEY=keys/stateful_tool_signing_key.private.pem";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs scripts/package.sh into `dir/dist`, packaging a small fake amd64 binary (a debug
/// build is over the daemon's size limit); `env` adds SIGNING_KEY and the like.
fn package_sh(dir: &Path, env: &[(&str, &str)]) -> String {
    let (ok, all) = try_package_sh(dir, env);
    assert!(ok, "{all}");
    all
}

fn try_package_sh(dir: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let (_, fake) = fake_bins(dir).remove(0);
    let out = Command::new("bash")
        .arg(root().join("scripts/package.sh"))
        .env("BIN", BIN)
        .env("AMD64_BIN", &fake)
        .env("DIST", dir.join("dist"))
        .env_remove("ARM64")
        .env_remove("SIGNING_KEY")
        .env_remove("PUBLIC_KEY")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), all)
}

#[test]
fn make_package_builds_amd64_only_unless_asked_and_says_how_to_add_arm64_before_building() {
    let dir = tempfile::tempdir().unwrap();
    let all = package_sh(dir.path(), &[]);
    let first = all.lines().next().unwrap();
    assert!(first.starts_with("== amd64 only") && first.contains("make package ARM64=1"), "{all}");
    assert!(first.contains("about 35 minutes"), "{first}");
    assert!(all.contains("binary amd64: bin/stateful-tool-amd64") && !all.contains("binary arm64"), "{all}");
    for name in ["stateful_tool-0.1.0.difypkg", "stateful_trigger-0.1.0.difypkg"] {
        assert!(dir.path().join("dist").join(name).is_file(), "{name}: {all}");
    }
    // The unsigned run ends with the one hint: a key pair into keys/, then the signed run.
    let tail: Vec<&str> = all.trim_end().lines().rev().take(2).collect();
    assert_eq!(tail[0], format!("then: make package {SIGNING_KEY}"), "{all}");
    assert_eq!(tail[1], format!("  {BIN} {HINT}"), "{all}");
}

#[test]
fn arm64_says_what_it_builds_how_long_and_how_to_skip_it_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (_, arm) = fake_bins(dir.path()).remove(1);
    // Stands in for the 35-minute cross build: says it started, prints the binary's path last.
    let build = dir.path().join("build-arm64.sh");
    fs::write(&build, format!("echo 'cross build started' >&2\necho '{}'\n", arm.display())).unwrap();
    let all = package_sh(dir.path(), &[("ARM64", "1"), ("ARM64_BUILD", s(&build))]);
    let heading = all.find("== arm64: cross-building the arm64 binary").expect(&all);
    let started = all.find("cross build started").expect(&all);
    assert!(heading < started, "the build started before it was announced:\n{all}");
    let announced = &all[heading..started];
    for needed in
        ["About 35 minutes on 2 cores", "qemu-user", "gcc-aarch64-linux-gnu", "Leave ARM64 unset for amd64 only"]
    {
        assert!(announced.contains(needed), "{needed:?} not in: {announced}");
    }
    assert!(all.contains("binary arm64: bin/stateful-tool-arm64 (38 bytes)"), "{all}");
}

#[test]
fn the_signed_run_says_each_identifier_once_and_verifies_both_packages() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let keygen = run(&["keygen", "--out-dir", s(&keys), "--bits", "2048"]);
    assert!(keygen.status.success(), "{}", all_output(&keygen));
    let private = keys.join("stateful_tool_signing_key.private.pem");
    let all = package_sh(dir.path(), &[("SIGNING_KEY", s(&private))]);
    let ids: Vec<&str> = all.lines().filter(|l| l.starts_with("identifier: ")).collect();
    // Two packages, each unsigned and signed: four identifiers, none said twice.
    assert_eq!(ids.len(), 4, "{all}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 4, "an identifier was printed twice:\n{all}");
    assert_eq!(all.matches("\nverified (key: ").count(), 2, "{all}");
    for name in ["stateful_tool-0.1.0.signed.difypkg", "stateful_trigger-0.1.0.signed.difypkg"] {
        assert!(dir.path().join("dist").join(name).is_file(), "{name}: {all}");
    }
}

#[test]
fn the_key_pair_hint_is_the_same_everywhere_and_writes_into_the_ignored_keys_directory() {
    for name in ["Makefile", "scripts/package.sh", "README.md", "docs/packaging.md"] {
        let text = fs::read_to_string(root().join(name)).unwrap();
        assert!(text.contains(HINT), "{name} lacks `{HINT}`");
        // Every keygen command (not prose about `keygen`) is that one.
        for (at, _) in text.match_indices(" keygen") {
            let before = &text[..at];
            if ["stateful-tool", "$(BIN)", "$bin"].iter().any(|cmd| before.ends_with(cmd)) {
                assert!(text[at + 1..].starts_with(HINT), "{name}: {}", &text[at..(at + 40).min(text.len())]);
            }
        }
        for (at, _) in text.match_indices("SIGNING_KEY=") {
            let path = &text[at..];
            assert!(path.starts_with(SIGNING_KEY) || path.starts_with("SIGNING_KEY=path/"), "{name}: {path:.60}");
        }
    }
    let ignored = fs::read_to_string(root().join(".gitignore")).unwrap();
    assert!(ignored.lines().any(|l| l == "/keys/"), "keys/ is not ignored");

    // The binary itself: without --out-dir it writes into keys/ of the current directory,
    // nothing beside it, and says how to sign with what it wrote.
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).args(["keygen", "--bits", "2048"]).current_dir(cwd.path()).output().unwrap();
    let text = all_output(&out);
    assert!(out.status.success(), "{text}");
    let entries: Vec<_> = fs::read_dir(cwd.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries, ["keys"], "{text}");
    assert!(cwd.path().join("keys/stateful_tool_signing_key.public.pem").is_file());
    assert!(text.contains(&format!("sign with: make package {SIGNING_KEY} ")), "{text}");
}

#[test]
fn a_missing_signing_key_is_said_with_the_hint_before_any_package_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("keys/stateful_tool_signing_key.private.pem");
    let (ok, all) = try_package_sh(dir.path(), &[("SIGNING_KEY", s(&missing))]);
    assert!(!ok, "{all}");
    let want = format!("no signing key at {}; make a key pair with: {BIN} {HINT}", missing.display());
    assert_eq!(all.trim_end(), want);
    assert!(!dir.path().join("dist").exists(), "packages were built: {all}");
}
