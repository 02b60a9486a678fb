//! A claim whose commit is not yet visible: PostgreSQL with `synchronous_standby_names`
//! naming a standby that is not there, so every commit is written locally and then waits,
//! invisible to other sessions, for a confirmation. The plugin's claim statement passed its
//! deadline check, its answer never comes, and the call must settle without a false "nothing
//! landed": its settling read waits for the claim on the key's lock and sees it, or, when the
//! claim is still waiting at the end of the call, says the claim could not be checked.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::postgres::{PgServer, ADMIN, ADMIN_PASSWORD};

/// The plugin's store timeout: one call's whole budget for its store round trips.
const TIMEOUT_MS: &str = "3000";

/// Polls `sql` (one number) on `pg` until it is at least 1 (true), or until `gone` says the
/// moment has passed (false). Only a hang fails: a machine so loaded that nothing happens for
/// [`HANG`].
async fn until_some(pg: &PgServer, what: &str, sql: &str, gone: impl Fn() -> bool) -> bool {
    let until = Instant::now() + HANG;
    loop {
        let n: i64 = pg.sql("postgres", sql).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        if n >= 1 {
            return true;
        }
        if gone() {
            return false;
        }
        assert!(Instant::now() < until, "nothing happened for {} s waiting until {what}", HANG.as_secs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Long enough that only a hang reaches it, whatever the machine's load.
const HANG: Duration = Duration::from_secs(120);

/// How many times the first test tries to release the standby while a call's settling read
/// waits: the read waits on the key's lock for the rest of the call's budget (about a second
/// and a half), and a poll or a release that misses that window (a loaded machine starting
/// `psql` slowly) is a scenario that did not happen, not a failure.
const CATCH_TRIES: usize = 8;

/// A primary whose commits wait for a standby named `ghost` that never connects, once
/// [`Stuck::hold`] is called, and the plugin, its tables made while commits still passed.
struct Stuck {
    pg: PgServer,
    plugin: Arc<Plugin>,
    url: String,
    probe: Option<Child>,
    /// Holds so far: each proves itself with a commit of a table of its own.
    holds: usize,
}

impl Stuck {
    async fn start() -> Stuck {
        let pg = PgServer::start(&["synchronous_commit=on"]);
        let url = pg.app("app", "events");
        let plugin = Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", TIMEOUT_MS)]).await);
        let warm =
            plugin.invoke("event_ingest", &creds(&url), json!({"event_id": "warm-up", "event_type": "created"})).await;
        assert_eq!(warm.outcome(), "accepted", "{warm:?}");
        Stuck { pg, plugin, url, probe: None, holds: 0 }
    }

    /// From now on every commit waits; proven by a commit of our own seen waiting.
    async fn hold(&mut self) {
        self.pg.must("postgres", "ALTER SYSTEM SET synchronous_standby_names = 'ghost'");
        self.pg.must("postgres", "SELECT pg_reload_conf()");
        let probe = Command::new("psql")
            .arg(format!("host=127.0.0.1 port={} user={ADMIN} dbname=postgres", self.pg.port))
            .args(["-qX", "-c", &format!("CREATE TABLE commit_probe_{} ()", self.holds)])
            .env("PGPASSWORD", ADMIN_PASSWORD)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql");
        self.holds += 1;
        if let Some(mut done) = self.probe.replace(probe) {
            let _ = done.wait();
        }
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
        until_some(&self.pg, "a commit waits for the missing standby", waiting, || false).await;
    }

    /// Commits are visible again (the waiting ones at once).
    fn release(&self) {
        self.pg.must("postgres", "ALTER SYSTEM RESET synchronous_standby_names");
        self.pg.must("postgres", "SELECT pg_reload_conf()");
    }

    /// The ingest of `id`, answered in the background.
    fn ingest(&self, id: &str) -> tokio::task::JoinHandle<Reply> {
        let (p, c, ev) = (self.plugin.clone(), creds(&self.url), json!({"event_id": id, "event_type": "created"}));
        tokio::spawn(async move { p.invoke("event_ingest", &c, ev).await })
    }

    /// The status of `id` as stored (with commits visible).
    async fn status(&self, id: &str) -> Reply {
        self.plugin.invoke("event_status", &creds(&self.url), json!({"event_id": id})).await
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        if let Some(mut p) = self.probe.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// The plugin's statements that wait on the key's lock in a transaction of their own: the
/// settling read (or the roll-back), not a claim.
const SETTLING_WAITS: &str = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' \
     AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%set_config(''lock_timeout''%'";

/// The claim's answer is lost while its commit waits; the standby confirms while the call is
/// settling. The settling read waits for the claim, sees it is this call's own, and the call
/// answers `accepted`: the event is neither lost nor left to a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_still_committing_is_seen_by_the_settling_read() {
    let mut s = Stuck::start().await;
    s.hold().await;
    let mut caught = None;
    for n in 0..CATCH_TRIES {
        let id = format!("committing-{n}");
        let call = s.ingest(&id);
        let what = "the call's settling read waits on the key's lock";
        let seen = until_some(&s.pg, what, SETTLING_WAITS, || call.is_finished()).await;
        if seen {
            s.release();
        }
        let answer = call.await.unwrap();
        if seen && answer.error.is_none() {
            caught = Some((id, answer));
            break;
        }
        // Missed: the call ended before the poll saw its settling read, or before the release
        // reached the server (psql starts slowly on a loaded machine); either way it must have
        // said that its claim could not be checked, never that none landed.
        assert!(answer.message().contains("could not be checked"), "{answer:?}");
        eprintln!("try {n}: the settling read ended before the release (seen: {seen}); trying again with a new id");
        if seen {
            s.hold().await;
        }
    }
    let (id, first) = caught.unwrap_or_else(|| panic!("no call settled after a release in {CATCH_TRIES} tries"));
    assert_eq!((first.outcome().as_str(), first.json()["attempt"].as_u64()), ("accepted", Some(1)), "{first:?}");
    let stored = s.status(&id).await;
    let seen = (&stored.json()["status"], &stored.json()["attempt"], &stored.json()["updated_at"]);
    let told = (&json!("processing"), &first.json()["attempt"], &first.json()["updated_at"]);
    assert_eq!(seen, told, "the store holds the claim the call answered: {stored:?}");
    let again = s.plugin.invoke("event_ingest", &creds(&s.url), json!({"event_id": id, "event_type": "created"})).await;
    assert_eq!(again.outcome(), "duplicate", "{again:?}");
}

/// The standby never confirms within the call: the call answers `upstream_error` and says the
/// claim could not be checked (never that none can land). When the commit becomes visible,
/// the record is that claim's, as the message warned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_committing_past_the_call_is_reported_unchecked() {
    let mut s = Stuck::start().await;
    s.hold().await;
    let first = s.ingest("stuck").await.unwrap();
    assert_eq!(first.outcome(), "error:upstream_error", "{first:?}");
    let message = first.message();
    assert!(!message.contains("none can land"), "a claim still committing was declared absent: {message}");
    assert!(message.contains("could not be checked"), "{message}");
    s.release();
    let stored = s.status("stuck").await;
    assert_eq!(
        (stored.json()["status"].as_str(), stored.json()["attempt"].as_u64()),
        (Some("processing"), Some(1)),
        "{stored:?}"
    );
}
