//! The census: records by status, the stuck count and the 50 most recent failed and stuck
//! records, read from the counts the writer keeps (`counts`), cached and rate-limited.
//!
//! Counts are kept as writes happen, so a census costs no scan of the records: it reads the
//! counts, the `processing` records' leases ("stuck" depends on the clock: a lease runs out
//! with no write at all), the newest failed records, and the few records expired but not yet
//! purged. It still runs on a blocking thread at most once per `--census-interval-ms` (5 s),
//! so a page polled by many browsers costs one census per interval. A read that finds the
//! result due starts one and waits for it up to a second; past that it gets the previous
//! result (with its age).

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::ReadableTableMetadata;
use serde::{Deserialize, Serialize};

use crate::server::counts;
use crate::server::engine::{Engine, ReadError};
use crate::server::ops_metrics;
use crate::server::record::{system_now_ms, StoredValue};
use crate::server::tables::{expired_at, DATA, EXPIRY};

/// How long a read waits for a scan in progress before taking the previous result.
const FRESH_WAIT: Duration = Duration::from_millis(1000);
/// Length of each list.
pub(crate) const LIST_LEN: usize = 50;
/// A `result` longer than this is cut in lists (the record view shows it whole).
const RESULT_CHARS: usize = 200;

/// The fields of an event record a list row shows; the payload is skipped unread.
#[derive(Deserialize)]
struct Fields<'a> {
    v: u32,
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    attempt: u32,
    #[serde(default)]
    lease_until_ms: Option<i64>,
    #[serde(borrow, default)]
    result: Option<Cow<'a, str>>,
    /// Set on a claim the trigger made at its door (see [`stuck`]).
    #[serde(default)]
    door: Option<DoorFields>,
}

/// The part of a door claim that says whether a workflow run took it.
#[derive(Deserialize)]
struct DoorFields {
    #[serde(default)]
    started_at: Option<serde::de::IgnoredAny>,
}

/// One record as a list row. Non-event values have status `other` and no event fields.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Brief {
    pub(crate) key: String,
    pub(crate) status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) attempt: Option<u32>,
    /// Server time of the last write to the record (unix ms): its age is `now_ms - modified_ms`.
    pub(crate) modified_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease_until_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<String>,
    /// Why it counts as stuck: `lease_expired`, `no_lease` (processing for the stuck age), or
    /// `never_started` (claimed at the trigger's door, and no workflow run took it within its
    /// start window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stuck: Option<&'static str>,
    pub(crate) size: usize,
}

impl Brief {
    /// Judges one live record at `now_ms`.
    pub(crate) fn of(key: &str, rec: &StoredValue, now_ms: u64, stuck_after_ms: u64) -> Brief {
        let mut b = Brief {
            key: key.to_owned(),
            status: "other",
            event_id: None,
            event_type: None,
            attempt: None,
            modified_ms: rec.modified_ms,
            lease_until_ms: None,
            result: None,
            stuck: None,
            size: rec.value.len(),
        };
        let Some(f) = serde_json::from_slice::<Fields>(&rec.value).ok().filter(|f| f.v == 1) else {
            return b;
        };
        // One classification for the counts and the lists (`counts::classify`).
        b.status = match counts::classify(&rec.value).category {
            "other" => return b,
            category => category,
        };
        b.stuck = stuck(b.status, f.lease_until_ms, rec.modified_ms, now_ms, stuck_after_ms);
        let waiting = f.door.as_ref().is_some_and(|d| d.started_at.is_none());
        if waiting && b.stuck == Some("lease_expired") {
            b.stuck = Some("never_started");
        }
        b.event_id = Some(f.event_id.into_owned());
        b.event_type = Some(f.event_type.into_owned());
        b.attempt = Some(f.attempt);
        b.lease_until_ms = f.lease_until_ms;
        b.result = f.result.map(|r| r.chars().take(RESULT_CHARS).collect());
        b
    }
}

