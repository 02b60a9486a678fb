//! Replays the daemon lines captured from a real Dify 1.13 + daemon 0.6
//! (`tests/fixtures/trigger/`, copied from the spec's examples; their README says how they
//! were made) into the real binary: every request shape is accepted, every reply has the
//! captured shape, and none is a reply the captured mutation matrix shows Dify rejecting or
//! silently dropping.

use std::path::Path;

use serde_json::{json, Value};

use crate::support::kv::KvServer;
use crate::support::plugin::{Plugin, Reply};
use crate::trigger_door::{chunk, http, ENV};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/trigger");

fn lines(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(DIR).join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The first stream chunk the captured plugin (the Python SDK) sent in session `sid`.
fn captured_chunk(file: &str, sid: &str) -> Option<Value> {
    lines(file)
        .into_iter()
        .find(|l| l["session_id"] == sid && l["data"]["type"] == "stream")
        .map(|l| l["data"]["data"].clone())
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    k.sort();
    k
}

/// A reply shape the mutation matrix (20-mutations-matrix.jsonl) shows Dify rejecting (the
/// sender gets 400, no run) or dropping (no run, no log), checked on one of our replies.
struct Rule {
    mode: &'static str,
    broken: fn(action: &str, reply: &Reply) -> bool,
}

const RULES: [Rule; 8] = [
    Rule {
        mode: "d-events-null",
        broken: |a, r| a == "dispatch_trigger_event" && r.chunks.first().is_some_and(|c| c["events"].is_null()),
    },
    Rule {
        mode: "d-events-undeclared",
        broken: |a, r| {
            a == "dispatch_trigger_event"
                && r.chunks
                    .iter()
                    .any(|c| c["events"].as_array().is_some_and(|e| e.iter().any(|n| n != "webhook_received")))
        },
    },
    Rule {
        mode: "d-response-empty",
        broken: |a, r| {
            a == "dispatch_trigger_event" && r.chunks.iter().any(|c| c["response"].as_str().is_none_or(str::is_empty))
        },
    },
    Rule { mode: "d-no-stream", broken: |a, r| a == "dispatch_trigger_event" && r.chunks.is_empty() },
    Rule { mode: "d-error", broken: |a, r| a == "dispatch_trigger_event" && r.error.is_some() },
    Rule {
        mode: "i-variables-null",
        broken: |a, r| a == "invoke_trigger_event" && r.chunks.iter().any(|c| !c["variables"].is_object()),
    },
    Rule { mode: "i-no-stream", broken: |a, r| a == "invoke_trigger_event" && r.chunks.is_empty() },
    // A 503 with events still starts the run: a failure must never name an event.
    Rule {
        mode: "d-response-503",
        broken: |a, r| {
            a == "dispatch_trigger_event" && r.chunks.iter().any(|c| http(c).0 >= 300 && c["events"] != json!([]))
        },
    },
];

#[test]
fn the_matrix_shows_each_rule_is_a_real_failure() {
    let matrix = lines("20-mutations-matrix.jsonl");
    for rule in RULES {
        let row =
            matrix.iter().find(|r| r["mode"] == rule.mode).unwrap_or_else(|| panic!("{} not in the matrix", rule.mode));
        let runs = row["workflow_runs"].as_array().map_or(0, Vec::len);
        let what = (row["sender_http_status"].as_u64(), runs);
        match rule.mode {
            // The run started although the sender was told to retry: a duplicate run later.
            "d-response-503" => assert_eq!(what, (Some(503), 1), "{}", rule.mode),
            m if m.starts_with("d-") => assert_eq!(what, (Some(400), 0), "{m}: Dify rejected it"),
            m => assert_eq!(runs, 0, "{m}: Dify dropped the run"),
        }
    }
}

/// One captured request, as our provider receives it: our provider name, and for a built
/// subscription our properties (the store, the id in the JSON body's `/id`).
fn ours(mut data: Value, kv_url: &str) -> Value {
    data["provider"] = json!("stateful_trigger");
    let built = data["subscription"]["endpoint"].as_str().is_some_and(|e| e.contains('/'));
    if built {
        data["subscription"]["properties"] =
            json!({"kv_url": kv_url, "signature_scheme": "none", "id_json_pointer": "/id"});
    }
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_captured_request_gets_a_reply_of_the_captured_shape() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let p = Plugin::spawn(&ENV).await;
    let scenarios = [
        "01-builder-validation-dispatch",
        "02-delivery1",
        "03-delivery2-duplicate",
        "04-dispatch-error-bad-api-key",
        "05-dispatch-error-non-json-body",
        "06-dispatch-error-empty-object",
        "07-chunked-with-query",
        "08-utf8-body",
        "09-form-urlencoded",
        "10-debug-listen",
        "30-ctor-validate-rejected",
        "31-ctor-validate-ok",
        "32-ctor-subscribe",
        "33-ctor-refresh",
        "34-ctor-dispatch-api-key-subscription",
        "35-ctor-unsubscribe",
    ];
    let mut outcomes = Vec::new();
    for name in scenarios {
        for line in lines(&format!("{name}.d2p.jsonl")) {
            let (sid, action) =
                (line["session_id"].as_str().unwrap(), line["data"]["action"].as_str().unwrap().to_owned());
            let reply = p.request(ours(line["data"].clone(), &kv.url())).await;
            for rule in &RULES {
                assert!(
                    !(rule.broken)(&action, &reply),
                    "{name} {action}: a reply like mutation {}: {reply:?}",
                    rule.mode
                );
            }
            let captured = captured_chunk(&format!("{name}.p2d.jsonl"), sid);
            match action.as_str() {
                "dispatch_trigger_event" => {
                    let c = chunk(&reply);
                    // The SDK's reply had these keys too (where it answered a chunk at all).
                    if let Some(cap) = &captured {
                        assert_eq!(keys(c), keys(cap), "{name}");
                    }
                    outcomes.push((name, http(c).2["outcome"].as_str().unwrap().to_owned(), c["events"].clone()));
                }
                "invoke_trigger_event" => {
                    assert!(reply.error.is_none(), "{name}: {reply:?}");
                    let c = &reply.chunks[0];
                    // (The SDK failed some invokes, e.g. 09's form body: we answer those too.)
                    if let Some(cap) = &captured {
                        assert_eq!(keys(c), keys(cap), "{name}");
                    }
                    assert_eq!(c["cancelled"], false);
                    let vars = c["variables"].as_object().unwrap();
                    assert_eq!(vars.len(), 11, "{name}: every declared variable: {c}");
                }
                "validate_trigger_credentials" => assert_eq!(reply.chunks, vec![json!({"result": true})], "{name}"),
                // Manual subscriptions never call these; the answer says so.
                _ => assert!(reply.message().contains("manual subscriptions"), "{name} {action}: {reply:?}"),
            }
        }
    }
    let got = |n: &str| outcomes.iter().filter(|o| o.0 == n).map(|o| (o.1.as_str(), o.2.clone())).collect::<Vec<_>>();
    let started = json!(["webhook_received"]);
    assert_eq!(got("01-builder-validation-dispatch"), [("builder", json!([]))]);
    assert_eq!(got("02-delivery1"), [("accepted", started.clone())]);
    // Dify started a second run for this identical redelivery; at our door it starts nothing.
    assert_eq!(got("03-delivery2-duplicate"), [("in_progress", json!([]))]);
    assert_eq!(got("07-chunked-with-query"), [("accepted", started.clone())], "stale Transfer-Encoding, merged header");
    assert_eq!(got("08-utf8-body"), [("accepted", started)]);
    assert_eq!(got("09-form-urlencoded"), [("no_id", json!([]))], "a form body has no JSON /id");
}
