//! Log records reach the daemon as protocol `log` events at their own level (stdio and TCP),
//! not as stderr lines (which the daemon logs as `WARN plugin stderr` whatever they say);
//! stderr keeps what happens before the protocol is up. Through the real binary.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::support::daemon::FakeDaemon;
use crate::support::kv::KvServer;
use crate::support::plugin::{request_line, BIN};

const SECRET: &str = "kvtok-LOGS-SECRET-19af";

fn validate(url: &str) -> Value {
    json!({"action": "validate_tool_credentials", "provider": "stateful_tool", "type": "tool", "user_id": "u",
           "credentials": {"kv_url": url, "kv_token": SECRET}})
}

/// Every `log` event has exactly the shape the daemon decodes: string level and message,
/// numeric timestamp (a non-number makes the daemon drop the event).
fn check_log_shape(line: &Value) {
    let data = line["data"].as_object().expect("log data is an object");
    assert_eq!(data.len(), 3, "{line}");
    assert!(data["level"].is_string() && data["message"].is_string() && data["timestamp"].is_number(), "{line}");
    assert!(line.get("session_id").is_none(), "{line}");
}

fn logs_with<'a>(lines: &'a [Value], level: &str, text: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "log" && l["data"]["level"] == level)
        .filter(|l| l["data"]["message"].as_str().is_some_and(|m| m.contains(text)))
        .collect()
}

#[tokio::test]
async fn under_the_daemon_logs_are_log_events_and_stderr_stays_empty() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", SECRET]);
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("INSTALL_METHOD", "local")
        .env("STATEFUL_TOOL_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(request_line("s-1", &validate(&kv.url())).as_bytes()).await.unwrap();
    // A line that names no session: dropped, with a warning.
    stdin.write_all(b"{\"event\":\"nonsense\"}\n").await.unwrap();
    stdin.write_all(request_line("s-2", &json!({"type": "tool", "action": "nope"})).as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> =
        stdout.lines().map(|l| serde_json::from_str(l).expect("every stdout line is JSON")).collect();
    lines.iter().filter(|l| l["event"] == "log").for_each(check_log_shape);
    assert_eq!(logs_with(&lines, "INFO", "credentials validated against").len(), 1, "{stdout}");
    assert_eq!(logs_with(&lines, "WARNING", "dropped an input line that names no session").len(), 1, "{stdout}");
    assert!(!logs_with(&lines, "DEBUG", "").is_empty(), "debug records are events too: {stdout}");
    let end = |sid: &str| lines.iter().any(|l| l["session_id"] == sid && l["data"]["type"] == "end");
    assert!(end("s-1") && end("s-2"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "nothing on stderr while the protocol is up: {stderr}");
    assert!(!stdout.contains(SECRET), "a secret in the protocol stream: {stdout}");
}

#[tokio::test]
async fn failures_before_the_protocol_is_up_go_to_stderr() {
    let out = Command::new(BIN).arg("serve").env("INSTALL_METHOD", "carrier-pigeon").output().await.unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no protocol line: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("INSTALL_METHOD=\"carrier-pigeon\" is not supported"));
}

/// The remote-debugging daemon drops `log` events (its logs stay with the developer), so in
/// TCP mode they are sent and also written to stderr.
#[tokio::test]
async fn remote_debugging_sends_log_events_and_keeps_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = FakeDaemon::bind().await;
    let key = "3b0c1e8a-0000-4000-8000-00000000beef";
    let mut child = Command::new(BIN)
        .arg("serve")
        .current_dir(dir.path())
        .env("INSTALL_METHOD", "remote")
        .env("REMOTE_INSTALL_URL", format!("127.0.0.1:{}", daemon.port()))
        .env("REMOTE_INSTALL_KEY", key)
        .env("STATEFUL_TOOL_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut conn = daemon.accept().await;
    conn.registration(key).await;
    let kv = crate::support::kv::ScratchKv::start();
    conn.send(request_line("r-1", &validate(&kv.url())).as_bytes()).await;
    let mut lines = vec![];
    while logs_with(&lines, "INFO", "credentials validated against").is_empty() {
        lines.push(conn.line().await.expect("connection open"));
    }
    lines.iter().filter(|l| l["event"] == "log").for_each(check_log_shape);
    child.start_kill().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
    assert!(stderr.contains("credentials validated against"), "{stderr}");
    assert!(stderr.contains("registration sent to the daemon"), "{stderr}");
}