/// `processing` past its lease (by the server clock, as the plugin judges it), or, with no
/// lease, unchanged for `stuck_after_ms`.
fn stuck(status: &str, lease: Option<i64>, modified_ms: u64, now_ms: u64, stuck_after_ms: u64) -> Option<&'static str> {
    if status != "processing" {
        return None;
    }
    match lease {
        Some(until) => (i64::try_from(now_ms).unwrap_or(i64::MAX) >= until).then_some("lease_expired"),
        None => (now_ms.saturating_sub(modified_ms) >= stuck_after_ms).then_some("no_lease"),
    }
}

/// One census result.
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    /// Server time the scan's snapshot was taken (unix ms).
    pub(crate) as_of_ms: u64,
    pub(crate) scan_ms: u64,
    /// Live keys.
    pub(crate) keys: u64,
    pub(crate) counts: ops_metrics::Census,
    pub(crate) stuck_after_s: u64,
    /// Most recently written first.
    pub(crate) failed: Vec<Brief>,
    pub(crate) stuck: Vec<Brief>,
}

/// The newest `LIST_LEN` rows by `modified_ms`.
fn newest_first(list: &mut Vec<Brief>) {
    list.sort_by(|a, b| b.modified_ms.cmp(&a.modified_ms).then_with(|| a.key.cmp(&b.key)));
    list.truncate(LIST_LEN);
}

/// The census of `db` as of `now_ms`, from the counts kept as writes happen (see
/// `counts`): no scan of the records. Reads the counts, the records expired but not yet
/// purged (a purge interval's worth; they no longer count), every `processing` record's
/// lease (to judge "stuck" by the clock) and the newest failed records.
fn scan(db: &redb::Database, now_ms: u64, stuck_after_ms: u64) -> Result<Snapshot, ReadError> {
    let started = Instant::now();
    let txn = db.begin_read()?;
    let data = txn.open_table(DATA)?;
    let load = |key: &str| -> Result<Option<StoredValue>, ReadError> {
        match data.get(key)? {
            Some(v) => Ok(Some(
                StoredValue::decode(v.value())
                    .map_err(|e| ReadError::Damaged(format!("the record under key {key:?}: {e}")))?,
            )),
            None => Ok(None),
        }
    };
    let mut by_category = counts::read(&txn)?;
    let mut keys = data.len()?;
    // Expired, not purged yet: absent for every client, so not counted either.
    let expiry = txn.open_table(EXPIRY)?;
    for entry in expiry.range(expired_at(now_ms))? {
        let (k, _) = entry?;
        let (expires, key) = k.value();
        if let Some(rec) = load(key)?.filter(|r| r.expires_ms == expires) {
            let n = by_category.entry(counts::classify(&rec.value).category.to_owned()).or_default();
            *n = n.saturating_sub(1);
            keys = keys.saturating_sub(1);
        }
    }
    let listed = txn.open_table(counts::LISTED)?;
    // Newest first, and only the rows a list shows are kept: a backlog of stuck claims is
    // counted one record at a time, never held (the census' memory does not grow with it).
    let (mut stuck_list, mut failed) = (Vec::new(), Vec::new());
    let (mut stuck_count, mut never_started) = (0u64, 0u64);
    let processing = ("processing", 0, "")..=("processing", u64::MAX, "");
    for entry in listed.range::<(&str, u64, &str)>(processing)?.rev() {
        let (k, lease) = entry?;
        let (_, modified_ms, key) = k.value();
        let lease = Some(lease.value()).filter(|l| *l != counts::NO_LEASE);
        if stuck("processing", lease, modified_ms, now_ms, stuck_after_ms).is_none() {
            continue;
        }
        let Some(rec) = load(key)?.filter(|r| r.is_live(now_ms)) else { continue };
        let brief = Brief::of(key, &rec, now_ms, stuck_after_ms);
        stuck_count += 1;
        never_started += u64::from(brief.stuck == Some("never_started"));
        // Rows of the same millisecond as the last one kept may still sort before it by key.
        if stuck_list.len() < LIST_LEN || stuck_list.last().is_some_and(|l: &Brief| l.modified_ms == modified_ms) {
            stuck_list.push(brief);
        }
    }
    // Newest first, skipping the expired ones not purged yet.
    for entry in listed.range::<(&str, u64, &str)>(("failed", 0, "")..=("failed", u64::MAX, ""))?.rev() {
        if failed.len() >= LIST_LEN {
            break;
        }
        let (k, _) = entry?;
        let key = k.value().2;
        if let Some(rec) = load(key)?.filter(|r| r.is_live(now_ms)) {
            failed.push(Brief::of(key, &rec, now_ms, stuck_after_ms));
        }
    }
    newest_first(&mut failed);
    newest_first(&mut stuck_list);
    let counts = ops_metrics::Census::from_counts(&by_category, stuck_count, never_started);
    let scan_ms = started.elapsed().as_millis() as u64;
    Ok(Snapshot {
        as_of_ms: now_ms,
        scan_ms,
        keys,
        counts,
        stuck_after_s: stuck_after_ms / 1000,
        failed,
        stuck: stuck_list,
    })
}

