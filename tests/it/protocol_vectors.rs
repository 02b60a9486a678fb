//! Replays the captured daemon transcripts (tests/fixtures/spec/examples) against the real binary.
//!
//! The captures come from an echo plugin, so requests are mapped onto our provider and tools
//! (echo → event_ingest, fail → an invalid event_ingest, slow → event_status, nope stays
//! unknown) and answers are compared by shape, with the documented dynamic fields ignored:
//! per session the same terminal sequence (stream… end, or error + end), chunk kinds, error
//! data shape (`error_type`, `message`, `args` object ≤ 10 keys) and envelope keys.

use std::collections::BTreeMap;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::support::kv::ScratchKv;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/spec/examples");

fn read_jsonl(name: &str) -> Vec<Value> {
    let path = format!("{EXAMPLES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Where a request's kv_url goes: [`run_plugin`] puts its own store's URL in its place.
const THE_STORE: &str = "kv-url-of-this-run";

/// Maps an echo-plugin request onto ours.
fn adapt(mut line: Value) -> Value {
    let data = &mut line["data"];
    if data["provider"] == "echo" {
        data["provider"] = json!("stateful_tool");
    }
    let bad_creds = data["credentials"]["api_key"] == "bad";
    data["credentials"] = json!({"kv_url": if bad_creds { "ftp://not-a-store" } else { THE_STORE }});
    let text = data["tool_parameters"]["text"].as_str().unwrap_or("x").to_owned();
    match data["tool"].as_str() {
        Some("echo") => {
            data["tool"] = json!("event_ingest");
            data["tool_parameters"] = json!({"event_id": text, "event_type": "created"});
        }
        Some("fail") => {
            data["tool"] = json!("event_ingest");
            data["tool_parameters"] = json!({"event_id": text, "event_type": "not-configured"});
        }
        Some("slow") => {
            data["tool"] = json!("event_status");
            data["tool_parameters"] = json!({"event_id": text});
        }
        _ => {}
    }
    line
}

/// Feeds `lines` to a fresh plugin, with a fresh KV container as [`THE_STORE`].
async fn run_plugin(lines: &[String]) -> Vec<Value> {
    let kv = ScratchKv::start();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .env("INSTALL_METHOD", "local")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        stdin.write_all(l.replace(THE_STORE, &kv.url()).as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is JSON"))
        .collect()
}

fn by_session(lines: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["event"] == "session") {
        m.entry(l["session_id"].as_str().unwrap().to_owned()).or_default().push(l["data"].clone());
    }
    m
}

fn check_envelope(line: &Value) {
    let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
    match line["event"].as_str() {
        Some("session") => {
            assert!(line["session_id"].is_string());
            let d = line["data"].as_object().unwrap();
            assert!(d.contains_key("type") && d.contains_key("data"), "session message needs type and data: {line}");
        }
        Some("heartbeat") => assert_eq!(line, &json!({"event": "heartbeat", "session_id": null, "data": {}})),
        Some("log") => assert!(line["data"]["timestamp"].is_number() && line["data"]["message"].is_string()),
        _ => panic!("unexpected output line {line} (keys {keys:?})"),
    }
}

async fn replay(transcript: &str, input: &str) {
    let expected = by_session(
        &read_jsonl(transcript)
            .into_iter()
            .filter(|r| r["dir"] == "plugin->daemon")
            .map(|r| r["line"].clone())
            .collect::<Vec<_>>(),
    );
    let lines: Vec<String> = read_jsonl(input).into_iter().map(|l| adapt(l).to_string()).collect();
    let out = run_plugin(&lines).await;
    out.iter().for_each(check_envelope);
    let got = by_session(&out);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{transcript}: every session answered"
    );
    for (sid, want) in &expected {
        let have = &got[sid];
        let kinds = |msgs: &[Value]| msgs.iter().map(|m| m["type"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        let (want_k, have_k) = (kinds(want), kinds(have));
        assert_eq!(have_k.last().map(String::as_str), Some("end"), "{transcript}/{sid}: ends with end");
        assert_eq!(have_k.iter().filter(|k| *k == "end").count(), 1, "{transcript}/{sid}: exactly one end");
        assert_eq!(
            want_k.contains(&"error".to_owned()),
            have_k.contains(&"error".to_owned()),
            "{transcript}/{sid}: {have:?}"
        );
        for m in have {
            match m["type"].as_str().unwrap() {
                "error" => {
                    let d = &m["data"];
                    assert!(d["error_type"].is_string() && d["message"].is_string(), "{d}");
                    assert!(d["args"].as_object().is_some_and(|a| a.len() <= 10), "{d}");
                }
                "stream" if m["data"].get("result").is_some() => assert_eq!(m["data"], json!({"result": true})),
                "stream" => {
                    let chunk = &m["data"];
                    let kind = chunk["type"].as_str().unwrap();
                    // Our tools answer with the `text` + `json` pair (§3.4 shapes).
                    assert!(["text", "json"].contains(&kind), "{transcript}/{sid}: chunk kind {kind}");
                    assert!(chunk["message"].is_object() && chunk.get("meta").is_some(), "{chunk}");
                }
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn vector_02_text_and_json() {
    replay("02-invoke-tool-text-json.jsonl", "02-invoke-tool-text-json.in.jsonl").await;
}
#[tokio::test]
async fn vector_03_tool_error() {
    replay("03-invoke-tool-error.jsonl", "03-invoke-tool-error.in.jsonl").await;
}
#[tokio::test]
async fn vector_04_validate_ok() {
    replay("04-validate-credentials-ok.jsonl", "04-validate-credentials-ok.in.jsonl").await;
}
#[tokio::test]
async fn vector_05_validate_fail() {
    replay("05-validate-credentials-fail.jsonl", "05-validate-credentials-fail.in.jsonl").await;
    let out = run_plugin(
        &read_jsonl("05-validate-credentials-fail.in.jsonl")
            .into_iter()
            .map(|l| adapt(l).to_string())
            .collect::<Vec<_>>(),
    )
    .await;
    let err = out.iter().find(|l| l["data"]["type"] == "error").unwrap();
    assert_eq!(err["data"]["data"]["error_type"], "ToolProviderCredentialValidationError");
}
#[tokio::test]
async fn vector_07_unknown_tool() {
    replay("07-invoke-tool-unknown-tool.jsonl", "07-invoke-tool-unknown-tool.in.jsonl").await;
}
#[tokio::test]
async fn vector_08_and_15_runtime_parameters_are_answered() {
    // The SDK answers only `end` (vector 08); we answer like the hand-written vector 15.
    let lines: Vec<String> = read_jsonl("08-get-tool-runtime-parameters-sdk-unrouted.in.jsonl")
        .into_iter()
        .map(|mut l| {
            l["data"]["provider"] = json!("stateful_tool");
            l["data"]["tool"] = json!("event_ingest");
            l.to_string()
        })
        .collect();
    let out = run_plugin(&lines).await;
    let msgs = &by_session(&out)["3f6c2a52-8d0e-4a55-9a3e-1c1f5f0e9a07"];
    assert_eq!(msgs.len(), 2);
    assert!(msgs[0]["data"]["parameters"].is_array(), "{:?}", msgs[0]);
    assert_eq!(msgs[1], json!({"type": "end", "data": {}}));
}
#[tokio::test]
async fn vector_09_concurrent_sessions() {
    replay("09-concurrent-sessions.jsonl", "09-concurrent-sessions.in.jsonl").await;
}
#[tokio::test]
async fn vector_14_native_binary_sessions() {
    replay("14-native-binary-via-shim.jsonl", "14-native-binary-via-shim.in.jsonl").await;
}
#[tokio::test]
async fn vector_11_malformed_input() {
    let raw: Vec<String> = read_jsonl("11-malformed-input.jsonl")
        .into_iter()
        .filter(|r| r["dir"] == "daemon->plugin")
        .map(|r| r["raw"].as_str().unwrap().to_owned())
        .collect();
    let out = run_plugin(&raw).await;
    out.iter().for_each(check_envelope);
    // Unlike the SDK (top-level `error` events that leave the session hanging), the
    // identifiable session is answered and closed; the anonymous line is only logged.
    assert_eq!(
        by_session(&out)["s-missing-data"].iter().map(|m| m["type"].as_str().unwrap()).collect::<Vec<_>>(),
        ["error", "end"]
    );
    assert!(out.iter().all(|l| l["event"] != "error"));
}
