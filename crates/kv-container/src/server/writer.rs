//! The single writer thread: drains the queue, applies a batch in one transaction, commits
//! once, then answers every request of the batch (group commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::Durability;
use tokio::sync::{mpsc, oneshot};

use super::batch::{self, BatchError, WriteOp, WriteOutcome};
use super::gather::Gather;
use super::health::Health;
use super::metrics::Metrics;
use super::open::DbSlot;
use super::record::ServerClock;

/// Most writes applied in one transaction; bounds commit latency and memory per batch.
pub(crate) const MAX_BATCH: usize = 1024;

/// `--durability`: whether an acknowledged write has been fsync'd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityMode {
    /// Every acknowledged write is on disk (fsync'd) before its response is sent.
    Immediate,
    /// No fsync per commit; for measuring what fsync costs. A crash can lose ~1–2 s of writes.
    None,
}

impl DurabilityMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DurabilityMode::Immediate => "immediate",
            DurabilityMode::None => "none",
        }
    }
}

/// Why a request could not be served by the store. Never turned into a success.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum EngineError {
    #[error("storage error: {0}")]
    Storage(String),
    #[error("the storage writer is not running")]
    Unavailable,
}

macro_rules! storage_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for EngineError {
            fn from(e: $t) -> Self { EngineError::Storage(e.to_string()) }
        }
    )*};
}
storage_error_from!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::DatabaseError
);

/// Counters for tests and the shutdown log line.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Transactions committed by the writer.
    pub(crate) commits: AtomicU64,
    /// Write requests answered (committed or refused by a precondition).
    pub(crate) ops: AtomicU64,
}

