//! The storage engine: redb for durability, one writer thread doing group commit, MVCC reads.
//!
//! Why redb: pure Rust (no C/C++ toolchain in the build), ACID with copy-on-write B-trees,
//! readers get MVCC snapshots and never block the writer, and a commit is crash-safe by
//! construction (checksummed commit slots, no write-ahead log to replay). sled is an
//! unmaintained beta, RocksDB is a heavy C++ build, SQLite would work but brings a C
//! dependency and a SQL layer we do not need.
//!
//! Group commit: every write (PUT/POST/DELETE/purge) is queued to one dedicated OS thread,
//! which drains up to [`MAX_BATCH`] queued writes, applies them in order inside one write
//! transaction, commits once (one fsync in `immediate` mode) and only then answers each
//! request. N concurrent writers therefore cost about one fsync, not N.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::Database;
use tokio::sync::{mpsc, oneshot};

use super::batch::{WriteOp, WriteOutcome};
use super::check_process::CheckProgram;
use super::health::Health;
use super::integrity::{CheckJob, CheckRunner, Integrity, Verdict};
use super::metrics::Metrics;
use super::open::DbSlot;
use super::pin::Held;
use super::record::{ServerClock, StoredValue};
use super::tables::DATA;
use super::warm::{self, Warmer};
use super::writer::{BatchHook, Job, Writer, IDLE};
pub(crate) use super::writer::{DurabilityMode, EngineError, Stats, MAX_BATCH};

/// Writes waiting for the writer; a full queue makes request handlers wait (backpressure).
const QUEUE_DEPTH: usize = 4 * MAX_BATCH;
pub(crate) use super::open::DB_FILE;

/// Cheap-to-clone handle used by the HTTP handlers and the purge task.
#[derive(Clone)]
pub(crate) struct Engine {
    slot: Arc<DbSlot>,
    health: Arc<Health>,
    queue: mpsc::Sender<Job>,
    clock: ServerClock,
    // Shared with the writer; only tests read it through the handle.
    #[cfg_attr(not(test), allow(dead_code))]
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
    /// Shared with the writer: when the batch being applied started (IDLE = none).
    busy_since: Arc<AtomicU64>,
    /// The background check of every page and record.
    integrity: Arc<Integrity>,
    /// Whether a write's pages are read before it is queued (see `warm`).
    warmer: Arc<Warmer>,
}

/// Joins the writer thread; it exits once every [`Engine`] handle has been dropped.
pub(crate) struct WriterHandle(std::thread::JoinHandle<()>, Arc<Integrity>);

impl WriterHandle {
    /// Stops a running integrity check (it holds the database open) and waits for the writer.
    pub(crate) fn join(self) {
        self.1.stop();
        if self.0.join().is_err() {
            tracing::error!("kv writer thread panicked");
        }
    }
}

impl Engine {
    /// Opens `<dir>/kv.redb` (creating it only when the directory has no data file; refusing
    /// one that is not a complete, valid store) with a page cache of `cache_bytes`
    /// (`--cache-mb`), and starts the writer thread.
    pub(crate) fn open_cached(
        dir: &Path,
        durability: DurabilityMode,
        clock: ServerClock,
        cache_bytes: usize,
    ) -> anyhow::Result<(Engine, WriterHandle)> {
        Self::start(dir, durability, clock, cache_bytes, None, CheckRunner::Thread)
    }

    /// [`Engine::open_cached`] for `kv serve`: the integrity check runs in a process of
    /// `check`.
    pub(crate) fn open_serving(
        dir: &Path,
        durability: DurabilityMode,
        clock: ServerClock,
        cache_bytes: usize,
        check: CheckProgram,
    ) -> anyhow::Result<(Engine, WriterHandle)> {
        Self::start(dir, durability, clock, cache_bytes, None, CheckRunner::Process(check))
    }

    /// [`Engine::open_cached`] with a [`BatchHook`] the writer consults around each batch
    /// (tests inject one; the server has none).
    pub(crate) fn start(
        dir: &Path,
        durability: DurabilityMode,
        clock: ServerClock,
        cache_bytes: usize,
        hook: Option<Box<dyn BatchHook>>,
        check: CheckRunner,
    ) -> anyhow::Result<(Engine, WriterHandle)> {
        let (db, checked) = super::open::open(dir, cache_bytes)?;
        if !checked.created {
            tracing::info!("kv: opened {} ({} records)", dir.join(DB_FILE).display(), checked.records);
        }
        let slot = Arc::new(DbSlot::new(dir.join(DB_FILE), db, cache_bytes));
        let health = Arc::new(Health::default());
        let (queue, rx) = mpsc::channel(QUEUE_DEPTH);
        let stats = Arc::new(Stats::default());
        let metrics = Arc::new(Metrics::default());
        let busy_since = Arc::new(AtomicU64::new(IDLE));
        let writer = Writer {
            slot: slot.clone(),
            health: health.clone(),
            broken: None,
            rx,
            durability,
            clock: clock.clone(),
            stats: stats.clone(),
            metrics: metrics.clone(),
            busy_since: busy_since.clone(),
            hook,
        };
        let thread = std::thread::Builder::new().name("kv-writer".into()).spawn(move || writer.run())?;
        let integrity = Arc::new(Integrity::new(checked.clean_start, check));
        let warmer = Arc::new(Warmer::default());
        let (handle, integrity) = (WriterHandle(thread, integrity.clone()), integrity);
        let engine = Engine { slot, health, queue, clock, stats, metrics, busy_since, integrity, warmer };
        Ok((engine, handle))
    }

