//! The plugin process is `SIGKILL`ed (what the daemon does) while sessions of a thousand sent
//! at once are in flight against a real store (KV container, Redis). A fresh plugin process then serves
//! the redeliveries: `duplicate` for claims that landed (or a re-claim once their lease ran
//! out), `accepted` for the ones that did not; no attempt is ever accepted twice, and the
//! store never holds a half-written record.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::kv::KvServer;
use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::proxy::{Fault, Proxy};
use crate::support::redis::RedisServer;
use event_store::key::storage_key;
use event_store::record::{Record, Status};
use serde_json::{json, Value};

const SESSIONS: usize = 1000;
/// Half of the events carry this lease, the other half none.
const LEASE_SECONDS: u64 = 5;
/// The store timeout bounds a whole call; a thousand calls at once on a busy 2-core machine
/// take seconds, and this test is about the kill, not latency.
const GENEROUS: &[(&str, &str)] = &[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "30000")];
/// How long the test waits without progress before it calls the plugin or the store stuck.
const STALL: Duration = Duration::from_secs(120);

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

/// Plugin A talks to the store at `upstream` through a proxy that holds the request naming the
/// last event (and whatever follows it on that connection) for longer than the test runs, and
/// is killed once that request is held: at least that claim is in flight at the kill, however
/// quickly the rest were served.
async fn sigkill_mid_flight<F, Fut>(upstream: SocketAddr, redis: bool, read: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<u8>>>,
{
    let tag = format!("kill-{:x}", rand::random::<u32>());
    let ids: Vec<(String, bool)> = (0..SESSIONS).map(|i| (format!("{tag}-{i}"), i % 2 == 0)).collect();
    let id_bytes = |i: usize| -> &'static [u8] { Box::leak(ids[i].0.clone().into_bytes().into_boxed_slice()) };
    // Nearer the store, the answers on the connection of the middle event's claim are held
    // from then on (its requests still land): claims that landed but whose answer the killed
    // plugin never gave, whenever that claim goes ahead of the last one.
    let answers_held = Proxy::start(upstream, Fault::Hold { trigger: id_bytes(SESSIONS / 2), times: 1, release: None });
    let held = Fault::HoldRequest {
        trigger: id_bytes(SESSIONS - 1),
        times: 1,
        hold: Duration::from_secs(600),
        cut_after: None,
        queue: false,
    };
    let proxy = Proxy::start(answers_held.addr(), held);
    let url = if redis { proxy.redis_url() } else { proxy.http_url() };
    let c = creds(&url);

    // Plugin A: every session sent at once.
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
    // Plugin A is killed after its first 100 answers, or as soon as the last event's claim is
    // held at the proxy if that comes first: either way that claim (sent or not) cannot land,
    // and whatever was sent after it on its connection is held too.
    // A loaded machine only makes the answers later; a plugin that stops answering altogether
    // fails the test.
    let mut progress = Instant::now();
    while answered.len() < 100 && proxy.fired() == 0 {
        assert!(progress.elapsed() < STALL, "no answer and no held claim for {STALL:?}");
        if let Ok(Some((id, r))) = tokio::time::timeout(Duration::from_millis(10), rx.recv()).await {
            answered.insert(id, r);
            progress = Instant::now();
        }
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
    // A request the store had received before the kill may still be applied: the snapshot of
    // what landed is taken once the store is done with every connection but the held one.
    // A connection plugin A opened and wrote on just before the kill may not be accepted by a
    // proxy yet (a loaded machine): its request still lands later. First every connection made
    // before the kill is accepted by the outer proxy, which has connected each onward to the
    // inner one by then, so the inner one is settled second.
    proxy.settle_accepts(STALL).await;
    answers_held.settle_accepts(STALL).await;
    let held_open = proxy.fired();
    let mut progress = (0, Instant::now());
    loop {
        let open = |p: &Proxy| p.connections() - p.store_closed();
        let (outer, inner) = (open(&proxy), open(&answers_held));
        if outer <= held_open && inner <= held_open {
            break;
        }
        let closed = proxy.store_closed() + answers_held.store_closed();
        if closed > progress.0 {
            progress = (closed, Instant::now());
        }
        assert!(progress.1.elapsed() < STALL, "the store kept {outer} + {inner} of the dead plugin's connections");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !redis {
        // The KV container applies writes in the order they reach its one writer: once this
        // write is answered, a claim its connection's handler had queued has been applied too.
        // (Redis runs each command it reads before it closes the connection.)
        let put = reqwest::Client::new().put(format!("http://{upstream}/state/{tag}-settled")).body("1").send().await;
        assert!(put.unwrap().status().is_success(), "the barrier write");
    }
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
    assert!(!landed.contains_key(&ids[SESSIONS - 1].0), "the held claim was in flight at the kill");

    // Plugin B serves every redelivery, talking to the store directly (the faults were A's).
    let c = creds(&if redis { format!("redis://{upstream}/0") } else { format!("http://{upstream}") });
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
    sigkill_mid_flight(kv.addr(), false, |id| {
        let (http, url) = (http.clone(), url.clone());
        async move { crate::support::kv::raw_event(&http, &url, &id).await }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugin_sigkill_mid_flight_against_redis() {
    let r = RedisServer::start(&[]);
    let client = r.client();
    let upstream = format!("127.0.0.1:{}", r.port).parse().unwrap();
    sigkill_mid_flight(upstream, true, |id| {
        let client = client.clone();
        async move {
            let mut conn = crate::support::redis::multiplexed(&client).await;
            let v: Option<Vec<u8>> =
                redis::cmd("GET").arg(storage_key(None, &id)).query_async(&mut conn).await.unwrap();
            v
        }
    })
    .await;
    assert_eq!(r.keys("*").len(), SESSIONS, "one record per event, nothing else");
}
