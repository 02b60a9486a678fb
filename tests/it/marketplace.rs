//! `scripts/marketplace_check.py` (the marketplace pre-check, reproduced) passes our plugin
//! layout and fails on each thing the marketplace rejects: an author containing `dify`, a
//! missing, placeholder or default icon, a plugin that never prints the start-up marker, and
//! a server that does not answer.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");

/// An unpacked package as the marketplace sees it, built from the repo's own files.
fn unpacked() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for f in ["manifest.yaml", "README.md", "PRIVACY.md", "requirements.txt", "main.py"] {
        std::fs::copy(Path::new(ROOT).join(f), d.join(f)).unwrap();
    }
    for sub in ["provider", "tools", "_assets"] {
        std::fs::create_dir(d.join(sub)).unwrap();
        for e in std::fs::read_dir(Path::new(ROOT).join(sub)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), d.join(sub).join(e.file_name())).unwrap();
        }
    }
    std::fs::create_dir(d.join("bin")).unwrap();
    let arch = if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" };
    std::os::unix::fs::symlink(BIN, d.join("bin").join(format!("stateful-tool-{arch}"))).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs the check on `dir`; returns (success, output).
fn check(dir: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(Path::new(ROOT).join("scripts/marketplace_check.py"))
        .arg("--dir")
        .arg(dir)
        .arg("--bin")
        .arg(BIN)
        .env("MARKETPLACE_PORT", free_port().to_string())
        .env("MARKETPLACE_MARKER_TIMEOUT", "8")
        .env("MARKETPLACE_SETTLE", "0.5")
        .output()
        .expect("python3 runs the check");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn assert_line(output: &str, line_start: &str) {
    assert!(output.lines().any(|l| l.starts_with(line_start)), "expected a line starting {line_start:?} in:\n{output}");
}

#[test]
fn our_layout_passes_the_steps_that_run_the_plugin() {
    let dir = unpacked();
    let (_, out) = check(dir.path());
    for step in
        ["[PASS] manifest author", "[PASS] icon", "[PASS] icon_dark", "[PASS] startup marker", "[PASS] HTTP probe"]
    {
        assert_line(&out, step);
    }
}

#[test]
fn author_containing_dify_fails() {
    let dir = unpacked();
    let m = dir.path().join("manifest.yaml");
    let text = std::fs::read_to_string(&m).unwrap().replace("author: eventsmith", "author: my-dify-team");
    std::fs::write(&m, text).unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok);
    assert_line(&out, "[FAIL] manifest author");
}

#[test]
fn missing_placeholder_or_default_icons_fail() {
    let default_icon = "<svg width=\"100\" height=\"100\" xmlns=\"http://www.w3.org/2000/svg\">\n  <path d=\"M20 20 V80 M20 20 H60 Q80 20 80 40 T60 60 H20\" \n        fill=\"none\" \n        stroke=\"black\" \n        stroke-width=\"5\"/>\n</svg>";
    for variant in ["missing", "placeholder", "default"] {
        let dir = unpacked();
        let icon = dir.path().join("_assets/icon.svg");
        match variant {
            "missing" => std::fs::remove_file(&icon).unwrap(),
            "placeholder" => {
                std::fs::write(&icon, "<svg><!-- DIFY_MARKETPLACE_TEMPLATE_ICON_DO_NOT_USE --></svg>").unwrap()
            }
            _ => std::fs::write(&icon, default_icon).unwrap(),
        }
        let (ok, out) = check(dir.path());
        assert!(!ok, "{variant}");
        assert_line(&out, "[FAIL] icon");
    }
}

#[test]
fn a_plugin_that_never_prints_the_marker_fails() {
    let dir = unpacked();
    std::fs::write(dir.path().join("main.py"), "import time\ntime.sleep(60)\n").unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok);
    assert_line(&out, "[FAIL] startup marker");
}

#[test]
fn a_server_that_does_not_answer_fails() {
    let dir = unpacked();
    std::fs::write(
        dir.path().join("main.py"),
        "import time\nprint(' * Serving Flask app \\'x\\'', flush=True)\ntime.sleep(60)\n",
    )
    .unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok);
    assert_line(&out, "[PASS] startup marker");
    assert_line(&out, "[FAIL] HTTP probe");
}
