//! Applies one batch of writes inside a single redb write transaction (the group commit body).

use redb::{Database, Durability, ReadableTable, Table};

use super::counts::Counter;
use super::record::{CorruptRecord, StoredValue, Value};
use super::tables::{expired_at, DATA, EXPIRY, META, REV_KEY};

/// What a write is conditional on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Unconditional.
    None,
    /// `If-None-Match: *` — only if no live value exists.
    IfAbsent,
    /// `If-Match: *` — only if a live value exists.
    IfExists,
    /// `If-Match: "<rev>"` — only if the live value has exactly this revision.
    IfRev(u64),
}

/// One queued write.
#[derive(Debug, Clone)]
pub(crate) enum WriteOp {
    Put {
        key: String,
        value: Value,
        pre: Precondition,
        ttl_ms: Option<u64>,
        /// `KV-Deadline-Ms`: refused unless applied at a store time up to this.
        until_ms: Option<u64>,
    },
    Delete {
        key: String,
        pre: Precondition,
        until_ms: Option<u64>,
    },
    /// Delete at most `limit` expired keys.
    Purge {
        limit: usize,
    },
}

#[cfg(test)]
impl WriteOp {
    /// A put with no deadline, as the unit tests write one.
    pub(crate) fn put(key: &str, value: impl Into<bytes::Bytes>, pre: Precondition, ttl_ms: Option<u64>) -> WriteOp {
        WriteOp::Put { key: key.to_owned(), value: value.into().into(), pre, ttl_ms, until_ms: None }
    }
}

/// Metadata of a value that was just written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) rev: u64,
    pub(crate) modified_ms: u64,
    pub(crate) expires_ms: u64,
}

/// The answer to one [`WriteOp`], valid only once the batch has committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    Created(Written),
    Replaced(Written),
    Deleted,
    NotFound,
    /// Precondition failed; carries the live value if there is one.
    PreconditionFailed(Option<StoredValue>),
    Purged(usize),
    /// Reached the writer after its deadline (at this store time): nothing was written.
    TooLate(u64),
}

/// Anything that stops a batch from committing; every request in it then gets an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchError {
    /// Boxed: redb's error is large and this travels through every `?` on the hot path.
    #[error("storage: {0}")]
    Storage(Box<redb::Error>),
    #[error(transparent)]
    Corrupt(#[from] CorruptRecord),
    #[error("revision counter exhausted")]
    RevisionOverflow,
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for BatchError {
            fn from(e: $t) -> Self { BatchError::Storage(Box::new(e.into())) }
        }
    )*};
}
from_redb!(redb::TransactionError, redb::TableError, redb::StorageError, redb::CommitError);

impl From<super::counts::CountError> for BatchError {
    fn from(e: super::counts::CountError) -> Self {
        BatchError::Storage(Box::new(e.into()))
    }
}

struct Tables<'t> {
    data: Table<'t, &'static str, &'static [u8]>,
    expiry: Table<'t, (u64, &'static str), ()>,
    /// Records by category, kept in the same transaction (see `counts`).
    counter: Counter<'t>,
    rev: u64,
    now: u64,
    dirty: bool,
}

/// Runs `ops` in order in one transaction and commits once. Later ops see the effects of
/// earlier ones, so two creates of one key in the same batch still yield one winner.
/// The flag says whether a commit happened: a batch that changed nothing (all preconditions
/// failed, nothing to purge) is aborted instead, which costs no fsync, unless
/// `force_commit` asks for a commit anyway (to make earlier non-durable commits durable).
pub(crate) fn apply(
    db: &Database,
    ops: &[WriteOp],
    now: u64,
    durability: Durability,
    force_commit: bool,
) -> Result<(Vec<WriteOutcome>, bool), BatchError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(durability);
    let (outcomes, dirty) = {
        let mut meta = txn.open_table(META)?;
        let start_rev = meta.get(REV_KEY)?.map(|g| g.value()).unwrap_or(0);
        let mut t = Tables {
            data: txn.open_table(DATA)?,
            expiry: txn.open_table(EXPIRY)?,
            counter: Counter::open(&txn)?,
            rev: start_rev,
            now,
            dirty: false,
        };
        let outcomes = ops.iter().map(|op| t.apply_one(op)).collect::<Result<Vec<_>, _>>()?;
        if t.rev != start_rev {
            meta.insert(REV_KEY, t.rev)?;
        }
        let dirty = t.dirty;
        t.counter.finish(&txn)?;
        (outcomes, dirty)
    };
    if dirty || force_commit {
        txn.commit()?;
    } else {
        txn.abort()?;
    }
    Ok((outcomes, dirty || force_commit))
}

