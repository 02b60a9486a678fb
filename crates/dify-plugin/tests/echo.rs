//! `examples/echo.rs`, the smallest plugin, driven over real pipes as the daemon drives an
//! installed plugin: a heartbeat first, each request answered on its session, a malformed
//! line answered with an error, a `log` event for the plugin's log, and exit 0 at EOF.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// `cargo test` builds the package's examples beside its test binaries.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "{path:?} is missing: run `cargo test -p dify-plugin` (it builds the examples)");
    path
}

#[test]
fn the_echo_example_serves_sessions_over_stdio() {
    let mut child = Command::new(example("echo"))
        .env("RUST_LOG", "info")
        .env("INSTALL_METHOD", "local")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let invoke = json!({"session_id": "s1", "event": "request",
                        "data": {"type": "tool", "action": "invoke_tool", "tool_parameters": {"text": "hello"}}});
    let validate = json!({"session_id": "s2", "event": "request", "data": {"type": "tool", "action": "validate"}});
    writeln!(stdin, "{invoke}\n{validate}\n{{\"session_id\":\"s3\",\"event\":\"request\",\"data\":[1]}}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["event"], "heartbeat", "{lines:?}");
    let session = |sid: &str| -> Vec<Value> {
        lines.iter().filter(|l| l["event"] == "session" && l["session_id"] == sid).map(|l| l["data"].clone()).collect()
    };
    assert_eq!(
        session("s1"),
        [
            json!({"type": "stream", "data": {"type": "text", "message": {"text": "hello"}}}),
            json!({"type": "end", "data": {}})
        ]
    );
    let s2 = session("s2");
    assert_eq!((s2[0]["type"].as_str(), s2[0]["data"]["error_type"].as_str()), (Some("error"), Some("param_invalid")));
    let s3 = session("s3");
    assert!(s3[0]["data"]["message"].as_str().unwrap().starts_with("malformed request"), "{s3:?}");
    assert_eq!(s3.last().unwrap()["type"], "end");
    let logs: Vec<&Value> = lines.iter().filter(|l| l["event"] == "log").collect();
    assert!(logs.iter().any(|l| l.to_string().contains("echoing 5 bytes")), "{logs:?}");
}
