//! Lifecycle behaviour every backend must show: completion, fencing, leases, skew.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::plugin::{creds, skewed_clock, Plugin};

fn fresh_id(tag: &str) -> String {
    format!("{tag}-{:x}", rand::random::<u64>())
}

pub(crate) async fn complete_fail_repeat_stale_unknown(url: &str) {
    let p = Plugin::spawn(&[]).await;
    let c = creds(url);
    let id = fresh_id("life");
    let ev = json!({"event_id": id, "event_type": "created"});
    assert_eq!(p.invoke("event_ingest", &c, ev.clone()).await.outcome(), "accepted");
    let fail = p
        .invoke("event_complete", &c, json!({"event_id": id, "status": "failed", "attempt": 1, "result": "smtp down"}))
        .await;
    assert_eq!(fail.outcome(), "failed", "{fail:?}");
    let repeat = p.invoke("event_complete", &c, json!({"event_id": id, "status": "failed", "attempt": 1})).await;
    assert_eq!(repeat.outcome(), "already_failed");
    // A failed run is retried by the sender's next delivery.
    let retry = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(
        (retry.outcome().as_str(), retry.json()["attempt"].as_u64(), retry.json()["retry"].as_bool()),
        ("accepted", Some(2), Some(true))
    );
    let stale = p.invoke("event_complete", &c, json!({"event_id": id, "status": "completed", "attempt": 1})).await;
    assert_eq!(stale.error_type(), Some("conflict"));
    assert_eq!(stale.message(), "stale completion: attempt 1, current attempt 2");
    let done = p
        .invoke("event_complete", &c, json!({"event_id": id, "status": "completed", "attempt": 2, "result": "sent"}))
        .await;
    assert_eq!(done.outcome(), "completed");
    assert_eq!(
        p.invoke("event_complete", &c, json!({"event_id": id, "status": "completed", "attempt": 2})).await.outcome(),
        "already_completed"
    );
    let flip = p.invoke("event_complete", &c, json!({"event_id": id, "status": "failed"})).await;
    assert_eq!(flip.error_type(), Some("conflict"));
    assert_eq!(p.invoke("event_ingest", &c, ev).await.outcome(), "duplicate", "completed events stay done");
    let st = p.invoke("event_status", &c, json!({"event_id": id})).await;
    assert_eq!(
        (st.json()["status"].as_str(), st.json()["attempt"].as_u64(), st.json()["result"].as_str()),
        (Some("completed"), Some(2), Some("sent"))
    );
    assert!(st.json()["completed_at"].is_string());
    let unknown = p.invoke("event_complete", &c, json!({"event_id": fresh_id("never")})).await;
    assert_eq!(unknown.error_type(), Some("not_found"));
}

/// Sleeps until `lease` has passed on the store's clock, counted from when the answer that
/// granted it was received: the store stamped the lease before it answered, so `lease` after
/// the answer is past the lease whatever the call's own delay was (`start` before the call
/// is not: a call slowed by a loaded machine claims late and its lease ends late).
async fn past_lease(answered: Instant, lease: Duration) {
    let margin = Duration::from_millis(300);
    tokio::time::sleep((answered + lease + margin).saturating_duration_since(Instant::now())).await;
}

/// A run accepts with a short lease and dies; the redelivery after expiry takes over, the
/// dead run's late completion is fenced off, the new one completes.
pub(crate) async fn crash_and_takeover(url: &str) {
    let p = Plugin::spawn(&[]).await;
    let c = creds(url);
    let id = fresh_id("crash");
    let ev = json!({"event_id": id, "event_type": "created", "lease_seconds": 2});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    let answered = Instant::now();
    assert_eq!(first.outcome(), "accepted");
    assert!(first.json()["lease_until"].is_string(), "{first:?}");
    // Inside the lease: duplicate.
    assert_eq!(p.invoke("event_ingest", &c, ev.clone()).await.outcome(), "duplicate");
    // After the lease (by the store's clock): re-claimed, attempt 2.
    past_lease(answered, Duration::from_secs(2)).await;
    let second = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!((second.outcome().as_str(), second.json()["attempt"].as_u64()), ("accepted", Some(2)), "{second:?}");
    let late = p.invoke("event_complete", &c, json!({"event_id": id, "attempt": 1})).await;
    assert_eq!(late.error_type(), Some("conflict"));
    let ok = p.invoke("event_complete", &c, json!({"event_id": id, "attempt": 2})).await;
    assert_eq!(ok.outcome(), "completed");
}

