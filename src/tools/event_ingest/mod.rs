//! `event_ingest`: claim an event id in ONE atomic store operation, or report what the
//! store already holds (duplicate / conflict / re-claim of a failed or abandoned run).
//!
//! `request.rs` validates a call into an [`IngestRequest`]; this file makes the claim (the
//! create, and reading it back when its answer was lost); `settle.rs` decides against a
//! record the store already holds and builds every answer.

mod request;
mod settle;
#[cfg(test)]
mod tests;

use serde_json::json;

use super::{Answer, Claims, Deadline, Params, Settings, MAX_ROUNDS};
use crate::error::ToolError;
use event_store::key::storage_key;
use event_store::{Created, EventStore, Write};
pub use request::IngestRequest;
use settle::{answer, settle, Claim};

pub(crate) async fn run<S: EventStore>(store: &S, settings: &Settings, p: &Params<'_>) -> Result<Answer, ToolError> {
    let req = IngestRequest::parse(p, settings)?;
    let compared_as = req.compared_as;
    let answer = ingest(store, settings, req).await?;
    Ok(answer.field("payload_compared_as", json!(compared_as)))
}

/// Claims a validated request: the one claim path, also taken by the trigger's dispatch (a
/// delivery claimed at the door is the same record `event_status`/`event_complete` see).
pub(crate) async fn ingest<S: EventStore>(
    store: &S,
    settings: &Settings,
    req: IngestRequest,
) -> Result<Answer, ToolError> {
    let key = storage_key(settings.namespace.as_deref(), &req.event_id);
    let deadline = Deadline::start(store.clock().host(), settings.call_timeout, settings.call_timeout_setting);
    let mut claims = Claims::new(settings.claim_ids.clone());
    match claim(store, settings, req, &key, &deadline, &mut claims).await {
        Ok(answer) => Ok(answer),
        // A lost answer: this call's claim may be in the store after all.
        Err(e) => {
            let own = claims.resolve(store, &key, settings.retention, &deadline, e).await?;
            let retry = own.attempt > 1;
            Ok(answer("accepted", own, &key, retry))
        }
    }
}

async fn claim<S: EventStore>(
    store: &S,
    settings: &Settings,
    req: IngestRequest,
    key: &str,
    deadline: &Deadline,
    claims: &mut Claims,
) -> Result<Answer, ToolError> {
    let fail = |e| deadline.error(e);
    if req.lease_ms.is_some() && !store.clock().is_synced() {
        // Lease deadlines are stamped in the store's clock: learn it once per store, by one
        // call (a burst of first calls would otherwise all read the store first).
        let _one = store.clock().syncing().await;
        if !store.clock().is_synced() {
            store.read(key, deadline.share().map_err(fail)?).await.map_err(fail)?;
        }
    }
    let now = store.clock().now_ms();
    let lease_ms = req.lease_ms;
    let compared_as = req.compared_as;
    let fresh = req.first_claim(now, claims.new_id());
    let bytes = fresh.to_bytes();
    let ttl = settings.ttl_for(lease_ms);
    for _ in 0..MAX_ROUNDS {
        let timeout = deadline.share().map_err(fail)?;
        let until = claims.push(store.clock(), &fresh.claim_id, timeout);
        let existing = match store.create(key, Write { value: &bytes, ttl, until }, timeout).await {
            Ok(Created::Created) => return Ok(answer("accepted", fresh, key, false)),
            Ok(Created::Exists(cur)) => cur,
            // The write may have landed (or may still land): read the key back.
            Err(e) if e.is_ambiguous() => {
                claims.lost(&fresh);
                match store.read(key, deadline.share().map_err(fail)?).await.map_err(fail)? {
                    Some(cur) => cur,
                    None => continue,
                }
            }
            Err(e) => return Err(fail(e)),
        };
        // Built only on this path: a new event's call never pays for it.
        let this = Claim { key, fresh: &fresh, lease_ms, compared_as, ttl };
        if let Some(done) = settle(store, &this, deadline, claims, existing).await? {
            return Ok(done);
        }
        // The record expired or was deleted between our steps: claim it afresh.
    }
    Err(ToolError::upstream(format!("the record under {key} kept changing; try again")))
}
