//! `event_complete`: moves a `processing` record to `completed` or `failed` with one
//! compare-and-swap, fenced by the attempt number its `event_ingest` returned.

use serde_json::json;

use super::{decode, params, Answer, Claims, Deadline, Params, Settings, MAX_ROUNDS};
use crate::error::ToolError;
use event_store::key::{storage_key, validate_event_id};
use event_store::record::{format_time, Record, Status};
use event_store::{EventStore, Swapped, Write};

pub(crate) const MAX_RESULT_BYTES: usize = 4096;

pub(crate) async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Params<'_>) -> Result<Answer, ToolError> {
    let event_id = params::required_str(p, "event_id")?;
    validate_event_id(&event_id)?;
    let target = match params::optional_str(p, "status")?.as_deref().unwrap_or("completed") {
        "completed" => Status::Completed,
        "failed" => Status::Failed,
        other => return Err(ToolError::param(format!("status {other:?} must be completed or failed"))),
    };
    let attempt = params::optional_int(p, "attempt", 1, u32::MAX as i64)?.map(|a| a as u32);
    let result = params::optional_str(p, "result")?;
    if result.as_ref().is_some_and(|r| r.len() > MAX_RESULT_BYTES) {
        return Err(ToolError::param(format!(
            "result is longer than {MAX_RESULT_BYTES} bytes; store a short summary or a reference"
        )));
    }
    let key = storage_key(settings.namespace.as_deref(), &event_id);
    let deadline = Deadline::start(store.clock().host(), settings.call_timeout, settings.call_timeout_setting);
    let asked = Completion { event_id, key, target, attempt, result };
    let mut claims = Claims::new(settings.claim_ids.clone());
    match complete(store, settings, &asked, &deadline, &mut claims).await {
        // A lost answer: this call's completion may be in the store after all.
        Err(e) => {
            let own = claims.resolve(store, &asked.key, settings.retention, &deadline, e).await?;
            Ok(answer(target.as_str(), own, &asked.key))
        }
        done => done,
    }
}

/// A validated completion request.
struct Completion {
    event_id: String,
    key: String,
    target: Status,
    attempt: Option<u32>,
    result: Option<String>,
}

async fn complete<S: EventStore>(
    store: &S,
    settings: &Settings,
    asked: &Completion,
    deadline: &Deadline,
    claims: &mut Claims,
) -> Result<Answer, ToolError> {
    let Completion { event_id, key, target, attempt, result } = asked;
    let (key, target, attempt) = (key.as_str(), *target, *attempt);
    let fail = |e| deadline.error(e);
    let not_found = || {
        ToolError::not_found(format!(
            "no event with id {event_id:?} was ingested (or its record expired); nothing to complete"
        ))
    };
    let mut cur = store.read(key, deadline.share().map_err(fail)?).await.map_err(fail)?.ok_or_else(not_found)?;
    for _ in 0..MAX_ROUNDS {
        let rec = decode(&cur.value, key)?;
        if claims.owns(&rec.claim_id) {
            // This call's own completion landed (its answer was lost or came late).
            return Ok(answer(target.as_str(), rec, key));
        }
        if let Some(a) = attempt {
            if a > rec.attempt {
                return Err(ToolError::conflict(format!(
                    "attempt {a} of event {event_id:?} does not exist yet: the current attempt is {}; pass the attempt \
                     number event_ingest returned",
                    rec.attempt
                ))
                .with_details(json!({"event_id": event_id, "attempt": a, "current_attempt": rec.attempt, "status": rec.status.as_str()})));
            }
            if a < rec.attempt {
                return Err(ToolError::conflict(format!("stale completion: attempt {a}, current attempt {}", rec.attempt))
                    .with_details(json!({"event_id": event_id, "attempt": a, "current_attempt": rec.attempt, "status": rec.status.as_str()})));
            }
        }
        if rec.status != Status::Processing {
            let same = rec.status == target && (result.is_none() || *result == rec.result);
            if same {
                return Ok(answer(&format!("already_{}", target.as_str()), rec, key));
            }
            if rec.status == target {
                // Same status, another result: say which result the record keeps.
                let shown = |r: &Option<String>| r.as_deref().map_or("none".to_owned(), |r| format!("{r:?}"));
                return Err(ToolError::conflict(format!(
                    "event {event_id:?} (attempt {}) is already {} with result {}; this call's result {} differs, \
                     and the stored result is kept",
                    rec.attempt,
                    rec.status.as_str(),
                    shown(&rec.result),
                    shown(result)
                )));
            }
            return Err(ToolError::conflict(format!(
                "event {event_id:?} (attempt {}) is already {}; it cannot become {}",
                rec.attempt,
                rec.status.as_str(),
                target.as_str()
            )));
        }
        let next = Record {
            status: target,
            updated_at: format_time(cur.store_now_ms),
            completed_at: Some(format_time(cur.store_now_ms)),
            result: result.clone(),
            lease_until_ms: None,
            claim_id: claims.new_id(),
            ..rec
        };
        let timeout = deadline.share().map_err(fail)?;
        let until = claims.push(store.clock(), &next.claim_id, timeout);
        match store
            .swap(key, &cur.version, Write { value: &next.to_bytes(), ttl: settings.retention, until }, timeout)
            .await
        {
            Ok(Swapped::Swapped) => return Ok(answer(target.as_str(), next, key)),
            Ok(Swapped::Changed(Some(newer))) => cur = newer,
            Ok(Swapped::Changed(None)) => return Err(not_found()),
            Err(e) if e.is_ambiguous() => {
                claims.lost(&next);
                cur = store.read(key, deadline.share().map_err(fail)?).await.map_err(fail)?.ok_or_else(not_found)?;
            }
            Err(e) => return Err(fail(e)),
        }
    }
    Err(ToolError::upstream(format!("the record under {key} kept changing; try again")))
}

