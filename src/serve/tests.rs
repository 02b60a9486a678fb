//! The plugin through the session loop, on byte slices: framing, concurrency, EOF, malformed
//! and oversize input, and a panicking handler.

use std::time::Duration;

use serde_json::{json, Value};

use dify_plugin::logging::LogRoute;
use dify_plugin::runtime::env::EnvSettings;
use dify_plugin::runtime::session_loop::serve;
use dify_plugin::runtime::ServeOptions;
use dify_plugin::{Handler, Session};

use crate::dispatch::App;
use event_store::{HostClock, StoreOptions};

fn opts() -> ServeOptions {
    ServeOptions {
        heartbeat: Duration::from_secs(3600),
        max_in_flight: 64,
        logs: LogRoute::Stderr,
        ..ServeOptions::default()
    }
}

fn request(sid: &str, data: Value) -> String {
    crate::request_line(sid, data)
}

fn ingest(sid: &str, id: &str) -> String {
    request(
        sid,
        json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest",
               "credentials": {"kv_url": "memory://"}, "tool_parameters": {"event_id": id, "event_type": "created"}, "user_id": "u"}),
    )
}

fn app() -> std::sync::Arc<App> {
    App::new(HostClock::system(), StoreOptions { allow_memory: true, ..StoreOptions::default() })
}

/// The plugin's own handler (its answers to a panic included), except that a request of type
/// "test" panics in it.
struct Panicky(std::sync::Arc<App>);

impl Handler for Panicky {
    type Data<'a> = crate::request::RequestFields<'a>;

    async fn handle<'a>(&'a self, session: Session, data: Self::Data<'a>, request: &'a dify_plugin::RequestData) {
        if data.kind.as_deref() == Some("test") {
            panic!("an injected panicking handler");
        }
        self.0.handle(session, data, request).await
    }

    fn panicked(&self) -> dify_plugin::ErrorMessage {
        self.0.panicked()
    }
}

async fn run(input: &[u8]) -> Vec<Value> {
    run_with(input, app()).await
}

async fn run_with<H: Handler>(input: &[u8], handler: std::sync::Arc<H>) -> Vec<Value> {
    let mut out = Vec::new();
    serve(tokio::io::BufReader::new(input), &mut out, handler, opts()).await.unwrap();
    out.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("non-JSON output line: {e}")))
        .collect()
}

