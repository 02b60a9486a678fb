//! The door: one webhook delivery → verified, identified, claimed, and the answer the sender
//! gets. Every path ends in a [`Verdict`]; nothing here is a session error.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::config::{Door, IdSource, TypeSource};
use super::raw::RawRequest;
use super::verdict::Verdict;
use super::EVENT;
use crate::error::{ErrorClass, ToolError};
use crate::tools::event_ingest::{ingest, IngestRequest};
use event_store::key::{storage_key, validate_event_id};
use event_store::record::{format_time, Status};
use event_store::EventStore;

/// Seconds a sender is asked to wait before retrying after a store failure.
pub(crate) const RETRY_AFTER_S: u32 = 5;

/// Bodies above this are refused with 413 before any claim: the request comes back to
/// `invoke` hex-doubled in one line, next to the payload, and must fit the plugin's
/// input-line cap there too (a claim whose invoke cannot be read would stall the delivery).
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What the sender is told about a subscription it cannot be served by.
pub(crate) const MISCONFIGURED: &str =
    "the webhook subscription is misconfigured; its owner can see why in Dify's plugin log";

/// A delivery that passed every check that needs no store.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) door: Door,
    pub(crate) request: RawRequest,
    pub(crate) delivery_id: String,
    pub(crate) event_type: Option<String>,
    pub(crate) body_json: Option<Value>,
}

/// True while the subscription is still being built: its endpoint is the bare endpoint id,
/// not a URL. Deliveries there are test pings; Dify starts nothing for them.
pub(crate) fn is_builder(subscription: &Value) -> bool {
    let endpoint = subscription.get("endpoint").and_then(Value::as_str).unwrap_or("");
    !endpoint.contains('/')
}

/// Everything before the store: configuration, the raw request, signature, id.
pub(crate) fn check(subscription: &Value, raw_hex: &str, now_s: i64) -> Result<Checked, Box<Verdict>> {
    let props = subscription.get("properties").cloned().unwrap_or(Value::Null);
    let door = Door::from_properties(&props).map_err(|e| {
        // The sender is outside: the reason (property names and values) goes to the log, and
        // to the subscription builder's log, where a test ping shows it before the first delivery.
        tracing::warn!("the trigger subscription is misconfigured: {e}");
        refused(500, "misconfigured", MISCONFIGURED)
    })?;
    let request = RawRequest::from_hex(raw_hex).map_err(|e| refused(400, "bad_request", e))?;
    if request.body.len() > MAX_BODY_BYTES {
        return Err(refused(
            413,
            "too_large",
            format!("the body is {} bytes; this trigger accepts at most {MAX_BODY_BYTES}", request.body.len()),
        ));
    }
    if let Err(why) = door.scheme.verify(&request, now_s, door.tolerance_s) {
        tracing::info!(scheme = door.scheme.name(), "delivery refused: {why}");
        return Err(refused(401, "unsigned", "the webhook signature is missing or invalid"));
    }
    // Parsed once: the id, the type and the workflow's `body_json` all come from it.
    let body_json: Option<Value> = serde_json::from_slice(&request.body).ok();
    let delivery_id = identify(&door, &request, body_json.as_ref()).map_err(|e| {
        // Where the id was looked for is the subscription's business, not the sender's.
        tracing::info!("delivery refused: {e}");
        refused(400, "no_id", "the request carries no usable delivery id")
    })?;
    let event_type = match &door.event_type {
        TypeSource::None => None,
        TypeSource::Header(name) => request.header(name),
        TypeSource::JsonPointer(p) => body_json.as_ref().and_then(|b| b.pointer(p)).and_then(scalar),
    }
    .filter(|t| !t.is_empty() && t.len() <= 64 && !t.chars().any(char::is_control));
    Ok(Checked { door, request, delivery_id, event_type, body_json })
}

/// The delivery id, from where the subscription says it is; the error says what is missing.
pub(crate) fn identify(door: &Door, request: &RawRequest, body_json: Option<&Value>) -> Result<String, String> {
    let delivery_id = match &door.id {
        IdSource::Header(name) => request.header(name),
        IdSource::JsonPointer(p) => body_json.and_then(|b| b.pointer(p)).and_then(scalar),
        IdSource::BodySha256 => Some(hex::encode(Sha256::digest(&request.body))),
    };
    let where_ = match &door.id {
        IdSource::Header(name) => format!("header {name}"),
        IdSource::JsonPointer(p) => format!("JSON body at {p}"),
        IdSource::BodySha256 => "body".to_owned(),
    };
    let Some(delivery_id) = delivery_id.filter(|id| !id.is_empty()) else {
        return Err(format!("no delivery id: the {where_} is missing or empty"));
    };
    validate_event_id(&delivery_id).map_err(|e| format!("the delivery id in the {where_} is unusable: {e}"))?;
    Ok(delivery_id)
}

