//! `event_status`: read-only look-up of an event's record; never claims or writes.

use serde_json::{json, Map, Value};

use super::{decode, params, Answer, Settings};
use crate::error::ToolError;
use crate::store::key::{storage_key, validate_event_id};
use crate::store::EventStore;

pub async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Map<String, Value>) -> Result<Answer, ToolError> {
    let event_id = params::required_str(p, "event_id")?;
    validate_event_id(&event_id)?;
    let key = storage_key(settings.namespace.as_deref(), &event_id);
    Ok(match store.read(&key).await? {
        // "Have we seen it?" is this tool's question, so "no" is an answer, not an error.
        None => Answer::new("not_found")
            .field("found", json!(false))
            .field("event_id", json!(event_id))
            .field("key", json!(key)),
        Some(cur) => {
            let rec = decode(&cur.value, &key)?;
            let (payload, lease_expired) = (json!(rec.payload), rec.lease_expired(cur.store_now_ms));
            Answer::new("found")
                .field("found", json!(true))
                .record(rec, &key)
                .field("payload", payload)
                .field("lease_expired", json!(lease_expired))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{params, settings, store};
    use super::*;

    #[tokio::test]
    async fn unknown_then_found_and_never_writes() {
        let (s, st) = (store(), settings());
        let p = params(json!({"event_id": "S1"}));
        let v = run(&s, &st, &p).await.unwrap().to_value();
        assert_eq!(v["outcome"], "not_found");
        assert_eq!(v["found"], false);
        assert!(s.is_empty(), "status must not claim");
        super::super::event_ingest::run(
            &s,
            &st,
            &params(json!({"event_id": "S1", "event_type": "closed", "payload": "hi"})),
        )
        .await
        .unwrap();
        let v = run(&s, &st, &p).await.unwrap().to_value();
        assert_eq!(v["outcome"], "found");
        assert_eq!(v["status"], "processing");
        assert_eq!(v["payload"], "hi");
        assert_eq!(v["attempt"], 1);
    }
}
