//! `event_ingest`: claim an event id in ONE atomic store operation, or report what the
//! store already holds (duplicate / conflict / re-claim of a failed or abandoned run).

use serde_json::{json, Map, Value};

use super::{decode, params, swap_or_read_back, Answer, Settings, MAX_ROUNDS};
use crate::error::ToolError;
use crate::store::key::{storage_key, validate_event_id};
use crate::store::record::{fingerprint, format_time, new_claim_id, Record, Status};
use crate::store::{Created, Current, EventStore, Swapped};

pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
pub const MAX_LEASE_SECONDS: i64 = 86_400;

/// A validated ingest call; nothing touches the store before this exists.
pub struct IngestRequest {
    pub event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub fingerprint: String,
    pub lease_ms: Option<i64>,
}

impl IngestRequest {
    pub fn parse(p: &Map<String, Value>, settings: &Settings) -> Result<IngestRequest, ToolError> {
        let event_id = params::required_str(p, "event_id")?;
        validate_event_id(&event_id)?;
        let event_type = params::required_str(p, "event_type")?;
        if !settings.event_types.contains(&event_type) {
            return Err(ToolError::param(format!(
                "event_type {event_type:?} is not one of the configured types: {}",
                settings.event_types.join(", ")
            )));
        }
        let payload = params::optional_payload(p, "payload")?;
        if let Some(body) = &payload {
            if body.len() > MAX_PAYLOAD_BYTES {
                return Err(ToolError::param(format!(
                    "payload is {} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB)",
                    body.len()
                )));
            }
        }
        let lease = params::optional_int(p, "lease_seconds", 0, MAX_LEASE_SECONDS)?;
        let fingerprint = fingerprint(&event_type, payload.as_deref());
        Ok(IngestRequest {
            event_id,
            event_type,
            payload,
            fingerprint,
            lease_ms: lease.filter(|&s| s > 0).map(|s| s * 1000),
        })
    }
}

pub async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Map<String, Value>) -> Result<Answer, ToolError> {
    let req = IngestRequest::parse(p, settings)?;
    let key = storage_key(settings.namespace.as_deref(), &req.event_id);
    if req.lease_ms.is_some() && !store.clock().is_synced() {
        // Lease deadlines are stamped in the store's clock: learn it once per store.
        store.read(&key).await?;
    }
    let now = store.clock().now_ms();
    let fresh = Record {
        v: 1,
        event_id: req.event_id.clone(),
        event_type: req.event_type.clone(),
        payload: req.payload.clone(),
        fingerprint: req.fingerprint.clone(),
        status: Status::Processing,
        received_at: format_time(now),
        updated_at: format_time(now),
        attempt: 1,
        lease_until_ms: req.lease_ms.map(|l| now + l),
        completed_at: None,
        result: None,
        claim_id: new_claim_id(),
    };
    let bytes = fresh.to_bytes();
    for _ in 0..MAX_ROUNDS {
        let existing = match store.create(&key, &bytes, settings.retention).await {
            Ok(Created::Created) => return Ok(answer("accepted", fresh, &key, false)),
            Ok(Created::Exists(cur)) => cur,
            // The write may have landed although its answer was lost: read it back.
            Err(e) if e.is_ambiguous() => match store.read(&key).await? {
                Some(cur) if decode(&cur.value, &key)?.claim_id == fresh.claim_id => {
                    return Ok(answer("accepted", fresh, &key, false));
                }
                Some(cur) => cur,
                None => continue,
            },
            Err(e) => return Err(e.into()),
        };
        if let Some(done) = settle(store, settings, &req, &key, existing).await? {
            return Ok(done);
        }
        // The record expired or was deleted between our steps: claim it afresh.
    }
    Err(ToolError::upstream(format!("the record under {key} kept changing; try again")))
}