fn answer(outcome: &str, rec: Record, key: &str) -> Answer {
    Answer::new(outcome).record(rec, key)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{params, settings, store};
    use super::*;
    use crate::error::ErrorClass;
    use crate::tools::event_ingest;

    #[tokio::test]
    async fn lifecycle_complete_fail_retry_and_fencing() {
        let (s, st) = (store(), settings());
        let ev = params(json!({"event_id": "L1", "event_type": "created"}));
        assert_eq!(event_ingest::run(&s, &st, &ev).await.unwrap().to_value()["attempt"], 1);
        let fail = params(json!({"event_id": "L1", "status": "failed", "attempt": 1}));
        assert_eq!(run(&s, &st, &fail).await.unwrap().to_value()["outcome"], "failed");
        assert_eq!(run(&s, &st, &fail).await.unwrap().to_value()["outcome"], "already_failed");
        let retry = event_ingest::run(&s, &st, &ev).await.unwrap().to_value();
        assert_eq!(
            (retry["outcome"].as_str(), retry["attempt"].as_u64(), retry["retry"].as_bool()),
            (Some("accepted"), Some(2), Some(true))
        );
        let stale = run(&s, &st, &params(json!({"event_id": "L1", "attempt": 1}))).await.unwrap_err();
        assert_eq!(stale.class, ErrorClass::Conflict);
        assert_eq!(stale.message, "stale completion: attempt 1, current attempt 2");
        let early = run(&s, &st, &params(json!({"event_id": "L1", "attempt": 3}))).await.unwrap_err();
        assert_eq!(early.class, ErrorClass::Conflict);
        assert!(early.message.contains("attempt 3 of event \"L1\" does not exist yet"), "{}", early.message);
        let done =
            run(&s, &st, &params(json!({"event_id": "L1", "attempt": 2, "result": "ok"}))).await.unwrap().to_value();
        assert_eq!(done["outcome"], "completed");
        assert_eq!(done["result"], "ok");
        // The same status with another result (two runs of one delivery finishing it): the
        // message names both results and which one is kept.
        let other =
            run(&s, &st, &params(json!({"event_id": "L1", "attempt": 2, "result": "again"}))).await.unwrap_err();
        assert_eq!(other.class, ErrorClass::Conflict);
        assert_eq!(
            other.message,
            "event \"L1\" (attempt 2) is already completed with result \"ok\"; this call's result \"again\" \
             differs, and the stored result is kept"
        );
        assert_eq!(event_ingest::run(&s, &st, &ev).await.unwrap().to_value()["outcome"], "duplicate");
        let flip = run(&s, &st, &params(json!({"event_id": "L1", "status": "failed"}))).await.unwrap_err();
        assert_eq!(flip.class, ErrorClass::Conflict);
        let unknown = run(&s, &st, &params(json!({"event_id": "nope"}))).await.unwrap_err();
        assert_eq!(unknown.class, ErrorClass::NotFound);
    }

    #[tokio::test]
    async fn expired_lease_is_reclaimed_once_and_unexpired_is_duplicate() {
        // The store's clock is the test's: the lease runs out when the test moves it.
        let (clock, hand) = event_store::HostClock::manual(1_780_000_000_000);
        let s = event_store::memory::MemoryStore::new(clock, 0);
        let st = settings();
        let ev = params(json!({"event_id": "L2", "event_type": "created", "lease_seconds": 1}));
        event_ingest::run(&s, &st, &ev).await.unwrap().to_value();
        hand.advance(999);
        assert_eq!(event_ingest::run(&s, &st, &ev).await.unwrap().to_value()["outcome"], "duplicate");
        hand.advance(1);
        let again = event_ingest::run(&s, &st, &ev).await.unwrap().to_value();
        assert_eq!((again["outcome"].as_str(), again["attempt"].as_u64()), (Some("accepted"), Some(2)));
    }
}
