//! Slow and lossy stores, both backends: a TCP proxy forwards every request at once (so the
//! store applies it) but holds back or swallows the store's answer. The plugin must resolve
//! the ambiguity by reading the key back (its own `claim_id` there means its write landed),
//! answer `accepted` or `upstream_error`, and never report one event accepted twice across
//! the original call and every redelivery.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::kv::KvServer;
use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::proxy::{Fault, Proxy};
use crate::support::redis::RedisServer;
use serde_json::{json, Value};

/// The plugin's per-call store timeout in these tests: the held answers wait past it.
const TIMEOUT_MS: &str = "1200";
/// A bound that only catches a hang, far past anything a loaded machine takes.
const HANG: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    Kv,
    Redis,
}

/// Bytes that identify one kind of store request on the wire.
pub(crate) struct Wire {
    /// The atomic create of a claim.
    pub(crate) claim: &'static [u8],
    /// A compare-and-swap (re-claim, completion).
    pub(crate) swap: &'static [u8],
    /// A plain read (the read-back): releases held answers on a shared connection.
    pub(crate) read: Option<&'static [u8]>,
}

impl Backend {
    pub(crate) fn wire(self) -> Wire {
        match self {
            // reqwest writes header names in lower case.
            Backend::Kv => Wire { claim: b"if-none-match: *", swap: b"\r\nif-match: ", read: None },
            // RESP: the claim script (7 words: EVALSHA sha 1 key value ttl deadline), the swap
            // script (8 words), and `GET key`. Redis uses one multiplexed connection, so the
            // read-back queues behind the held answer.
            Backend::Redis => Wire {
                claim: b"*7\r\n$7\r\nEVALSHA\r\n",
                swap: b"*8\r\n$7\r\nEVALSHA\r\n",
                read: Some(b"*2\r\n$3\r\nGET\r\n"),
            },
        }
    }
}

/// A real store of the given kind; kept alive by the returned guard.
pub(crate) enum Store {
    Kv { server: KvServer, _dir: tempfile::TempDir },
    Redis(RedisServer),
}

impl Store {
    /// A fresh store; Redis already holds the plugin's claim and swap scripts (a first
    /// `EVALSHA` answers NOSCRIPT and is sent again, so a fault meant for the write itself
    /// would hit that refusal instead).
    pub(crate) async fn start(backend: Backend) -> Store {
        match backend {
            Backend::Kv => {
                let dir = tempfile::tempdir().unwrap();
                Store::Kv { server: KvServer::start(dir.path(), &[]), _dir: dir }
            }
            Backend::Redis => {
                let store = Store::Redis(RedisServer::start(&[]));
                let (p, c, id) = (plugin().await, creds(&store.direct_url()), fresh_id("warm"));
                let ev = json!({"event_id": id, "event_type": "created"});
                assert_eq!(p.invoke("event_ingest", &c, ev.clone()).await.outcome(), "accepted");
                let fail = json!({"event_id": id, "status": "failed", "attempt": 1});
                assert_eq!(p.invoke("event_complete", &c, fail).await.outcome(), "failed");
                assert_eq!(p.invoke("event_ingest", &c, ev).await.outcome(), "accepted");
                store
            }
        }
    }

    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        match self {
            Store::Kv { server: s, .. } => s.addr(),
            Store::Redis(r) => format!("127.0.0.1:{}", r.port).parse().unwrap(),
        }
    }

    /// The store's URL, bypassing any proxy.
    pub(crate) fn direct_url(&self) -> String {
        match self {
            Store::Kv { server: s, .. } => s.url(),
            Store::Redis(r) => r.url(),
        }
    }

    pub(crate) fn proxy(&self, backend: Backend, fault: Fault) -> (Proxy, String) {
        let p = Proxy::start(self.addr(), fault);
        let url = match backend {
            Backend::Kv => p.http_url(),
            Backend::Redis => p.redis_url(),
        };
        (p, url)
    }
}

pub(crate) fn fresh_id(tag: &str) -> String {
    format!("{tag}-{:x}", rand::random::<u64>())
}

pub(crate) async fn plugin() -> Plugin {
    Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", TIMEOUT_MS)]).await
}

/// Every answer is accepted / duplicate / upstream_error, and no attempt of the event was
/// reported accepted twice.
fn assert_never_accepted_twice(answers: &[Reply]) {
    let mut by_attempt: HashMap<u64, usize> = HashMap::new();
    for a in answers {
        match a.outcome().as_str() {
            "accepted" => *by_attempt.entry(a.json()["attempt"].as_u64().unwrap()).or_default() += 1,
            "duplicate" | "error:upstream_error" => {}
            other => panic!("unexpected outcome {other}: {a:?}"),
        }
    }
    assert!(by_attempt.values().all(|&n| n == 1), "an attempt was accepted twice: {by_attempt:?}");
}

