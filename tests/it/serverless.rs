//! `INSTALL_METHOD=serverless` / `aws_lambda` through the real binary over real HTTP on 127.0.0.1.

use std::process::Stdio;
use std::time::Duration;

use crate::support::kv::ScratchKv;
use crate::support::plugin::{request_line, BIN};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const STEP: Duration = Duration::from_secs(20);

pub(crate) struct Server {
    pub(crate) _child: Child,
    /// The store the tool calls of these tests use.
    pub(crate) kv: ScratchKv,
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
}

/// Starts `serve` on port 0 and reads the real port from the ` * Running on` line, after
/// checking the `Serving Flask app` marker came first (the marketplace pre-check waits for it).
pub(crate) async fn start(method: &str) -> Server {
    let prefix = if method == "aws_lambda" { "AWS_LAMBDA" } else { "SERVERLESS" };
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .current_dir(dir.path())
        .env("INSTALL_METHOD", method)
        .env(format!("{prefix}_HOST"), "127.0.0.1")
        .env(format!("{prefix}_PORT"), "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(crate::support::child_log::captured("plugin"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = vec![];
    let addr = tokio::time::timeout(STEP, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(addr) = line.strip_prefix(" * Running on http://") {
                return addr.trim().to_owned();
            }
            seen.push(line);
        }
        panic!("stdout ended before the Running on line: {seen:?}");
    })
    .await
    .expect("start-up lines in time");
    assert!(seen.iter().any(|l| l.contains("Serving Flask app")), "marker before Running on: {seen:?}");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server { _child: child, kv: ScratchKv::start(), base: format!("http://{addr}"), client: reqwest::Client::new() }
}

/// The response status and its body's JSON lines.
async fn post(s: &Server, action: &str, sid: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, Vec<Value>) {
    let mut req = s.client.post(format!("{}/invoke?action={action}", s.base)).body(body);
    req = req.header("Content-Type", "application/json").header("Accept", "text/event-stream");
    if let Some(sid) = sid {
        req = req.header("Dify-Plugin-Session-ID", sid);
    }
    let resp = tokio::time::timeout(STEP, req.send()).await.expect("answer in time").unwrap();
    let status = resp.status().as_u16();
    let text = tokio::time::timeout(STEP, resp.text()).await.expect("body in time").unwrap();
    let lines = text.lines().filter(|l| !l.trim().is_empty());
    (status, lines.map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("non-JSON line {l:?}: {e}"))).collect())
}

impl Server {
    /// A tool call's request data, against this server's store.
    fn tool(&self, name: &str, params: Value) -> Value {
        json!({"action": "invoke_tool", "credential_type": "api-key", "credentials": {"kv_url": self.kv.url()},
               "provider": "stateful_tool", "tool": name, "tool_parameters": params, "type": "tool", "user_id": "u"})
    }
}

/// Checks the lines are exactly one session's (no heartbeat, `end` last) and returns its messages.
fn session(lines: &[Value], sid: &str) -> Vec<Value> {
    assert!(lines.iter().all(|l| l["event"] == "session" && l["session_id"] == sid), "{lines:?}");
    assert_eq!(lines.last().map(|l| l["data"].clone()), Some(json!({"type": "end", "data": {}})), "{lines:?}");
    lines.iter().map(|l| l["data"].clone()).collect()
}

async fn invoke(s: &Server, sid: &str, data: Value) -> Vec<Value> {
    let action = data["action"].as_str().unwrap().to_owned();
    let (status, lines) = post(s, &action, Some(sid), request_line(sid, &data)).await;
    assert_eq!(status, 200, "{lines:?}");
    session(&lines, sid)
}

