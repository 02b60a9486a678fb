//! Behaviour every backend must show, driven through the real binary over pipes.

use std::sync::Arc;

use serde_json::json;

use super::plugin::{creds, Plugin};

pub(crate) async fn outcomes(url: &str) {
    let p = Plugin::spawn(&[]).await;
    let c = creds(url);
    let id = format!("EVT-{:x}", rand::random::<u64>());
    let first = p
        .invoke(
            "event_ingest",
            &c,
            json!({"event_id": id, "event_type": "created", "payload": "{\"a\":1,\"b\":[1,2]}"}),
        )
        .await;
    assert_eq!(first.outcome(), "accepted", "{first:?}");
    assert_eq!(first.json()["attempt"], 1);
    assert_eq!(first.chunks[0]["type"], "text");
    let text = first.chunks[0]["message"]["text"].as_str().unwrap();
    assert_eq!(
        text,
        format!("Event {id} is new (attempt 1): process it now, then call event_complete with attempt 1.")
    );
    // Same content, other key order and spacing: a duplicate, with the original time.
    let dup = p
        .invoke(
            "event_ingest",
            &c,
            json!({"event_id": id, "event_type": "created", "payload": "{ \"b\": [1, 2], \"a\": 1 }"}),
        )
        .await;
    assert_eq!(dup.outcome(), "duplicate");
    assert_eq!(dup.json()["received_at"], first.json()["received_at"]);
    assert_eq!(dup.json()["status"], "processing");
    // Different content under a known id: conflict naming both fingerprints (their first 12 hex
    // characters in the message, in full in its args); nothing overwritten.
    let conflict =
        p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "created", "payload": "{\"a\":2}"})).await;
    assert_eq!(conflict.error_type(), Some("conflict"));
    let stored = first.json()["fingerprint"].as_str().unwrap();
    assert!(conflict.message().contains(&stored[.."sha256:".len() + 12]), "{}", conflict.message());
    assert_eq!(conflict.error.as_ref().unwrap()["args"]["stored_fingerprint"], stored, "{conflict:?}");
    let status = p.invoke("event_status", &c, json!({"event_id": id})).await;
    assert_eq!(status.outcome(), "found");
    assert_eq!(status.json()["payload"], "{\"a\":1,\"b\":[1,2]}");
    assert_eq!(status.json()["fingerprint"], first.json()["fingerprint"]);
    let unknown = p.invoke("event_status", &c, json!({"event_id": format!("{id}-never")})).await;
    assert_eq!((unknown.outcome().as_str(), unknown.json()["found"].as_bool()), ("not_found", Some(false)));
    // event_status never claims: the unknown id is still new.
    let later = p.invoke("event_ingest", &c, json!({"event_id": format!("{id}-never"), "event_type": "closed"})).await;
    assert_eq!(later.outcome(), "accepted");
    let bad = p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "exploded"})).await;
    assert_eq!(bad.error_type(), Some("param_invalid"));
    assert!(bad.message().contains("created, updated, closed"), "{}", bad.message());
    let done = p.invoke("event_complete", &c, json!({"event_id": id, "attempt": 1, "result": "sent"})).await;
    assert_eq!(done.outcome(), "completed");
    let gone = p.invoke("event_complete", &c, json!({"event_id": format!("{id}-nope")})).await;
    assert_eq!(gone.error_type(), Some("not_found"));
    let ok = p.validate(&c).await;
    assert_eq!(ok.chunks, vec![json!({"result": true})], "{ok:?}");
}

/// Many concurrent sessions with one id, in several plugin processes: exactly one accepted.
/// The store timeout bounds a whole call, and a thousand claims at once on a busy 2-core
/// machine take seconds: this is about one winner, not latency, so the deadline is generous.
pub(crate) async fn race(url: &str, processes: usize, rounds: usize, per_process: usize) {
    let mut plugins = vec![];
    for _ in 0..processes {
        plugins.push(Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "30000")]).await));
    }
    let c = creds(url);
    for round in 0..rounds {
        let id = format!("race-{round}-{:x}", rand::random::<u64>());
        let mut tasks = vec![];
        for p in &plugins {
            for _ in 0..per_process {
                let (p, c, id) = (p.clone(), c.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "updated", "payload": "same"}))
                        .await
                }));
            }
        }
        let mut accepted = 0;
        for t in tasks {
            let r = t.await.unwrap();
            match r.outcome().as_str() {
                "accepted" => accepted += 1,
                "duplicate" => {}
                other => panic!("round {round}: unexpected {other}: {r:?}"),
            }
        }
        assert_eq!(accepted, 1, "round {round}: exactly one delivery may win");
        let st = plugins[0].invoke("event_status", &c, json!({"event_id": id})).await;
        assert_eq!((st.json()["status"].as_str(), st.json()["attempt"].as_u64()), (Some("processing"), Some(1)));
    }
}

/// Ids that naive escaping would merge or that would break a path each get their own key.
pub(crate) async fn key_safety(url: &str) -> Vec<String> {
    let p = Plugin::spawn(&[]).await;
    let c = creds(url);
    let salt = format!("{:x}", rand::random::<u32>());
    let ids = [
        format!("{salt}:a"),
        format!("{salt}/a"),
        format!("{salt}%2Fa"),
        format!("{salt}_a"),
        format!("../{salt}"),
        format!("{salt}.."),
        format!("{salt} a"),
        format!("{salt}🎉"),
        format!("{salt}~a"),
        format!("{}{salt}", "x".repeat(255 - salt.len())),
    ];
    let mut keys = vec![];
    for id in &ids {
        let r = p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "created"})).await;
        assert_eq!(r.outcome(), "accepted", "{id:?} must be a new event: {r:?}");
        let k = r.json()["key"].as_str().unwrap().to_owned();
        assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b)), "{k}");
        keys.push(k);
    }
    let nul = p.invoke("event_ingest", &c, json!({"event_id": format!("{salt}\u{0}"), "event_type": "created"})).await;
    assert_eq!(nul.error_type(), Some("param_invalid"));
    let too_long = p.invoke("event_ingest", &c, json!({"event_id": "y".repeat(256), "event_type": "created"})).await;
    assert_eq!(too_long.error_type(), Some("param_invalid"));
    keys
}
