//! `event_status`: read-only look-up of an event's record; never claims or writes.

use serde_json::json;

use super::{decode, params, Answer, Deadline, Params, Settings};
use crate::error::ToolError;
use event_store::key::{storage_key, validate_event_id};
use event_store::record::{parse_time, Record, Status};
use event_store::EventStore;

pub(crate) async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Params<'_>) -> Result<Answer, ToolError> {
    let event_id = params::required_str(p, "event_id")?;
    validate_event_id(&event_id)?;
    let key = storage_key(settings.namespace.as_deref(), &event_id);
    let deadline = Deadline::start(store.clock().host(), settings.call_timeout, settings.call_timeout_setting);
    let found =
        store.read(&key, deadline.rest().map_err(|e| deadline.error(e))?).await.map_err(|e| deadline.error(e))?;
    Ok(match found {
        // "Have we seen it?" is this tool's question, so "no" is an answer, not an error.
        None => Answer::new("not_found")
            .field("found", json!(false))
            .field("event_id", json!(event_id))
            .field("key", json!(key)),
        Some(cur) => {
            let rec = decode(&cur.value, &key)?;
            let (payload, lease_expired) = (json!(rec.payload), rec.lease_expired(cur.store_now_ms));
            let stuck = is_stuck(&rec, cur.store_now_ms, settings.stuck_after());
            let waiting = rec.waiting_for_run();
            let started_at = json!(rec.door.as_ref().and_then(|d| d.started_at.clone()));
            Answer::new("found")
                .field("found", json!(true))
                .record(rec, &key)
                .field("payload", payload)
                .field("lease_expired", json!(lease_expired))
                .field("stuck", json!(stuck))
                .field("waiting_for_run", json!(waiting))
                .field("started_at", started_at)
        }
    })
}

/// A `processing` record without a lease whose last change is older than `after`: its run
/// may have crashed, and no redelivery will take it over by itself.
fn is_stuck(rec: &Record, store_now_ms: i64, after: std::time::Duration) -> bool {
    rec.status == Status::Processing
        && rec.lease_until_ms.is_none()
        && parse_time(&rec.updated_at).is_some_and(|t| store_now_ms - t >= after.as_millis() as i64)
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

    #[test]
    fn stuck_means_processing_without_a_lease_for_too_long() {
        let ten_min = std::time::Duration::from_secs(600);
        let at = |status, lease_until_ms| Record {
            v: 1,
            event_id: "E".into(),
            event_type: "created".into(),
            payload: None,
            fingerprint: String::new(),
            status,
            received_at: event_store::record::format_time(0),
            updated_at: event_store::record::format_time(0),
            attempt: 1,
            lease_until_ms,
            completed_at: None,
            result: None,
            claim_id: String::new(),
            run_id: None,
            door: None,
        };
        assert!(is_stuck(&at(Status::Processing, None), 600_000, ten_min));
        assert!(!is_stuck(&at(Status::Processing, None), 599_999, ten_min));
        assert!(!is_stuck(&at(Status::Processing, Some(1)), 600_000, ten_min), "a lease ends by itself");
        assert!(!is_stuck(&at(Status::Completed, None), 600_000, ten_min));
    }
}
