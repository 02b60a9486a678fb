//! What a `kill -9` of a standalone Redis under load costs with Dify's default persistence
//! (RDB snapshots only) and with AOF at `appendfsync everysec` / `always`: acknowledged
//! claims lost, reported for the README. Only `always` is asserted (it must lose none).

use std::sync::Arc;
use std::time::Instant;

use crate::support::load::{event, Call, Load};
use crate::support::plugin::{creds, Plugin};
use crate::support::redis::RedisServer;
use crate::support::redis_ha::accepted_twice;
use event_store::key::storage_key;

/// Sessions in flight per plugin process (three processes).
const SESSIONS: usize = 8;

/// Acknowledged claims lost by one crash: (ids accepted, lost).
async fn crash_once(setting: &str, extra: &[&str]) -> (usize, usize) {
    let mut r = RedisServer::start(extra);
    let url = r.url();
    let mut plugins = vec![];
    for _ in 0..3 {
        plugins.push(Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")]).await));
    }
    let tag = format!("p{:x}", rand::random::<u32>());
    let load = Load::start(&plugins, &creds(&url), SESSIONS, &tag);
    // The crash comes once claims have been accepted under the whole load, and the load runs
    // on until as many are accepted after the restart: events, however long a loaded machine
    // takes for them.
    let accepted_since = |t: Option<Instant>, calls: &[Call]| {
        calls.iter().filter(|c| c.outcome == "accepted" && t.is_none_or(|t| c.started > t)).count()
    };
    load.wait_for("claims accepted before the crash", 3 * SESSIONS, |calls| accepted_since(None, calls)).await;
    r.kill9();
    r.relaunch();
    let restarted = Instant::now();
    load.wait_for("claims accepted after the restart", 3 * SESSIONS, |calls| accepted_since(Some(restarted), calls))
        .await;
    let (calls, _) = load.stop().await;
    let mut accepted: Vec<&String> = calls.iter().filter(|c| c.outcome == "accepted").map(|c| &c.id).collect();
    accepted.sort();
    accepted.dedup();
    let mut con = r.conn();
    let absent = accepted
        .iter()
        .filter(|id| redis::cmd("EXISTS").arg(storage_key(None, id)).query::<i64>(&mut con).unwrap() == 0)
        .count();
    // A claim lost and then redelivered is accepted again (and then present): count both.
    let lost = absent + accepted_twice(&calls);
    // Ingest goes on after the restart.
    let after = plugins[0].invoke("event_ingest", &creds(&url), event(&format!("{tag}-after"))).await;
    assert_eq!(after.outcome(), "accepted", "{after:?}");
    eprintln!("redis kill -9 under load, {setting}: {} ids accepted, {lost} acknowledged claims lost", accepted.len());
    (accepted.len(), lost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_claims_lost_by_a_crash_per_persistence_setting() {
    // Dify's docker-compose Redis: the stock configuration, RDB snapshots, no AOF.
    let (_, _) =
        crash_once("RDB only (Dify's default)", &["--save", "3600 1 300 100 60 10000", "--appendonly", "no"]).await;
    let (_, _) = crash_once("AOF appendfsync everysec", &["--appendonly", "yes", "--appendfsync", "everysec"]).await;
    let (accepted, lost) =
        crash_once("AOF appendfsync always", &["--appendonly", "yes", "--appendfsync", "always"]).await;
    assert!(accepted > 0);
    assert_eq!(lost, 0, "with appendfsync always no acknowledged claim may be lost");
}
