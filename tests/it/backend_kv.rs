//! The event store on our real KV container: outcomes, races, faults, keys, retention, auth.

use crate::support::fake::{canned_store, closed_port, silent_store};
use crate::support::kv::KvServer;
use crate::support::plugin::{creds, Plugin};
use crate::support::scenarios;
use serde_json::json;

fn kv() -> (KvServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (KvServer::start(dir.path(), &[]), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_outcome_through_the_binary() {
    let (s, _d) = kv();
    scenarios::outcomes(&s.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_across_processes_have_one_winner() {
    let (s, _d) = kv();
    scenarios::race(&s.url(), 3, 20, 16).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_duplicates() {
    let (s, _d) = kv();
    scenarios::race(&s.url(), 2, 1, 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_escaped_and_distinct() {
    let (s, _d) = kv();
    let keys = scenarios::key_safety(&s.url()).await;
    // Each key holds its own record, readable by key exactly as the plugin named it.
    let client = reqwest::Client::new();
    for k in keys {
        let r = client.get(format!("{}/state/{k}", s.url())).send().await.unwrap();
        assert_eq!(r.status(), 200, "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_expires_ids_and_namespaces_isolate() {
    let (s, _d) = kv();
    let p = Plugin::spawn(&[]).await;
    // No lease: a record with one is kept at least the lease plus a minute.
    let c = json!({"kv_url": s.url(), "namespace": "acme", "retention": "1s", "default_lease_seconds": "0"});
    let ev = json!({"event_id": "EVT-1", "event_type": "created"});
    let a = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!((a.outcome().as_str(), a.json()["key"].as_str()), ("accepted", Some("evt_acme~EVT-1")));
    let other = p
        .invoke("event_status", &json!({"kv_url": s.url(), "namespace": "globex"}), json!({"event_id": "EVT-1"}))
        .await;
    assert_eq!(other.outcome(), "not_found");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = p.invoke("event_ingest", &c, ev.clone()).await;
        if r.outcome() == "accepted" {
            break;
        }
        assert_eq!(r.outcome(), "duplicate");
        assert!(std::time::Instant::now() < deadline, "the record never expired");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_faults_are_upstream_errors() {
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "400")]).await;
    let ev = json!({"event_id": "F1", "event_type": "created"});
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let down = p.invoke("event_ingest", &creds(&url(closed_port())), ev.clone()).await;
    assert_eq!(down.error_type(), Some("upstream_error"), "{down:?}");
    let slow = p.invoke("event_ingest", &creds(&url(silent_store())), ev.clone()).await;
    assert_eq!(slow.error_type(), Some("upstream_error"), "{slow:?}");
    let five_hundred =
        canned_store(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
    let r = p.invoke("event_ingest", &creds(&url(five_hundred)), ev.clone()).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
    let garbage = canned_store(b"SSH-2.0-OpenSSH\r\n\r\n");
    let r = p.invoke("event_ingest", &creds(&url(garbage)), ev.clone()).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
    // A store that claims success but is not ours (plain 200, no ETag): never "accepted".
    let fake_ok = canned_store(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
    let r = p.invoke("event_ingest", &creds(&url(fake_ok)), ev).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validation_refuses_a_store_without_atomic_create() {
    let p = Plugin::spawn(&[]).await;
    let legacy = canned_store(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let r = p.validate(&creds(&format!("http://127.0.0.1:{legacy}"))).await;
    assert_eq!(r.error_type(), Some("ToolProviderCredentialValidationError"));
    assert!(r.message().contains("cannot create a key atomically"), "{}", r.message());
    let (s, _d) = kv();
    assert_eq!(p.validate(&creds(&s.url())).await.chunks, vec![json!({"result": true})]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_is_required_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = KvServer::start(dir.path(), &["--token", "s3cret-token"]);
    let p = Plugin::spawn(&[]).await;
    let missing = p.validate(&creds(&s.url())).await;
    assert_eq!(missing.error_type(), Some("ToolProviderCredentialValidationError"));
    assert!(missing.message().contains("kv_token"), "{}", missing.message());
    let wrong = p
        .invoke(
            "event_ingest",
            &json!({"kv_url": s.url(), "kv_token": "nope"}),
            json!({"event_id": "T", "event_type": "created"}),
        )
        .await;
    assert_eq!(wrong.error_type(), Some("upstream_error"));
    let good = json!({"kv_url": s.url(), "kv_token": "s3cret-token"});
    assert_eq!(p.validate(&good).await.chunks, vec![json!({"result": true})]);
    assert_eq!(
        p.invoke("event_ingest", &good, json!({"event_id": "T", "event_type": "created"})).await.outcome(),
        "accepted"
    );
}

mod lifecycle {
    use super::kv;
    use crate::support::lifecycle;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn complete_fail_repeat_stale_unknown() {
        let (s, _d) = kv();
        lifecycle::complete_fail_repeat_stale_unknown(&s.url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn crash_and_takeover() {
        let (s, _d) = kv();
        lifecycle::crash_and_takeover(&s.url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_lease_means_processing_until_completed() {
        let (s, _d) = kv();
        lifecycle::no_lease_means_processing_until_completed(&s.url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_reclaim_among_concurrent_redeliveries() {
        let (s, _d) = kv();
        lifecycle::one_reclaim_among_concurrent_redeliveries(&s.url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn host_clock_skew_changes_nothing() {
        let (s, _d) = kv();
        lifecycle::host_clock_skew_changes_nothing(&s.url()).await;
    }
}

/// The plugin keeps its connections to the container open between calls (one connection
/// serves a run of calls one after another), and a connection the container has closed as
/// idle is never used again: the next calls go on new connections, with no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_are_kept_and_one_the_container_closed_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let s = KvServer::start(dir.path(), &["--idle-timeout-ms", "300"]);
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": s.url()});
    let ingest = |id: String| p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "created"}));
    let open = || async {
        let text = reqwest::get(format!("{}/metrics", s.url())).await.unwrap().text().await.unwrap();
        let line = text.lines().find(|l| l.starts_with("kv_open_connections ")).expect("the gauge").to_owned();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
    };
    for i in 0..20 {
        assert_eq!(ingest(format!("KEEP-{i}")).await.outcome(), "accepted");
    }
    // The plugin's one connection, and the scrape's own.
    assert_eq!(open().await, 2, "20 calls in a row share one connection");
    // The container closes the quiet connection; the plugin's next calls do not fail.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while open().await > 1 {
        assert!(std::time::Instant::now() < deadline, "the container closes idle connections");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let again = futures_util::future::join_all((0..8).map(|i| ingest(format!("KEEP-{i}")))).await;
    assert!(again.iter().all(|a| a.outcome() == "duplicate"), "{again:?}");
    assert_eq!(ingest("KEEP-new".into()).await.outcome(), "accepted");
}
