//! What Dify's three callers make of our answers, replayed on the real binary's output lines
//! (stdio, remote TCP, serverless HTTP) by `support/dify_consumers.py`: the workflow tool
//! node's outputs, the agent app's string, the Agent node's rendering and the fail branch.

use std::process::Stdio;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::daemon::{Conn, FakeDaemon};
use crate::support::kv::KvServer;
use crate::support::plugin::{request_line_as, BIN};

const REPLAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/support/dify_consumers.py");
const KEY: &str = "3b0c1e8a-0000-4000-8000-00000000ca11";

/// How Dify calls: which envelope fields the request line carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Caller {
    /// Workflow tool node: `app_id`, no `message_id`.
    Workflow,
    /// Agent app (`ToolEngine.agent_invoke`): `message_id` too.
    AgentApp,
    /// Backwards invocation from an Agent node strategy: neither.
    Backwards,
    /// A line without the two keys at all (not what the daemon writes): treated as a workflow.
    Unlabelled,
}

const CALLERS: [Caller; 4] = [Caller::Workflow, Caller::AgentApp, Caller::Backwards, Caller::Unlabelled];

impl Caller {
    fn line(self, sid: &str, data: &Value) -> String {
        match self {
            Caller::Workflow => request_line_as(sid, data, Some("app-1"), None),
            Caller::AgentApp => request_line_as(sid, data, Some("app-1"), Some("msg-1")),
            Caller::Backwards => request_line_as(sid, data, None, None),
            Caller::Unlabelled => {
                let mut line: Map<String, Value> =
                    serde_json::from_str(&request_line_as(sid, data, None, None)).unwrap();
                line.remove("app_id");
                line.remove("message_id");
                format!("{}\n", Value::Object(line))
            }
        }
    }

    fn gets_variables(self) -> bool {
        matches!(self, Caller::Workflow | Caller::Unlabelled)
    }
}

/// The real binary behind one of its runtimes; `call` returns one session's raw lines.
pub(crate) enum Transport {
    Stdio { _child: Child, stdin: ChildStdin, lines: Lines<BufReader<ChildStdout>> },
    Tcp { _child: Child, conn: Conn, _dir: tempfile::TempDir },
    Http(crate::serverless::Server),
}

impl Transport {
    pub(crate) async fn stdio() -> Transport {
        let mut child = Command::new(BIN)
            .arg("serve")
            .env("INSTALL_METHOD", "local")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        Transport::Stdio { _child: child, stdin, lines: BufReader::new(stdout).lines() }
    }

    async fn tcp() -> Transport {
        let daemon = FakeDaemon::bind().await;
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .current_dir(dir.path())
            .env_remove("REMOTE_INSTALL_HOST")
            .env_remove("REMOTE_INSTALL_PORT")
            .env("INSTALL_METHOD", "remote")
            .env("REMOTE_INSTALL_URL", format!("127.0.0.1:{}", daemon.port()))
            .env("REMOTE_INSTALL_KEY", KEY)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut conn = daemon.accept().await;
        conn.registration(KEY).await;
        Transport::Tcp { _child: child, conn, _dir: dir }
    }

    async fn http(method: &str) -> Transport {
        Transport::Http(crate::serverless::start(method).await)
    }

    /// Sends one request line and returns that session's lines, through its `end`.
    async fn call(&mut self, sid: &str, line: String) -> Vec<String> {
        let mut session = vec![];
        let ours = |l: &str| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("non-JSON line {l:?}: {e}"));
            (v["event"] == "session" && v["session_id"] == sid).then(|| v["data"]["type"] == "end")
        };
        match self {
            Transport::Stdio { stdin, lines, .. } => {
                stdin.write_all(line.as_bytes()).await.unwrap();
                while let Some(l) = lines.next_line().await.unwrap() {
                    if let Some(end) = ours(&l) {
                        session.push(l);
                        if end {
                            return session;
                        }
                    }
                }
                panic!("stdout ended inside session {sid}");
            }
            Transport::Tcp { conn, .. } => {
                conn.send(line.as_bytes()).await;
                loop {
                    let l = conn.raw_line().await.expect("connection open until the session ended");
                    if let Some(end) = ours(&l) {
                        session.push(l);
                        if end {
                            return session;
                        }
                    }
                }
            }
            Transport::Http(s) => {
                let url = format!("{}/invoke?action=invoke_tool", s.base);
                let resp = s.client.post(url).header("Dify-Plugin-Session-ID", sid).body(line).send().await.unwrap();
                assert_eq!(resp.status(), 200);
                let text = resp.text().await.unwrap();
                let lines = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned);
                session.extend(lines.inspect(|l| assert!(ours(l).is_some(), "only this session's lines: {l}")));
                session
            }
        }
    }
}

