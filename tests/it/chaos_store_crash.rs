//! The store crashes in the middle of a sustained ingest load from three plugin processes
//! (16 sessions in flight each, new ids plus redeliveries) and comes back on the same address
//! and data: every event a plugin answered `accepted` is in the store afterwards, no id was
//! answered accepted twice, calls made while the store was down answered `upstream_error`,
//! the running plugin processes recover by themselves, and every stored value is a whole
//! record.
//!
//! Redis is run with `--appendonly yes --appendfsync always`: the persistence setting the
//! guarantee assumes (with `everysec`, Redis itself may lose the last second of
//! acknowledged writes on a crash).

use std::sync::Arc;
use std::time::Instant;

use crate::support::kv::KvServer;
use crate::support::load::{check_calls, event, Call, Load};
use crate::support::plugin::{creds, Plugin};
use crate::support::redis::RedisServer;
use event_store::key::storage_key;
use event_store::record::{Record, Status};
use serde_json::json;

const PROCESSES: usize = 3;
const SESSIONS: usize = 16;
/// How many calls each phase waits for (claims accepted before the crash, calls answered
/// while the store is down, claims accepted after the restart): as many as there are
/// sessions, so each phase runs under the whole load however long a loaded machine takes.
const PER_PHASE: usize = PROCESSES * SESSIONS;

