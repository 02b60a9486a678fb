//! `event_status`: read-only look-up of an event's record; never claims or writes.

use serde_json::{json, Map, Value};

use super::{decode, params, record_fields, Settings};
use crate::error::ToolError;
use crate::store::key::{storage_key, validate_event_id};
use crate::store::EventStore;

pub async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Map<String, Value>) -> Result<Value, ToolError> {
    let event_id = params::required_str(p, "event_id")?;
    validate_event_id(&event_id)?;
    let key = storage_key(settings.namespace.as_deref(), &event_id);
    let mut m = Map::new();
    match store.read(&key).await? {
        // "Have we seen it?" is this tool's question, so "no" is an answer, not an error.
        None => {
            m.insert("outcome".into(), json!("not_found"));
            m.insert("found".into(), json!(false));
            m.insert("event_id".into(), json!(event_id));
            m.insert("key".into(), json!(key));
        }
        Some(cur) => {
            let rec = decode(&cur.value, &key)?;
            m.insert("outcome".into(), json!("found"));
            m.insert("found".into(), json!(true));
            m.extend(record_fields(&rec, &key));
            m.insert("payload".into(), json!(rec.payload));
            m.insert("lease_expired".into(), json!(rec.lease_expired(cur.store_now_ms)));
        }
    }
    Ok(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{params, settings, store};
    use super::*;

    #[tokio::test]
    async fn unknown_then_found_and_never_writes() {
        let (s, st) = (store(), settings());
        let p = params(json!({"event_id": "S1"}));
        let v = run(&s, &st, &p).await.unwrap();
        assert_eq!(v["outcome"], "not_found");
        assert_eq!(v["found"], false);
        assert!(s.is_empty(), "status must not claim");
        super::super::ingest::run(&s, &st, &params(json!({"event_id": "S1", "event_type": "closed", "payload": "hi"})))
            .await
            .unwrap();
        let v = run(&s, &st, &p).await.unwrap();
        assert_eq!(v["outcome"], "found");
        assert_eq!(v["status"], "processing");
        assert_eq!(v["payload"], "hi");
        assert_eq!(v["attempt"], 1);
    }
}