/// One call: the tool, its parameters, and the expected outcome (or error prefix) and attempt.
pub(crate) struct Step {
    pub(crate) tool: &'static str,
    pub(crate) params: Value,
    pub(crate) outcome: &'static str,
    pub(crate) attempt: Option<u64>,
}

fn step(tool: &'static str, params: Value, outcome: &'static str, attempt: Option<u64>) -> Step {
    Step { tool, params, outcome, attempt }
}

/// Every outcome of every tool, and the errors a fail branch tells apart by their stable
/// first words; the payload arrives as Dify's `str()` of
/// an object (a variable wired straight to the field) and as its JSON text.
pub(crate) fn lifecycle(id: &str) -> Vec<Step> {
    let repr = json!({"event_id": id, "event_type": "created", "payload": "{'order': 42, 'paid': True, 'note': None}"});
    let text =
        json!({"event_id": id, "event_type": "created", "payload": "{\"note\": null, \"order\": 42, \"paid\": true}"});
    let other = json!({"event_id": id, "event_type": "created", "payload": "{\"order\": 43}"});
    let fail = json!({"event_id": id, "status": "failed", "attempt": 1});
    let done = json!({"event_id": id, "status": "completed", "attempt": 2, "result": "shipped"});
    vec![
        step("event_ingest", repr.clone(), "accepted", Some(1)),
        step("event_ingest", text, "duplicate", Some(1)),
        step("event_ingest", other, "error type: conflict, error details: event_id ", None),
        step("event_status", json!({"event_id": id}), "found", Some(1)),
        step("event_complete", fail.clone(), "failed", Some(1)),
        step("event_complete", fail.clone(), "already_failed", Some(1)),
        step("event_ingest", repr.clone(), "accepted", Some(2)),
        step("event_complete", fail, "error type: conflict, error details: stale completion: attempt 1", None),
        step("event_complete", done.clone(), "completed", Some(2)),
        step("event_complete", done, "already_completed", Some(2)),
        step(
            "event_complete",
            json!({"event_id": id, "status": "failed", "attempt": 2}),
            "error type: conflict, error details: event \"",
            None,
        ),
        step(
            "event_complete",
            json!({"event_id": format!("{id}-never")}),
            "error type: not_found, error details: no event with id ",
            None,
        ),
        step("event_ingest", repr, "duplicate", Some(2)),
        step("event_status", json!({"event_id": id}), "found", Some(2)),
        step("event_status", json!({"event_id": format!("{id}-never")}), "not_found", None),
    ]
}

fn short(id: &str) -> Vec<Step> {
    let ingest = json!({"event_id": id, "event_type": "created", "payload": "{'n': 1}"});
    vec![
        step("event_ingest", ingest.clone(), "accepted", Some(1)),
        step("event_ingest", ingest, "duplicate", Some(1)),
        step("event_status", json!({"event_id": id}), "found", Some(1)),
        step("event_complete", json!({"event_id": id, "attempt": 1}), "completed", Some(1)),
    ]
}

/// Runs `steps` as `caller`, replays every session through Dify's consumers, checks them and
/// returns the replays (what each consumer made of each session).
pub(crate) async fn run(t: &mut Transport, url: &str, caller: Caller, steps: &[Step]) -> Vec<Value> {
    let mut sessions = vec![];
    for (i, s) in steps.iter().enumerate() {
        let data = json!({"action": "invoke_tool", "credential_type": "api-key", "credentials": {"kv_url": url},
                          "provider": "stateful_tool", "tool": s.tool, "tool_parameters": s.params,
                          "type": "tool", "user_id": "u"});
        let sid = format!("{caller:?}-{i}-{:08x}", rand::random::<u32>());
        sessions.push(t.call(&sid, caller.line(&sid, &data)).await);
    }
    let replays = replay(&sessions);
    for ((s, lines), replay) in steps.iter().zip(&sessions).zip(&replays) {
        check(caller, s, lines, replay);
    }
    replays
}

