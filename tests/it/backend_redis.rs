//! The event store on a real redis-server: outcomes, races, faults, keys, retention.

use crate::support::fake::{canned_store, closed_port, silent_store};
use crate::support::plugin::{creds, Plugin};
use crate::support::redis::RedisServer;
use crate::support::scenarios;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_outcome_through_the_binary() {
    let r = RedisServer::start(&[]);
    scenarios::outcomes(&r.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_across_processes_have_one_winner() {
    let r = RedisServer::start(&[]);
    scenarios::race(&r.url(), 3, 20, 16).await;
    // One record per id, nothing else.
    assert_eq!(r.keys("evt*").len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_duplicates() {
    let r = RedisServer::start(&[]);
    scenarios::race(&r.url(), 2, 1, 500).await;
    assert_eq!(r.keys("evt*").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_escaped_and_distinct() {
    let r = RedisServer::start(&[]);
    let keys = scenarios::key_safety(&r.url()).await;
    let mut stored = r.keys("*");
    stored.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(stored, expected, "exactly the escaped keys reach Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_record_and_ttl_are_as_documented() {
    let r = RedisServer::start(&[]);
    let p = Plugin::spawn(&[]).await;
    // No lease: a record with one is kept at least the lease plus a minute.
    let c = json!({"kv_url": r.url(), "namespace": "acme", "retention": "2s", "default_lease_seconds": "0"});
    let a = p.invoke("event_ingest", &c, json!({"event_id": "EVT-1", "event_type": "created", "payload": "x"})).await;
    assert_eq!(a.json()["key"], "evt_acme~EVT-1");
    let raw: serde_json::Value = serde_json::from_str(&r.get("evt_acme~EVT-1").unwrap()).unwrap();
    for field in
        ["v", "event_id", "event_type", "payload", "fingerprint", "status", "received_at", "updated_at", "attempt"]
    {
        assert!(raw.get(field).is_some(), "record lacks {field}: {raw}");
    }
    let ttl: i64 = redis::cmd("PTTL").arg("evt_acme~EVT-1").query(&mut r.conn()).unwrap();
    assert!(ttl > 0 && ttl <= 2000, "store-side TTL is the retention: {ttl}");
    // Another namespace sharing the store never sees it.
    let other = p
        .invoke("event_status", &json!({"kv_url": r.url(), "namespace": "globex"}), json!({"event_id": "EVT-1"}))
        .await;
    assert_eq!(other.outcome(), "not_found");
    // After retention the id is a new event.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while r.get("evt_acme~EVT-1").is_some() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let again =
        p.invoke("event_ingest", &c, json!({"event_id": "EVT-1", "event_type": "created", "payload": "x"})).await;
    assert_eq!(again.outcome(), "accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_faults_are_upstream_errors() {
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "400")]).await;
    let ev = json!({"event_id": "F1", "event_type": "created"});
    let down = p.invoke("event_ingest", &creds(&format!("redis://127.0.0.1:{}", closed_port())), ev.clone()).await;
    assert_eq!(down.error_type(), Some("upstream_error"), "{down:?}");
    let slow = p.invoke("event_ingest", &creds(&format!("redis://127.0.0.1:{}", silent_store())), ev.clone()).await;
    assert_eq!(slow.error_type(), Some("upstream_error"), "{slow:?}");
    let garbage =
        p.invoke("event_ingest", &creds(&format!("redis://127.0.0.1:{}", canned_store(b"%%garbage\r\n"))), ev).await;
    assert_eq!(garbage.error_type(), Some("upstream_error"), "{garbage:?}");
    let bad_scheme = p.validate(&creds("ftp://127.0.0.1:1")).await;
    assert_eq!(bad_scheme.error_type(), Some("ToolProviderCredentialValidationError"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credential_validation_checks_auth() {
    let r = RedisServer::start(&["--requirepass", "s3cret"]);
    let p = Plugin::spawn(&[]).await;
    let wrong = p.validate(&creds(&format!("redis://:nope@127.0.0.1:{}/0", r.port))).await;
    assert_eq!(wrong.error_type(), Some("ToolProviderCredentialValidationError"), "{wrong:?}");
    assert!(!wrong.message().contains("nope"), "the password must not be echoed: {}", wrong.message());
    let right = p.validate(&creds(&format!("redis://:s3cret@127.0.0.1:{}/0", r.port))).await;
    assert_eq!(right.chunks, vec![json!({"result": true})], "{right:?}");
}

/// min_replicas=1 on a master without replicas: every write is confirmed by none, so the
/// plugin answers upstream_error and puts back, by the write's claim_id, exactly what was
/// there before: nothing for a first claim, the previous record for a completion and for
/// a re-claim. The event then goes on as if the refused call never happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unreplicated_writes_are_rolled_back_to_the_previous_record() {
    let r = RedisServer::start(&[]);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "2000")]).await;
    let (plain, waits) = (json!({"kv_url": r.url()}), json!({"kv_url": r.url(), "min_replicas": "1"}));
    let ev = json!({"event_id": "UNREP-1", "event_type": "created"});
    let key = "evt_UNREP-1";
    let unconfirmed = |reply: &crate::support::plugin::Reply| {
        assert_eq!(reply.error_type(), Some("upstream_error"), "{reply:?}");
        let m = reply.message();
        assert!(m.contains("only 0 of the 1 replicas") && m.contains("it was rolled back"), "{m}");
    };
    // A first claim: deleted again.
    unconfirmed(&p.invoke("event_ingest", &waits, ev.clone()).await);
    assert_eq!(r.get(key), None, "the unconfirmed first claim stays");
    assert_eq!(p.invoke("event_ingest", &plain, ev.clone()).await.outcome(), "accepted");
    let claimed = r.get(key).unwrap();
    // A completion: the processing record comes back byte for byte, with a TTL.
    let fail = json!({"event_id": "UNREP-1", "status": "failed", "attempt": 1});
    unconfirmed(&p.invoke("event_complete", &waits, fail.clone()).await);
    assert_eq!(r.get(key).as_deref(), Some(claimed.as_str()));
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut r.conn()).unwrap();
    assert!(ttl > 0, "the restored record lost its TTL: {ttl}");
    assert_eq!(p.invoke("event_complete", &plain, fail).await.outcome(), "failed");
    let failed = r.get(key).unwrap();
    // A re-claim of the failed event: the failed record comes back.
    unconfirmed(&p.invoke("event_ingest", &waits, ev.clone()).await);
    assert_eq!(r.get(key).as_deref(), Some(failed.as_str()));
    let retry = p.invoke("event_ingest", &plain, ev).await;
    assert_eq!((retry.outcome().as_str(), retry.json()["attempt"].as_u64()), ("accepted", Some(2)), "{retry:?}");
}

/// A node that has lost its script cache (`SCRIPT FLUSH`, a restart without persistence, a
/// failover to a replica that never ran the script) answers `EVALSHA` with NOSCRIPT: the
/// plugin sends the script and the claim goes through, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_without_the_scripts_is_sent_them() {
    let r = RedisServer::start(&[]);
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": r.url()});
    let calls = |name: &str| {
        r.info_field("commandstats", &format!("cmdstat_{name}"))
            .and_then(|v| v.strip_prefix("calls=")?.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ingest = |id: &str| p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "created"}));
    assert_eq!(ingest("FLUSH-1").await.outcome(), "accepted");
    let (evals, loads) = (calls("evalsha"), calls("script|load"));
    assert!(evals >= 1 && loads >= 1, "the claim ran as a script: evalsha {evals}, script load {loads}");
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut r.conn()).unwrap();
    assert_eq!(ingest("FLUSH-2").await.outcome(), "accepted");
    assert_eq!(ingest("FLUSH-1").await.outcome(), "duplicate");
    assert_eq!(calls("script|load"), loads + 1, "the claim's script is sent again, once");
    assert_eq!(calls("evalsha"), evals + 3, "the refused EVALSHA, its retry and the duplicate's");
    assert_eq!(r.keys("evt*").len(), 2);
}

mod lifecycle {
    use super::RedisServer;
    use crate::support::lifecycle;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn complete_fail_repeat_stale_unknown() {
        lifecycle::complete_fail_repeat_stale_unknown(&RedisServer::start(&[]).url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn crash_and_takeover() {
        lifecycle::crash_and_takeover(&RedisServer::start(&[]).url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_lease_means_processing_until_completed() {
        lifecycle::no_lease_means_processing_until_completed(&RedisServer::start(&[]).url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_reclaim_among_concurrent_redeliveries() {
        lifecycle::one_reclaim_among_concurrent_redeliveries(&RedisServer::start(&[]).url()).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn host_clock_skew_changes_nothing() {
        lifecycle::host_clock_skew_changes_nothing(&RedisServer::start(&[]).url()).await;
    }
}
