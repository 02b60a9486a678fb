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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::Database;
use tokio::sync::{mpsc, oneshot};

use super::batch::{Outcome, WriteOp, DATA, EXPIRY, META};
use super::metrics::Metrics;
use super::record::{Clock, Record};
pub use super::writer::{DurabilityMode, EngineError, Stats, MAX_BATCH};
use super::writer::{Job, Writer};

/// Writes waiting for the writer; a full queue makes request handlers wait (backpressure).
const QUEUE_DEPTH: usize = 4 * MAX_BATCH;
/// The database file inside `--data`.
pub const DB_FILE: &str = "kv.redb";

/// Cheap-to-clone handle used by the HTTP handlers and the purge task.
#[derive(Clone)]
pub struct Engine {
    db: Arc<Database>,
    queue: mpsc::Sender<Job>,
    clock: Clock,
    // Shared with the writer; only tests read it through the handle.
    #[cfg_attr(not(test), allow(dead_code))]
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
}

/// Joins the writer thread; it exits once every [`Engine`] handle has been dropped.
pub struct WriterHandle(std::thread::JoinHandle<()>);

impl WriterHandle {
    pub fn join(self) {
        if self.0.join().is_err() {
            tracing::error!("kv writer thread panicked");
        }
    }
}

impl Engine {
    /// Opens (creating if needed) `<dir>/kv.redb` and starts the writer thread.
    pub fn open(dir: &Path, durability: DurabilityMode, clock: Clock) -> anyhow::Result<(Engine, WriterHandle)> {
        Self::open_gated(dir, durability, clock, None)
    }

    /// Like [`Engine::open`], but the writer waits for `gate` before its first batch, so a
    /// test can fill the queue first and observe batching deterministically.
    pub(crate) fn open_gated(
        dir: &Path,
        durability: DurabilityMode,
        clock: Clock,
        gate: Option<std::sync::mpsc::Receiver<()>>,
    ) -> anyhow::Result<(Engine, WriterHandle)> {
        let db = Arc::new(open_database(dir)?);
        let (queue, rx) = mpsc::channel(QUEUE_DEPTH);
        let stats = Arc::new(Stats::default());
        let metrics = Arc::new(Metrics::default());
        let writer = Writer {
            db: db.clone(),
            rx,
            durability,
            clock: clock.clone(),
            stats: stats.clone(),
            metrics: metrics.clone(),
        };
        let thread = std::thread::Builder::new().name("kv-writer".into()).spawn(move || {
            if let Some(gate) = gate {
                let _ = gate.recv();
            }
            writer.run();
        })?;
        let engine = Engine { db, queue, clock, stats, metrics };
        Ok((engine, WriterHandle(thread)))
    }

    /// The live record under `key`, read from an MVCC snapshot on a blocking thread.
    pub async fn get(&self, key: String) -> Result<Option<Record>, EngineError> {
        let db = self.db.clone();
        let clock = self.clock.clone();
        tokio::task::spawn_blocking(move || read_live(&db, &key, clock.now_ms()))
            .await
            .map_err(|_| EngineError::Unavailable)?
    }

    /// Queues one write and waits until its batch has committed (or failed).
    pub async fn write(&self, op: WriteOp) -> Result<Outcome, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Job { op, reply }).await.map_err(|_| EngineError::Unavailable)?;
        // A dropped reply means the writer died mid-batch: report failure, never success.
        answer.await.map_err(|_| EngineError::Unavailable)?
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Where requests, commits and purges are counted.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The database, for read-only snapshots (listing, backups, key counts).
    pub(super) fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// False once the writer thread has stopped; health checks report it.
    pub fn writer_alive(&self) -> bool {
        !self.queue.is_closed()
    }

    /// Writes waiting in the queue (tests use it to know the queue is full before the gate opens).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }
}

fn open_database(dir: &Path) -> anyhow::Result<Database> {
    use anyhow::Context;
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        anyhow::bail!(
            "--data {}: that path is a file, not a directory; give a directory (created if missing)",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating data directory {}", dir.display()))?;
    let path: PathBuf = dir.join(DB_FILE);
    let db = Database::builder()
        .set_repair_callback(|session| {
            // Called only after an unclean shutdown (e.g. kill -9); redb verifies checksums
            // and rebuilds its allocator state, the committed data itself is intact.
            tracing::warn!("kv: database was not closed cleanly, repairing ({:.0}%)", session.progress() * 100.0);
        })
        .create(&path)
        .map_err(|e| match e {
            // redb holds an exclusive lock on the file while a database is open.
            redb::DatabaseError::DatabaseAlreadyOpen => anyhow::anyhow!(
                "{} is already open in another process (a `stateful-tool kv serve` still running with \
                 this --data?); stop that one, or give this one another --data directory",
                path.display()
            ),
            e => anyhow::Error::new(e).context(format!("opening {}", path.display())),
        })?;
    // Create the tables up front so readers never see "table does not exist".
    let txn = db.begin_write()?;
    txn.open_table(DATA)?;
    txn.open_table(EXPIRY)?;
    txn.open_table(META)?;
    txn.commit()?;
    Ok(db)
}

fn read_live(db: &Database, key: &str, now: u64) -> Result<Option<Record>, EngineError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(DATA)?;
    let stored = match table.get(key)? {
        Some(guard) => Some(Record::decode(guard.value()).map_err(|e| EngineError::Storage(e.to_string()))?),
        None => None,
    };
    Ok(stored.filter(|r| r.is_live(now)))
}
