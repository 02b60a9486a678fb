//! The plugin process is `SIGKILL`ed (what the daemon does) while a thousand sessions are
//! in flight against a real store (KV container, Redis). A fresh plugin process then serves
//! the redeliveries: `duplicate` for claims that landed (or a re-claim once their lease ran
//! out), `accepted` for the ones that did not; no attempt is ever accepted twice, and the
//! store never holds a half-written record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::kv::KvServer;
use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::redis::RedisServer;
use serde_json::{json, Value};
use stateful_tool::store::key::storage_key;
use stateful_tool::store::record::{Record, Status};

const SESSIONS: usize = 1000;
/// Half of the events carry this lease, the other half none.
const LEASE_SECONDS: u64 = 5;
/// The store timeout bounds a whole call; a thousand calls at once on a busy 2-core machine
/// take seconds, and this test is about the kill, not latency.
const GENEROUS: &[(&str, &str)] = &[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "30000")];

fn event(id: &str, leased: bool) -> Value {
    let lease = if leased { json!(LEASE_SECONDS) } else { json!(0) };
    json!({"event_id": id, "event_type": "created", "payload": id, "lease_seconds": lease})
}

/// Every (id, attempt) is accepted at most once over all answers.
fn record_accepts(seen: &mut HashMap<(String, u64), usize>, id: &str, r: &Reply) {
    if r.error.is_none() && r.outcome() == "accepted" {
        let n = seen.entry((id.to_owned(), r.json()["attempt"].as_u64().unwrap())).or_default();
        *n += 1;
        assert_eq!(*n, 1, "{id}: attempt accepted twice");
    }
}

async fn sigkill_mid_flight<F, Fut>(url: &str, read: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<u8>>>,
{
    let c = creds(url);
    let tag = format!("kill-{:x}", rand::random::<u32>());
    let ids: Vec<(String, bool)> = (0..SESSIONS).map(|i| (format!("{tag}-{i}"), i % 2 == 0)).collect();

    // Plugin A: every session in flight at once; killed after its first 100 answers.
    let a = Arc::new(Plugin::spawn(GENEROUS).await);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = vec![];
    for (id, leased) in &ids {
        let (a, c, tx, id, ev) = (a.clone(), c.clone(), tx.clone(), id.clone(), event(id, *leased));
        tasks.push(tokio::spawn(async move {
            let r = a.invoke("event_ingest", &c, ev).await;
            let _ = tx.send((id, r));
        }));
    }
    let mut answered: HashMap<String, Reply> = HashMap::new();
    while answered.len() < 100 {
        let (id, r) = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("answers").unwrap();
        answered.insert(id, r);
    }
    let pid = a.child.id().expect("plugin A is running");
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    // Answers the plugin wrote before it died may still be in the pipe.
    while let Ok(Some((id, r))) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        answered.insert(id, r);
    }
    for t in &tasks {
        t.abort();
    }
    // A request the store had fully received before the kill may still be applied: let it
    // settle before taking the snapshot of what landed.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut seen = HashMap::new();
    for (id, r) in &answered {
        assert_eq!(r.outcome(), "accepted", "{id}: a first delivery to a healthy store: {r:?}");
        record_accepts(&mut seen, id, r);
    }

    // What landed: whole records only, and every acknowledged claim among them.
    let mut landed = HashMap::new();
    for (id, _) in &ids {
        if let Some(raw) = read(id.clone()).await {
            let rec = Record::from_bytes(&raw).unwrap_or_else(|e| panic!("{id}: half-written record? {e}"));
            assert_eq!((rec.event_id.as_str(), rec.status, rec.attempt), (id.as_str(), Status::Processing, 1));
            landed.insert(id.clone(), rec);
        }
    }
    for id in answered.keys() {
        assert!(landed.contains_key(id), "{id} was answered accepted but is not in the store");
    }
    let in_flight_landed = landed.keys().filter(|id| !answered.contains_key(*id)).count();
    eprintln!(
        "{url}: {} answered before the kill, {} more claims landed unanswered, {} never landed",
        answered.len(),
        in_flight_landed,
        SESSIONS - landed.len()
    );
    assert!(landed.len() < SESSIONS, "the kill came while sessions were still in flight");

    // Plugin B serves every redelivery.
    let b = Arc::new(Plugin::spawn(GENEROUS).await);
    let mut redeliveries = vec![];
    for (id, leased) in &ids {
        let (b, c, id, ev) = (b.clone(), c.clone(), id.clone(), event(id, *leased));
        redeliveries.push(tokio::spawn(async move { (id, b.invoke("event_ingest", &c, ev).await) }));
    }
    for t in redeliveries {
        let (id, r) = t.await.unwrap();
        record_accepts(&mut seen, &id, &r);
        let leased = ids.iter().any(|(i, l)| *i == id && *l);
        let (outcome, attempt) = (r.outcome(), r.json()["attempt"].as_u64());
        match landed.contains_key(&id) {
            false => assert_eq!((outcome.as_str(), attempt), ("accepted", Some(1)), "{id}: its claim never landed"),
            // A landed claim is a duplicate; a leased one may already be past its lease.
            true if leased && outcome == "accepted" => assert_eq!(attempt, Some(2), "{id}: re-claim after the lease"),
            true => assert_eq!(outcome, "duplicate", "{id}: its claim landed before the kill"),
        }
    }

    // Once the leases ran out, each leased event is re-claimed exactly once more; unleased
    // ones stay with their (dead) claimant until completed.
    tokio::time::sleep(Duration::from_millis(LEASE_SECONDS * 1000 + 300)).await;
    for (id, leased) in &ids {
        let r = b.invoke("event_ingest", &c, event(id, *leased)).await;
        record_accepts(&mut seen, id, &r);
        if *leased {
            assert_eq!((r.outcome().as_str(), r.json()["retry"].as_bool()), ("accepted", Some(true)), "{id}");
        } else {
            assert_eq!(r.outcome(), "duplicate", "{id}");
        }
    }
    for (id, _) in &ids {
        let raw = read(id.clone()).await.expect("every event is stored now");
        Record::from_bytes(&raw).unwrap_or_else(|e| panic!("{id}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugin_sigkill_mid_flight_against_the_kv_container() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let (http, url) = (reqwest::Client::new(), kv.url());
    sigkill_mid_flight(&kv.url(), |id| {
        let (http, url) = (http.clone(), url.clone());
        async move { crate::support::kv::raw_event(&http, &url, &id).await }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugin_sigkill_mid_flight_against_redis() {
    let r = RedisServer::start(&[]);
    let client = r.client();
    sigkill_mid_flight(&r.url(), |id| {
        let client = client.clone();
        async move {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let v: Option<Vec<u8>> =
                redis::cmd("GET").arg(storage_key(None, &id)).query_async(&mut conn).await.unwrap();
            v
        }
    })
    .await;
    assert_eq!(r.keys("*").len(), SESSIONS, "one record per event, nothing else");
}