async fn plugins() -> Vec<Arc<Plugin>> {
    let mut ps = vec![];
    for _ in 0..PROCESSES {
        ps.push(Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")]).await));
    }
    ps
}

/// Runs the load through a crash of `store` and its restart, each phase ended by what happened
/// in it rather than by a stretch of time. Returns when the store was down (from the kill to
/// the restart) and when it was back.
async fn crash_and_restart<S>(
    load: &Load,
    store: &mut S,
    kill: fn(&mut S),
    restart: fn(&mut S),
) -> ((Instant, Instant), Instant) {
    let accepted_since = |t: Option<Instant>, calls: &[Call]| {
        calls.iter().filter(|c| c.outcome == "accepted" && t.is_none_or(|t| c.started > t)).count()
    };
    load.wait_for("claims accepted before the crash", PER_PHASE, |calls| accepted_since(None, calls)).await;
    kill(store);
    let down = Instant::now();
    // Calls that start and end while the store is down (check_calls: all upstream_error).
    load.wait_for("calls answered while the store is down", PER_PHASE, |calls| {
        calls.iter().filter(|c| c.started > down).count()
    })
    .await;
    let back = Instant::now();
    restart(store);
    let restarted = Instant::now();
    load.wait_for("claims accepted after the restart", PER_PHASE, |calls| accepted_since(Some(restarted), calls)).await;
    ((down, back), restarted)
}

/// A stored value must be one whole record of this id: a claim in progress, or a claim whose
/// answer was lost and that its call rolled back to `failed` before answering upstream_error.
fn assert_whole_record(id: &str, raw: &[u8]) -> Record {
    let rec = Record::from_bytes(raw).unwrap_or_else(|e| panic!("{id}: stored value is not a record ({e})"));
    assert_eq!(rec.event_id, id);
    assert!(matches!(rec.status, Status::Processing | Status::Failed) && rec.attempt >= 1, "{id}: {rec:?}");
    assert_eq!(rec.claim_id.len(), 32, "{id}: the claim id is stored whole");
    rec
}

/// The checks after the load, with `read` giving the raw stored value of an id (direct, not
/// through the plugin). Returns how many ids the store holds.
async fn verify<F, Fut>(
    plugin: &Plugin,
    url: &str,
    calls: &[Call],
    ids: &[String],
    outage: (Instant, Instant),
    restarted: Instant,
    read: F,
) -> usize
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<u8>>>,
{
    let s = check_calls(calls, outage);
    assert!(s.outage_calls > 0, "the load kept running through the outage");
    // A later attempt is accepted only after an earlier call for the id gave up
    // (upstream_error) and rolled its claim back to `failed`.
    for c in calls.iter().filter(|c| c.outcome == "accepted") {
        let gave_up = calls.iter().any(|e| e.id == c.id && e.outcome == "error:upstream_error" && e.started < c.ended);
        assert!(c.attempt == Some(1) || (c.attempt > Some(1) && gave_up), "{c:?}");
    }
    let before = calls.iter().filter(|c| c.outcome == "accepted" && c.ended < outage.0).count();
    let after = calls.iter().filter(|c| c.outcome == "accepted" && c.started > restarted).count();
    assert!(
        before > 0 && after > 0,
        "claims were accepted before the crash ({before}) and after the restart ({after})"
    );
    eprintln!(
        "{} calls, {} ids, {} accepted, {} made during the outage, {} unresolved (only upstream_error)",
        calls.len(),
        ids.len(),
        s.accepted.len(),
        s.outage_calls,
        s.unresolved.len()
    );

    // Every acknowledged claim survived the crash, whole, and the plugin reports it.
    let c = creds(url);
    for id in &s.accepted {
        let raw =
            read(id.clone()).await.unwrap_or_else(|| panic!("{id} was answered accepted but is not in the store"));
        let rec = assert_whole_record(id, &raw);
        assert_eq!(rec.status, Status::Processing, "{id}: an accepted claim is never rolled back");
        let attempt = calls.iter().find(|c| c.id == *id && c.outcome == "accepted").and_then(|c| c.attempt);
        let st = plugin.invoke("event_status", &c, json!({"event_id": id})).await;
        assert_eq!((st.outcome().as_str(), st.json()["attempt"].as_u64()), ("found", attempt), "{id}");
    }
    // Ids whose calls all failed: the store decides. A landed claim is a duplicate now, a
    // lost one is accepted now, and still no id is accepted twice.
    for id in &s.unresolved {
        // A claim that landed and was not rolled back is a duplicate now; a lost or rolled-back
        // one is accepted now.
        let live = read(id.clone()).await.is_some_and(|raw| assert_whole_record(id, &raw).status == Status::Processing);
        let r = plugin.invoke("event_ingest", &c, event(id)).await;
        let expected = if live { "duplicate" } else { "accepted" };
        assert_eq!(r.outcome(), expected, "{id}: redelivery after the crash");
    }
    // Nothing else in the store is damaged: every id is absent or one whole record.
    let mut held = 0;
    for id in ids {
        if let Some(raw) = read(id.clone()).await {
            assert_whole_record(id, &raw);
            held += 1;
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_container_kill9_under_load_loses_no_accepted_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut kv = KvServer::start(dir.path(), &[]);
    let url = kv.url();
    let ps = plugins().await;
    let load = Load::start(&ps, &creds(&url), SESSIONS, &format!("kv9-{:x}", rand::random::<u32>()));
    // Same address and data directory: the plugins keep their kv_url.
    let (outage, restarted) = crash_and_restart(&load, &mut kv, KvServer::kill9, KvServer::restart).await;
    let (calls, ids) = load.stop().await;
    let http = reqwest::Client::new();
    let read = |id: String| {
        let (http, url) = (http.clone(), url.clone());
        async move { crate::support::kv::raw_event(&http, &url, &id).await }
    };
    let held = verify(&ps[0], &url, &calls, &ids, outage, restarted, read).await;
    // And nothing but those records is on disk.
    kv.terminate();
    let inv = kv_container::inventory(dir.path()).unwrap();
    assert_eq!(inv.records as usize, held, "records on disk: {inv:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restart_under_load_loses_no_accepted_event() {
    let mut r = RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = r.url();
    let ps = plugins().await;
    let load = Load::start(&ps, &creds(&url), SESSIONS, &format!("rd9-{:x}", rand::random::<u32>()));
    let (outage, restarted) = crash_and_restart(&load, &mut r, RedisServer::kill9, RedisServer::relaunch).await;
    let (calls, ids) = load.stop().await;
    let client = r.client();
    let read = |id: String| {
        let client = client.clone();
        async move {
            let mut conn = crate::support::redis::multiplexed(&client).await;
            let v: Option<Vec<u8>> =
                redis::cmd("GET").arg(storage_key(None, &id)).query_async(&mut conn).await.unwrap();
            v
        }
    };
    let held = verify(&ps[0], &url, &calls, &ids, outage, restarted, read).await;
    assert_eq!(r.keys("*").len(), held, "nothing but whole event records in Redis");
}
