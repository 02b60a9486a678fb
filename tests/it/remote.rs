//! `INSTALL_METHOD=remote` through the real binary against a fake daemon on 127.0.0.1.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::daemon::{FakeDaemon, STEP};
use crate::support::kv::ScratchKv;
use crate::support::plugin::BIN;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

const KEY: &str = "3b0c1e8a-0000-4000-8000-00000000beef";
/// Settings a developer's shell or `.env` might hold; each test sets its own.
const CLEARED: [&str; 8] = [
    "INSTALL_METHOD",
    "REMOTE_INSTALL_URL",
    "REMOTE_INSTALL_HOST",
    "REMOTE_INSTALL_PORT",
    "REMOTE_INSTALL_KEY",
    "STATEFUL_TOOL_RECONNECT_MS",
    "STATEFUL_TOOL_RECONNECT_ATTEMPTS",
    "STATEFUL_TOOL_HEARTBEAT_MS",
];

/// `stateful-tool serve` in `dir` (never the repo root: it may hold a developer's `.env`).
fn spawn(dir: &Path, env: &[(&str, &str)], capture: bool) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").current_dir(dir);
    CLEARED.iter().for_each(|k| {
        cmd.env_remove(k);
    });
    let out = || if capture { Stdio::piped() } else { Stdio::inherit() };
    let err = if capture { Stdio::piped() } else { crate::support::child_log::captured("plugin") };
    cmd.envs(env.iter().copied()).stdin(Stdio::null()).stdout(out()).stderr(err).kill_on_drop(true);
    cmd.spawn().expect("spawn stateful-tool serve")
}

fn remote_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("INSTALL_METHOD", "remote".into()),
        ("REMOTE_INSTALL_URL", format!("127.0.0.1:{port}")),
        ("REMOTE_INSTALL_KEY", KEY.into()),
    ]
}

fn pairs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

