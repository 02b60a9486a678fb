//! The trigger at the door, through the real binary over stdio on both backends: one event
//! per delivery id, one winner among concurrent processes, 503 when the store is down, and a
//! failed run's redelivery claimed again as attempt 2 (the tool's `event_complete` finishing
//! what the trigger claimed: one record format, one key scheme).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::fake::closed_port;
use crate::support::kv::KvServer;
use crate::support::plugin::{Plugin, Reply};
use crate::support::redis::RedisServer;

/// Door claims get the same generous deadline as the tools' store calls in tests: a loaded
/// machine must not turn an outcome test into a timeout test.
pub(crate) const ENV: [(&str, &str); 1] = [("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS", "30000")];

/// A webhook as Dify serialises it (WSGI-capitalised names, no Content-Length), in hex.
pub(crate) fn raw_request(headers: &[(&str, &str)], body: &str) -> String {
    let mut text =
        String::from("POST /triggers/plugin/0c1e2f3a-0000-4000-8000-000000000001 HTTP/1.1\r\nHost: dify\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    hex::encode(text)
}

/// A built (manual) subscription with these properties.
pub(crate) fn subscription(props: Value) -> Value {
    json!({"endpoint": "https://dify.example/triggers/plugin/0c1e2f3a-0000-4000-8000-000000000001",
           "expires_at": -1, "parameters": {}, "properties": props})
}

/// `dispatch_trigger_event` data for a built (manual) subscription with these properties.
pub(crate) fn dispatch_data(props: Value, raw_hex: &str) -> Value {
    json!({
        "action": "dispatch_trigger_event", "credential_type": "unauthorized", "credentials": {},
        "provider": "stateful_trigger", "raw_http_request": raw_hex, "subscription": subscription(props),
        "type": "trigger", "user_id": ""
    })
}

/// `invoke_trigger_event` data, as Dify's Celery task sends it for one subscribed workflow:
/// the payload dispatch returned, and the same subscription.
pub(crate) fn invoke_data(props: Value, payload: &Value) -> Value {
    json!({
        "action": "invoke_trigger_event", "credential_type": "unauthorized", "credentials": {},
        "event": "webhook_received", "parameters": {}, "payload": payload, "provider": "stateful_trigger",
        "raw_http_request": "", "subscription": subscription(props), "type": "trigger", "user_id": ""
    })
}

/// The one chunk of a dispatch answer: never a session error, always an `events` list.
pub(crate) fn chunk(reply: &Reply) -> &Value {
    assert!(reply.error.is_none(), "dispatch must never end in a session error: {reply:?}");
    assert_eq!(reply.chunks.len(), 1, "{reply:?}");
    let c = &reply.chunks[0];
    assert!(c["events"].is_array(), "events must be a list: {c}");
    assert!(c["payload"].is_object() && c["user_id"].is_string(), "{c}");
    c
}

/// The sender's HTTP status and the answer's JSON body, decoded from the `response` hex.
pub(crate) fn http(chunk: &Value) -> (u16, Vec<(String, String)>, Value) {
    let bytes = hex::decode(chunk["response"].as_str().unwrap()).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines.filter_map(|l| l.split_once(": ")).map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
    (status, headers, serde_json::from_str(body).unwrap())
}

fn started(c: &Value) -> bool {
    c["events"] == json!(["webhook_received"])
}

async fn deliver(p: &Plugin, props: &Value, id: &str) -> Value {
    let raw = raw_request(&[("X-Github-Delivery", id), ("X-Github-Event", "push")], r#"{"ref":"refs/heads/main"}"#);
    chunk(&p.request(dispatch_data(props.clone(), &raw)).await).clone()
}

/// The whole life of one delivery on the store at `url`.
async fn lifecycle(url: &str) {
    let p = Plugin::spawn(&ENV).await;
    let props = json!({"kv_url": url, "signature_scheme": "none", "event_type_header": "X-GitHub-Event", "lease_seconds": "600"});
    let id = format!("dlv-{:x}", rand::random::<u64>());
    let first = deliver(&p, &props, &id).await;
    assert!(started(&first), "{first}");
    assert_eq!(http(&first).0, 200);
    assert_eq!((&first["payload"]["delivery_id"], &first["payload"]["attempt"]), (&json!(id), &json!(1)));
    let second = deliver(&p, &props, &id).await;
    assert_eq!(second["events"], json!([]));
    let (status, _, body) = http(&second);
    assert_eq!((status, body["outcome"].as_str()), (200, Some("in_progress")));

    // Before a run takes it, the tool sees a claim at the door that no run started.
    let creds = json!({"kv_url": url});
    let st = p.invoke("event_status", &creds, json!({"event_id": id})).await;
    assert_eq!((st.json()["status"].as_str(), st.json()["event_type"].as_str()), (Some("processing"), Some("push")));
    assert_eq!((&st.json()["waiting_for_run"], &st.json()["started_at"]), (&json!(true), &Value::Null), "{st:?}");
    assert!(st.text().contains("no workflow run has started it yet"), "{st:?}");

    // invoke: the run takes the claim; all the declared variables, from dispatch's payload.
    let inv = p.request(invoke_data(props.clone(), &first["payload"])).await;
    assert_eq!(inv.chunks[0]["cancelled"], false, "{inv:?}");
    let vars = &inv.chunks[0]["variables"];
    assert_eq!((&vars["delivery_id"], &vars["event_type"], &vars["attempt"]), (&json!(id), &json!("push"), &json!(1)));
    assert_eq!(vars["body_json"], json!({"ref": "refs/heads/main"}));
    let st = p.invoke("event_status", &creds, json!({"event_id": id})).await;
    assert_eq!(st.json()["waiting_for_run"], false, "{st:?}");
    assert!(st.json()["started_at"].is_string(), "{st:?}");
    assert_eq!(vars["lease_until"], st.json()["lease_until"], "the run's variables carry the run's lease");

    // The tool finishes the door's record; the next delivery takes it over.
    let failed = p.invoke("event_complete", &creds, json!({"event_id": id, "attempt": 1, "status": "failed"})).await;
    assert!(failed.error.is_none(), "{failed:?}");
    let third = deliver(&p, &props, &id).await;
    assert!(started(&third), "a failed run's redelivery is claimed again: {third}");
    assert_eq!(third["payload"]["attempt"], 2);
    let done = p.invoke("event_complete", &creds, json!({"event_id": id, "attempt": 2})).await;
    assert!(done.error.is_none(), "{done:?}");
    let fourth = deliver(&p, &props, &id).await;
    assert_eq!((fourth["events"].clone(), http(&fourth).2["outcome"].clone()), (json!([]), json!("duplicate")));
}

/// `processes` plugins × `per_process` concurrent dispatches of one id: exactly one event.
async fn race(url: &str, processes: usize, per_process: usize) {
    let mut plugins = vec![];
    for _ in 0..processes {
        plugins.push(Arc::new(Plugin::spawn(&ENV).await));
    }
    let props = json!({"kv_url": url, "signature_scheme": "none"});
    let id = format!("race-{:x}", rand::random::<u64>());
    let mut tasks = vec![];
    for p in &plugins {
        for _ in 0..per_process {
            let (p, props, id) = (p.clone(), props.clone(), id.clone());
            tasks.push(tokio::spawn(async move { deliver(&p, &props, &id).await }));
        }
    }
    let mut events = 0;
    for t in tasks {
        let c = t.await.unwrap();
        let (status, _, body) = http(&c);
        if started(&c) {
            events += 1;
        } else {
            assert_eq!((status, body["outcome"].as_str()), (200, Some("in_progress")), "{body}");
        }
    }
    assert_eq!(events, 1, "exactly one of {} concurrent deliveries starts a workflow", processes * per_process);
}

async fn store_down(url: &str) {
    let p = Plugin::spawn(&[]).await;
    let c = deliver(&p, &json!({"kv_url": url, "signature_scheme": "none"}), "down-1").await;
    assert_eq!(c["events"], json!([]), "a failure never starts a run");
    let (status, headers, body) = http(&c);
    assert_eq!((status, body["outcome"].as_str()), (503, Some("store_unavailable")), "{body}");
    assert!(headers.iter().any(|(n, v)| n == "Retry-After" && v.parse::<u32>().is_ok()), "{headers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_container() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    lifecycle(&kv.url()).await;
    race(&kv.url(), 3, 17).await;
    store_down(&format!("http://127.0.0.1:{}", closed_port())).await;
    // The container counts the door's claims like the tool's (they are the same writes):
    // lifecycle 1 accepted, 1 reclaimed, 2 duplicates; the race 1 accepted, 50 duplicates.
    let text = reqwest::get(format!("{}/metrics", kv.url())).await.unwrap().text().await.unwrap();
    let count = |o: &str| {
        let prefix = format!("kv_claims_total{{outcome=\"{o}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.trim().parse::<u64>().ok())
    };
    let counts = ["accepted", "reclaimed", "duplicate"].map(count);
    assert_eq!(counts, [Some(2), Some(1), Some(52)], "kv_claims_total by outcome");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis() {
    let r = RedisServer::start(&[]);
    lifecycle(&r.url()).await;
    race(&r.url(), 3, 17).await;
    assert_eq!(r.keys("evt*").len(), 2, "one record per delivery id, nothing else");
    store_down(&format!("redis://127.0.0.1:{}/0", closed_port())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn builder_pings_are_answered_without_a_claim() {
    let p = Plugin::spawn(&ENV).await;
    // Subscription creation: the endpoint is the bare id, the properties are empty, and the
    // default store is not running: a claim would have answered 503.
    let mut data = dispatch_data(json!({}), &raw_request(&[("X-Github-Delivery", "ping-1")], "{}"));
    data["subscription"] = json!({"endpoint": "0c1e2f3a-0000-4000-8000-000000000001", "expires_at": -1, "parameters": {}, "properties": {}});
    let c = chunk(&p.request(data).await).clone();
    assert_eq!((c["events"].clone(), http(&c).0, http(&c).2["outcome"].clone()), (json!([]), 200, json!("builder")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_line_too_long_to_hold_is_refused_with_413_not_an_error() {
    let p = Plugin::spawn(&ENV).await;
    // 5 MiB of body is a 10+ MiB line once Dify hex-encodes it (capture 21 saw 10.8 MB).
    let body = "x".repeat(5 * 1024 * 1024);
    let raw = raw_request(&[("X-Github-Delivery", "huge")], &body);
    let sid = "huge-line";
    let rx = p.open(sid);
    let line = crate::support::plugin::request_line(sid, &dispatch_data(json!({"kv_url": "http://127.0.0.1:1"}), &raw));
    assert!(line.len() > 10 * 1024 * 1024);
    p.write_raw(line.as_bytes()).await;
    let reply = Plugin::collect(rx).await;
    let c = chunk(&reply);
    assert_eq!((c["events"].clone(), http(c).0), (json!([]), 413));
    // The plugin keeps serving.
    let props = json!({"kv_url": "http://127.0.0.1:1", "signature_scheme": "none"});
    let after = chunk(&p.request(dispatch_data(props, &raw_request(&[], "{}"))).await).clone();
    assert_eq!(http(&after).0, 400, "no id in the next delivery: {after}");
}
