//! An existing record met by a claim: this call's own, the same run's, a duplicate, a
//! conflict, or one to take over (its run failed or its lease ran out); and the answers.

use serde_json::json;

use super::super::{decode, Answer, Claims, Deadline, MAX_ROUNDS};
use crate::error::ToolError;
use event_store::record::{fingerprint, format_time, short_fingerprint, Record, Status};
use event_store::{Current, EventStore, Swapped, Write};

/// and what an existing record is compared against, lent to [`settle`] as a plain struct by
/// reference (no more work per round than the loose arguments it replaces).
pub(super) struct Claim<'a> {
    /// The storage key of the event.
    pub(super) key: &'a str,
    /// This call's own first-claim record: the request's id, type, payload, fingerprint and run.
    pub(super) fresh: &'a Record,
    /// The lease a take-over stamps (store clock); `None` = never expires.
    pub(super) lease_ms: Option<i64>,
    /// How the payload was compared (`json`, `text`, `none`), named in a conflict.
    pub(super) compared_as: &'static str,
    /// The TTL every write of this claim carries.
    pub(super) ttl: std::time::Duration,
}

/// Decides against an existing record; re-claims it when its run failed or its lease
/// expired (by the store's clock). `None` = the key vanished, claim from scratch.
pub(super) async fn settle<S: EventStore>(
    store: &S,
    this: &Claim<'_>,
    deadline: &Deadline,
    claims: &mut Claims,
    mut cur: Current,
) -> Result<Option<Answer>, ToolError> {
    let fail = |e| deadline.error(e);
    let (key, fresh) = (this.key, this.fresh);
    for _ in 0..MAX_ROUNDS {
        let rec = decode(&cur.value, key)?;
        if claims.owns(&rec.claim_id) {
            // This call's own write landed (late, twice, or with its answer lost): it is this
            // call's claim, never a duplicate of itself.
            let retry = rec.attempt > 1;
            return Ok(Some(answer("accepted", rec, key, retry)));
        }
        if rec.fingerprint != fresh.fingerprint {
            return Err(conflict(&rec, fresh, this.compared_as));
        }
        if rec.status == Status::Processing && fresh.run_id.is_some() && rec.run_id == fresh.run_id {
            // The same workflow run calling again (Dify's node retry after an answer it never
            // saw): its attempt is still its own, and nobody else was told to run it.
            let retry = rec.attempt > 1;
            return Ok(Some(answer_of("accepted", rec, key, retry, true, None)));
        }
        let Some(reason) = takeover(&rec, cur.store_now_ms) else {
            return Ok(Some(answer("duplicate", rec, key, false)));
        };
        let next = Record {
            status: Status::Processing,
            attempt: rec.attempt + 1,
            updated_at: format_time(cur.store_now_ms),
            lease_until_ms: this.lease_ms.map(|l| cur.store_now_ms + l),
            completed_at: None,
            result: None,
            claim_id: claims.new_id(),
            run_id: fresh.run_id.clone(),
            door: fresh.door.clone(),
            ..rec
        };
        let timeout = deadline.share().map_err(fail)?;
        let until = claims.push(store.clock(), &next.claim_id, timeout);
        match store.swap(key, &cur.version, Write { value: &next.to_bytes(), ttl: this.ttl, until }, timeout).await {
            Ok(Swapped::Swapped) => return Ok(Some(answer_of("accepted", next, key, true, false, Some(reason)))),
            Ok(Swapped::Changed(Some(newer))) => cur = newer,
            Ok(Swapped::Changed(None)) => return Ok(None),
            Err(e) if e.is_ambiguous() => {
                claims.lost(&next);
                match store.read(key, deadline.share().map_err(fail)?).await.map_err(fail)? {
                    Some(newer) => cur = newer,
                    None => return Ok(None),
                }
            }
            Err(e) => return Err(fail(e)),
        }
    }
    Err(ToolError::upstream(format!("the record under {key} kept changing; try again")))
}

/// Why a record may be claimed again, if it may: its run failed, its lease expired, or it was
/// claimed at the trigger's door and no workflow run took it within its start window.
fn takeover(rec: &Record, store_now_ms: i64) -> Option<&'static str> {
    match rec.status {
        Status::Failed => Some("failed"),
        Status::Processing if rec.lease_expired(store_now_ms) => {
            Some(if rec.waiting_for_run() { "never_started" } else { "lease_expired" })
        }
        _ => None,
    }
}

/// Same id, different content: names what differs (the type, the payload, or both). `fresh` is
/// this call's own first-claim record.
fn conflict(rec: &Record, fresh: &Record, compared_as: &str) -> ToolError {
    let type_differs = rec.event_type != fresh.event_type;
    let payload_differs = fingerprint(&rec.event_type, fresh.payload.as_deref()) != rec.fingerprint;
    let what = match (type_differs, payload_differs) {
        (true, true) => format!(
            "a different event_type ({:?}, this delivery {:?}) and a different payload",
            rec.event_type, fresh.event_type
        ),
        (true, false) => format!("a different event_type ({:?}, this delivery {:?})", rec.event_type, fresh.event_type),
        _ => format!("a different payload (compared as {compared_as})"),
    };
    ToolError::conflict(format!(
        "event_id {:?} was already received with {what} (stored {}, this delivery {}); nothing was overwritten",
        rec.event_id,
        short_fingerprint(&rec.fingerprint),
        short_fingerprint(&fresh.fingerprint)
    ))
    .with_details(json!({
        "event_id": rec.event_id, "stored_fingerprint": rec.fingerprint,
        "new_fingerprint": fresh.fingerprint, "status": rec.status.as_str(), "received_at": rec.received_at,
        "event_type_differs": type_differs, "payload_differs": payload_differs,
        "stored_event_type": rec.event_type,
    }))
}

pub(super) fn answer(outcome: &str, rec: Record, key: &str, retry: bool) -> Answer {
    answer_of(outcome, rec, key, retry, false, None)
}

/// `same_run`: the answer is to a retry of the run whose claim this is (`run_id`);
/// `taken_over`: why this call could claim an earlier attempt ([`takeover`]).
fn answer_of(
    outcome: &str,
    rec: Record,
    key: &str,
    retry: bool,
    same_run: bool,
    taken_over: Option<&'static str>,
) -> Answer {
    let accepted = outcome == "accepted";
    let answer = Answer::new(outcome)
        .field("accepted", json!(accepted))
        .field("duplicate", json!(!accepted))
        .field("retry", json!(retry))
        .field("retry_of_same_run", json!(same_run))
        .record(rec, key);
    match taken_over {
        Some(reason) => answer.with_taken_over(reason),
        None => answer,
    }
}
