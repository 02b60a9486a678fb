//! A workflow run takes the door's claim: `invoke_trigger_event`, which Dify calls once per
//! subscribed workflow just before it starts that workflow's run for the delivery.
//
// The door's claim is a reservation for the subscription's start window. The first invoke of
// an attempt turns it into the run's claim (the lease becomes the subscription's lease, the
// record says when it started); later invokes of the same attempt are the other subscribed
// workflows' runs of the same delivery (Dify's fan-out) and are counted. An invoke whose
// attempt was taken over by a later delivery (its window had passed) is cancelled: that
// delivery's own invoke starts the run. When the store cannot be asked, the run starts
// anyway: a delivery the sender was told was accepted is never dropped here.

use serde_json::{json, Map, Value};

use super::config::Door;
use super::reply;
use crate::tools::MAX_ROUNDS;
use event_store::key::storage_key;
use event_store::record::{format_time, DoorClaim, Record, Status};
use event_store::{EventStore, StoreCache, Swapped, Write};

/// What taking the claim found.
#[derive(Debug, PartialEq)]
pub(crate) enum Taken {
    /// This run took (or joined) the attempt; the record as it is now.
    Started(Box<Record>),
    /// A later delivery took the event over as attempt `.0`: this run must not start.
    Superseded(u32),
    /// The claim could not be checked (why): the run starts, as the door promised.
    Unchecked(String),
}

/// Answers `invoke_trigger_event`: the workflow's variables, or `cancelled` for a superseded
/// attempt.
pub(crate) async fn invoke(stores: &StoreCache, data: &Value) -> Value {
    let payload = data.get("payload").unwrap_or(&Value::Null);
    let raw = data.get("raw_http_request").and_then(Value::as_str);
    let mut variables = reply::variables(payload, raw);
    match take(stores, data.get("subscription").unwrap_or(&Value::Null), payload).await {
        Taken::Started(rec) => started(&mut variables, &rec),
        Taken::Superseded(attempt) => {
            let delivery_id = payload.get("delivery_id").and_then(Value::as_str).unwrap_or_default();
            tracing::info!(delivery_id, "run not started: a later delivery took the event over as attempt {attempt}");
            return json!({ "variables": {}, "cancelled": true });
        }
        Taken::Unchecked(why) => tracing::warn!("the run starts without confirming its claim at the door: {why}"),
    }
    json!({ "variables": variables, "cancelled": false })
}

/// The variables of a run that took its claim: the lease it holds now.
fn started(variables: &mut Map<String, Value>, rec: &Record) {
    variables.insert("lease_until".into(), json!(rec.lease_until_ms.map(format_time)));
}

/// Takes the claim `payload` (dispatch's) names, in the store `subscription` names.
pub(crate) async fn take(stores: &StoreCache, subscription: &Value, payload: &Value) -> Taken {
    let (Some(delivery_id), Some(attempt)) = (
        payload.get("delivery_id").and_then(Value::as_str),
        payload.get("attempt").and_then(Value::as_u64).and_then(|a| u32::try_from(a).ok()),
    ) else {
        return Taken::Unchecked("the run's payload names no claim (a run Dify replayed?)".into());
    };
    let door = match Door::from_properties(subscription.get("properties").unwrap_or(&Value::Null)) {
        Ok(door) => door,
        Err(e) => return Taken::Unchecked(format!("the subscription is misconfigured: {e}")),
    };
    let timeout = stores.call_timeout();
    let store = match stores.get_within(&door.settings.store, timeout).await {
        Ok(store) => store,
        Err(e) => return Taken::Unchecked(e.to_string()),
    };
    let key = storage_key(door.settings.namespace.as_deref(), delivery_id);
    take_in(&*store, &door, &key, attempt, timeout).await
}

/// The claim under `key` for `attempt`, taken by one more run.
pub(crate) async fn take_in<S: EventStore>(
    store: &S,
    door: &Door,
    key: &str,
    attempt: u32,
    timeout: std::time::Duration,
) -> Taken {
    let mut cur = match store.read(key, timeout).await {
        Ok(Some(cur)) => cur,
        Ok(None) => return Taken::Unchecked(format!("no record under {key} (expired or deleted)")),
        Err(e) => return Taken::Unchecked(e.to_string()),
    };
    for _ in 0..MAX_ROUNDS {
        let rec = match Record::from_bytes(&cur.value) {
            Ok(rec) => rec,
            Err(e) => return Taken::Unchecked(format!("the record under {key}: {e}")),
        };
        if rec.attempt > attempt {
            return Taken::Superseded(rec.attempt);
        }
        if rec.attempt < attempt {
            return Taken::Unchecked(format!("the record under {key} is at attempt {}, before {attempt}", rec.attempt));
        }
        if rec.status != Status::Processing {
            // Another subscribed workflow's run of this delivery already finished it.
            return Taken::Started(Box::new(rec));
        }
        let now = cur.store_now_ms;
        let claim = rec.door.clone().unwrap_or_default();
        let first = claim.waiting();
        let lease_ms =
            (!door.settings.default_lease.is_zero()).then_some(door.settings.default_lease.as_millis() as i64);
        let next = Record {
            updated_at: format_time(now),
            // The first run gets the run's lease; the others run within it.
            lease_until_ms: if first { lease_ms.map(|l| now + l) } else { rec.lease_until_ms },
            door: Some(DoorClaim {
                started_at: claim.started_at.or_else(|| Some(format_time(now))),
                runs: claim.runs.saturating_add(1),
            }),
            ..rec
        };
        let ttl = door.settings.ttl_for(next.lease_until_ms.map(|until| until - now));
        match store.swap(key, &cur.version, Write { value: &next.to_bytes(), ttl, until: None }, timeout).await {
            Ok(Swapped::Swapped) => return Taken::Started(Box::new(next)),
            Ok(Swapped::Changed(Some(newer))) => cur = newer,
            Ok(Swapped::Changed(None)) => return Taken::Unchecked(format!("the record under {key} vanished")),
            Err(e) => return Taken::Unchecked(e.to_string()),
        }
    }
    Taken::Unchecked(format!("the record under {key} kept changing"))
}
