//! Shared helpers for the `package_*` integration tests: difypkg's fixtures, running the binary.

// Each test module uses a different subset of these helpers.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// difypkg's fixtures (vectors, plugin tree), read where the crate keeps them.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/difypkg/tests/fixtures");

#[path = "../../../crates/difypkg/tests/contract/fixtures.rs"]
mod fixtures;
pub(crate) use fixtures::*;

/// Runs the real binary.
pub(crate) fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stateful-tool")).args(args).output().expect("run stateful-tool")
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn all_output(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub(crate) fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The `not verified: …` line of a failing `verify` (asserting exit code 1).
pub(crate) fn verify_reason(pkg: &Path, key: &Path) -> String {
    let out = run(&["verify", s(pkg), "--key", s(key)]);
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    let text = stdout(&out);
    text.lines().find(|l| l.starts_with("not verified: ")).unwrap_or_else(|| panic!("{text}")).to_string()
}