type Latest = Option<Result<Arc<Snapshot>, String>>;

#[derive(Default)]
struct State {
    latest: Latest,
    running: bool,
    /// On tokio's clock, so a test can move it (paused time) instead of waiting for it.
    next_at: Option<tokio::time::Instant>,
}

/// The cache in front of [`scan`]; at most one scan runs at a time.
pub(crate) struct Census {
    state: Mutex<State>,
    done: tokio::sync::Notify,
    stuck_after_ms: u64,
    interval: Duration,
}

impl Census {
    pub(crate) fn new(stuck_after_ms: u64, interval: Duration) -> Census {
        Census { state: Mutex::default(), done: tokio::sync::Notify::new(), stuck_after_ms, interval }
    }

    /// `--stuck-after-seconds`, in ms.
    pub(crate) fn stuck_after_ms(&self) -> u64 {
        self.stuck_after_ms
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest census, starting a new scan when it is due. While one runs, waits for it
    /// up to [`FRESH_WAIT`] (small stores answer fresh), then answers with the previous one
    /// (large stores answer at once); only the very first read waits for a whole scan.
    pub(crate) async fn current(self: &Arc<Self>, engine: &Engine) -> Result<Arc<Snapshot>, String> {
        let mut waited = false;
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (latest, running) = {
                let mut s = self.lock();
                if !s.running && s.next_at.is_none_or(|t| tokio::time::Instant::now() >= t) {
                    s.running = true;
                    self.clone().refresh(engine.clone());
                }
                (s.latest.clone(), s.running)
            };
            match latest {
                Some(found) if !running || waited => return found,
                Some(found) => {
                    waited = true;
                    if tokio::time::timeout(FRESH_WAIT, notified).await.is_err() {
                        return found;
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Scans in a task of its own, so a client that goes away cannot leave `running` set.
    fn refresh(self: Arc<Self>, engine: Engine) {
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let result = self.scan(&engine).await.map(Arc::new);
            let mut s = self.lock();
            s.latest = Some(result);
            s.running = false;
            s.next_at = Some(tokio::time::Instant::now() + self.interval.max(started.elapsed() * 20));
            drop(s);
            self.done.notify_waiters();
        });
    }

    async fn scan(&self, engine: &Engine) -> Result<Snapshot, String> {
        let db = engine.db().map_err(|e| e.to_string())?;
        let after = self.stuck_after_ms;
        match tokio::task::spawn_blocking(move || scan(&db, system_now_ms(), after)).await {
            Ok(Ok(found)) => Ok(found),
            // Damage is reported through /healthz, like on any other read.
            Ok(Err(ReadError::Damaged(why))) => {
                engine.health().damaged(&why);
                Err(why)
            }
            Ok(Err(ReadError::Failed(why))) => Err(why),
            Err(_) => {
                engine.health().damaged("the storage engine failed (panicked) during the census scan");
                Err("the census scan failed".into())
            }
        }
    }
}

#[cfg(test)]
#[path = "census_tests.rs"]
mod tests;