/// The claim's answer is held until after the plugin's timeout (HTTP: the plugin drops the
/// connection and reads back on a new one; Redis: the read-back queues behind the held answer
/// on the shared connection, and both answers arrive late). The read-back finds the plugin's
/// own claim: `accepted` exactly once, redeliveries are duplicates.
/// The sender retries three more times after `first`: each retry is a duplicate, and no
/// delivery was ever accepted twice.
async fn redeliveries_are_duplicates(p: &Plugin, c: &Value, ev: &Value, first: Reply) {
    let mut answers = vec![first];
    for _ in 0..3 {
        let again = p.invoke("event_ingest", c, ev.clone()).await;
        assert_eq!(again.outcome(), "duplicate", "{again:?}");
        answers.push(again);
    }
    assert_never_accepted_twice(&answers);
}

async fn late_answer_is_found_by_the_read_back(backend: Backend) {
    let store = Store::start(backend).await;
    let w = backend.wire();
    let (proxy, url) = store.proxy(backend, Fault::Hold { trigger: w.claim, times: 1, release: w.read });
    let p = plugin().await;
    let c = creds(&url);
    let ev = json!({"event_id": fresh_id("late"), "event_type": "created", "payload": "{\"n\":1}"});
    // How long the claim's round trip may take (a fifth of the deadline kept for the settling
    // read, half of the rest for the read-back) is checked on an injected clock in
    // `tools::deadline`; here what counts is what the late answer leads to.
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the claim's answer was held");
    assert_eq!(first.outcome(), "accepted", "the read-back finds the plugin's own claim: {first:?}");
    assert_eq!(first.json()["attempt"], 1);
    redeliveries_are_duplicates(&p, &c, &ev, first).await;
}

/// The store applies the claim and its answer is swallowed with the connection: the read-back
/// resolves it to `accepted`, exactly once.
async fn cut_answer_is_resolved_by_the_read_back(backend: Backend) {
    let store = Store::start(backend).await;
    let (proxy, url) = store.proxy(backend, Fault::Cut { trigger: backend.wire().claim, times: 1 });
    let p = plugin().await;
    let c = creds(&url);
    let ev = json!({"event_id": fresh_id("cut"), "event_type": "updated"});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the claim's answer was cut off");
    assert_eq!(first.outcome(), "accepted", "{first:?}");
    redeliveries_are_duplicates(&p, &c, &ev, first).await;
}

/// Compare-and-swap answers lost the same way: the re-claim of a failed run and a
/// completion are both resolved by their read-back (the new record's claim_id).
async fn cut_swap_answers_are_resolved_by_the_read_back(backend: Backend) {
    let store = Store::start(backend).await;
    let direct = plugin().await;
    let dc = creds(&store.direct_url());
    let id = fresh_id("swap");
    let ev = json!({"event_id": id, "event_type": "created"});
    assert_eq!(direct.invoke("event_ingest", &dc, ev.clone()).await.outcome(), "accepted");
    let failed = direct.invoke("event_complete", &dc, json!({"event_id": id, "status": "failed", "attempt": 1})).await;
    assert_eq!(failed.outcome(), "failed");

    // Two swaps through the proxy, both answers lost: the re-claim, then the completion.
    let (proxy, url) = store.proxy(backend, Fault::Cut { trigger: backend.wire().swap, times: 2 });
    let p = plugin().await;
    let c = creds(&url);
    let retry = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1);
    assert_eq!(
        (retry.outcome().as_str(), retry.json()["attempt"].as_u64(), retry.json()["retry"].as_bool()),
        ("accepted", Some(2), Some(true)),
        "{retry:?}"
    );
    let done = p.invoke("event_complete", &c, json!({"event_id": id, "attempt": 2, "result": "ok"})).await;
    assert_eq!(proxy.fired(), 2);
    assert_eq!(done.outcome(), "completed", "{done:?}");
    let again = p.invoke("event_complete", &c, json!({"event_id": id, "attempt": 2, "result": "ok"})).await;
    assert_eq!(again.outcome(), "already_completed");
    assert_eq!(p.invoke("event_ingest", &c, ev).await.outcome(), "duplicate");
}

