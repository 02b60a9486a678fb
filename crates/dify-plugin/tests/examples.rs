//! The two examples, driven over real pipes as the daemon drives an installed plugin and checked against the Python SDK's captures.
//!
//! `tests/captures/` holds transcripts of the Python SDK (0.10.2) talking to the daemon: the
//! `echo` tool provider and the `rsshub_trigger` webhook. Each example is started with
//! `INSTALL_METHOD=local`, the captured daemon lines are written to its stdin, and each
//! session's answer must be the captured one. A Python traceback (`args`) and what a Python
//! parser adds after an error's first colon are Python's, not the plugin's, and are not compared.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// `cargo test` builds the package's examples beside its test binaries. `cargo test --test
/// examples` alone does not rebuild them: it runs whatever example binaries are there.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "{path:?} is missing: run `cargo test -p dify-plugin` (it builds the examples)");
    path
}

fn capture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Each session's answer (its `data` messages in order), comparable across languages.
type Answers = BTreeMap<String, Vec<Value>>;

fn answers<'a>(lines: impl IntoIterator<Item = &'a Value>) -> Answers {
    let mut out = Answers::new();
    for line in lines.into_iter().filter(|l| l["event"] == "session") {
        let mut data = line["data"].clone();
        if data["type"] == "error" {
            let error = &mut data["data"];
            error.as_object_mut().unwrap().remove("args");
            let message = error["message"].as_str().unwrap();
            error["message"] = message.split(": ").next().unwrap().into();
        }
        out.entry(line["session_id"].as_str().unwrap().to_owned()).or_default().push(data);
    }
    out
}

/// Runs example `name` on `input` until it exits at EOF; its output lines.
fn serve(name: &str, input: &str) -> Vec<Value> {
    let mut child = Command::new(example(name))
        .env("INSTALL_METHOD", "local")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{name} exits 0 at EOF: {:?}", out.status);
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["event"], "heartbeat", "the daemon's sign that the plugin is up: {lines:?}");
    lines
}

#[test]
fn the_tool_example_answers_as_the_python_sdk_did() {
    let captures = ["02-invoke-tool-text-json", "03-invoke-tool-error", "04-validate-credentials-ok"];
    let captures = captures.into_iter().chain(["05-validate-credentials-fail", "07-invoke-tool-unknown-tool"]);
    let (mut input, mut expected) = (String::new(), Vec::new());
    for name in captures {
        input += &capture(&format!("{name}.in.jsonl"));
        for record in capture(&format!("{name}.jsonl")).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
            if record["dir"] == "plugin->daemon" {
                expected.push(record["line"].clone());
            }
        }
    }
    let expected = answers(&expected);
    assert_eq!(expected.len(), 5, "one session per capture");
    assert_eq!(answers(&serve("tool", &input)), expected);
}

#[test]
fn the_webhook_example_answers_as_the_python_sdk_did() {
    let (mut input, mut expected) = (String::new(), String::new());
    for name in ["02-delivery1", "04-dispatch-error-bad-api-key", "05-dispatch-error-non-json-body"] {
        input += &capture(&format!("trigger-{name}.d2p.jsonl"));
        expected += &capture(&format!("trigger-{name}.p2d.jsonl"));
    }
    let expected: Vec<Value> = expected.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let expected = answers(&expected);
    assert_eq!(expected.len(), 4, "a delivery's dispatch and its invoke, and two refused deliveries");
    assert_eq!(answers(&serve("webhook", &input)), expected);
}

#[test]
fn a_malformed_line_gets_the_sdks_neutral_answer() {
    let out = serve("tool", "{\"session_id\":\"s3\",\"event\":\"request\",\"data\":[1]}\n");
    let answer = &answers(&out)["s3"];
    assert_eq!(answer[0]["data"]["error_type"], "malformed_request", "{answer:?}");
    assert_eq!(answer[1], serde_json::json!({"type": "end", "data": {}}));
}