fn session_types(out: &[Value], sid: &str) -> Vec<String> {
    out.iter()
        .filter(|v| v["event"] == "session" && v["session_id"] == sid)
        .map(|v| v["data"]["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn heartbeat_first_then_answers_and_clean_exit_at_eof() {
    let out = run(ingest("s1", "A").as_bytes()).await;
    assert_eq!(out[0], json!({"event": "heartbeat", "session_id": null, "data": {}}));
    assert_eq!(session_types(&out, "s1"), ["stream", "stream", "end"]);
}

#[tokio::test]
async fn many_sessions_each_end_exactly_once_and_one_wins() {
    let mut input = String::new();
    for i in 0..200 {
        input.push_str(&ingest(&format!("s{i}"), "same-id"));
    }
    let out = run(input.as_bytes()).await;
    let mut accepted = 0;
    for i in 0..200 {
        let sid = format!("s{i}");
        assert_eq!(session_types(&out, &sid), ["stream", "stream", "end"], "{sid}");
        let json = out.iter().find(|v| v["session_id"] == sid.as_str() && v["data"]["data"]["type"] == "json").unwrap();
        if json["data"]["data"]["message"]["json_object"]["outcome"] == "accepted" {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 1);
}

#[tokio::test]
async fn malformed_lines_answer_identifiable_sessions_and_nothing_crashes() {
    let mut input = Vec::new();
    input.extend_from_slice(b"this is not json\n");
    input.extend_from_slice(b"{\"session_id\":\"s-missing-data\",\"event\":\"request\"}\n");
    input.extend_from_slice(b"{\"session_id\":\"s-trunc\",\"event\":\"request\",\"data\":{\"action\"\n");
    input.extend_from_slice(b"\xff\xfe\xfd not utf8\n");
    input.extend_from_slice(b"{\"session_id\":7,\"event\":\"request\",\"data\":{}}\n");
    input.extend_from_slice(b"[1,2,3]\n");
    input.extend_from_slice(&[b'['; 100_000]);
    input.push(b'\n');
    input.extend_from_slice(b"{\"session_id\":\"s-unknown-event\",\"event\":\"cancel\",\"data\":{}}\n");
    input.extend_from_slice(b"{\"session_id\":\"s-bw\",\"event\":\"backwards_response\",\"data\":{}}\n");
    input.extend_from_slice(ingest("s-ok", "B").as_bytes());
    let out = run(&input).await;
    for sid in ["s-missing-data", "s-trunc", "s-unknown-event"] {
        assert_eq!(session_types(&out, sid), ["error", "end"], "{sid}");
    }
    assert!(session_types(&out, "s-bw").is_empty());
    assert_eq!(session_types(&out, "s-ok"), ["stream", "stream", "end"]);
    // Nothing but heartbeats, logs and session events ever reaches the output.
    assert!(out.iter().all(|v| ["heartbeat", "log", "session"].contains(&v["event"].as_str().unwrap())));
}

#[tokio::test]
async fn oversize_line_is_answered_from_its_prefix() {
    let mut line = b"{\"session_id\":\"s-big\",\"event\":\"request\",\"data\":{\"x\":\"".to_vec();
    line.extend(std::iter::repeat_n(b'a', dify_plugin::protocol::wire::MAX_INPUT_LINE + 10));
    line.extend_from_slice(b"\"}}\n");
    line.extend_from_slice(ingest("s-after", "C").as_bytes());
    let out = run(&line).await;
    assert_eq!(session_types(&out, "s-big"), ["error", "end"]);
    let err = out.iter().find(|v| v["session_id"] == "s-big" && v["data"]["type"] == "error").unwrap();
    assert!(err["data"]["data"]["message"].as_str().unwrap().contains("exceeds"));
    assert_eq!(session_types(&out, "s-after"), ["stream", "stream", "end"]);
}

#[tokio::test]
async fn unknown_action_tool_and_provider_are_clear_errors() {
    let base = |action: &str, provider: &str, tool: &str| json!({"action": action, "type": "tool", "provider": provider, "tool": tool, "credentials": {}, "tool_parameters": {}, "user_id": "u"});
    let mut input = request("a", base("invoke_llm", "stateful_tool", "event_ingest"));
    input += &request("b", base("invoke_tool", "stateful_tool", "nope"));
    input += &request("c", base("invoke_tool", "echo", "event_ingest"));
    input += &request(
        "d",
        json!({"action": "get_tool_runtime_parameters", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest", "credentials": {}, "user_id": "u"}),
    );
    let out = run(input.as_bytes()).await;
    let message = |sid: &str| {
        out.iter()
            .find(|v| v["session_id"] == sid && v["data"]["type"] == "error")
            .map(|v| v["data"]["data"]["message"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(message("a").contains("invoke_llm"), "{}", message("a"));
    assert!(message("b").contains("\"nope\""), "{}", message("b"));
    assert!(message("c").contains("echo"), "{}", message("c"));
    assert_eq!(session_types(&out, "d"), ["stream", "end"]);
}

#[tokio::test]
async fn output_error_stops_the_loop() {
    struct Broken;
    impl tokio::io::AsyncWrite for Broken {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }
    // An input that never ends: only the broken output can stop the loop.
    let (_keep_open, reader) = tokio::io::duplex(64);
    let r = serve(tokio::io::BufReader::new(reader), Broken, app(), opts()).await;
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
}

#[tokio::test]
async fn a_panicking_handler_still_ends_its_session() {
    let mut input = request("p", json!({"type": "test", "action": "panic"}));
    input += &ingest("s-after", "P");
    let out = run_with(input.as_bytes(), std::sync::Arc::new(Panicky(app()))).await;
    assert_eq!(session_types(&out, "p"), ["error", "end"]);
    let err = out.iter().find(|v| v["session_id"] == "p" && v["data"]["type"] == "error").unwrap();
    assert_eq!(err["data"]["data"]["error_type"], "upstream_error");
    assert_eq!(session_types(&out, "s-after"), ["stream", "stream", "end"]);
}

#[tokio::test]
async fn a_kv_url_we_cannot_use_is_the_callers_mistake() {
    let data = |action: &str, url: &str| {
        json!({"action": action, "type": "tool", "provider": "stateful_tool", "tool": "event_status",
               "credentials": {"kv_url": url}, "tool_parameters": {"event_id": "A"}, "user_id": "u"})
    };
    let mut input = request("ftp", data("invoke_tool", "ftp://user:s3cret@h"));
    input += &request("bare", data("invoke_tool", "localhost:8123"));
    input += &request("validate", data("validate_tool_credentials", "gopher://h"));
    let out = run(input.as_bytes()).await;
    let error = |sid: &str| {
        out.iter().find(|v| v["session_id"] == sid && v["data"]["type"] == "error").unwrap()["data"]["data"].clone()
    };
    for (sid, error_type) in
        [("ftp", "param_invalid"), ("bare", "param_invalid"), ("validate", "ToolProviderCredentialValidationError")]
    {
        let e = error(sid);
        assert_eq!(e["error_type"], error_type, "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("http(s)://") && message.contains("redis(s)://"), "{message}");
        assert!(!message.contains("s3cret") && !message.contains("user"), "{message}");
    }
}

#[test]
fn the_plugins_settings_are_read_from_the_settings_it_is_given() {
    let settings = EnvSettings::from_pairs([
        ("STATEFUL_TOOL_STORE_TIMEOUT_MS", "250"),
        ("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS", "soon"),
        ("STATEFUL_TOOL_STORE_HOSTS", "kv.internal"),
    ]);
    let options = super::PluginOptions::from_settings(&settings).unwrap();
    let defaults = StoreOptions::default();
    assert_eq!(options.store.call_timeout, Duration::from_millis(250));
    assert_eq!(options.store.door_timeout, defaults.door_timeout, "not a number: the default");
    assert!(format!("{:?}", options.store.allowed_hosts).contains("kv.internal"));
    let bad = EnvSettings::from_pairs([("STATEFUL_TOOL_STORE_HOSTS", "http://kv/")]);
    assert!(super::PluginOptions::from_settings(&bad).unwrap_err().to_string().contains("STATEFUL_TOOL_STORE_HOSTS"));
}

#[test]
fn remote_debugging_registers_the_package_the_setting_names() {
    let tool = super::registration(None).unwrap();
    assert_eq!(tool.declaration.0, "tool_declaration");
    assert_eq!(super::registration(Some("trigger")).unwrap().declaration.0, "trigger_declaration");
    let e = super::registration(Some("both")).unwrap_err().to_string();
    assert!(e.contains("STATEFUL_TOOL_PACKAGE=\"both\""), "{e}");
}

#[tokio::test]
async fn an_oversize_webhook_reaches_the_trigger_and_other_oversize_lines_are_refused_in_our_words() {
    let mut input =
        br#"{"session_id":"s-hook","event":"request","data":{"action":"dispatch_trigger_event","raw":""#.to_vec();
    input.extend(std::iter::repeat_n(b'a', dify_plugin::protocol::wire::MAX_INPUT_LINE + 10));
    input.extend_from_slice(b"\"}}\n");
    let out = run(&input).await;
    assert_eq!(session_types(&out, "s-hook"), ["stream", "end"], "{out:?}");
    let chunk = out.iter().find(|v| v["session_id"] == "s-hook" && v["data"]["type"] == "stream").unwrap();
    let response = hex::decode(chunk["data"]["data"]["response"].as_str().unwrap()).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 413"), "{}", String::from_utf8_lossy(&response));
}
