//! The `text` message: one stable English sentence saying what happened and what to do next.
//
// Agents read the text and the `json` message together (Dify's agent apps join them into one
// string), so the text never repeats the record as JSON: it names the event, the outcome
// and the next step, and the record itself travels once, in the `json` message.

use std::io::Write;

use serde_json::Value;

use super::{Answer, Tool};
use event_store::record::{format_time, Status};

/// Appends `answer`'s sentence to `out` (plain UTF-8, no trailing newline).
pub(crate) fn write(answer: &Answer, out: &mut Vec<u8>) {
    let rec = answer.shown_record();
    let id = match rec {
        Some(r) => r.event_id.as_str(),
        None => answer.get("event_id").and_then(Value::as_str).unwrap_or("?"),
    };
    let flag = |name: &str| answer.get(name).and_then(Value::as_bool).unwrap_or(false);
    let outcome = answer.outcome();
    // Writing into a Vec cannot fail.
    let _ = match (answer.tool(), outcome, rec) {
        (Some(Tool::EventIngest), "accepted", Some(r)) if flag("retry") => write!(
            out,
            "Event {id} was taken over as attempt {n} ({}): process it now, then call event_complete with attempt {n}.",
            match answer.taken_over() {
                Some("failed") => "the earlier attempt failed",
                Some("lease_expired") => "the earlier attempt's lease expired",
                Some("never_started") => "no workflow run started the earlier attempt within its start window",
                _ => "the earlier attempt failed or its lease expired",
            },
            n = r.attempt
        ),
        (_, "accepted", Some(r)) => write!(
            out,
            "Event {id} is new (attempt {n}): process it now, then call event_complete with attempt {n}.",
            n = r.attempt
        ),
        (_, "duplicate", Some(r)) if r.status == Status::Processing => write!(
            out,
            "Event {id} was already received at {} (status processing, attempt {}): do not process it again; \
             another run is working on it.",
            r.received_at, r.attempt
        ),
        (_, "duplicate", Some(r)) => write!(
            out,
            "Event {id} was already received at {} (status {}): do not process it again.",
            r.received_at,
            r.status.as_str()
        ),
        (_, "found", Some(r)) => match r.status {
            Status::Processing if r.waiting_for_run() && flag("lease_expired") => write!(
                out,
                "Event {id} was claimed at the trigger's door at {} (attempt {}), and no workflow run started it \
                 within its start window (it ended at {}): the next delivery will take it over.",
                r.updated_at,
                r.attempt,
                r.lease_until_ms.map(format_time).unwrap_or_default()
            ),
            Status::Processing if r.waiting_for_run() => write!(
                out,
                "Event {id} was claimed at the trigger's door at {} (attempt {}); no workflow run has started it \
                 yet (it waits until {}).",
                r.updated_at,
                r.attempt,
                r.lease_until_ms.map(format_time).unwrap_or_default()
            ),
            Status::Processing if flag("lease_expired") => write!(
                out,
                "Event {id} was received at {} and is processing (attempt {}), but its lease ran out at {}: \
                 the next delivery will take it over.",
                r.received_at,
                r.attempt,
                r.lease_until_ms.map(format_time).unwrap_or_default()
            ),
            Status::Processing => write!(
                out,
                "Event {id} was received at {} and is processing (attempt {}): a run is working on it.",
                r.received_at, r.attempt
            ),
            Status::Completed => write!(
                out,
                "Event {id} was received at {} and completed at {} (attempt {}): it is done.",
                r.received_at,
                r.completed_at.as_deref().unwrap_or("?"),
                r.attempt
            ),
            Status::Failed => write!(
                out,
                "Event {id} was received at {} and failed at {} (attempt {}): its next delivery will retry it.",
                r.received_at,
                r.completed_at.as_deref().unwrap_or("?"),
                r.attempt
            ),
        },
        (_, "not_found", _) => write!(
            out,
            "Event {id} has not been received (or its record expired): ingest it with event_ingest before processing it."
        ),
        (_, "completed", Some(r)) => {
            write!(out, "Event {id} is now completed (attempt {}): nothing more to do.", r.attempt)
        }
        (_, "already_completed", Some(r)) => {
            write!(out, "Event {id} was already completed (attempt {}): nothing more to do.", r.attempt)
        }
        (_, "failed", Some(r)) => {
            write!(out, "Event {id} is now marked failed (attempt {}): its next delivery will retry it.", r.attempt)
        }
        (_, "already_failed", Some(r)) => {
            write!(out, "Event {id} was already marked failed (attempt {}): its next delivery will retry it.", r.attempt)
        }
        (_, outcome, _) => write!(out, "Event {id}: {outcome}."),
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use event_store::record::{fingerprint, new_claim_id, Record};

    fn rec(status: Status, attempt: u32) -> Record {
        Record {
            v: 1,
            event_id: "EVT-1".into(),
            event_type: "created".into(),
            payload: None,
            fingerprint: fingerprint("created", None),
            status,
            received_at: format_time(1_785_924_000_000),
            updated_at: format_time(1_785_924_000_000),
            attempt,
            lease_until_ms: Some(1_785_924_300_000),
            completed_at: (status != Status::Processing).then(|| format_time(1_785_924_100_000)),
            result: Some("{\"not\": \"shown\"}".into()),
            claim_id: new_claim_id(),
            run_id: None,
            door: None,
        }
    }

    fn ingest(outcome: &str, r: Record, retry: bool) -> Answer {
        Answer::new(outcome).field("retry", json!(retry)).record(r, "evt_EVT-1").of_tool(Tool::EventIngest)
    }

    #[test]
    fn every_outcome_has_its_own_plain_sentence() {
        let found = |status, expired| {
            Answer::new("found")
                .field("found", json!(true))
                .record(rec(status, 2), "evt_EVT-1")
                .field("lease_expired", json!(expired))
                .of_tool(Tool::EventStatus)
        };
        let found_at_door = |expired| {
            let at_door = Record { door: Some(Default::default()), ..rec(Status::Processing, 2) };
            Answer::new("found")
                .field("found", json!(true))
                .record(at_door, "evt_EVT-1")
                .field("lease_expired", json!(expired))
                .of_tool(Tool::EventStatus)
        };
        let complete =
            |outcome: &str, status| Answer::new(outcome).record(rec(status, 3), "k").of_tool(Tool::EventComplete);
        let cases = [
            (
                ingest("accepted", rec(Status::Processing, 1), false),
                "Event EVT-1 is new (attempt 1): process it now, then call event_complete with attempt 1.",
            ),
            (
                ingest("accepted", rec(Status::Processing, 2), true),
                "Event EVT-1 was taken over as attempt 2 (the earlier attempt failed or its lease expired): process it now, then call event_complete with attempt 2.",
            ),
            (
                ingest("duplicate", rec(Status::Completed, 1), false),
                "Event EVT-1 was already received at 2026-08-05 10:00:00 UTC (status completed): do not process it again.",
            ),
            (
                ingest("duplicate", rec(Status::Processing, 1), false),
                "Event EVT-1 was already received at 2026-08-05 10:00:00 UTC (status processing, attempt 1): do not process it again; another run is working on it.",
            ),
            (
                found(Status::Processing, false),
                "Event EVT-1 was received at 2026-08-05 10:00:00 UTC and is processing (attempt 2): a run is working on it.",
            ),
            (
                found(Status::Processing, true),
                "Event EVT-1 was received at 2026-08-05 10:00:00 UTC and is processing (attempt 2), but its lease ran out at 2026-08-05 10:05:00 UTC: the next delivery will take it over.",
            ),
            (
                found_at_door(false),
                "Event EVT-1 was claimed at the trigger's door at 2026-08-05 10:00:00 UTC (attempt 2); no workflow run has started it yet (it waits until 2026-08-05 10:05:00 UTC).",
            ),
            (
                found_at_door(true),
                "Event EVT-1 was claimed at the trigger's door at 2026-08-05 10:00:00 UTC (attempt 2), and no workflow run started it within its start window (it ended at 2026-08-05 10:05:00 UTC): the next delivery will take it over.",
            ),
            (
                ingest("accepted", rec(Status::Processing, 2), true).with_taken_over("never_started"),
                "Event EVT-1 was taken over as attempt 2 (no workflow run started the earlier attempt within its start window): process it now, then call event_complete with attempt 2.",
            ),
            (
                found(Status::Completed, false),
                "Event EVT-1 was received at 2026-08-05 10:00:00 UTC and completed at 2026-08-05 10:01:40 UTC (attempt 2): it is done.",
            ),
            (
                found(Status::Failed, false),
                "Event EVT-1 was received at 2026-08-05 10:00:00 UTC and failed at 2026-08-05 10:01:40 UTC (attempt 2): its next delivery will retry it.",
            ),
            (
                Answer::new("not_found").field("found", json!(false)).field("event_id", json!("EVT-1")).of_tool(Tool::EventStatus),
                "Event EVT-1 has not been received (or its record expired): ingest it with event_ingest before processing it.",
            ),
            (complete("completed", Status::Completed), "Event EVT-1 is now completed (attempt 3): nothing more to do."),
            (complete("already_completed", Status::Completed), "Event EVT-1 was already completed (attempt 3): nothing more to do."),
            (complete("failed", Status::Failed), "Event EVT-1 is now marked failed (attempt 3): its next delivery will retry it."),
            (
                complete("already_failed", Status::Failed),
                "Event EVT-1 was already marked failed (attempt 3): its next delivery will retry it.",
            ),
        ];
        for (answer, expected) in cases {
            let sentence = answer.sentence();
            assert_eq!(sentence, expected);
            assert!(!sentence.contains(['{', '}', '"', '\n']), "no JSON in the text: {sentence}");
        }
    }
}
