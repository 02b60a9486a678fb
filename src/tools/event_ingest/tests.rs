//! `event_ingest` against the in-memory store: outcomes, conflicts, bad input, races.

use super::super::testing::{params, settings, store};
use super::request::MAX_PAYLOAD_BYTES;
use super::*;
use crate::error::ErrorClass;
use event_store::record::short_fingerprint;

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
    let e =
        run(&s, &st, &params(json!({"event_id": "D", "event_type": "created", "payload": deep}))).await.unwrap_err();
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