    /// The live record under `key`, read from an MVCC snapshot on a blocking thread.
    pub(crate) async fn get(&self, key: String) -> Result<Option<StoredValue>, EngineError> {
        self.get_at(key).await.map(|(found, _)| found)
    }

    /// The live record under `key` (from an MVCC snapshot, on a blocking thread), and a store time T such that every write applied at a time up to T
    /// is in the snapshot read: the read's own time, or just before the batch that was being
    /// applied when the read began (its writes commit later and would be missed). A client
    /// judging "no write with a deadline before T can appear any more" relies on it.
    pub(crate) async fn get_at(&self, key: String) -> Result<(Option<StoredValue>, u64), EngineError> {
        let db = self.db()?;
        let clock = self.clock.clone();
        let health = self.health.clone();
        let busy_since = self.busy_since.clone();
        let read = move || {
            let now = clock.now_ms();
            let busy = busy_since.load(Ordering::SeqCst);
            let at = if busy == IDLE { now } else { now.min(busy.saturating_sub(1)) };
            read_live(&db, &key, now).map(|found| (found, at))
        };
        match tokio::task::spawn_blocking(read).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(ReadError::Damaged(why))) => {
                health.damaged(&why);
                Err(EngineError::Storage(why))
            }
            Ok(Err(ReadError::Failed(why))) => Err(EngineError::Storage(why)),
            Err(_) => {
                health.damaged("the storage engine failed (panicked) reading a key");
                Err(EngineError::Storage("the read failed".into()))
            }
        }
    }

    /// Starts the check of every page and record in the background, unless one runs (`false`).
    pub(crate) fn check_in_background(&self) -> bool {
        let job = CheckJob {
            slot: self.slot.clone(),
            health: self.health.clone(),
            metrics: self.metrics.integrity.clone(),
            traffic: self.metrics.traffic.clone(),
        };
        self.integrity.start(job)
    }

    /// What the last integrity check found.
    pub(crate) fn integrity(&self) -> Verdict {
        self.integrity.verdict()
    }

    /// What `/healthz` reports besides a stopped writer.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// Queues one write and waits until its batch has committed (or failed).
    pub(crate) async fn write(&self, op: WriteOp) -> Result<WriteOutcome, EngineError> {
        if let WriteOp::Put { key, .. } | WriteOp::Delete { key, .. } = &op {
            if let (true, Ok(db)) = (self.warmer.wanted(self.clock.now_ms(), warm::read_bytes), self.db()) {
                warm::warm(db, key.clone()).await;
            }
        }
        let (reply, answer) = oneshot::channel();
        self.queue.send(Job { op, reply }).await.map_err(|_| EngineError::Unavailable)?;
        // A dropped reply means the writer died mid-batch: report failure, never success.
        answer.await.map_err(|_| EngineError::Unavailable)?
    }

    /// Reads the pages of the records the next purge batch of `limit` keys deletes (see
    /// `ttl`), so the writer finds them in memory.
    pub(crate) async fn warm_expired(&self, limit: usize) {
        if let Ok(db) = self.db() {
            warm::warm_expired(db, self.clock.now_ms(), limit).await;
        }
    }

    /// When the batch being applied started (tests pose as a writer mid-batch).
    #[cfg(test)]
    pub(crate) fn busy_since(&self) -> &AtomicU64 {
        &self.busy_since
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Where requests, commits and purges are counted.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The database, for reads and read-only snapshots (listing, backups, key counts);
    /// unavailable while the store is being reopened after a failed write, refused once the
    /// data file is known to be damaged.
    pub(super) fn db(&self) -> Result<Arc<Database>, EngineError> {
        if let Some(why) = self.health.damage() {
            return Err(EngineError::Storage(why));
        }
        self.slot.get().ok_or(EngineError::Unavailable)
    }

    /// Holds the newest commit for an image backup (see `pin`), taken between two commits.
    pub(super) async fn hold(&self) -> Result<Held, EngineError> {
        self.db()?;
        let slot = self.slot.clone();
        tokio::task::spawn_blocking(move || Held::take(&slot))
            .await
            .map_err(|_| EngineError::Storage("holding a commit for the backup failed".into()))?
            .map_err(EngineError::Storage)
    }

    /// False once the writer thread has stopped; health checks report it.
    pub(crate) fn writer_alive(&self) -> bool {
        !self.queue.is_closed()
    }

    /// Writes waiting in the queue (tests use it to know the queue is full before the gate opens).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }
}

/// A failed read: damage is reported through `/healthz`, other failures only to the client.
pub(super) enum ReadError {
    Damaged(String),
    Failed(String),
}

impl<E: Into<redb::Error>> From<E> for ReadError {
    fn from(e: E) -> Self {
        match e.into() {
            e @ redb::Error::Corrupted(_) => ReadError::Damaged(e.to_string()),
            e => ReadError::Failed(e.to_string()),
        }
    }
}

fn read_live(db: &Database, key: &str, now: u64) -> Result<Option<StoredValue>, ReadError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(DATA)?;
    let stored = match table.get(key)? {
        Some(guard) => Some(
            StoredValue::decode(guard.value())
                .map_err(|e| ReadError::Damaged(format!("the record under key {key:?}: {e}")))?,
        ),
        None => None,
    };
    Ok(stored.filter(|r| r.is_live(now)))
}
