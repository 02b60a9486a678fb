//! The census: records by status, the stuck count and the 50 most recent failed and stuck
//! records, from one scan of an MVCC snapshot, cached and rate-limited.
//!
//! Why a cached scan and not counts kept on every write: "stuck" depends on the clock (a
//! lease runs out with no write at all), and keeping counts exact would put a JSON parse of
//! the old and new value into the writer's commit loop. Instead a scan runs on a blocking
//! thread, never blocking writers, at most once per `--census-interval-ms` (5 s) and never
//! more often than every 20× its own duration, so it costs at most ~5 % of one core on a
//! store of any size. A read that finds the result due starts a scan and waits for it up to
//! a second; past that it gets the previous result (with its age) while the scan finishes.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use crate::server::batch::DATA;
use crate::server::engine::{Engine, ReadError};
use crate::server::ops_metrics;
use crate::server::record::{system_now_ms, StoredValue};

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
    #[serde(borrow)]
    status: Cow<'a, str>,
    attempt: u32,
    #[serde(default)]
    lease_until_ms: Option<i64>,
    #[serde(borrow, default)]
    result: Option<Cow<'a, str>>,
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
    /// Why it counts as stuck: `lease_expired` or `no_lease` (processing for the stuck age).
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
        b.status = match f.status.as_ref() {
            "processing" => "processing",
            "completed" => "completed",
            "failed" => "failed",
            _ => return b,
        };
        b.stuck = stuck(b.status, f.lease_until_ms, rec.modified_ms, now_ms, stuck_after_ms);
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

/// The newest `LIST_LEN` rows by `modified_ms`, kept while scanning in O(n log k).
fn keep_newest(list: &mut Vec<Brief>, b: Brief) {
    list.push(b);
    if list.len() >= 4 * LIST_LEN {
        newest_first(list);
    }
}

fn newest_first(list: &mut Vec<Brief>) {
    list.sort_by(|a, b| b.modified_ms.cmp(&a.modified_ms).then_with(|| a.key.cmp(&b.key)));
    list.truncate(LIST_LEN);
}

/// Scans every live record of `db` as of `now_ms`.
fn scan(db: &redb::Database, now_ms: u64, stuck_after_ms: u64) -> Result<Snapshot, ReadError> {
    let started = Instant::now();
    let txn = db.begin_read()?;
    let table = txn.open_table(DATA)?;
    let (mut counts, mut keys) = (ops_metrics::Census::default(), 0u64);
    let (mut failed, mut stuck) = (Vec::new(), Vec::new());
    for item in table.iter()? {
        let (k, v) = item?;
        let rec = StoredValue::decode(v.value())
            .map_err(|e| ReadError::Damaged(format!("the record under key {:?}: {e}", k.value())))?;
        if !rec.is_live(now_ms) {
            continue;
        }
        keys += 1;
        let b = Brief::of(k.value(), &rec, now_ms, stuck_after_ms);
        match b.status {
            "processing" => counts.processing += 1,
            "completed" => counts.completed += 1,
            "failed" => counts.failed += 1,
            _ => counts.other += 1,
        }
        if b.stuck.is_some() {
            counts.stuck += 1;
            keep_newest(&mut stuck, b);
        } else if b.status == "failed" {
            keep_newest(&mut failed, b);
        }
    }
    newest_first(&mut failed);
    newest_first(&mut stuck);
    let scan_ms = started.elapsed().as_millis() as u64;
    Ok(Snapshot { as_of_ms: now_ms, scan_ms, keys, counts, stuck_after_s: stuck_after_ms / 1000, failed, stuck })
}

type Latest = Option<Result<Arc<Snapshot>, String>>;

#[derive(Default)]
struct State {
    latest: Latest,
    running: bool,
    next_at: Option<Instant>,
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
                if !s.running && s.next_at.is_none_or(|t| Instant::now() >= t) {
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
            let started = Instant::now();
            let result = self.scan(&engine).await.map(Arc::new);
            let mut s = self.lock();
            s.latest = Some(result);
            s.running = false;
            s.next_at = Some(Instant::now() + self.interval.max(started.elapsed() * 20));
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
