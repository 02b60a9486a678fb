//! Backwards invocation and storage through the session loop the stdio runtime runs, over in-process pipes, with this test as the daemon (capture 10 replayed).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dify_plugin::protocol::{BackwardsError, BackwardsOptions, RequestIds};
use dify_plugin::provider::NoCredentials;
use dify_plugin::runtime::session_loop::serve;
use dify_plugin::runtime::ServeOptions;
use dify_plugin::tool::{Tool, ToolContext, ToolProvider};
use dify_plugin::{ErrorMessage, Handler, RequestData, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A tool that keeps a greeting in Dify's storage: `store` sets it and reads it back,
/// `exist` asks whether it is there, `forget` deletes it. A failed call is the session's error,
/// its `error_type` naming the failure.
struct Greeter;

async fn work(session: &Session, tool: &str) -> Result<String, BackwardsError> {
    let storage = session.storage();
    match tool {
        "store" => {
            storage.set("greeting", b"hello").await?;
            Ok(String::from_utf8_lossy(&storage.get("greeting").await?).into_owned())
        }
        "exist" => Ok(storage.exist("greeting").await?.to_string()),
        "forget" => storage.del("greeting").await.map(|()| "forgotten".to_owned()),
        other => Ok(format!("no tool {other}")),
    }
}

impl Handler for Greeter {
    type Data<'a> = Value;

    async fn handle<'a>(&'a self, session: Session, data: Value, _: &'a RequestData) {
        match work(&session, data["tool"].as_str().unwrap_or_default()).await {
            Ok(text) => {
                session.stream(&json!({"type": "text", "message": {"text": text}, "meta": null})).await;
                session.finish(None).await;
            }
            Err(e) => {
                let kind = match &e {
                    BackwardsError::Daemon(_) => "daemon",
                    BackwardsError::Timeout(_) => "timeout",
                    BackwardsError::Closed => "closed",
                    _ => "other",
                };
                session.finish(Some(ErrorMessage::new(kind, e.to_string()).to_wire())).await;
            }
        }
    }
}

/// The daemon's end of the two pipes, and the plugin's session loop.
struct Daemon {
    to_plugin: Option<DuplexStream>,
    from_plugin: Lines<BufReader<DuplexStream>>,
    served: JoinHandle<std::io::Result<()>>,
}

/// Ids handed out in order (the capture's), so the plugin's lines can be compared to it.
fn ids(list: &[&str]) -> RequestIds {
    let queue = Mutex::new(list.iter().map(|s| s.to_string()).collect::<VecDeque<_>>());
    RequestIds::from_fn(move || queue.lock().unwrap().pop_front().expect("more calls than ids"))
}

fn options(ids: RequestIds, max_in_flight: usize) -> ServeOptions {
    ServeOptions {
        heartbeat: Duration::from_secs(3600),
        max_in_flight,
        backwards: BackwardsOptions { ids, ..BackwardsOptions::default() },
        ..ServeOptions::default()
    }
}

impl Daemon {
    fn start(opts: ServeOptions) -> Daemon {
        Daemon::serving(Greeter, opts)
    }

    fn serving<H: Handler>(handler: H, opts: ServeOptions) -> Daemon {
        let (to_plugin, plugin_in) = tokio::io::duplex(64 * 1024);
        let (plugin_out, from_plugin) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve(BufReader::new(plugin_in), plugin_out, Arc::new(handler), opts));
        Daemon { to_plugin: Some(to_plugin), from_plugin: BufReader::new(from_plugin).lines(), served }
    }

    async fn send(&mut self, line: &str) {
        let pipe = self.to_plugin.as_mut().expect("input still open");
        pipe.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    /// The plugin's next `session` line, as text (heartbeats and logs skipped).
    async fn next(&mut self) -> String {
        loop {
            let line = self.from_plugin.next_line().await.unwrap().expect("the plugin's output ended");
            if serde_json::from_str::<Value>(&line).unwrap()["event"] == "session" {
                return line;
            }
        }
    }

    async fn next_value(&mut self) -> Value {
        serde_json::from_str(&self.next().await).unwrap()
    }

    /// Closes the input; the loop must end cleanly having written no further session line.
    async fn finish(mut self) {
        self.to_plugin = None;
        while let Some(line) = self.from_plugin.next_line().await.unwrap() {
            let line: Value = serde_json::from_str(&line).unwrap();
            assert_ne!(line["event"], "session", "unexpected {line}");
        }
        self.served.await.unwrap().unwrap();
    }
}