/// A refusal before the store (boxed: a `Verdict` is large next to `Checked`).
fn refused(status: u16, outcome: &'static str, message: impl Into<String>) -> Box<Verdict> {
    Box::new(Verdict::refuse(status, outcome, message))
}

/// A JSON scalar as id text (strings as they are, numbers as written).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Claims the delivery through the tool's own claim path and decides the answer. The claim is
/// a reservation for the subscription's start window: the run Dify starts for it takes it
/// over (`invoke_trigger_event`), and a delivery after the window finds it `never_started`.
pub(crate) async fn claim<S: EventStore>(store: &S, checked: Checked) -> Verdict {
    let Checked { door, request, delivery_id, event_type, body_json } = checked;
    let record_type = event_type.clone().unwrap_or_else(|| EVENT.to_owned());
    let window_ms = door.start_window.as_millis() as i64;
    let req = IngestRequest::at_door(delivery_id.clone(), record_type.clone(), window_ms);
    let key = storage_key(door.settings.namespace.as_deref(), &delivery_id);
    let answer = match ingest(store, &door.settings, req).await {
        Ok(answer) => answer,
        Err(e) => return failed(e, &delivery_id, &record_type, door.duplicate_status),
    };
    let Some(rec) = answer.shown_record() else {
        return Verdict::refuse(503, "store_unavailable", "the store gave no record").with("retry", json!(true));
    };
    let base = |v: Verdict| {
        v.with("delivery_id", json!(delivery_id))
            .with("attempt", json!(rec.attempt))
            .with("status", json!(rec.status.as_str()))
    };
    if answer.outcome() != "accepted" {
        let outcome = if rec.status == Status::Processing { "in_progress" } else { "duplicate" };
        tracing::debug!(delivery_id, outcome, attempt = rec.attempt, "duplicate delivery dropped at the door");
        let message = format!("delivery {delivery_id} was already received (its run is {})", rec.status.as_str());
        return base(Verdict::refuse(door.duplicate_status, outcome, message));
    }
    let lease_until = rec.lease_until_ms.map(format_time);
    let payload = super::reply::payload(
        &request,
        body_json,
        json!({
            "delivery_id": delivery_id,
            "event_type": event_type.unwrap_or_default(),
            "attempt": rec.attempt,
            "claimed_at": rec.updated_at,
            "lease_until": lease_until,
            "key": key,
        }),
    );
    // `retry` as the claim path says it (also when a lost answer was resolved to this call's
    // own take-over, whose reason is then not known).
    let (retry, taken_over) = (answer.get("retry") == Some(&json!(true)), answer.taken_over());
    let mut v = base(Verdict::refuse(200, "accepted", format!("delivery {delivery_id} accepted")))
        .with("retry", json!(retry || taken_over.is_some()));
    if let Some(reason) = taken_over {
        tracing::info!(delivery_id, attempt = rec.attempt, reason, "delivery taken over as a new attempt");
        v = v.with("reason", json!(reason));
    }
    v.start = true;
    v.payload = payload;
    v
}

/// A claim that did not happen: the store failed (503, retry later) or the id is taken by
/// another event type (treated as a duplicate, and logged).
fn failed(e: ToolError, delivery_id: &str, event_type: &str, duplicate_status: u16) -> Verdict {
    match e.class {
        ErrorClass::Conflict => {
            tracing::warn!(delivery_id, "delivery id already claimed for another event type: {}", e.message);
            // The door compares no payload: only the event type can differ.
            let stored = e.details.as_ref().and_then(|d| d.get("stored_event_type")).and_then(Value::as_str);
            let message = match stored {
                Some(stored) => format!(
                    "delivery {delivery_id} was already received as event type {stored:?}; this delivery says \
                     {event_type:?}"
                ),
                None => format!("delivery {delivery_id} was already received as another event type"),
            };
            Verdict::refuse(duplicate_status, "conflict", message).with("delivery_id", json!(delivery_id))
        }
        ErrorClass::ParamInvalid => {
            tracing::warn!(delivery_id, "the trigger subscription is misconfigured: {}", e.message);
            Verdict::refuse(500, "misconfigured", MISCONFIGURED)
        }
        _ => {
            tracing::warn!(delivery_id, "claim failed, the sender is asked to retry: {}", e.message);
            let mut v = Verdict::refuse(503, "store_unavailable", "the dedup store is unavailable; retry later")
                .with("delivery_id", json!(delivery_id));
            v.retry_after = Some(RETRY_AFTER_S);
            v
        }
    }
}

#[cfg(test)]
#[path = "door_tests.rs"]
mod tests;