/// Without a lease (`lease_seconds` 0, or absent with `default_lease_seconds` 0) a
/// processing record is never taken over; absent with the default, it gets the default lease.
pub(crate) async fn no_lease_means_processing_until_completed(url: &str) {
    let p = Plugin::spawn(&[]).await;
    let with_default =
        p.invoke("event_ingest", &creds(url), json!({"event_id": fresh_id("dl"), "event_type": "created"})).await;
    assert!(with_default.json()["lease_until"].is_string(), "leases are on by default: {with_default:?}");
    let c = json!({"kv_url": url, "default_lease_seconds": "0"});
    for lease in [json!(null), json!(0)] {
        let id = fresh_id("nolease");
        let ev = json!({"event_id": id, "event_type": "created", "lease_seconds": lease});
        let a = p.invoke("event_ingest", &c, ev.clone()).await;
        assert_eq!(a.outcome(), "accepted");
        assert!(a.json()["lease_until"].is_null());
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(p.invoke("event_ingest", &c, ev).await.outcome(), "duplicate");
    }
}

/// Many concurrent redeliveries of an expired-lease record, from several processes: one re-claim.
pub(crate) async fn one_reclaim_among_concurrent_redeliveries(url: &str) {
    let plugins = [Arc::new(Plugin::spawn(&[]).await), Arc::new(Plugin::spawn(&[]).await)];
    let c = creds(url);
    let id = fresh_id("reclaim");
    let first = json!({"event_id": id, "event_type": "created", "lease_seconds": 1});
    assert_eq!(plugins[0].invoke("event_ingest", &c, first).await.outcome(), "accepted");
    past_lease(Instant::now(), Duration::from_secs(1)).await;
    // The redeliveries ask for a long lease: attempt 2 must not expire while the other 99
    // are still being answered on a loaded machine (that would be a legitimate attempt 3).
    let ev = json!({"event_id": id, "event_type": "created", "lease_seconds": 3600});
    let mut tasks = vec![];
    for p in &plugins {
        for _ in 0..50 {
            let (p, c, ev) = (p.clone(), c.clone(), ev.clone());
            tasks.push(tokio::spawn(async move { p.invoke("event_ingest", &c, ev).await }));
        }
    }
    let mut reclaims = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.outcome().as_str() {
            "accepted" => {
                assert_eq!(r.json()["attempt"], 2);
                reclaims += 1;
            }
            "duplicate" => assert_eq!(r.json()["attempt"], 2, "duplicates see the new attempt"),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(reclaims, 1);
}

/// Two plugin hosts whose clocks are an hour off in opposite directions (the real binary under
/// libfaketime) reach the same outcomes: leases are stamped and judged by the store's clock.
pub(crate) async fn host_clock_skew_changes_nothing(url: &str) {
    let ahead = Plugin::spawn_with(&skewed_clock("+1h", 3600)).await;
    let behind = Plugin::spawn_with(&skewed_clock("-1h", -3600)).await;
    let c = creds(url);
    let id = fresh_id("skew");
    let ev = json!({"event_id": id, "event_type": "created", "lease_seconds": 2});
    assert_eq!(behind.invoke("event_ingest", &c, ev.clone()).await.outcome(), "accepted");
    let answered = Instant::now();
    // The host an hour ahead must not think the lease is long gone.
    assert_eq!(ahead.invoke("event_ingest", &c, ev.clone()).await.outcome(), "duplicate");
    past_lease(answered, Duration::from_secs(2)).await;
    // And the host an hour behind must not think it is still an hour away.
    let took = behind.invoke("event_ingest", &c, ev).await;
    assert_eq!((took.outcome().as_str(), took.json()["attempt"].as_u64()), ("accepted", Some(2)));
}