async fn exit(child: Child, within: Duration) -> (Output, String) {
    let out = tokio::time::timeout(within, child.wait_with_output()).await.expect("plugin exited in time").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

fn ingest(kv: &ScratchKv, id: &str) -> Value {
    json!({"action": "invoke_tool", "credential_type": "api-key", "credentials": {"kv_url": kv.url()},
           "provider": "stateful_tool", "tool": "event_ingest", "type": "tool", "user_id": "u",
           "tool_parameters": {"event_id": id, "event_type": "created", "payload": "{\"n\":1}"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_like_the_sdk_then_serves_sessions() {
    let kv = ScratchKv::start();
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = remote_env(daemon.port());
    env.push(("STATEFUL_TOOL_HEARTBEAT_MS", "100".into()));
    let _plugin = spawn(dir.path(), &pairs(&env), false);
    let mut conn = daemon.accept().await;
    conn.registration(KEY).await;
    for _ in 0..3 {
        let line = conn.line().await.unwrap();
        assert_eq!(line, json!({"event": "heartbeat", "session_id": null, "data": {}}), "heartbeats from `end` on");
    }
    let a = conn.request("d0000000-0000-4000-8000-00000000000d", &ingest(&kv, "tcp-1")).await;
    assert_eq!(a.outcome(), "accepted", "{a:?}");
    let b = conn.request("d0000000-0000-4000-8000-00000000000e", &ingest(&kv, "tcp-1")).await;
    assert_eq!(b.outcome(), "duplicate", "{b:?}");
    assert_eq!(b.json()["received_at"], a.json()["received_at"]);
    let mut status = ingest(&kv, "tcp-1");
    status["tool"] = json!("event_status");
    status["tool_parameters"] = json!({"event_id": "tcp-1"});
    assert_eq!(conn.request("s3", &status).await.outcome(), "found");
    let validate = json!({"action": "validate_tool_credentials", "credentials": {"kv_url": kv.url()},
                          "provider": "stateful_tool", "type": "tool", "user_id": "u"});
    assert_eq!(conn.request("s4", &validate).await.chunks, vec![json!({"result": true})]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_key_exits_non_zero_with_a_clear_message_and_no_retry() {
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = remote_env(daemon.port());
    env.push(("STATEFUL_TOOL_RECONNECT_MS", "10".into()));
    let plugin = spawn(dir.path(), &pairs(&env), true);
    let mut conn = daemon.accept().await;
    // The daemon checks the handshake line alone, before the rest arrives.
    assert_eq!(conn.line().await.unwrap(), json!({"type": "handshake", "data": {"key": KEY}}));
    tokio::spawn(conn.refuse("handshake failed, invalid key\n"));
    let (out, stderr) = exit(plugin, STEP).await;
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    // No retry: the plugin has exited, so a connection it opened after the refusal would be
    // waiting in the listener's backlog now.
    assert!(daemon.accept_within(Duration::from_millis(300)).await.is_none(), "a refusal is never retried");
    assert!(
        stderr.contains("the daemon refused the debugging key: get a fresh one in Dify → Plugins → Debug"),
        "{stderr}"
    );
    assert!(stderr.contains("handshake failed, invalid key"), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout stays empty: {:?}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refused_after_end_exits_with_the_daemons_reason() {
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = spawn(dir.path(), &pairs(&remote_env(daemon.port())), true);
    let mut conn = daemon.accept().await;
    conn.registration(KEY).await;
    tokio::spawn(conn.refuse("plugin declaration validation failed: label is required\n"));
    let (out, stderr) = exit(plugin, STEP).await;
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("refused the plugin's registration"), "{stderr}");
    assert!(stderr.contains("label is required"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_close_of_the_first_registration_exits_non_zero() {
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = spawn(dir.path(), &pairs(&remote_env(daemon.port())), true);
    let mut conn = daemon.accept().await;
    conn.registration(KEY).await;
    drop(conn);
    let (out, stderr) = exit(plugin, STEP).await;
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("gave no reason") && stderr.contains("REMOTE_INSTALL_URL"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_and_re_registers_after_a_disconnect() {
    let kv = ScratchKv::start();
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = remote_env(daemon.port());
    env.push(("STATEFUL_TOOL_RECONNECT_MS", "50".into()));
    let _plugin = spawn(dir.path(), &pairs(&env), false);
    let mut conn = daemon.accept().await;
    conn.registration(KEY).await;
    assert_eq!(conn.request("c1-a", &ingest(&kv, "reconnect-1")).await.outcome(), "accepted");
    // Mid-session: a request goes out and the daemon vanishes before reading its answer.
    conn.send(crate::support::plugin::request_line("c1-b", &ingest(&kv, "reconnect-2")).as_bytes()).await;
    drop(conn);
    let mut conn = daemon.accept().await;
    conn.registration(KEY).await;
    assert_eq!(conn.line().await.unwrap()["event"], "heartbeat");
    // Same store: the first connection's event is a duplicate now.
    let again = conn.request("c2-a", &ingest(&kv, "reconnect-1")).await;
    assert_eq!(again.outcome(), "duplicate", "{again:?}");
    let abandoned = conn.request("c2-b", &ingest(&kv, "reconnect-2")).await.outcome();
    assert!(["accepted", "duplicate"].contains(&abandoned.as_str()), "{abandoned}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotenv_file_supplies_the_settings_and_the_environment_wins() {
    let kv = ScratchKv::start();
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let dotenv = format!(
        "# remote debugging (see .env.example)\nINSTALL_METHOD=remote\n\nREMOTE_INSTALL_URL=\"tcp://127.0.0.1:{}\"\n\
         export REMOTE_INSTALL_KEY='file-key'   # from Dify → Plugins → Debug\n",
        daemon.port()
    );
    std::fs::write(dir.path().join(".env"), dotenv).unwrap();
    let plugin = spawn(dir.path(), &[], false);
    let mut conn = daemon.accept().await;
    conn.registration("file-key").await;
    assert_eq!(conn.request("env-1", &ingest(&kv, "dotenv-1")).await.outcome(), "accepted");
    drop(plugin);
    let _plugin = spawn(dir.path(), &[("REMOTE_INSTALL_KEY", "env-key")], false);
    let mut conn = daemon.accept().await;
    conn.registration("env-key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_when_the_daemon_stays_unreachable() {
    let port = crate::support::fake::closed_port();
    let dir = tempfile::tempdir().unwrap();
    let mut env = remote_env(port);
    env.extend([("STATEFUL_TOOL_RECONNECT_MS", "10".into()), ("STATEFUL_TOOL_RECONNECT_ATTEMPTS", "3".into())]);
    let (out, stderr) = exit(spawn(dir.path(), &pairs(&env), true), STEP).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("gave up after 3 failed attempts"), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stderr) = exit(spawn(dir.path(), &[("INSTALL_METHOD", "remote")], true), STEP).await;
    assert!(!out.status.success());
    assert!(stderr.contains("REMOTE_INSTALL_KEY is not set") && stderr.contains("Plugins → Debug"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trigger_package_registers_its_trigger_declaration_and_serves_dispatch() {
    let daemon = FakeDaemon::bind().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = remote_env(daemon.port());
    env.push(("STATEFUL_TOOL_PACKAGE", "trigger".into()));
    let _plugin = spawn(dir.path(), &pairs(&env), false);
    let mut conn = daemon.accept().await;
    let mut lines = vec![];
    loop {
        let line = conn.line().await.expect("connection open during registration");
        let end = line["type"] == "end";
        lines.push(line);
        if end {
            break;
        }
    }
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..3], ["handshake", "manifest_declaration", "trigger_declaration"], "{kinds:?}");
    assert!(kinds[3..kinds.len() - 1].iter().all(|k| *k == "asset_chunk"), "{kinds:?}");
    // ManifestValidate refuses a trigger next to a tool: the manifest names the trigger only.
    let manifest = &lines[1]["data"];
    assert_eq!(
        (&manifest["plugins"]["tools"], &manifest["plugins"]["triggers"]),
        (&json!([]), &json!(["provider/stateful_trigger.yaml"]))
    );
    let provider = &lines[2]["data"][0];
    assert_eq!(provider["identity"]["name"], "stateful_trigger");
    assert_eq!(provider["events"][0]["identity"]["name"], "webhook_received");
    let raw = hex::encode("POST /triggers/plugin/e HTTP/1.1\r\nX-Github-Delivery: remote-1\r\n\r\n{}");
    let builder = json!({"action": "dispatch_trigger_event", "credential_type": "unauthorized", "credentials": {},
        "provider": "stateful_trigger", "raw_http_request": raw, "type": "trigger", "user_id": "",
        "subscription": {"endpoint": "e", "expires_at": -1, "parameters": {}, "properties": {}}});
    let r = conn.request("d0000000-0000-4000-8000-0000000000a1", &builder).await;
    assert_eq!(r.chunks.len(), 1, "{r:?}");
    assert_eq!(r.chunks[0]["events"], json!([]));
}
