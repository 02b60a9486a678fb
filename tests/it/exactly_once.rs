//! Exactly once through the real plugin binary and real stores, both backends, under the
//! faults that once lost events: a claim delivered later than its round trip waited (and
//! after the plugin's retry queued behind it), a claim held past the call's deadline, a
//! retention shorter than the lease, and a claim whose answer and read-back were both lost.

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
    let store = Store::start(backend).await;
    let hold = Fault::HoldRequest {
        trigger: backend.wire().claim,
        times: 1,
        hold: Duration::from_millis(1500),
        cut_after: Some(Duration::from_millis(1000)),
        queue: true,
    };
    let (proxy, url) = store.proxy(backend, hold);
    // The call's deadline only has to outlast the 1.5 s hold; 30 s keeps a loaded machine (a
    // slow re-send, a slow proxy) from turning this into a deadline test.
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "30000")]).await;
    let c = json!({"kv_url": url, "default_lease_seconds": "0"});
    let ev = json!({"event_id": fresh_id("own"), "event_type": "created", "payload": "{\"n\":1}"});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the first claim was held");
    // The answer waited for the held claim: the proxy had forwarded it to the store (and the
    // re-sent claim behind it) before the plugin answered.
    assert_eq!(proxy.held_forwarded(), 1, "answered after the held claim landed");
    assert_eq!(first.outcome(), "accepted", "the only delivery of the event: {first:?}");
    assert_eq!(first.json()["attempt"], 1);
    let again = p.invoke("event_ingest", &c, ev).await;
    assert_eq!(again.outcome(), "duplicate", "{again:?}");
}

/// The same hold with a deadline (1 s) shorter than the hold, and no cut: the re-sent claims
/// queue behind the held one. Every claim carried a deadline in the store's clock that has
/// passed when it arrives, so the store refuses them all. The call answers `upstream_error`
/// saying so; the next delivery, right after the hold is released, is `accepted` as attempt 1
/// (no lease to wait for: the default lease is 20 minutes), and the store holds that claim.
async fn claim_held_past_its_deadline_never_lands(backend: Backend) {
    let store = Store::start(backend).await;
    let hold = Fault::HoldRequest {
        trigger: backend.wire().claim,
        times: 1,
        // Far past the 1 s deadline: the call must answer while the claim is still held,
        // and on a loaded machine it may answer seconds late (a hang bound, not a latency one).
        hold: Duration::from_secs(20),
        cut_after: None,
        queue: true,
    };
    let (proxy, url) = store.proxy(backend, hold);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")]).await;
    let c = json!({"kv_url": url});
    let id = fresh_id("deadline");
    let ev = json!({"event_id": id, "event_type": "created"});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    // One deadline bounds the whole call: it answered while the proxy still held the claim,
    // so neither it nor a re-sent claim (queued behind it) had reached the store.
    let forwarded = proxy.released();
    assert_eq!(proxy.fired(), 1, "the first claim was held");
    assert_eq!(forwarded, 0, "one deadline bounds the whole call: answered while the claim was still held");
    assert_eq!(first.outcome(), "error:upstream_error", "{first:?}");
    let msg = first.message().to_owned();
    assert!(msg.contains("this call waited") && msg.contains("1000 ms"), "{msg}");
    assert!(msg.contains("none can land"), "{msg}");
    proxy.until_released(1, Duration::from_secs(120)).await;
    let next = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!((next.outcome().as_str(), next.json()["attempt"].as_u64()), ("accepted", Some(1)), "{next:?}");
    held_claim_stays(&p, &store, &id, &next).await;
}

/// The store holds exactly the claim `accepted` answered, and keeps it while every request
/// the proxy held reaches the store (they are all refused).
pub(crate) async fn held_claim_stays(p: &Plugin, store: &Store, id: &str, accepted: &crate::support::plugin::Reply) {
    let direct = creds(&store.direct_url());
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        let st = p.invoke("event_status", &direct, json!({"event_id": id})).await;
        let seen = (&st.json()["status"], &st.json()["attempt"], &st.json()["updated_at"]);
        let told = (&json!("processing"), &accepted.json()["attempt"], &accepted.json()["updated_at"]);
        assert_eq!(seen, told, "the store holds the accepted claim, and nothing else landed: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A retention shorter than the lease: the record is kept until the lease (plus a margin)
/// ends, so a redelivery while the first run holds its lease is a duplicate, not a second
/// attempt 1.
async fn retention_shorter_than_the_lease_keeps_the_record(backend: Backend) {
    let store = Store::start(backend).await;
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": store.direct_url(), "retention": "2s"});
    let ev = json!({"event_id": fresh_id("ret"), "event_type": "created", "lease_seconds": 3600});
    assert_eq!(p.invoke("event_ingest", &c, ev.clone()).await.outcome(), "accepted");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = p.invoke("event_ingest", &c, ev).await;
    assert_eq!(again.outcome(), "duplicate", "the first run still holds its lease: {again:?}");
}

/// The claim lands but its answer is lost, and the read-back right after it is held past the
/// deadline too: once the claim's store deadline has passed, the call reads once more (on a
/// new connection) and finds its own claim: `accepted`, and the sender's retry is a duplicate.
async fn claim_whose_answer_and_read_back_were_lost_is_found(backend: Backend) {
    let store = Store::start(backend).await;
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
    assert_eq!((first.outcome().as_str(), first.json()["attempt"].as_u64()), ("accepted", Some(1)), "{first:?}");
    let retry = p.invoke("event_ingest", &creds(&store.direct_url()), ev).await;
    assert_eq!(retry.outcome(), "duplicate", "{retry:?}");
}

mod kv {
    use super::Backend::Kv;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn own_late_claim_is_accepted() {
        super::own_late_claim_is_accepted(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_held_past_its_deadline_never_lands() {
        super::claim_held_past_its_deadline_never_lands(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn retention_shorter_than_the_lease_keeps_the_record() {
        super::retention_shorter_than_the_lease_keeps_the_record(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_whose_answer_and_read_back_were_lost_is_found() {
        super::claim_whose_answer_and_read_back_were_lost_is_found(Kv).await;
    }
}

mod redis {
    use super::Backend::Redis;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn own_late_claim_is_accepted() {
        super::own_late_claim_is_accepted(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_held_past_its_deadline_never_lands() {
        super::claim_held_past_its_deadline_never_lands(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn retention_shorter_than_the_lease_keeps_the_record() {
        super::retention_shorter_than_the_lease_keeps_the_record(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_whose_answer_and_read_back_were_lost_is_found() {
        super::claim_whose_answer_and_read_back_were_lost_is_found(Redis).await;
    }
}
