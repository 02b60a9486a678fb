//! A normal launch by the daemon logs no error: `requirements.txt` installs nothing, yet the
//! daemon's SDK-patching step finds an SDK version in it that needs no patch.

use std::process::Command;

const REQUIREMENTS: &str = include_str!("../../requirements.txt");

/// The daemon's patterns, verbatim (`internal/core/local_runtime/patch.go`,
/// `getPluginSdkVersion`). Go's RE2 and Rust's `regex` agree on this syntax and on
/// leftmost-first matching; both are applied to the whole file text, comments included.
const EXACT: &str = r"(?:dify[_-]plugin)(?:~=|==)([0-9.a-z]+)";
const RANGES: &str = r"(?:dify[_-]plugin)([><]=?|==)([0-9.a-z]+)(?:,([><]=?|==)([0-9.a-z]+))?";

/// What the daemon's `getPluginSdkVersion` returns for `text` (`None`: it logs
/// "failed to get the version of the plugin sdk" at ERROR). A port of its control flow:
/// the first exact (`==`/`~=`) pin wins; else, of the range matches, the highest upper
/// bound that parses, else the first match's bound.
fn daemon_sdk_version(text: &str) -> Option<String> {
    if let Some(c) = regex::Regex::new(EXACT).unwrap().captures(text) {
        return Some(c[1].to_owned());
    }
    let matches: Vec<_> = regex::Regex::new(RANGES).unwrap().captures_iter(text).collect();
    let highest = matches
        .iter()
        .filter_map(|c| c.get(4).map(|m| m.as_str()))
        .filter(|v| !v.is_empty())
        .max_by_key(|v| release(v));
    highest.or_else(|| matches.first().map(|c| c.get(2).map_or("", |m| m.as_str()))).map(str::to_owned)
}

/// Numeric release segments; the daemon parses the version with hashicorp/go-version and
/// logs an error if it cannot, so only a plain dotted release is acceptable for our file.
fn release(v: &str) -> Vec<u64> {
    v.split('.').map(|s| s.parse().unwrap_or_else(|_| panic!("{v:?} is not a plain dotted release"))).collect()
}

#[test]
fn the_daemon_finds_an_sdk_version_that_needs_no_patch() {
    let version = daemon_sdk_version(REQUIREMENTS).expect("the daemon would log 'failed to get the version'");
    assert_eq!(version, "0.10.2");
    // The daemon patches SDKs older than 0.0.1b70 and 0.1.1 (looking up the installed SDK,
    // which is absent, fails and logs an error): ours must be newer than both.
    assert!(release(&version) > release("0.1.1"), "{version} would be patched");
}

#[test]
fn the_port_agrees_with_the_daemons_own_tests() {
    // The daemon's `TestGetPluginSdkVersion` inputs and answers (`version_match_test.go`).
    let cases = [
        ("\ndify-plugin==0.0.1b70\ngunicorn==20.1.0\n", Some("0.0.1b70")),
        ("\npython-dotenv==1.0.1\ndify-plugin~=0.0.1b70\n", Some("0.0.1b70")),
        ("\n# comment\ndify_plugin==0.0.1b70\n# comment\ngunicorn~=20.1.0\n", Some("0.0.1b70")),
        ("\ndify-plugin==0.0.1\n", Some("0.0.1")),
        ("\ndify-plugin>=0.1.0,<0.2.0\n", Some("0.2.0")),
        // What our file said before: the word without a version is no match, hence the error.
        ("# Do NOT add dify_plugin: the plugin does not use the Python SDK\n", None),
    ];
    for (text, want) in cases {
        assert_eq!(daemon_sdk_version(text).as_deref(), want, "{text:?}");
    }
}

#[test]
fn the_requirements_file_installs_nothing() {
    for line in REQUIREMENTS.lines() {
        let line = line.trim();
        assert!(line.is_empty() || line.starts_with('#'), "not a comment: {line:?}");
    }
    // pip's own reading of the file: resolve it without touching any index.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/requirements.txt");
    let out = Command::new("python3")
        .args(["-m", "pip", "install", "--dry-run", "--no-index", "--disable-pip-version-check", "-r", path])
        .output()
        .expect("run python3 -m pip");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pip refused the file: {text}");
    assert!(!text.contains("Would install"), "pip would install something: {text}");
}
