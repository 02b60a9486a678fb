//! The door's answer for every case, over the in-memory store.

use super::*;
use crate::trigger::reply::dispatch_chunk;
use event_store::memory::MemoryStore;
use event_store::HostClock;

fn raw(headers: &[(&str, &str)], body: &str) -> String {
    let mut text = String::from("POST /triggers/plugin/e1 HTTP/1.1\r\nHost: dify\r\n");
    for (n, v) in headers {
        text.push_str(&format!("{n}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    hex::encode(text)
}

/// A built subscription with `props`; the two properties without a default (the store and
/// the signature scheme) are filled in where a case leaves them out.
fn sub(mut props: Value) -> Value {
    if let Some(map) = props.as_object_mut() {
        map.entry("kv_url").or_insert(json!("http://127.0.0.1:8123"));
        map.entry("signature_scheme").or_insert(json!("none"));
    }
    json!({"endpoint": "https://dify.example/triggers/plugin/e1", "expires_at": -1, "parameters": {}, "properties": props})
}

async fn deliver(store: &MemoryStore, props: Value, raw_hex: &str) -> Verdict {
    match check(&sub(props), raw_hex, 1_700_000_000) {
        Ok(checked) => claim(store, checked).await,
        Err(v) => *v,
    }
}

fn store() -> MemoryStore {
    MemoryStore::new(HostClock::system(), 0)
}

#[tokio::test]
async fn first_delivery_starts_the_event_and_a_redelivery_does_not() {
    let s = store();
    let r = raw(
        &[("X-Github-Delivery", "d-1"), ("X-Github-Event", "push"), ("Content-Type", "application/json")],
        r#"{"ref":"main"}"#,
    );
    let props = json!({"event_type_header": "X-GitHub-Event", "lease_seconds": 600});
    let first = deliver(&s, props.clone(), &r).await;
    assert_eq!((first.status, first.outcome, first.start), (200, "accepted", true));
    let p = &first.payload;
    assert_eq!(
        (&p["delivery_id"], &p["event_type"], &p["attempt"], &p["key"]),
        (&json!("d-1"), &json!("push"), &json!(1), &json!("evt_d-1"))
    );
    assert_eq!((&p["body_json"], &p["headers"]["x-github-event"]), (&json!({"ref": "main"}), &json!("push")));
    assert!(p["lease_until"].is_string() && p["claimed_at"].is_string());
    let chunk = dispatch_chunk(&first);
    assert_eq!(chunk["events"], json!(["webhook_received"]));

    let again = deliver(&s, props.clone(), &r).await;
    assert_eq!((again.status, again.outcome, again.start), (200, "in_progress", false));
    assert_eq!(dispatch_chunk(&again)["events"], json!([]));
    let custom = deliver(&s, json!({"duplicate_status": 409, "event_type_header": "X-GitHub-Event"}), &r).await;
    assert_eq!((custom.status, custom.outcome), (409, "in_progress"));
    assert_eq!(s.len(), 1);
}

#[tokio::test]
async fn a_failed_run_is_claimed_again_as_attempt_two_and_a_completed_one_is_a_duplicate() {
    let s = store();
    let settings = crate::tools::testing::settings();
    let r = raw(&[("X-GitHub-Delivery", "d-2")], "{}");
    assert_eq!(deliver(&s, json!({}), &r).await.outcome, "accepted");
    let fail = crate::tools::testing::params(json!({"event_id": "d-2", "attempt": 1, "status": "failed"}));
    crate::tools::event_complete::run(&s, &settings, &fail).await.unwrap();
    let second = deliver(&s, json!({}), &r).await;
    assert_eq!((second.outcome, &second.payload["attempt"]), ("accepted", &json!(2)));
    let done = crate::tools::testing::params(json!({"event_id": "d-2", "attempt": 2}));
    crate::tools::event_complete::run(&s, &settings, &done).await.unwrap();
    let third = deliver(&s, json!({}), &r).await;
    assert_eq!((third.outcome, third.start, &third.fields["status"]), ("duplicate", false, &json!("completed")));
}

#[tokio::test]
async fn refusals_start_nothing_and_claim_nothing() {
    let s = store();
    let body = "Hello, World!";
    let signed = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let gh = json!({"signature_scheme": "github", "webhook_secret": "It's a Secret to Everybody"});
    let cases = [
        (gh.clone(), raw(&[("X-GitHub-Delivery", "a")], body), 401, "unsigned"),
        (
            gh.clone(),
            raw(&[("X-GitHub-Delivery", "a"), ("X-Hub-Signature-256", signed)], "Hello, World?"),
            401,
            "unsigned",
        ),
        (gh.clone(), raw(&[("X-Hub-Signature-256", signed)], body), 400, "no_id"),
        (json!({}), raw(&[("X-GitHub-Delivery", "")], body), 400, "no_id"),
        (json!({"id_json_pointer": "/id"}), raw(&[], r#"{"id": {"nested": 1}}"#), 400, "no_id"),
        (json!({}), raw(&[("X-GitHub-Delivery", &"x".repeat(300))], body), 400, "no_id"),
        (json!({"signature_scheme": "nope"}), raw(&[], body), 500, "misconfigured"),
        (json!({}), "not hex".to_owned(), 400, "bad_request"),
    ];
    for (props, r, status, outcome) in cases {
        let v = deliver(&s, props.clone(), &r).await;
        assert_eq!((v.status, v.outcome, v.start), (status, outcome, false), "{props}");
        assert_eq!(dispatch_chunk(&v)["events"], json!([]));
    }
    let ok = deliver(&s, gh, &raw(&[("X-GitHub-Delivery", "a"), ("X-Hub-Signature-256", signed)], body)).await;
    assert_eq!(ok.outcome, "accepted");
    assert_eq!(s.len(), 1, "only the signed delivery was claimed");
}

#[tokio::test]
async fn ids_come_from_a_header_a_json_pointer_or_the_body_hash() {
    let s = store();
    let stripe = deliver(
        &s,
        json!({"id_json_pointer": "/id", "event_type_json_pointer": "/type"}),
        &raw(&[], r#"{"id":"evt_1","type":"charge.succeeded"}"#),
    )
    .await;
    assert_eq!(
        (&stripe.payload["delivery_id"], &stripe.payload["event_type"]),
        (&json!("evt_1"), &json!("charge.succeeded"))
    );
    let numeric = deliver(&s, json!({"id_json_pointer": "/n"}), &raw(&[], r#"{"n":42}"#)).await;
    assert_eq!(numeric.payload["delivery_id"], "42");
    let shopify =
        deliver(&s, json!({"id_header": "X-Shopify-Webhook-Id"}), &raw(&[("x-shopify-webhook-id", "s-1")], "{}")).await;
    assert_eq!(shopify.payload["delivery_id"], "s-1");
    let hashed = deliver(&s, json!({"id_body_sha256": true}), &raw(&[], "same body")).await;
    let expected = hex::encode(Sha256::digest(b"same body"));
    assert_eq!(hashed.payload["delivery_id"], json!(expected));
    // The warning in the docs: an equal body is the same delivery, whatever the headers.
    let twin = deliver(&s, json!({"id_body_sha256": true}), &raw(&[("X-Other", "1")], "same body")).await;
    assert_eq!(twin.outcome, "in_progress");
}

#[tokio::test]
async fn store_failures_ask_the_sender_to_retry_and_conflicts_are_duplicates() {
    let v = failed(ToolError::upstream("the store at x is unreachable"), "d", "push", 200);
    assert_eq!((v.status, v.outcome, v.retry_after, v.start), (503, "store_unavailable", Some(RETRY_AFTER_S), false));
    let head = String::from_utf8(super::super::reply::http_response(&v)).unwrap();
    assert!(head.starts_with("HTTP/1.1 503 ") && head.contains("Retry-After: 5\r\n"), "{head}");
    let c = failed(ToolError::conflict("different type"), "d", "push", 202);
    assert_eq!((c.status, c.outcome), (202, "conflict"));
    // The same id claimed earlier under another event type is that conflict, and says so.
    let s = store();
    let r = |t: &str| raw(&[("X-GitHub-Delivery", "same"), ("X-GitHub-Event", t)], "{}");
    let props = json!({"event_type_header": "X-GitHub-Event"});
    assert_eq!(deliver(&s, props.clone(), &r("push")).await.outcome, "accepted");
    let conflict = deliver(&s, props, &r("issues")).await;
    assert_eq!(conflict.outcome, "conflict");
    assert_eq!(
        conflict.message,
        r#"delivery same was already received as event type "push"; this delivery says "issues""#
    );
}

#[test]
fn builder_subscriptions_are_recognised_by_their_bare_endpoint() {
    assert!(is_builder(&json!({"endpoint": "5b0e1d3c-0000-4000-8000-000000000000", "properties": {}})));
    assert!(is_builder(&Value::Null));
    assert!(!is_builder(&sub(json!({}))));
}

#[test]
fn oversized_bodies_are_refused_before_the_claim() {
    let big = "x".repeat(MAX_BODY_BYTES + 1);
    let v = check(&sub(json!({})), &raw(&[("X-GitHub-Delivery", "big")], &big), 0).unwrap_err();
    assert_eq!((v.status, v.outcome), (413, "too_large"));
}

/// A door whose store and clock the test holds: the clock moves only when the test moves it.
struct Held {
    now: event_store::ClockHand,
    store: MemoryStore,
}

impl Held {
    fn new() -> Held {
        let (clock, now) = HostClock::manual(1_780_000_000_000);
        Held { store: MemoryStore::new(clock, 0), now }
    }
    fn pass(&self, ms: i64) {
        self.now.advance(ms);
    }
    async fn deliver(&self, props: &Value, r: &str) -> Verdict {
        deliver(&self.store, props.clone(), r).await
    }
    async fn invoke(&self, props: &Value, attempt: u32) -> crate::trigger::start::Taken {
        let door = Door::from_properties(&sub(props.clone())["properties"]).unwrap();
        let key = storage_key(None, "r-1");
        crate::trigger::start::take_in(&self.store, &door, &key, attempt, std::time::Duration::from_secs(5)).await
    }
    async fn record(&self) -> event_store::record::Record {
        let cur = self.store.read("evt_r-1", std::time::Duration::from_secs(5)).await.unwrap().unwrap();
        event_store::record::Record::from_bytes(&cur.value).unwrap()
    }
}

#[tokio::test]
async fn a_claim_no_run_took_within_its_start_window_is_taken_over_by_the_next_delivery() {
    use crate::trigger::start::Taken;
    let h = Held::new();
    let props = json!({"start_within_seconds": 60, "lease_seconds": 600});
    let r = raw(&[("X-GitHub-Delivery", "r-1")], "{}");
    let first = h.deliver(&props, &r).await;
    assert_eq!((first.outcome, &first.fields["retry"]), ("accepted", &json!(false)));
    let rec = h.record().await;
    assert!(rec.waiting_for_run(), "a door claim waits for its run: {rec:?}");
    assert_eq!(rec.lease_until_ms, Some(1_780_000_000_000 + 60_000), "the lease is the start window");
    // Within the window a redelivery is in progress, as before.
    h.pass(59_999);
    assert_eq!(h.deliver(&props, &r).await.outcome, "in_progress");
    // No run took it: the next delivery takes it over as attempt 2 and says why.
    h.pass(1);
    let second = h.deliver(&props, &r).await;
    assert_eq!(
        (second.outcome, &second.fields["attempt"], &second.fields["retry"], &second.fields["reason"]),
        ("accepted", &json!(2), &json!(true), &json!("never_started"))
    );
    assert!(second.start);
    assert!(h.record().await.waiting_for_run(), "attempt 2 is a reservation again");
    // Attempt 1's run, started late, is cancelled; attempt 2's takes the claim.
    assert_eq!(h.invoke(&props, 1).await, Taken::Superseded(2));
    let Taken::Started(rec) = h.invoke(&props, 2).await else { panic!("attempt 2's run did not start") };
    assert_eq!(rec.door.as_ref().map(|d| d.runs), Some(1));
    assert_eq!(rec.lease_until_ms, Some(h.now.now_ms() + 600_000));
}

#[tokio::test]
async fn an_invoked_claim_keeps_its_run_lease_and_later_invokes_are_runs_of_the_same_delivery() {
    use crate::trigger::start::Taken;
    let h = Held::new();
    let props = json!({"start_within_seconds": 60, "lease_seconds": 600});
    let r = raw(&[("X-GitHub-Delivery", "r-1")], "{}");
    assert_eq!(h.deliver(&props, &r).await.outcome, "accepted");
    h.pass(5_000);
    let Taken::Started(first) = h.invoke(&props, 1).await else { panic!("no start") };
    let door = first.door.clone().unwrap();
    assert_eq!((door.runs, door.started_at.is_some()), (1, true));
    assert_eq!(first.lease_until_ms, Some(1_780_000_005_000 + 600_000), "the run's lease from its start");
    // A second subscribed workflow: the same attempt, one more run, the lease unchanged.
    h.pass(1_000);
    let Taken::Started(second) = h.invoke(&props, 1).await else { panic!("no start") };
    assert_eq!((second.door.as_ref().unwrap().runs, second.lease_until_ms), (2, first.lease_until_ms));
    assert_eq!(second.door.as_ref().unwrap().started_at, door.started_at, "started once");
    // Past the start window, but within the run's lease: a redelivery is in progress.
    h.pass(120_000);
    assert_eq!(h.deliver(&props, &r).await.outcome, "in_progress");
    // Past the run's lease: an ordinary expired lease, not never_started.
    h.pass(600_000);
    let next = h.deliver(&props, &r).await;
    assert_eq!((next.outcome, &next.fields["reason"]), ("accepted", &json!("lease_expired")));
}