/// What the writer consults around each batch. The server passes none; tests inject one (at
/// [`super::engine::Engine::start`]) to hold the writer while they fill its queue, or to fail
/// a batch the way a failed commit does, without a switch in the writer itself.
pub(crate) trait BatchHook: Send {
    /// Before the writer takes its next batch from the queue; may block.
    fn before_gather(&mut self) {}
    /// Before a gathered batch is applied: an error fails the whole batch, as a failed
    /// commit would, and nothing of it is acknowledged.
    fn before_apply(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// In `none` mode, how often a commit is still made durable so redb can reuse freed pages
/// (it only frees them on durable commits) and a crash loses a bounded window.
const NONE_MODE_SYNC_EVERY: Duration = Duration::from_secs(1);
/// While writes fail (disk full, I/O errors), how often the database is reopened to see
/// whether they can succeed again; batches in between fail at once.
const REOPEN_EVERY: Duration = Duration::from_millis(500);

/// One queued write and where its answer goes.
pub(super) struct Job {
    pub(crate) op: WriteOp,
    pub(crate) reply: oneshot::Sender<Result<WriteOutcome, EngineError>>,
}

pub(super) struct Writer {
    pub(crate) slot: Arc<DbSlot>,
    pub(crate) health: Arc<Health>,
    /// Set after a failed commit: (when the database was last (re)opened, why writes fail).
    pub(crate) broken: Option<(Instant, String)>,
    pub(crate) rx: mpsc::Receiver<Job>,
    pub(crate) durability: DurabilityMode,
    pub(crate) clock: ServerClock,
    pub(crate) stats: Arc<Stats>,
    pub(crate) metrics: Arc<Metrics>,
    /// The store time a batch being applied started at ([`IDLE`] between batches): a read
    /// never reports a time at or past it, since that batch's writes are not visible yet.
    pub(crate) busy_since: Arc<AtomicU64>,
    pub(crate) hook: Option<Box<dyn BatchHook>>,
}

/// `busy_since` between batches.
pub(crate) const IDLE: u64 = u64::MAX;

impl Writer {
    pub(crate) fn run(mut self) {
        let mut ops = Vec::with_capacity(MAX_BATCH);
        let mut replies = Vec::with_capacity(MAX_BATCH);
        let mut last_sync = Instant::now();
        let mut unsynced = false;
        let mut gather = Gather::default();
        loop {
            if let Some(hook) = &mut self.hook {
                hook.before_gather();
            }
            let Some(first) = self.rx.blocking_recv() else { break };
            ops.push(first.op);
            replies.push(first.reply);
            while ops.len() < MAX_BATCH {
                let Ok(job) = self.rx.try_recv() else { break };
                ops.push(job.op);
                replies.push(job.reply);
            }
            if self.durability == DurabilityMode::Immediate {
                gather.top_up(&mut self.rx, ops.len(), MAX_BATCH, |job: Job| {
                    ops.push(job.op);
                    replies.push(job.reply);
                });
            }
            // In `none` mode, make one commit per interval durable, even an empty one.
            let flush_due =
                self.durability == DurabilityMode::None && unsynced && last_sync.elapsed() >= NONE_MODE_SYNC_EVERY;
            let durable = self.durability == DurabilityMode::Immediate || flush_due;
            let level = if durable { Durability::Immediate } else { Durability::None };
            let started = Instant::now();
            let result = self.apply(&ops, level, flush_due);
            self.stats.ops.fetch_add(ops.len() as u64, Ordering::Relaxed);
            match result {
                Ok((outcomes, committed)) => {
                    if committed {
                        self.metrics.committed(ops.len(), started.elapsed());
                        self.stats.commits.fetch_add(1, Ordering::Relaxed);
                        if durable {
                            last_sync = Instant::now();
                            gather.committed(ops.len(), last_sync - started);
                        }
                        unsynced = !durable;
                    }
                    for (reply, outcome) in replies.drain(..).zip(outcomes) {
                        // The client may have gone away; its write still stands.
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    tracing::warn!("kv: batch of {} writes failed, none acknowledged: {e}", ops.len());
                    self.metrics.writer_failed();
                    let err = EngineError::Storage(e);
                    for reply in replies.drain(..) {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
            ops.clear();
            replies.clear();
        }
        if unsynced {
            // `none` mode: make the tail durable on a clean shutdown.
            if let Err(e) = self.apply(&[], Durability::Immediate, true) {
                tracing::error!("kv: final flush failed: {e}");
            }
        }
        if self.health.damage().is_some() {
            self.slot.leave_unclosed();
            tracing::warn!("kv: the damaged data file is left as it is (not closed cleanly)");
        }
        let commits = self.stats.commits.load(Ordering::Relaxed);
        let total = self.stats.ops.load(Ordering::Relaxed);
        tracing::info!("kv writer stopped: {total} operations in {commits} commits");
    }

    /// Applies a batch. After a failed commit redb refuses every later write until it is
    /// reopened: the database is reopened (at most every [`REOPEN_EVERY`]) and the next batch
    /// is committed even if it changes nothing, so a purge tick proves the disk writable again.
    fn apply(
        &mut self,
        ops: &[WriteOp],
        durability: Durability,
        force_commit: bool,
    ) -> Result<(Vec<WriteOutcome>, bool), String> {
        if let Some(hook) = &mut self.hook {
            hook.before_apply()?;
        }
        // Damage is not something a reopen fixes, and redb's repair on reopen would write to
        // the damaged file the operator needs as it is: refuse until a restart.
        if let Some(why) = self.health.damage() {
            return Err(why);
        }
        let recovering = self.broken.is_some();
        if let Some((opened, why)) = &mut self.broken {
            if opened.elapsed() < REOPEN_EVERY {
                return Err(why.clone());
            }
            let attempt = self.slot.reopen();
            *opened = Instant::now();
            if let Err(e) = attempt {
                tracing::debug!("kv: reopen failed: {e}");
                return Err(why.clone());
            }
        }
        let db = self.slot.get().ok_or("the database is closed")?;
        // Published before the batch's time is taken, cleared once its commit is visible:
        // a reader that saw IDLE took its time before this batch's (see Engine::get_at).
        self.busy_since.store(self.clock.now_ms(), Ordering::SeqCst);
        let now = self.clock.now_ms();
        let (durability, force) = if recovering { (Durability::Immediate, true) } else { (durability, force_commit) };
        let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A commit rewrites the file's header before the pages it points to are all
            // written: an integrity check takes its view of the file between commits.
            let _between = self.slot.commit_gate();
            batch::apply(&db, ops, now, durability, force)
        }));
        self.busy_since.store(IDLE, Ordering::SeqCst);
        match applied {
            Ok(Ok(done)) => {
                if self.broken.take().is_some() {
                    tracing::warn!("kv: the database was reopened and commits succeed again");
                }
                self.health.write_succeeded();
                Ok(done)
            }
            Ok(Err(BatchError::Corrupt(e))) => {
                self.health.damaged(&e.to_string());
                Err(e.to_string())
            }
            Ok(Err(e)) => {
                let why = e.to_string();
                self.health.write_failed(&why);
                self.broken.get_or_insert((Instant::now(), why.clone()));
                Err(why)
            }
            Err(_) => {
                let why = "the storage engine failed (panicked) applying a batch".to_owned();
                self.health.damaged(&why);
                self.broken.get_or_insert((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}