impl Tables<'_> {
    fn apply_one(&mut self, op: &WriteOp) -> Result<WriteOutcome, BatchError> {
        match op {
            // The deadline is judged with the batch's time, the time the write is applied at.
            WriteOp::Put { until_ms: Some(d), .. } | WriteOp::Delete { until_ms: Some(d), .. } if self.now > *d => {
                Ok(WriteOutcome::TooLate(self.now))
            }
            WriteOp::Put { key, value, pre, ttl_ms, .. } => self.put(key, value, *pre, *ttl_ms),
            WriteOp::Delete { key, pre, .. } => self.delete(key, *pre),
            WriteOp::Purge { limit } => self.purge(*limit),
        }
    }

    /// The stored record, expired or not (the purge index needs the raw expiry).
    fn load(&self, key: &str) -> Result<Option<StoredValue>, BatchError> {
        match self.data.get(key)? {
            Some(guard) => Ok(Some(StoredValue::decode(guard.value())?)),
            None => Ok(None),
        }
    }

    fn put(
        &mut self,
        key: &str,
        value: &Value,
        pre: Precondition,
        ttl_ms: Option<u64>,
    ) -> Result<WriteOutcome, BatchError> {
        let stored = self.load(key)?;
        let live = stored.clone().filter(|r| r.is_live(self.now));
        if !precondition_holds(pre, live.as_ref()) {
            return Ok(WriteOutcome::PreconditionFailed(live));
        }
        if let Some(old) = &stored {
            if old.expires_ms != 0 {
                self.expiry.remove((old.expires_ms, key))?;
            }
            self.counter.removed(key, old)?;
        }
        self.rev = self.rev.checked_add(1).ok_or(BatchError::RevisionOverflow)?;
        let written = Written {
            rev: self.rev,
            modified_ms: self.now,
            expires_ms: ttl_ms.map_or(0, |ttl| self.now.saturating_add(ttl)),
        };
        let blob = value.encode(written.rev, written.modified_ms, written.expires_ms);
        self.data.insert(key, blob.as_slice())?;
        self.counter.added(key, &value.sent, written.modified_ms)?;
        if written.expires_ms != 0 {
            self.expiry.insert((written.expires_ms, key), ())?;
        }
        self.dirty = true;
        Ok(match live {
            Some(_) => WriteOutcome::Replaced(written),
            None => WriteOutcome::Created(written),
        })
    }

    fn delete(&mut self, key: &str, pre: Precondition) -> Result<WriteOutcome, BatchError> {
        let live = self.load(key)?.filter(|r| r.is_live(self.now));
        let Some(current) = live else {
            // An expired leftover is the purge's job; to clients the key is simply absent.
            return Ok(match pre {
                Precondition::None => WriteOutcome::NotFound,
                _ => WriteOutcome::PreconditionFailed(None),
            });
        };
        if !precondition_holds(pre, Some(&current)) {
            return Ok(WriteOutcome::PreconditionFailed(Some(current)));
        }
        self.data.remove(key)?;
        self.counter.removed(key, &current)?;
        if current.expires_ms != 0 {
            self.expiry.remove((current.expires_ms, key))?;
        }
        self.dirty = true;
        Ok(WriteOutcome::Deleted)
    }

    fn purge(&mut self, limit: usize) -> Result<WriteOutcome, BatchError> {
        let mut victims: Vec<(u64, String)> = Vec::new();
        for entry in self.expiry.range(expired_at(self.now))? {
            if victims.len() >= limit {
                break;
            }
            let (k, _) = entry?;
            let (expires, key) = k.value();
            victims.push((expires, key.to_owned()));
        }
        for (expires, key) in &victims {
            self.expiry.remove((*expires, key.as_str()))?;
            // The index entry and the record are written together, but double-check so a
            // purge can never delete a value that was rewritten with a later expiry.
            if let Some(old) = self.load(key)?.filter(|r| r.expires_ms == *expires) {
                self.data.remove(key.as_str())?;
                self.counter.removed(key, &old)?;
            }
        }
        self.dirty |= !victims.is_empty();
        Ok(WriteOutcome::Purged(victims.len()))
    }
}

fn precondition_holds(pre: Precondition, live: Option<&StoredValue>) -> bool {
    match pre {
        Precondition::None => true,
        Precondition::IfAbsent => live.is_none(),
        Precondition::IfExists => live.is_some(),
        Precondition::IfRev(rev) => live.is_some_and(|r| r.rev == rev),
    }
}
