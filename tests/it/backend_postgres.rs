//! The event store on a real PostgreSQL (Debian's binaries): the scenarios every backend
//! passes (outcomes, races across processes, keys, retention, lifecycle, faults).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::fake::closed_port;
use crate::support::plugin::{creds, Plugin};
use crate::support::postgres::PgServer;
use crate::support::scenarios;

/// A cluster with a role `app` owning database `events`, and its kv_url.
fn server() -> (PgServer, String) {
    let pg = PgServer::start(&[]);
    let url = pg.app("app", "events");
    (pg, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_outcome_through_the_binary() {
    let (pg, url) = server();
    scenarios::outcomes(&url).await;
    // First use made our schema and recorded its layout version.
    assert_eq!(pg.must("events", "SELECT schema_version FROM stateful_tool.meta"), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_duplicates_fifty_times_across_processes() {
    let (pg, url) = server();
    scenarios::race(&url, 4, 50, 4).await;
    assert_eq!(pg.must("events", "SELECT count(*) FROM stateful_tool.events"), "50");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_fifty_six_concurrent_duplicates_three_times() {
    let (pg, url) = server();
    scenarios::race(&url, 4, 3, 64).await;
    assert_eq!(pg.must("events", "SELECT count(*) FROM stateful_tool.events"), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_escaped_and_distinct_and_the_schema_is_chosen_by_the_url() {
    let (pg, url) = server();
    let mut keys = scenarios::key_safety(&format!("{url}?schema=claims_eu")).await;
    let stored = pg.must("events", "SELECT string_agg(key, E'\\n' ORDER BY key) FROM claims_eu.events");
    keys.sort();
    assert_eq!(stored.lines().collect::<Vec<_>>(), keys, "exactly the escaped keys are rows");
    assert_eq!(pg.must("events", "SELECT to_regnamespace('stateful_tool') IS NULL"), "t", "only the named schema");
}

/// Retention is the row's expiry on the server's clock: invisible the moment it passes,
/// the id new again, and the row itself purged soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_record_and_retention_are_as_documented() {
    let (pg, url) = server();
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": url, "namespace": "acme", "retention": "2s", "default_lease_seconds": "0"});
    let ev = json!({"event_id": "EVT-1", "event_type": "created", "payload": "x"});
    let a = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(a.json()["key"], "evt_acme~EVT-1");
    let q = "SELECT convert_from(value, 'UTF8'), \
             (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, claim_id <> '' \
             FROM stateful_tool.events WHERE key = 'evt_acme~EVT-1'";
    let row = pg.must("events", q);
    let parts: Vec<&str> = row.rsplitn(3, '|').collect();
    let raw: serde_json::Value = serde_json::from_str(parts[2]).unwrap();
    assert_eq!(raw["claim_id"].as_str().map(str::len), Some(32), "{raw}");
    let left: i64 = parts[1].parse().unwrap();
    assert!(left > 0 && left <= 2000, "the row expires after the retention: {left} ms");
    assert_eq!(parts[0], "t", "the claim_id column is filled");
    let globex = json!({"kv_url": url, "namespace": "globex"});
    assert_eq!(p.invoke("event_status", &globex, json!({"event_id": "EVT-1"})).await.outcome(), "not_found");
    // Past its expiry the row is still there (not purged yet), but no operation sees it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.must("events", "SELECT count(*) FROM stateful_tool.events WHERE expires_at < clock_timestamp()") != "1" {
        assert!(Instant::now() < deadline, "the row never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = p.invoke("event_status", &c, json!({"event_id": "EVT-1"})).await;
    assert_eq!(status.outcome(), "not_found", "{status:?}");
    // Accepted again (kept for an hour now: it must outlive the purge below).
    let hour = json!({"kv_url": url, "namespace": "acme", "retention": "1h", "default_lease_seconds": "0"});
    assert_eq!(p.invoke("event_ingest", &hour, ev).await.outcome(), "accepted");
    // Expired rows of other ids are deleted by the plugin's purge.
    let old = json!({"kv_url": url, "namespace": "old", "retention": "1s", "default_lease_seconds": "0"});
    for i in 0..5 {
        p.invoke("event_ingest", &old, json!({"event_id": format!("OLD-{i}"), "event_type": "created"})).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while pg.must("events", "SELECT count(*) FROM stateful_tool.events WHERE key LIKE 'evt_old~%'") != "0" {
        assert!(Instant::now() < deadline, "expired rows were never purged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pg.must("events", "SELECT count(*) FROM stateful_tool.events"), "1", "the live row stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_faults_are_upstream_errors() {
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")]).await;
    let ev = json!({"event_id": "F1", "event_type": "created"});
    let down = format!("postgres://app:pw@127.0.0.1:{}/events", closed_port());
    let r = p.invoke("event_ingest", &creds(&down), ev.clone()).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
    let (mut pg, url) = server();
    assert_eq!(p.invoke("event_ingest", &creds(&url), ev.clone()).await.outcome(), "accepted");
    pg.kill9();
    let r = p.invoke("event_ingest", &creds(&url), json!({"event_id": "F2", "event_type": "created"})).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
    let bad = p.invoke("event_ingest", &creds(&format!("{url}?schema=No-Such")), ev).await;
    assert_eq!(bad.error_type(), Some("param_invalid"), "{bad:?}");
}

mod lifecycle {
    use super::server;
    use crate::support::lifecycle;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn complete_fail_repeat_stale_unknown() {
        lifecycle::complete_fail_repeat_stale_unknown(&server().1).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn crash_and_takeover() {
        lifecycle::crash_and_takeover(&server().1).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_lease_means_processing_until_completed() {
        lifecycle::no_lease_means_processing_until_completed(&server().1).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_reclaim_among_concurrent_redeliveries() {
        lifecycle::one_reclaim_among_concurrent_redeliveries(&server().1).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn host_clock_skew_changes_nothing() {
        lifecycle::host_clock_skew_changes_nothing(&server().1).await;
    }
}

/// The late-write deadline (on the store's clock) is judged by the statement itself: a
/// write past it is refused and nothing lands; one within it is applied as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_past_their_store_clock_deadline_are_refused_by_the_statement() {
    use event_store::postgres::PostgresStore;
    use event_store::{Created, EventStore, HostClock, Rollback, StoreDeadline, StoreError, Swapped, Write};
    let (_pg, url) = server();
    let t = Duration::from_secs(10);
    let store = PostgresStore::connect(&url, 0, HostClock::system(), t).await.unwrap();
    let (_, now) = store.read_at("k", t).await.unwrap();
    let (past, future) = (Some(StoreDeadline(now - 1)), Some(StoreDeadline(now + 60_000)));
    let ttl = Duration::from_secs(60);
    let late =
        |e: StoreError| assert!(matches!(e, StoreError::TooLate { deadline_ms, .. } if deadline_ms == now - 1), "{e}");
    late(store.create("k", Write { value: br#"{"claim_id":"a"}"#, ttl, until: past }, t).await.unwrap_err());
    assert!(store.read("k", t).await.unwrap().is_none(), "a refused claim left a row");
    assert!(matches!(
        store.create("k", Write { value: br#"{"claim_id":"a"}"#, ttl, until: future }, t).await,
        Ok(Created::Created)
    ));
    let cur = store.read("k", t).await.unwrap().unwrap();
    late(
        store.swap("k", &cur.version, Write { value: br#"{"claim_id":"b"}"#, ttl, until: past }, t).await.unwrap_err(),
    );
    late(store.release("k", Rollback { claim_id: "a", restore: None, ttl, until: past }, t).await.unwrap_err());
    let (still, at) = store.read_at("k", t).await.unwrap();
    assert_eq!(still.unwrap().value, br#"{"claim_id":"a"}"#.to_vec(), "a refused write changed the row");
    assert!(at >= now, "the store's clock went back: {at} < {now}");
    let swapped =
        store.swap("k", &cur.version, Write { value: br#"{"claim_id":"b"}"#, ttl, until: future }, t).await.unwrap();
    assert!(matches!(swapped, Swapped::Swapped));
    assert!(matches!(
        store.swap("k", &cur.version, Write { value: b"x", ttl, until: None }, t).await.unwrap(),
        Swapped::Changed(Some(_))
    ));
    assert!(
        !store.release("k", Rollback { claim_id: "a", restore: None, ttl, until: future }, t).await.unwrap(),
        "released by another claim_id"
    );
    assert!(store.release("k", Rollback { claim_id: "b", restore: None, ttl, until: future }, t).await.unwrap());
    assert!(store.read("k", t).await.unwrap().is_none());
}
