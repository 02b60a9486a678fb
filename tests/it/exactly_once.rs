//! Exactly once through the real plugin binary and real stores, both backends, under the
//! faults that once lost events: a claim delivered later than its round trip waited (and
//! after the plugin's retry queued behind it), a retention shorter than the lease, and an
//! `upstream_error` whose claim had landed.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::chaos_slow_store::{fresh_id, Backend, Store};
use crate::support::plugin::{creds, Plugin};
use crate::support::proxy::Fault;

/// The first claim of a key is held 1.5 s before the store receives it, and its client
/// connection is cut after 1 s (a proxy giving up on a slow upstream): the plugin reads the
/// key back (absent), claims again, and that second claim is applied after the first. Its
/// answer carries the plugin's own claim_id: `accepted`, not `duplicate` of itself.
async fn own_late_claim_is_accepted(backend: Backend) {
    let store = Store::start(backend);
    let hold = Fault::HoldRequest {
        trigger: backend.wire().claim,
        times: 1,
        hold: Duration::from_millis(1500),
        cut_after: Some(Duration::from_millis(1000)),
        queue: true,
    };
    let (proxy, url) = store.proxy(backend, hold);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "4000")]).await;
    let c = json!({"kv_url": url, "default_lease_seconds": "0"});
    let ev = json!({"event_id": fresh_id("own"), "event_type": "created", "payload": "{\"n\":1}"});
    let started = Instant::now();
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the first claim was held");
    assert!(started.elapsed() >= Duration::from_millis(1500), "answered after the held claim landed");
    assert_eq!(first.outcome(), "accepted", "the only delivery of the event: {first:?}");
    assert_eq!(first.json()["attempt"], 1);
    let again = p.invoke("event_ingest", &c, ev).await;
    assert_eq!(again.outcome(), "duplicate", "{again:?}");
}

/// The same hold with a deadline shorter than the hold: the call cannot learn the outcome in
/// time. It answers `upstream_error` saying how long it waited (never `duplicate` of its own
/// claim); the claim lands after the call gave up, and with a lease the event is taken over
/// once the lease ends.
async fn claim_landing_after_the_deadline_is_bounded_by_the_lease(backend: Backend) {
    let store = Store::start(backend);
    let hold = Fault::HoldRequest {
        trigger: backend.wire().claim,
        times: 1,
        hold: Duration::from_millis(1500),
        cut_after: None,
        queue: true,
    };
    let (_proxy, url) = store.proxy(backend, hold);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")]).await;
    let c = json!({"kv_url": url});
    let ev = json!({"event_id": fresh_id("deadline"), "event_type": "created", "lease_seconds": 2});
    let started = Instant::now();
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    let waited = started.elapsed();
    assert_eq!(first.outcome(), "error:upstream_error", "{first:?}");
    let msg = first.error.as_ref().unwrap()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("this call waited") && msg.contains("1000 ms"), "{msg}");
    assert!(waited < Duration::from_millis(1400), "one deadline bounds the whole call: {waited:?}");
    // The held claim lands at 1.5 s; after its 2 s lease a redelivery takes the event over.
    tokio::time::sleep(Duration::from_millis(3700).saturating_sub(started.elapsed())).await;
    let later = p.invoke("event_ingest", &c, ev).await;
    assert_eq!(later.outcome(), "accepted", "{later:?}");
}

/// A retention shorter than the lease: the record is kept until the lease (plus a margin)
/// ends, so a redelivery while the first run holds its lease is a duplicate, not a second
/// attempt 1.
async fn retention_shorter_than_the_lease_keeps_the_record(backend: Backend) {
    let store = Store::start(backend);
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": store.direct_url(), "retention": "2s"});
    let ev = json!({"event_id": fresh_id("ret"), "event_type": "created", "lease_seconds": 3600});
    assert_eq!(p.invoke("event_ingest", &c, ev.clone()).await.outcome(), "accepted");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = p.invoke("event_ingest", &c, ev).await;
    assert_eq!(again.outcome(), "duplicate", "the first run still holds its lease: {again:?}");
}

/// The claim lands but its answer is lost, and the read-back fails too: the call answers
/// `upstream_error`, and first rolls its claim back (marked failed by claim_id), so the
/// sender's retry is accepted at once, even without a lease.
async fn upstream_error_leaves_no_claim_behind(backend: Backend) {
    let store = Store::start(backend);
    let w = backend.wire();
    // plugin → cut the claim's answer → hold the first read past the deadline → store.
    let read_trigger: &'static [u8] = match backend {
        Backend::Kv => b"GET /state/",
        Backend::Redis => b"*2\r\n$3\r\nGET\r\n",
    };
    let inner = crate::support::proxy::Proxy::start(
        store.addr(),
        Fault::HoldRequest {
            trigger: read_trigger,
            times: 1,
            hold: Duration::from_millis(3000),
            cut_after: None,
            queue: false,
        },
    );
    let outer = crate::support::proxy::Proxy::start(inner.addr(), Fault::Cut { trigger: w.claim, times: 1 });
    let url = match backend {
        Backend::Kv => outer.http_url(),
        Backend::Redis => outer.redis_url(),
    };
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "2000")]).await;
    let c = json!({"kv_url": url, "default_lease_seconds": "0"});
    let id = fresh_id("orphan");
    let ev = json!({"event_id": id, "event_type": "created"});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!((outer.fired(), inner.fired()), (1, 1), "the claim's answer was cut and the read-back held");
    assert_eq!(first.outcome(), "error:upstream_error", "{first:?}");
    let msg = first.error.as_ref().unwrap()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("rolled back"), "{msg}");
    let direct = creds(&store.direct_url());
    let st = p.invoke("event_status", &direct, json!({"event_id": id})).await;
    assert_eq!((st.json()["status"].as_str(), st.json()["attempt"].as_u64()), (Some("failed"), Some(1)), "{st:?}");
    let retry = p.invoke("event_ingest", &direct, ev).await;
    assert_eq!((retry.outcome().as_str(), retry.json()["attempt"].as_u64()), ("accepted", Some(2)), "{retry:?}");
}

mod kv {
    use super::Backend::Kv;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn own_late_claim_is_accepted() {
        super::own_late_claim_is_accepted(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_landing_after_the_deadline_is_bounded_by_the_lease() {
        super::claim_landing_after_the_deadline_is_bounded_by_the_lease(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn retention_shorter_than_the_lease_keeps_the_record() {
        super::retention_shorter_than_the_lease_keeps_the_record(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn upstream_error_leaves_no_claim_behind() {
        super::upstream_error_leaves_no_claim_behind(Kv).await;
    }
}

mod redis {
    use super::Backend::Redis;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn own_late_claim_is_accepted() {
        super::own_late_claim_is_accepted(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_landing_after_the_deadline_is_bounded_by_the_lease() {
        super::claim_landing_after_the_deadline_is_bounded_by_the_lease(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn retention_shorter_than_the_lease_keeps_the_record() {
        super::retention_shorter_than_the_lease_keeps_the_record(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn upstream_error_leaves_no_claim_behind() {
        super::upstream_error_leaves_no_claim_behind(Redis).await;
    }
}