fn replay(sessions: &[Vec<String>]) -> Vec<Value> {
    let mut child = std::process::Command::new("python3")
        .arg(REPLAY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the replay of Dify's consumers");
    let input = json!({ "sessions": sessions }).to_string();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the replay failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(caller: Caller, s: &Step, lines: &[String], replay: &Value) {
    let what = format!("{caller:?} {} → {}", s.tool, s.outcome);
    if s.outcome.starts_with("error type: ") {
        let fail = &replay["fail_branch"];
        assert_eq!(fail["error_type"], "PluginInvokeError", "{what}");
        let message = fail["error_message"].as_str().unwrap();
        assert!(message.contains(s.outcome), "{what}: the fail branch reads {message:?}");
        return;
    }
    assert!(replay["fail_branch"].is_null(), "{what}: {lines:?}");
    let variables = lines.iter().filter(|l| l.contains(r#""type":"variable""#)).count();
    let declared = declared_outputs(s.tool);
    let outputs = &replay["tool_node"];
    let record = &outputs["json"][0];
    assert_eq!(record["outcome"], s.outcome, "{what}");
    assert_eq!(record.get("attempt").and_then(Value::as_u64), s.attempt, "{what}");
    let text = outputs["text"].as_str().unwrap();
    // Agents' sentences end with a line break: Dify joins text and JSON with nothing between.
    let end = if caller.gets_variables() { "." } else { ".\n" };
    let sentence = text.strip_suffix(end).unwrap_or_else(|| panic!("{what}: text {text:?} ends with {end:?}"));
    assert!(sentence.starts_with("Event ") && !sentence.contains(['{', '\n']), "{what}: text {text:?}");
    // A model's record leaves out what it cannot use (NOT_FOR_AGENTS), nulls, false flags and
    // most of the fingerprint; a workflow node's keeps them all.
    let fingerprint = record.get("fingerprint").and_then(Value::as_str);
    if caller.gets_variables() {
        assert!(record["key"].is_string(), "{what}: {record}");
        assert!(fingerprint.is_none_or(|f| f.len() == "sha256:".len() + 64), "{what}: {record}");
    } else {
        for gone in stateful_tool::NOT_FOR_AGENTS {
            assert!(record.get(gone).is_none(), "{what}: {gone} in {record}");
        }
        let empty = |v: &Value| v.is_null() || *v == json!(false);
        assert!(!record.as_object().unwrap().values().any(empty), "{what}: no nulls or false flags: {record}");
        assert!(fingerprint.is_none_or(|f| f.len() == "sha256:".len() + 12), "{what}: {record}");
    }
    if caller.gets_variables() {
        assert_eq!(variables, declared.len(), "{what}: one variable per declared output");
        check_outputs(&what, s, &declared, outputs);
    } else {
        assert_eq!(variables, 0, "{what}: no variable messages for agents");
        check_agent_strings(&what, text, replay);
    }
}

/// The tool's declared outputs, from the YAML embedded in the binary.
fn declared_outputs(tool: &str) -> Map<String, Value> {
    let decl = stateful_tool::declared_tool(tool).expect("declared tool");
    decl["output_schema"]["properties"].as_object().expect("output_schema.properties").clone()
}

/// The tool node's outputs hold every declared output with a value of its declared type (or
/// null where its description says so), equal to the answer's field; nothing else.
fn check_outputs(what: &str, s: &Step, declared: &Map<String, Value>, outputs: &Value) {
    let record = &outputs["json"][0];
    for (name, decl) in declared {
        let value = outputs.get(name).unwrap_or_else(|| panic!("{what}: output {name} missing"));
        assert_eq!(value, record.get(name).unwrap_or(&Value::Null), "{what}: {name} is the answer's");
        let description = decl["description"].as_str().unwrap_or("");
        let typed = match decl["type"].as_str() {
            Some("string") => value.is_string(),
            Some("boolean") => value.is_boolean(),
            Some("integer") => value.is_u64() || value.is_i64(),
            Some("number") => value.is_number(),
            Some("object") => value.is_object(),
            Some("array") => value.is_array(),
            other => panic!("{what}: {name} declares type {other:?}"),
        };
        assert!(typed || (value.is_null() && description.contains("null")), "{what}: {name} = {value}");
        if let (Some(allowed), false) = (decl["enum"].as_array(), value.is_null()) {
            assert!(allowed.contains(value), "{what}: {name} = {value} not in {allowed:?}");
        }
    }
    let known = ["text", "files", "json"];
    for key in outputs.as_object().unwrap().keys() {
        assert!(known.contains(&key.as_str()) || declared.contains_key(key), "{what}: undeclared output {key}");
    }
    assert_eq!(outputs["outcome"], s.outcome, "{what}");
    assert_eq!(outputs["attempt"].as_u64(), s.attempt, "{what}");
}

/// Each agent string holds the record once (the JSON message), the sentence, no variables.
fn check_agent_strings(what: &str, text: &str, replay: &Value) {
    let record = replay["records"][0].as_str().unwrap();
    assert_eq!(replay["records"].as_array().unwrap().len(), 1, "{what}");
    for key in ["agent_app", "agent_node", "agent_node_current"] {
        let s = replay[key].as_str().unwrap();
        assert_eq!(s.matches(record).count(), 1, "{what}: {key} holds the record once: {s}");
        assert_eq!(s.matches(text).count(), 1, "{what}: {key} holds the sentence once: {s}");
        assert!(!s.contains("variable_name") && !s.contains("VariableMessage"), "{what}: {key}: {s}");
    }
    assert!(replay["agent_app"].as_str().unwrap().starts_with(text), "{what}");
}

pub(crate) fn id(tag: &str) -> String {
    format!("EVT-{tag}-{:x}", rand::random::<u64>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_every_tool_and_outcome_for_each_caller() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let mut t = Transport::stdio().await;
    for caller in CALLERS {
        run(&mut t, &kv.url(), caller, &lifecycle(&id("stdio"))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_payload_wired_as_an_object_is_stored_as_its_json() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let mut t = Transport::stdio().await;
    let id = id("repr");
    let creds = json!({"kv_url": kv.url()});
    let call = |tool: &str, params: Value| {
        json!({"action": "invoke_tool", "credentials": creds, "provider": "stateful_tool", "tool": tool,
               "tool_parameters": params, "type": "tool", "user_id": "u"})
    };
    let ingest =
        call("event_ingest", json!({"event_id": id, "event_type": "created", "payload": "{'a': [1, 'x'], 'b': None}"}));
    t.call("r1", Caller::Workflow.line("r1", &ingest)).await;
    let lines = t.call("r2", Caller::Workflow.line("r2", &call("event_status", json!({"event_id": id})))).await;
    let outputs = &replay(&[lines])[0]["tool_node"];
    assert_eq!(outputs["payload"], r#"{"a":[1,"x"],"b":null}"#, "stored as JSON, not as a Python repr");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tcp_answers_like_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let mut t = Transport::tcp().await;
    for caller in CALLERS {
        run(&mut t, &kv.url(), caller, &short(&id("tcp"))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serverless_and_aws_lambda_answer_like_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    for method in ["serverless", "aws_lambda"] {
        let mut t = Transport::http(method).await;
        for caller in CALLERS {
            run(&mut t, &kv.url(), caller, &short(&id(method))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_reaches_the_fail_branch_as_upstream_error() {
    let mut t = Transport::stdio().await;
    let url = format!("http://127.0.0.1:{}", crate::support::fake::closed_port());
    let steps = [step(
        "event_ingest",
        json!({"event_id": id("down"), "event_type": "created"}),
        "error type: upstream_error, error details: ",
        None,
    )];
    for caller in CALLERS {
        run(&mut t, &url, caller, &steps).await;
    }
}
