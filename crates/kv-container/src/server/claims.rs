//! What the container can tell about a claim from the conditional write it answered.
//!
//! The container never sees the plugin's answer, only writes. A create-only `PUT`
//! (`If-None-Match: *`) answered 201 is a new claim. One answered 412 carries two records:
//! the one the client sent and the one stored; both hold the event's `fingerprint` and the
//! write's `claim_id`, so the container applies the plugin's own rule (`event_ingest`):
//! same claim id = the client's own earlier write (its answer was lost: not counted again);
//! other fingerprint = conflict; a stored record that failed or whose lease ran out (by
//! this server's clock) = not a duplicate, the client will claim it again with an
//! `If-Match` swap to a `processing` record, counted as reclaimed; otherwise a duplicate.
//! The trigger's swap that records a workflow run taking a door claim (`door.started_at`
//! set) is no claim: the claim was counted when the door made it.
//! Values that are not event records (another client) count as `other`.

use std::borrow::Cow;

use serde::Deserialize;

use super::batch::{Precondition, WriteOutcome};
use super::rates::Claim;

/// The few fields of an event record the judgement needs; the payload is skipped unread.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    fingerprint: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow, default)]
    claim_id: Cow<'a, str>,
    #[serde(default)]
    lease_until_ms: Option<i64>,
    #[serde(default)]
    door: Option<Door>,
}

/// The part of a door claim's record that tells a run's start from a claim.
#[derive(Deserialize)]
struct Door {
    #[serde(default)]
    started_at: Option<serde::de::IgnoredAny>,
}

fn fields(value: &[u8]) -> Option<Fields<'_>> {
    serde_json::from_slice(value).ok()
}

/// The claim a conditional write answered, if it was one. `now_ms` is this server's clock,
/// which is also the clock the plugin judges leases by.
pub(crate) fn classify(pre: Precondition, sent: &[u8], outcome: &WriteOutcome, now_ms: u64) -> Option<Claim> {
    match (pre, outcome) {
        (Precondition::IfAbsent, WriteOutcome::Created(_)) => Some(Claim::Accepted),
        (Precondition::IfAbsent, WriteOutcome::PreconditionFailed(Some(stored))) => {
            refused(sent, &stored.value, now_ms)
        }
        (Precondition::IfAbsent, WriteOutcome::PreconditionFailed(None)) => Some(Claim::Other),
        (Precondition::IfRev(_), WriteOutcome::Replaced(_)) => fields(sent)
            .filter(|f| f.status == "processing" && f.door.as_ref().is_none_or(|d| d.started_at.is_none()))
            .map(|_| Claim::Reclaimed),
        _ => None,
    }
}

fn refused(sent: &[u8], stored: &[u8], now_ms: u64) -> Option<Claim> {
    let (Some(sent), Some(stored)) = (fields(sent), fields(stored)) else {
        return Some(Claim::Other);
    };
    if !sent.claim_id.is_empty() && sent.claim_id == stored.claim_id {
        return None;
    }
    if sent.fingerprint != stored.fingerprint {
        return Some(Claim::Conflict);
    }
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let expired = stored.lease_until_ms.is_some_and(|until| now >= until);
    match stored.status.as_ref() {
        "failed" => None,
        "processing" if expired => None,
        _ => Some(Claim::Duplicate),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::server::batch::Written;
    use crate::server::record::StoredValue;

    const NOW: u64 = 1_785_924_000_000;

    fn rec(fp: &str, status: &str, claim: &str, lease: Option<u64>) -> Vec<u8> {
        let mut v = serde_json::json!({"v": 1, "event_id": "E", "event_type": "t", "payload": "{\"big\":[1,2,3]}",
            "fingerprint": fp, "status": status, "attempt": 1, "claim_id": claim});
        if let Some(l) = lease {
            v["lease_until_ms"] = l.into();
        }
        serde_json::to_vec(&v).unwrap()
    }

    fn refused_by(stored: Vec<u8>) -> WriteOutcome {
        let value = Bytes::from(stored);
        WriteOutcome::PreconditionFailed(Some(StoredValue { value, rev: 1, modified_ms: NOW, expires_ms: 0 }))
    }

    fn create(sent: &[u8], outcome: &WriteOutcome) -> Option<Claim> {
        classify(Precondition::IfAbsent, sent, outcome, NOW)
    }

    #[test]
    fn created_is_accepted_and_refusals_follow_the_plugins_rule() {
        let sent = rec("sha256:a", "processing", "c2", Some(NOW + 1000));
        let w = Written { rev: 1, modified_ms: NOW, expires_ms: 0 };
        assert_eq!(create(&sent, &WriteOutcome::Created(w)), Some(Claim::Accepted));
        let live = |fp: &str, status: &str, lease| refused_by(rec(fp, status, "c1", lease));
        assert_eq!(create(&sent, &live("sha256:a", "processing", Some(NOW + 1))), Some(Claim::Duplicate));
        assert_eq!(create(&sent, &live("sha256:a", "completed", None)), Some(Claim::Duplicate));
        assert_eq!(create(&sent, &live("sha256:a", "processing", None)), Some(Claim::Duplicate));
        assert_eq!(create(&sent, &live("sha256:b", "completed", None)), Some(Claim::Conflict));
        // About to be claimed again: the swap that follows is what counts.
        assert_eq!(create(&sent, &live("sha256:a", "failed", None)), None);
        assert_eq!(create(&sent, &live("sha256:a", "processing", Some(NOW))), None);
        // The client's own write, landed earlier with its answer lost.
        assert_eq!(create(&sent, &refused_by(rec("sha256:a", "processing", "c2", None))), None);
    }

    #[test]
    fn foreign_values_are_other_and_swaps_count_only_reclaims() {
        let sent = rec("sha256:a", "processing", "c2", None);
        assert_eq!(create(b"{\"n\":1}", &refused_by(rec("sha256:a", "completed", "c1", None))), Some(Claim::Other));
        assert_eq!(create(&sent, &refused_by(b"[1,2]".to_vec())), Some(Claim::Other));
        assert_eq!(create(&sent, &WriteOutcome::PreconditionFailed(None)), Some(Claim::Other));
        let w = WriteOutcome::Replaced(Written { rev: 2, modified_ms: NOW, expires_ms: 0 });
        assert_eq!(classify(Precondition::IfRev(1), &sent, &w, NOW), Some(Claim::Reclaimed));
        let done = rec("sha256:a", "completed", "c2", None);
        assert_eq!(classify(Precondition::IfRev(1), &done, &w, NOW), None);
        assert_eq!(classify(Precondition::None, &sent, &w, NOW), None);
        assert_eq!(classify(Precondition::IfRev(1), b"\xff", &w, NOW), None);
    }
}
