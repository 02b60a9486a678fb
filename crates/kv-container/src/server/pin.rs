//! One commit of a store held still while its file is read in place (the integrity check
//! reads its pages, an image backup copies them) and the writer goes on.
//!
//! Taken between two commits: an ephemeral savepoint, a read transaction and the file's
//! header (its first page). While the savepoint and the transaction live, redb reuses no
//! page of that commit: not its records, and, because a savepoint exists, not its own system
//! and free-page trees either. Every page the header leads to therefore stays as it was in
//! the file, whatever the writer commits meanwhile; only pages free in that commit change.
//! Its [`Ladder`] lets the pages the writer replaced meanwhile go a slice at a time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::{Database, Durability, ReadTransaction, Savepoint};

use super::ladder::Ladder;
use super::open::{header_page, DbSlot};
use super::verify::Commit;

/// A held commit: its pages stay in the file until this is dropped (or [`Pinned::let_go`]).
/// Fields drop in order: the transaction and the savepoint before the database.
pub(crate) struct Pinned {
    pub(crate) txn: ReadTransaction,
    /// Held for what it prevents (see the module's comment), never read.
    _savepoint: Savepoint,
    /// The file's first page as of the held commit.
    pub(crate) header: Vec<u8>,
    /// The file's length as of the held commit: its pages all lie below it.
    pub(crate) len: u64,
    /// The reader calls [`Ladder::keep_up`] as it goes.
    pub(crate) ladder: Ladder,
    _db: Arc<Database>,
}

impl Pinned {
    /// The held commit as the check sees the file.
    pub(crate) fn commit(&self) -> Commit<'_> {
        Commit { header: &self.header, len: self.len }
    }

    /// Lets go of the held commit; the rungs taken meanwhile are the caller's to let go of.
    pub(crate) fn let_go(self) -> Ladder {
        let Pinned { txn, _savepoint, ladder, .. } = self;
        drop(txn);
        drop(_savepoint);
        ladder
    }
}

/// Whether [`pin`] first makes the newest commit durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum First {
    /// Read the header as the file has it: right when every commit is durable, and what the
    /// first check after a start wants (it writes nothing to a file it has not checked).
    AsIs,
    /// Commit an empty transaction durably first, so the header on disk names the commit the
    /// read transaction sees also under `--durability none`.
    Durable,
}

/// Holds the newest commit of `db` (the file at `path`). The caller holds the store's commit
/// gate (no commit may run in between), or the store is its own (offline).
pub(crate) fn pin(db: Arc<Database>, path: &Path, first: First) -> Result<Pinned, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    if first == First::Durable {
        let mut write = db.begin_write().map_err(|x| e(&x))?;
        write.set_durability(Durability::Immediate);
        write.commit().map_err(|x| e(&x))?;
    }
    let write = db.begin_write().map_err(|x| e(&x))?;
    let savepoint = write.ephemeral_savepoint().map_err(|x| e(&x))?;
    write.abort().map_err(|x| e(&x))?;
    let txn = db.begin_read().map_err(|x| e(&x))?;
    let header = header_page(path).map_err(|x| format!("cannot read the file's header: {x}"))?;
    let len = std::fs::metadata(path).map_err(|x| format!("cannot read {}: {x}", path.display()))?.len();
    Ok(Pinned { txn, _savepoint: savepoint, header, len, ladder: Ladder::new(db.clone()), _db: db })
}

/// A serving store's newest commit, held (an online image backup reads the file under it).
pub(crate) struct Held {
    pub(crate) pinned: Pinned,
    pub(crate) path: PathBuf,
    generation: u64,
    counter: Arc<AtomicU64>,
}

impl Held {
    /// Holds the newest commit of the store in `slot`, made durable first.
    pub(crate) fn take(slot: &DbSlot) -> Result<Held, String> {
        // Read before the handle: a reopen after this moves the count, so it is seen.
        let generation = slot.generation();
        let db = slot.get().ok_or_else(|| "the store is being reopened".to_owned())?;
        let _between = slot.commit_gate();
        let pinned = pin(db, slot.path(), First::Durable)?;
        Ok(Held { pinned, path: slot.path().to_owned(), generation, counter: slot.generation_counter() })
    }

    /// Lets go of the held commit (see [`Pinned::let_go`]).
    pub(crate) fn let_go(self) -> Ladder {
        self.pinned.let_go()
    }

    /// Whether the commit is still held: a reopen of the store (after a failed write) opens
    /// the file anew, and the new handle knows nothing of this one's savepoint.
    pub(crate) fn still(&self) -> bool {
        self.counter.load(Ordering::SeqCst) == self.generation
    }
}
