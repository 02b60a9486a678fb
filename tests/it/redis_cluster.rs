//! The event store on a real 3-master / 3-replica Redis Cluster: every backend scenario,
//! keys spread over every master, a `redis://` node detected as a cluster, and a failover
//! under load (with and without `min_replicas`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::lifecycle;
use crate::support::load::{check_calls, Load};
use crate::support::plugin::{creds, Plugin};
use crate::support::redis_ha::{accepted_twice, ingest_resumes, RedisCluster};
use crate::support::scenarios;

/// One cluster for every scenario (building one costs seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_backend_scenario_on_a_cluster() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    scenarios::outcomes(&url).await;
    // One node's plain redis:// URL: cluster mode is detected and redirects are followed.
    scenarios::outcomes(&format!("redis://127.0.0.1:{}", cluster.nodes[3].port)).await;
    scenarios::race(&url, 3, 8, 16).await;
    scenarios::race(&url, 2, 1, 500).await;
    let mut keys = scenarios::key_safety(&url).await;
    lifecycle::complete_fail_repeat_stale_unknown(&url).await;
    lifecycle::crash_and_takeover(&url).await;
    lifecycle::no_lease_means_processing_until_completed(&url).await;
    lifecycle::one_reclaim_among_concurrent_redeliveries(&url).await;
    lifecycle::host_clock_skew_changes_nothing(&url).await;

    // Every key lives on exactly one master, and every master holds some: no hash tags.
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let per_master: Vec<Vec<String>> = masters.iter().map(|&m| cluster.keys_on(m, "evt*")).collect();
    for (m, held) in masters.iter().zip(&per_master) {
        assert!(!held.is_empty(), "master {m} holds no event: keys are not spread");
    }
    let all: Vec<&String> = per_master.iter().flatten().collect();
    assert_eq!(all.len(), all.iter().collect::<HashSet<_>>().len(), "a key on two masters");
    keys.sort();
    for k in &keys {
        assert!(all.contains(&k), "{k} is on no master");
    }

    // The record's TTL, set on the owning master: the retention, extended to the default
    // lease (1200 s) plus its 60 s margin while the record is `processing`.
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": url, "namespace": "acme", "retention": "60s"});
    let a = p.invoke("event_ingest", &c, json!({"event_id": "T-1", "event_type": "created"})).await;
    assert_eq!(a.outcome(), "accepted");
    let ttl: i64 = redis::cmd("PTTL").arg("evt_acme~T-1").query(&mut cluster.conn()).unwrap();
    assert!(ttl > 60_000 && ttl <= 1_260_000, "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validation_names_the_cluster_and_refuses_uncovered_slots() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    let p = Plugin::spawn_logged(&[], &log).await;
    let ok = p.validate(&creds(&cluster.url())).await;
    assert_eq!(ok.chunks, vec![json!({"result": true})], "{ok:?}");
    // Under the daemon the plugin logs as protocol `log` events; stderr has the rest.
    let events: Vec<String> = p.logs.lock().unwrap().iter().map(|l| log_message(l)).collect();
    let text = format!("{}\n{}", std::fs::read_to_string(&log).unwrap(), events.join("\n"));
    assert!(text.contains("Redis Cluster with 3 masters"), "{text}");
    assert!(text.contains("no persistence"), "the test cluster runs without persistence: {text}");
    // A password the cluster does not have is named as such, not as a wrong one.
    let pw = p.validate(&creds(&cluster.url().replace("redis+cluster://", "redis+cluster://:pw@"))).await;
    assert_eq!(pw.error_type(), Some("ToolProviderCredentialValidationError"), "{pw:?}");
    assert!(pw.message().contains("Redis Cluster node at 127.0.0.1:"), "{}", pw.message());
    assert!(pw.message().contains("the server has no password set"), "{}", pw.message());
    // min_replicas larger than any master's replica count cannot work.
    let two = p.validate(&json!({"kv_url": cluster.url(), "min_replicas": "2"})).await;
    assert_eq!(two.error_type(), Some("ToolProviderCredentialValidationError"), "{two:?}");
    assert!(two.message().contains("min_replicas"), "{}", two.message());
    // Take one slot away: the cluster no longer covers every slot.
    let owner = cluster.masters()[0];
    let client = redis::Client::open(format!("redis://127.0.0.1:{owner}")).unwrap();
    let mut con = client.get_connection().unwrap();
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    let first_slot = slots
        .iter()
        .find(|r| matches!(&r[2], redis::Value::Array(n) if redis::from_redis_value_ref::<u16>(&n[1]).ok() == Some(owner)))
        .map(|r| redis::from_redis_value_ref::<i64>(&r[0]).unwrap())
        .unwrap();
    let _: () = redis::cmd("CLUSTER").arg("DELSLOTS").arg(first_slot).query(&mut con).unwrap();
    let p2 = Plugin::spawn(&[]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let refused = p2.validate(&creds(&cluster.url())).await;
        if refused.error_type() == Some("ToolProviderCredentialValidationError") {
            assert!(refused.message().contains("slots"), "{}", refused.message());
            break;
        }
        assert!(Instant::now() < deadline, "uncovered slots were not refused: {refused:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Load from three plugin processes while a master is killed: its replica takes over, the
/// node comes back as a replica, and ingest goes on in the same plugin processes.
async fn failover_under_load(min_replicas: u32) -> (usize, usize) {
    let mut cluster = RedisCluster::start();
    let c = json!({"kv_url": cluster.url(), "min_replicas": min_replicas.to_string()});
    let mut plugins = vec![];
    for _ in 0..3 {
        plugins.push(Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await));
    }
    let tag = format!("fo{min_replicas}x{:x}", rand::random::<u32>());
    let load = Load::start(&plugins, &c, 8, &tag);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let victim = cluster.masters()[0];
    let down = Instant::now();
    cluster.node(victim).kill9();
    // A replica is promoted; then the old master returns and becomes its replica.
    cluster.wait_healthy();
    cluster.node(victim).relaunch();
    cluster.wait_healthy();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (calls, _) = load.stop().await;
    ingest_resumes(&plugins, &c, &tag).await;
    // A lost claim shows twice: its id accepted again, or an accepted id absent.
    let twice = accepted_twice(&calls);
    let mut accepted: Vec<&String> = calls.iter().filter(|c| c.outcome == "accepted").map(|c| &c.id).collect();
    accepted.sort();
    accepted.dedup();
    let mut con = cluster.conn();
    let absent = accepted
        .iter()
        .filter(|id| redis::cmd("EXISTS").arg(format!("evt_{id}")).query::<i64>(&mut con).unwrap() == 0)
        .count();
    eprintln!(
        "cluster failover, min_replicas={min_replicas}: {} calls, {} ids accepted, {} upstream errors; acknowledged \
         claims lost: {twice} accepted twice, {absent} absent",
        calls.len(),
        accepted.len(),
        calls.iter().filter(|c| c.outcome.starts_with("error")).count()
    );
    if min_replicas > 0 {
        check_calls(&calls, (down, down));
    }
    (accepted.len(), twice + absent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_with_min_replicas_loses_no_accepted_claim() {
    let (accepted, lost) = failover_under_load(1).await;
    assert!(accepted > 0);
    assert_eq!(lost, 0, "with min_replicas=1 every accepted claim survives the failover");
}

/// Reports (does not assert) what asynchronous replication loses in a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_without_min_replicas_is_reported() {
    let (accepted, _lost) = failover_under_load(0).await;
    assert!(accepted > 0);
}

/// The message of a protocol `log` event line.
fn log_message(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    v["data"]["message"].as_str().unwrap_or(line).to_owned()
}