fn request(sid: &str, tool: &str) -> String {
    let data = json!({"action": "invoke_tool", "credential_type": "api-key", "credentials": {}, "provider": "echo",
        "tool": tool, "tool_parameters": {}, "type": "tool", "user_id": "u"});
    envelope(sid, "request", data)
}

/// A daemon line, its members in the order Go writes them.
fn envelope(sid: &str, event: &str, data: Value) -> String {
    json!({"session_id": sid, "conversation_id": null, "message_id": null, "app_id": null, "endpoint_id": null,
        "context": null, "event": event, "data": data})
    .to_string()
}

fn reply(sid: &str, id: &str, event: &str, message: &str, data: Value) -> String {
    let data = json!({"backwards_request_id": id, "event": event, "message": message, "data": data});
    envelope(sid, "backwards_response", data)
}

/// The `backwards_request_id` of an `invoke` line.
fn invoked_id(line: &Value) -> String {
    assert_eq!(line["data"]["type"], "invoke", "{line}");
    line["data"]["data"]["backwards_request_id"].as_str().unwrap().to_owned()
}

/// The capture's two storage ids, in the order the plugin asked for them.
const CAPTURED_IDS: [&str; 2] = ["ee735ea265a44038893def47e214f194", "03071ef93c0044789f709e9ee3f39aed"];