fn outcome(msgs: &[Value]) -> &str {
    assert_eq!(msgs.iter().map(|m| m["type"].as_str().unwrap()).collect::<Vec<_>>(), ["stream", "stream", "end"]);
    msgs[1]["data"]["message"]["json_object"]["outcome"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_index_and_unknown_paths() {
    let s = start("serverless").await;
    let health = s.client.get(format!("{}/health", s.base)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "OK");
    let index = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(index.status(), 200);
    let info: Value = serde_json::from_str(&index.text().await.unwrap()).unwrap();
    assert_eq!((info["plugin"].as_str(), info["install_method"].as_str()), (Some("stateful_tool"), Some("serverless")));
    assert_eq!(s.client.get(format!("{}/nope", s.base)).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tool_and_credential_validation_round_trip() {
    let s = start("serverless").await;
    let ingest = s.tool("event_ingest", json!({"event_id": "http-1", "event_type": "created", "payload": "p"}));
    assert_eq!(outcome(&invoke(&s, "h1", ingest.clone()).await), "accepted");
    assert_eq!(outcome(&invoke(&s, "h2", ingest).await), "duplicate");
    assert_eq!(outcome(&invoke(&s, "h3", s.tool("event_status", json!({"event_id": "http-1"}))).await), "found");
    let done = s.tool("event_complete", json!({"event_id": "http-1", "attempt": 1, "result": "ok"}));
    assert_eq!(outcome(&invoke(&s, "h4", done).await), "completed");
    let validate = json!({"action": "validate_tool_credentials", "credentials": {"kv_url": s.kv.url()},
                          "provider": "stateful_tool", "type": "tool", "user_id": "u"});
    let msgs = invoke(&s, "h5", validate).await;
    assert_eq!(msgs[0], json!({"type": "stream", "data": {"result": true}}));
    // A tool error is a session error + end, with status 200 (the daemon reads the lines).
    let bad = invoke(&s, "h6", s.tool("event_complete", json!({"event_id": "never-seen"}))).await;
    assert_eq!(bad.iter().map(|m| m["type"].as_str().unwrap()).collect::<Vec<_>>(), ["error", "end"]);
    assert_eq!(bad[0]["data"]["error_type"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_id_from_the_header_when_the_body_has_none() {
    let s = start("serverless").await;
    let mut body: Value =
        serde_json::from_str(&request_line("ignored", &s.tool("event_status", json!({"event_id": "x"})))).unwrap();
    body.as_object_mut().unwrap().remove("session_id");
    let (status, lines) = post(&s, "invoke_tool", Some("from-header"), body.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(outcome(&session(&lines, "from-header")), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_body_is_413_and_the_server_keeps_serving() {
    let s = start("serverless").await;
    let big =
        format!("{{\"session_id\":\"big\",\"event\":\"request\",\"data\":{{\"pad\":\"{}\"}}}}", "x".repeat(6 << 20));
    let (status, lines) = post(&s, "invoke_tool", Some("big"), big).await;
    assert_eq!(status, 413);
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0]["event"].as_str(), lines[0]["session_id"].as_str()), (Some("error"), Some("big")));
    assert!(lines[0]["data"]["error"].as_str().unwrap().contains("5242880"), "{lines:?}");
    assert_eq!(outcome(&invoke(&s, "after-big", s.tool("event_status", json!({"event_id": "x"}))).await), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_answered_and_never_crash() {
    let s = start("serverless").await;
    let (status, lines) = post(&s, "invoke_tool", None, "this is not json").await;
    assert_eq!(status, 400);
    assert_eq!(lines, vec![lines[0].clone()]);
    assert_eq!((lines[0]["event"].as_str(), &lines[0]["session_id"]), (Some("error"), &Value::Null));
    assert!(lines[0]["data"]["error"].is_string());
    // With a session id (header), the session gets the error, like a malformed stdio line.
    let (status, lines) = post(&s, "invoke_tool", Some("bad-1"), "{\"event\":\"request\"").await;
    assert_eq!(status, 200);
    let msgs = session(&lines, "bad-1");
    assert_eq!(msgs.iter().map(|m| m["type"].as_str().unwrap()).collect::<Vec<_>>(), ["error", "end"]);
    assert!(msgs[0]["data"]["message"].as_str().unwrap().contains("malformed input"));
    let (status, lines) = post(&s, "invoke_tool", Some("bad-2"), "").await;
    assert_eq!((status, lines.len()), (200, 2));
    assert_eq!(outcome(&invoke(&s, "after-bad", s.tool("event_status", json!({"event_id": "x"}))).await), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_query_must_match_the_request() {
    let s = start("serverless").await;
    let line = request_line("mismatch", &s.tool("event_status", json!({"event_id": "x"})));
    let (status, lines) = post(&s, "validate_tool_credentials", Some("mismatch"), line.clone()).await;
    assert_eq!(status, 400);
    assert_eq!(lines[0]["event"], "error");
    assert!(lines[0]["data"]["error"].as_str().unwrap().contains("validate_tool_credentials"), "{lines:?}");
    let resp = s.client.post(format!("{}/invoke", s.base)).body(line).send().await.unwrap();
    assert_eq!(resp.status(), 400, "a missing action query is a mismatch too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_lambda_prints_the_flask_marker_and_answers_root() {
    let s = start("aws_lambda").await;
    let index = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(index.status(), 200);
    assert!(index.text().await.unwrap().contains("aws_lambda"));
    assert_eq!(outcome(&invoke(&s, "l1", s.tool("event_status", json!({"event_id": "x"}))).await), "not_found");
}

#[tokio::test]
async fn unknown_install_method_lists_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").current_dir(dir.path()).env("INSTALL_METHOD", "kubernetes").stdin(Stdio::null());
    let out = tokio::time::timeout(STEP, cmd.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for m in ["kubernetes", "local", "remote", "serverless", "aws_lambda"] {
        assert!(stderr.contains(m), "{m} in {stderr}");
    }
}
