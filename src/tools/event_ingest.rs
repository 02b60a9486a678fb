//! `event_ingest`: claim an event id in ONE atomic store operation, or report what the
//! store already holds (duplicate / conflict / re-claim of a failed or abandoned run).

use serde_json::json;

use super::settings::MAX_LEASE_SECONDS;
use super::{decode, params, Answer, Claims, Deadline, Params, Settings, MAX_ROUNDS};
use crate::error::ToolError;
use event_store::key::{storage_key, validate_event_id};
use event_store::record::{
    check_depth, fingerprint, fingerprint_and_kind, format_time, short_fingerprint, DoorClaim, Record, Status,
};
use event_store::{Created, Current, EventStore, Swapped, Write};

pub(crate) const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// Longest accepted `run_id` (Dify's workflow run ids are 36-character UUIDs).
pub(crate) const MAX_RUN_ID_BYTES: usize = 255;

/// A validated ingest call; nothing touches the store before this exists.
#[derive(Clone)]
pub struct IngestRequest {
    pub event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub fingerprint: String,
    /// `json`, `text` or `none`: how the payload was compared.
    pub compared_as: &'static str,
    /// The effective lease: this call's `lease_seconds`, else the provider default; None = never.
    pub lease_ms: Option<i64>,
    /// The workflow run calling (`{{#sys.workflow_run_id#}}`): its claim says so, and the same
    /// run calling again (a node retry) finds its own claim instead of a duplicate.
    pub run_id: Option<String>,
    /// Claimed at the trigger's door: a reservation until a workflow run takes it, its lease
    /// (`lease_ms`) the start window.
    pub at_door: bool,
}

impl IngestRequest {
    /// What the trigger's door claims: no payload (only the id and the type are compared on a
    /// redelivery), held for `start_window_ms` until a workflow run takes it.
    pub fn at_door(event_id: String, event_type: String, start_window_ms: i64) -> IngestRequest {
        let (fingerprint, compared_as) = fingerprint_and_kind(&event_type, None);
        IngestRequest {
            event_id,
            event_type,
            payload: None,
            fingerprint,
            compared_as,
            lease_ms: Some(start_window_ms),
            run_id: None,
            at_door: true,
        }
    }

    /// The record a first claim of this event writes at store time `now`, with `claim_id`:
    /// the request's own strings move into it (the payload is most of a record), and it
    /// stands for the request from then on.
    pub fn first_claim(self, now: i64, claim_id: String) -> Record {
        let received_at = format_time(now);
        Record {
            v: 1,
            event_id: self.event_id,
            event_type: self.event_type,
            payload: self.payload,
            fingerprint: self.fingerprint,
            status: Status::Processing,
            updated_at: received_at.clone(),
            received_at,
            attempt: 1,
            lease_until_ms: self.lease_ms.map(|l| now + l),
            completed_at: None,
            result: None,
            claim_id,
            run_id: self.run_id,
            door: self.at_door.then(DoorClaim::default),
        }
    }

    pub fn parse(p: &Params<'_>, settings: &Settings) -> Result<IngestRequest, ToolError> {
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
        let lease = params::optional_int(p, "lease_seconds", 0, MAX_LEASE_SECONDS as i64)?
            .unwrap_or(settings.default_lease.as_secs() as i64);
        let run_id = params::optional_str(p, "run_id")?.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
        if let Some(r) = &run_id {
            if r.len() > MAX_RUN_ID_BYTES || r.chars().any(char::is_control) {
                return Err(ToolError::param(format!(
                    "run_id must be printable text of at most {MAX_RUN_ID_BYTES} bytes; pass {{{{#sys.workflow_run_id#}}}}"
                )));
            }
        }
        let (fingerprint, compared_as) = fingerprint_and_kind(&event_type, payload.as_deref());
        if compared_as == "text" {
            check_depth(payload.as_deref().unwrap_or_default()).map_err(ToolError::param)?;
        }
        Ok(IngestRequest {
            event_id,
            event_type,
            payload,
            fingerprint,
            compared_as,
            lease_ms: (lease > 0).then_some(lease * 1000),
            run_id,
            at_door: false,
        })
    }
}

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

/// One claim of a delivery: what each of its writes (the create, then any take-over) carries
/// and what an existing record is compared against, lent to [`settle`] as a plain struct by
/// reference (no more work per round than the loose arguments it replaces).
struct Claim<'a> {
    /// The storage key of the event.
    key: &'a str,
    /// This call's own first-claim record: the request's id, type, payload, fingerprint and run.
    fresh: &'a Record,
    /// The lease a take-over stamps (store clock); `None` = never expires.
    lease_ms: Option<i64>,
    /// How the payload was compared (`json`, `text`, `none`), named in a conflict.
    compared_as: &'static str,
    /// The TTL every write of this claim carries.
    ttl: std::time::Duration,
}