/// Decides against an existing record; re-claims it when its run failed or its lease
/// expired (by the store's clock). `None` = the key vanished, claim from scratch.
async fn settle<S: EventStore>(
    store: &S,
    settings: &Settings,
    req: &IngestRequest,
    key: &str,
    mut cur: Current,
) -> Result<Option<Answer>, ToolError> {
    for _ in 0..MAX_ROUNDS {
        let rec = decode(&cur.value, key)?;
        if rec.fingerprint != req.fingerprint {
            return Err(ToolError::conflict(format!(
                "event_id {:?} was already received with different content (stored {}, this delivery {}); nothing was overwritten",
                rec.event_id, rec.fingerprint, req.fingerprint
            ))
            .with_details(json!({
                "event_id": rec.event_id, "stored_fingerprint": rec.fingerprint,
                "new_fingerprint": req.fingerprint, "status": rec.status.as_str(), "received_at": rec.received_at,
            })));
        }
        let reclaim =
            rec.status == Status::Failed || (rec.status == Status::Processing && rec.lease_expired(cur.store_now_ms));
        if !reclaim {
            return Ok(Some(answer("duplicate", rec, key, false)));
        }
        let next = Record {
            status: Status::Processing,
            attempt: rec.attempt + 1,
            updated_at: format_time(cur.store_now_ms),
            lease_until_ms: req.lease_ms.map(|l| cur.store_now_ms + l),
            completed_at: None,
            result: None,
            claim_id: new_claim_id(),
            ..rec
        };
        let swapped = swap_or_read_back(store, key, &cur.version, &next, settings.retention).await?;
        match swapped {
            Swapped::Swapped => return Ok(Some(answer("accepted", next, key, true))),
            Swapped::Changed(Some(newer)) => cur = newer,
            Swapped::Changed(None) => return Ok(None),
        }
    }
    Err(ToolError::upstream(format!("the record under {key} kept changing; try again")))
}

fn answer(outcome: &str, rec: Record, key: &str, retry: bool) -> Answer {
    let accepted = outcome == "accepted";
    Answer::new(outcome)
        .field("accepted", json!(accepted))
        .field("duplicate", json!(!accepted))
        .field("retry", json!(retry))
        .record(rec, key)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{params, settings, store};
    use super::*;
    use crate::error::ErrorClass;

    #[tokio::test]
    async fn accepted_then_duplicate_then_conflict() {
        let (s, st) = (store(), settings());
        let p = params(json!({"event_id": "E1", "event_type": "created", "payload": "{\"a\":1,\"b\":2}"}));
        let first = run(&s, &st, &p).await.unwrap().to_value();
        assert_eq!(first["outcome"], "accepted");
        assert_eq!(first["attempt"], 1);
        assert_eq!(first["key"], "evt_E1");
        let again = params(json!({"event_id": "E1", "event_type": "created", "payload": "{ \"b\": 2, \"a\": 1 }"}));
        let second = run(&s, &st, &again).await.unwrap().to_value();
        assert_eq!(second["outcome"], "duplicate");
        assert_eq!(second["received_at"], first["received_at"]);
        let other = params(json!({"event_id": "E1", "event_type": "created", "payload": "{\"a\":2}"}));
        let e = run(&s, &st, &other).await.unwrap_err();
        assert_eq!(e.class, ErrorClass::Conflict);
        assert!(e.message.contains(first["fingerprint"].as_str().unwrap()));
        assert_eq!(s.len(), 1);
    }

    #[tokio::test]
    async fn invalid_input_never_reaches_the_store() {
        let (s, st) = (store(), settings());
        for bad in [
            json!({"event_type": "created"}),
            json!({"event_id": "", "event_type": "created"}),
            json!({"event_id": "x".repeat(256), "event_type": "created"}),
            json!({"event_id": "a\u{7}", "event_type": "created"}),
            json!({"event_id": "E", "event_type": "deleted"}),
            json!({"event_id": "E", "event_type": "created", "payload": "x".repeat(MAX_PAYLOAD_BYTES + 1)}),
            json!({"event_id": "E", "event_type": "created", "lease_seconds": -5}),
            json!({"event_id": "E", "event_type": "created", "lease_seconds": 86401}),
        ] {
            let e = run(&s, &st, &params(bad.clone())).await.unwrap_err();
            assert_eq!(e.class, ErrorClass::ParamInvalid, "{bad}");
        }
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn concurrent_duplicates_have_exactly_one_winner() {
        let (s, st) = (std::sync::Arc::new(store()), settings());
        let p = params(json!({"event_id": "race", "event_type": "updated"}));
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (s, st, p) = (s.clone(), st.clone(), p.clone());
                tokio::spawn(async move { run(&*s, &st, &p).await.unwrap().to_value()["outcome"].clone() })
            })
            .collect();
        let mut accepted = 0;
        for t in tasks {
            if t.await.unwrap() == "accepted" {
                accepted += 1;
            }
        }
        assert_eq!(accepted, 1);
    }
}
