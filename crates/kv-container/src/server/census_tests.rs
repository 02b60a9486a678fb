//! Census tests: counts, stuck judgement on a pinned clock, list order and caps, the cache.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::server::batch::{Precondition, WriteOp};
use crate::server::engine::{DurabilityMode, Engine, WriterHandle};
use crate::server::record::ServerClock;

const T0: u64 = 1_785_924_000_000;

fn event(id: &str, status: &str, lease: Option<u64>, result: Option<&str>) -> String {
    let mut v = json!({"v": 1, "event_id": id, "event_type": "created", "payload": "{\"n\":1}",
        "fingerprint": "sha256:x", "status": status, "received_at": "-", "updated_at": "-", "attempt": 2});
    if let Some(l) = lease {
        v["lease_until_ms"] = l.into();
    }
    if let Some(r) = result {
        v["result"] = r.into();
    }
    v.to_string()
}

async fn put(engine: &Engine, key: &str, value: String, ttl_ms: Option<u64>) {
    engine.write(WriteOp::put(key, value, Precondition::None, ttl_ms)).await.expect("written");
}

fn open(dir: &std::path::Path) -> (Engine, WriterHandle, Arc<std::sync::atomic::AtomicU64>) {
    let (clock, now) = ServerClock::manual(T0);
    let (engine, writer) =
        Engine::open_cached(dir, DurabilityMode::None, clock, crate::server::open::DEFAULT_CACHE_MB << 20).unwrap();
    (engine, writer, now)
}

#[test]
fn stuck_is_an_expired_lease_or_an_old_record_without_one() {
    assert_eq!(stuck("processing", Some(100), 0, 99, 1000), None);
    assert_eq!(stuck("processing", Some(100), 0, 100, 1000), Some("lease_expired"));
    assert_eq!(stuck("processing", None, 50, 1049, 1000), None);
    assert_eq!(stuck("processing", None, 50, 1050, 1000), Some("no_lease"));
    assert_eq!(stuck("failed", Some(1), 0, 10_000, 1), None);
    assert_eq!(stuck("completed", None, 0, 10_000, 1), None);
}

#[tokio::test]
async fn counts_lists_and_stuck_records_follow_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, clock) = open(dir.path());
    put(&engine, "evt_live-lease", event("live-lease", "processing", Some(T0 + 10_000), None), None).await;
    put(&engine, "evt_lapsed", event("lapsed", "processing", Some(T0 + 500), None), None).await;
    put(&engine, "evt_no-lease", event("no-lease", "processing", None, None), None).await;
    put(&engine, "evt_done", event("done", "completed", None, Some("ok")), None).await;
    for i in 0..60u64 {
        clock.store(T0 + i, Ordering::SeqCst);
        put(&engine, &format!("evt_f{i:02}"), event(&format!("f{i:02}"), "failed", None, Some(&"x".repeat(300))), None)
            .await;
    }
    put(&engine, "plain", "[1,2,3]".into(), None).await;
    put(&engine, "evt_gone", event("gone", "failed", None, None), Some(100)).await;
    let db = engine.db().unwrap();

    let s = scan(&db, T0 + 1000, 5000).unwrap_or_else(|_| panic!("scan"));
    assert_eq!(s.keys, 65, "the expired key is not counted");
    let c = s.counts;
    assert_eq!((c.processing, c.completed, c.failed, c.other, c.stuck), (3, 1, 60, 1, 1));
    assert_eq!(
        s.stuck.iter().map(|b| (b.key.as_str(), b.stuck)).collect::<Vec<_>>(),
        [("evt_lapsed", Some("lease_expired"))]
    );
    assert_eq!(s.failed.len(), LIST_LEN);
    assert_eq!(s.failed[0].key, "evt_f59", "newest first");
    assert_eq!(s.failed[LIST_LEN - 1].key, "evt_f10");
    let first = &s.failed[0];
    assert_eq!((first.event_id.as_deref(), first.attempt, first.modified_ms), (Some("f59"), Some(2), T0 + 59));
    assert_eq!(first.result.as_ref().map(|r| r.len()), Some(200), "long results are cut in lists");

    // Five seconds on, the record with no lease has been processing for the stuck age.
    let s = scan(&db, T0 + 5000, 5000).unwrap_or_else(|_| panic!("scan"));
    assert_eq!(s.counts.stuck, 2);
    assert_eq!(s.stuck.iter().map(|b| b.key.as_str()).collect::<Vec<_>>(), ["evt_lapsed", "evt_no-lease"]);
    drop((db, engine));
    writer.join();
}

#[tokio::test]
async fn a_stuck_backlog_is_counted_whole_and_listed_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, clock) = open(dir.path());
    let backlog = LIST_LEN as u64 + 20;
    for i in 0..backlog {
        // Two records per millisecond: the list's cut falls between two of the same time.
        clock.store(T0 + i / 2, Ordering::SeqCst);
        put(&engine, &format!("evt_s{i:03}"), event(&format!("s{i:03}"), "processing", Some(T0 + 100), None), None)
            .await;
    }
    put(&engine, "evt_fresh", event("fresh", "processing", Some(T0 + 10_000), None), None).await;
    let db = engine.db().unwrap();
    let s = scan(&db, T0 + 1000, 5000).unwrap_or_else(|_| panic!("scan"));
    assert_eq!((s.counts.processing, s.counts.stuck), (backlog + 1, backlog));
    assert_eq!(s.stuck.len(), LIST_LEN);
    let keys: Vec<&str> = s.stuck.iter().map(|b| b.key.as_str()).collect();
    // Newest first; within a millisecond by key, as before the list was bounded.
    assert_eq!(&keys[..3], ["evt_s068", "evt_s069", "evt_s066"]);
    assert_eq!(keys[LIST_LEN - 1], "evt_s021");
    drop((db, engine));
    writer.join();
}

// Paused time: the interval is moved past with `advance`, not waited for.
#[tokio::test(start_paused = true)]
async fn the_cache_serves_one_scan_until_the_next_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, _clock) = open(dir.path());
    put(&engine, "evt_a", event("a", "failed", None, None), None).await;
    // Within the interval every read gets the same scan, writes or not.
    let slow = Arc::new(Census::new(1000, Duration::from_secs(3600)));
    let first = slow.current(&engine).await.unwrap();
    assert_eq!(first.counts.failed, 1);
    put(&engine, "evt_b", event("b", "failed", None, None), None).await;
    assert!(Arc::ptr_eq(&first, &slow.current(&engine).await.unwrap()));
    let census = Arc::new(Census::new(1000, Duration::from_millis(50)));
    assert_eq!(census.current(&engine).await.unwrap().counts.failed, 2);
    put(&engine, "evt_c", event("c", "failed", None, None), None).await;
    // Once the interval has passed, a read starts a new scan and a later read sees it.
    tokio::time::advance(Duration::from_millis(50)).await;
    census.current(&engine).await.unwrap();
    assert_eq!(census.current(&engine).await.unwrap().counts.failed, 3, "the census refreshed");
    drop(engine);
    writer.join();
}