/// Decides against an existing record; re-claims it when its run failed or its lease
/// expired (by the store's clock). `None` = the key vanished, claim from scratch.
async fn settle<S: EventStore>(
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
pub(crate) fn takeover(rec: &Record, store_now_ms: i64) -> Option<&'static str> {
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

fn answer(outcome: &str, rec: Record, key: &str, retry: bool) -> Answer {
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
        let stored = first["fingerprint"].as_str().unwrap();
        assert!(e.message.contains(short_fingerprint(stored)), "{}", e.message);
        assert_eq!(e.details.unwrap()["stored_fingerprint"], stored);
        assert_eq!(s.len(), 1);
    }

    #[tokio::test]
    async fn the_same_run_calling_again_is_its_own_retry_and_another_run_a_duplicate() {
        let (s, st) = (store(), settings());
        let ev = |run: Option<&str>| params(json!({"event_id": "R1", "event_type": "created", "run_id": run}));
        let first = run(&s, &st, &ev(Some("run-a"))).await.unwrap().to_value();
        assert_eq!((first["outcome"].as_str(), first["retry_of_same_run"].as_bool()), (Some("accepted"), Some(false)));
        let again = run(&s, &st, &ev(Some("run-a"))).await.unwrap().to_value();
        assert_eq!(
            (again["outcome"].as_str(), again["attempt"].as_u64(), again["retry_of_same_run"].as_bool()),
            (Some("accepted"), Some(1), Some(true))
        );
        for other in [Some("run-b"), None] {
            let v = run(&s, &st, &ev(other)).await.unwrap().to_value();
            assert_eq!((v["outcome"].as_str(), v["retry_of_same_run"].as_bool()), (Some("duplicate"), Some(false)));
        }
        // Once the run completed it, its own retry is a duplicate like any other delivery.
        let done = params(json!({"event_id": "R1", "attempt": 1}));
        super::super::event_complete::run(&s, &st, &done).await.unwrap();
        assert_eq!(run(&s, &st, &ev(Some("run-a"))).await.unwrap().to_value()["outcome"], "duplicate");
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
            json!({"event_id": "E", "event_type": "created", "run_id": "r".repeat(256)}),
            json!({"event_id": "E", "event_type": "created", "run_id": "a\nb"}),
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

    #[tokio::test]
    async fn conflicts_name_what_differs_and_answers_say_how_the_payload_was_compared() {
        let (s, st) = (store(), settings());
        let first = params(json!({"event_id": "C1", "event_type": "created", "payload": "{\"a\": 1}"}));
        let v = run(&s, &st, &first).await.unwrap().to_value();
        assert_eq!(v["payload_compared_as"], "json");
        let text = params(json!({"event_id": "C2", "event_type": "created", "payload": "not json"}));
        assert_eq!(run(&s, &st, &text).await.unwrap().to_value()["payload_compared_as"], "text");
        let none = params(json!({"event_id": "C3", "event_type": "created"}));
        assert_eq!(run(&s, &st, &none).await.unwrap().to_value()["payload_compared_as"], "none");
        let cases = [
            (json!({"event_id": "C1", "event_type": "updated", "payload": "{\"a\":1}"}), "a different event_type"),
            (json!({"event_id": "C1", "event_type": "created", "payload": "{\"a\":2}"}), "a different payload"),
            (json!({"event_id": "C1", "event_type": "closed", "payload": "x"}), "and a different payload"),
        ];
        for (p, says) in cases {
            let e = run(&s, &st, &params(p.clone())).await.unwrap_err();
            assert_eq!(e.class, ErrorClass::Conflict);
            assert!(e.message.contains(says), "{p}: {}", e.message);
            // The message (a node's error banner) shows 12-hex prefixes; the details keep both
            // full fingerprints.
            let details = e.details.as_ref().unwrap();
            for field in ["stored_fingerprint", "new_fingerprint"] {
                let full = details[field].as_str().unwrap();
                assert_eq!(full.len(), "sha256:".len() + 64, "{field}");
                assert!(!e.message.contains(full), "{}", e.message);
                assert!(e.message.contains(&full[..7 + 12]), "{field} prefix in {}", e.message);
            }
            assert!(e.message.starts_with("event_id \"C1\" was already received with "), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn json_deeper_than_the_parser_accepts_is_refused_not_compared_as_text() {
        let (s, st) = (store(), settings());
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = run(&s, &st, &params(json!({"event_id": "D", "event_type": "created", "payload": deep})))
            .await
            .unwrap_err();
        assert_eq!(e.class, ErrorClass::ParamInvalid);
        assert!(e.message.contains("nested deeper than 127"), "{}", e.message);
        // The deepest accepted nesting is compared as JSON: spacing does not matter there.
        let at = |sp: &str| format!("{}1{}", format!("[{sp}").repeat(127), "]".repeat(127));
        let p = |payload: String| params(json!({"event_id": "D127", "event_type": "created", "payload": payload}));
        let first = run(&s, &st, &p(at(""))).await.unwrap().to_value();
        assert_eq!(first["payload_compared_as"], "json");
        assert_eq!(run(&s, &st, &p(at(" \n"))).await.unwrap().to_value()["outcome"], "duplicate");
        assert!(s.len() == 1);
    }
}