/// The connection goes silent after the claim is forwarded: its answer never comes. The first
/// call may end `accepted` (read-back found it) or `upstream_error`, never twice accepted; the
/// plugin must not stay wedged on the silent connection, and with a lease the event is
/// re-claimed (attempt 2) once the lease runs out, so it is not lost either.
async fn silent_connection_neither_double_accepts_nor_wedges(backend: Backend) {
    let store = Store::start(backend).await;
    let (proxy, url) = store.proxy(backend, Fault::Hold { trigger: backend.wire().claim, times: 1, release: None });
    let p = plugin().await;
    let c = creds(&url);
    let id = fresh_id("silent");
    let ev = json!({"event_id": id, "event_type": "created", "lease_seconds": 2});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1);
    let first_outcome = first.outcome();
    assert!(["accepted", "error:upstream_error"].contains(&first_outcome.as_str()), "{first:?}");
    let mut answers = vec![first];

    // Redeliveries until the abandoned claim is taken over once its lease ran out (not lost),
    // then three more: not wedged, those answers come from the store again. However slow the
    // machine, only a plugin stuck behind the silent connection or a lease that never ends
    // keeps attempt 2 away for the hang bound.
    let start = Instant::now();
    let reclaimed = |a: &Reply| a.outcome() == "accepted" && a.json()["attempt"] == 2;
    while !answers.iter().any(reclaimed) {
        let outcomes: Vec<String> = answers.iter().map(Reply::outcome).collect();
        assert!(start.elapsed() < HANG, "the abandoned claim was never re-claimed: {outcomes:?}");
        answers.push(p.invoke("event_ingest", &c, ev.clone()).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for _ in 0..3 {
        answers.push(p.invoke("event_ingest", &c, ev.clone()).await);
    }
    assert_never_accepted_twice(&answers);
    let outcomes: Vec<String> = answers.iter().map(Reply::outcome).collect();
    eprintln!("{backend:?}: outcomes through a silent connection: {outcomes:?}");
    assert!(
        outcomes.iter().rev().take(3).all(|o| o != "error:upstream_error"),
        "the plugin stayed stuck behind the silent connection: {outcomes:?}"
    );
    let attempts: Vec<u64> =
        answers.iter().filter(|a| a.outcome() == "accepted").map(|a| a.json()["attempt"].as_u64().unwrap()).collect();
    let st = p.invoke("event_status", &c, json!({"event_id": id})).await;
    assert_eq!(st.json()["status"], "processing");
    assert_eq!(st.json()["attempt"].as_u64(), attempts.iter().max().copied());
}

/// Several processes redeliver the same events concurrently while the proxy holds some
/// claim answers past the timeout: per event, at most one accepted answer, and an event
/// answered accepted is always in the store.
async fn concurrent_redeliveries_through_a_slow_store(backend: Backend) {
    let store = Store::start(backend).await;
    let w = backend.wire();
    let (_proxy, url) = store.proxy(backend, Fault::Hold { trigger: w.claim, times: 6, release: w.read });
    let plugins = [std::sync::Arc::new(plugin().await), std::sync::Arc::new(plugin().await)];
    let c = creds(&url);
    let ids: Vec<String> = (0..8).map(|i| fresh_id(&format!("conc{i}"))).collect();
    let mut tasks = vec![];
    for p in &plugins {
        for id in &ids {
            for _ in 0..3 {
                let (p, c, id) = (p.clone(), c.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let r = p.invoke("event_ingest", &c, json!({"event_id": id, "event_type": "created"})).await;
                    (id, r)
                }));
            }
        }
    }
    let mut per_id: HashMap<String, Vec<Reply>> = HashMap::new();
    for t in tasks {
        let (id, r) = t.await.unwrap();
        per_id.entry(id).or_default().push(r);
    }
    let direct = plugin().await;
    for (id, answers) in &per_id {
        assert_never_accepted_twice(answers);
        let st = direct.invoke("event_status", &creds(&store.direct_url()), json!({"event_id": id})).await;
        let accepted = answers.iter().filter(|a| a.outcome() == "accepted").count();
        if accepted == 1 {
            assert_eq!(st.json()["found"], true, "{id}: an accepted claim is in the store");
        }
        let found = st.json()["found"] == Value::Bool(true);
        assert!(found || accepted == 0, "{id}: {st:?}");
    }
}

mod kv {
    use super::Backend::Kv;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn late_answer_is_found_by_the_read_back() {
        super::late_answer_is_found_by_the_read_back(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cut_answer_is_resolved_by_the_read_back() {
        super::cut_answer_is_resolved_by_the_read_back(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cut_swap_answers_are_resolved_by_the_read_back() {
        super::cut_swap_answers_are_resolved_by_the_read_back(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn silent_connection_neither_double_accepts_nor_wedges() {
        super::silent_connection_neither_double_accepts_nor_wedges(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_redeliveries_through_a_slow_store() {
        super::concurrent_redeliveries_through_a_slow_store(Kv).await;
    }
}

mod redis {
    use super::Backend::Redis;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn late_answer_is_found_by_the_read_back() {
        super::late_answer_is_found_by_the_read_back(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cut_answer_is_resolved_by_the_read_back() {
        super::cut_answer_is_resolved_by_the_read_back(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cut_swap_answers_are_resolved_by_the_read_back() {
        super::cut_swap_answers_are_resolved_by_the_read_back(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn silent_connection_neither_double_accepts_nor_wedges() {
        super::silent_connection_neither_double_accepts_nor_wedges(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_redeliveries_through_a_slow_store() {
        super::concurrent_redeliveries_through_a_slow_store(Redis).await;
    }
}