/// Plays capture 10 against `daemon`: the plugin's lines must be the capture's, byte for byte.
async fn replay_storage_capture(mut daemon: Daemon) {
    let capture = include_str!("captures/10-backwards-invocation-storage.jsonl");
    let records: Vec<Value> = capture.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut compared = 0;
    for record in &records {
        let line = serde_json::to_string(&record["line"]).unwrap();
        match record["dir"].as_str().unwrap() {
            "daemon->plugin" => daemon.send(&line).await,
            _ => {
                assert_eq!(daemon.next().await, line, "the plugin's line, byte for byte");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 4, "two invoke lines, the text, the end");
    daemon.finish().await;
}

#[tokio::test]
async fn storage_through_the_session_loop_speaks_as_the_python_sdk_did() {
    replay_storage_capture(Daemon::start(options(ids(&CAPTURED_IDS), 8))).await;
}

/// The capture's `store` tool written on the typed interface: the same lines come out.
struct TypedStore;

impl Tool for TypedStore {
    type Params = Value;

    fn name(&self) -> &str {
        "store"
    }

    async fn invoke(&self, _: Value, cx: &ToolContext) -> Result<(), ErrorMessage> {
        let storage = cx.session().storage();
        let fail = |e: BackwardsError| ErrorMessage::new("storage", e.to_string());
        storage.set("greeting", b"hello").await.map_err(fail)?;
        let greeting = storage.get("greeting").await.map_err(fail)?;
        cx.text(&String::from_utf8_lossy(&greeting)).await;
        Ok(())
    }
}

#[tokio::test]
async fn a_typed_tool_reaches_storage_through_its_context() {
    let provider = ToolProvider::new(NoCredentials).with_tool(TypedStore);
    replay_storage_capture(Daemon::serving(provider, options(ids(&CAPTURED_IDS), 8))).await;
}

#[tokio::test]
async fn an_error_answer_fails_the_call_and_its_end_closes_it() {
    let mut daemon = Daemon::start(options(ids(&["a1", "a2"]), 8));
    daemon.send(&request("s1", "store")).await;
    let id = invoked_id(&daemon.next_value().await);
    daemon.send(&reply("s1", &id, "error", "permission denied: storage", Value::Null)).await;
    let error = daemon.next_value().await;
    assert_eq!(error["data"]["type"], "error", "{error}");
    assert_eq!(error["data"]["data"]["error_type"], "daemon");
    assert_eq!(error["data"]["data"]["message"], "the backwards call failed: permission denied: storage");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    // The daemon's `end` after its error still finds the call (no "unknown id" to drop), and
    // the next session's calls are served as usual.
    daemon.send(&reply("s1", &id, "end", "", Value::Null)).await;
    daemon.send(&request("s2", "exist")).await;
    let id = invoked_id(&daemon.next_value().await);
    assert_eq!(id, "a2");
    daemon.send(&reply("s2", &id, "response", "struct", json!({"data": true}))).await;
    daemon.send(&reply("s2", &id, "end", "", Value::Null)).await;
    assert_eq!(daemon.next_value().await["data"]["data"]["message"]["text"], "true");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    daemon.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_daemon_times_the_call_out_after_the_sdks_250_s() {
    let mut daemon = Daemon::start(options(RequestIds::random(), 8));
    let start = Instant::now();
    daemon.send(&request("s1", "forget")).await;
    let invoke = daemon.next_value().await;
    assert_eq!(invoke["data"]["data"]["request"], json!({"opt": "del", "key": "greeting"}));
    assert_eq!(invoked_id(&invoke).len(), 32, "32 hex digits, as uuid4().hex");
    let error = daemon.next_value().await;
    assert_eq!(error["data"]["data"]["error_type"], "timeout", "{error}");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(250) && waited < Duration::from_secs(251), "{waited:?}");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    // An answer after the timeout reaches no call: it is dropped, not answered.
    daemon.send(&reply("s1", &invoked_id(&invoke), "response", "struct", json!({"data": "ok"}))).await;
    daemon.finish().await;
}

#[tokio::test]
async fn an_answer_for_an_unknown_id_is_dropped_and_the_call_gets_its_own() {
    let mut daemon = Daemon::start(options(ids(&["b1", "b2"]), 8));
    daemon.send(&reply("nobody", "zz", "response", "struct", json!({"data": "x"}))).await;
    daemon.send(&request("s1", "store")).await;
    let id = invoked_id(&daemon.next_value().await);
    daemon.send(&reply("s1", "not-b1", "response", "struct", json!({"data": "not ok"}))).await;
    daemon.send(&reply("s1", "not-b1", "end", "", Value::Null)).await;
    daemon.send(&reply("s1", &id, "response", "struct", json!({"data": "ok"}))).await;
    daemon.send(&reply("s1", &id, "end", "", Value::Null)).await;
    let id = invoked_id(&daemon.next_value().await);
    daemon.send(&reply("s1", &id, "response", "struct", json!({"data": "68656c6c6f"}))).await;
    daemon.send(&reply("s1", &id, "end", "", Value::Null)).await;
    assert_eq!(daemon.next_value().await["data"]["data"]["message"]["text"], "hello");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    daemon.finish().await;
}

#[tokio::test]
async fn a_call_waiting_when_the_input_ends_fails_at_once() {
    let mut daemon = Daemon::start(options(RequestIds::random(), 8));
    daemon.send(&request("s1", "exist")).await;
    invoked_id(&daemon.next_value().await);
    daemon.to_plugin = None;
    let error = daemon.next_value().await;
    assert_eq!(error["data"]["data"]["error_type"], "closed", "{error}");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    daemon.finish().await;
}

/// Every session slot held by a call waiting for its answer, and a request waiting for a
/// slot: the reader still reads the answers behind that request (in paused time a stalled
/// reader would run into the 250 s timeout instead).
#[tokio::test(start_paused = true)]
async fn answers_reach_their_calls_while_requests_wait_for_a_slot() {
    let mut daemon = Daemon::start(options(ids(&["c1", "c2"]), 1));
    let start = Instant::now();
    daemon.send(&request("s1", "exist")).await;
    let first = invoked_id(&daemon.next_value().await);
    daemon.send(&request("s2", "exist")).await;
    daemon.send(&reply("s1", &first, "response", "struct", json!({"data": false}))).await;
    daemon.send(&reply("s1", &first, "end", "", Value::Null)).await;
    assert_eq!(daemon.next_value().await["data"]["data"]["message"]["text"], "false");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    let second = invoked_id(&daemon.next_value().await);
    daemon.send(&reply("s2", &second, "response", "struct", json!({"data": true}))).await;
    daemon.send(&reply("s2", &second, "end", "", Value::Null)).await;
    assert_eq!(daemon.next_value().await["data"]["data"]["message"]["text"], "true");
    assert_eq!(daemon.next_value().await["data"]["type"], "end");
    assert_eq!(start.elapsed(), Duration::ZERO, "no call waited for a timeout");
    daemon.finish().await;
}
