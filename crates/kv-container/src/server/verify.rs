//! redb's check of every page checksum, run on a data file without copying it and without
//! writing to it: redb opens the file through [`Overlay`], a storage backend that reads the
//! file and keeps every write redb makes (its "open" marker, what a repair would change) in
//! memory, so no free disk is needed and the file stays exactly as it is.
//!
//! On a running store the caller takes, between two commits, an ephemeral savepoint, a read
//! transaction and the file's header, and holds the first two for the whole check: redb
//! then reuses no page of that commit (its records, and, because a savepoint exists, its
//! own system and free-page trees too) while the writer goes on, so the check reads exactly
//! the commit the header names.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redb::{Database, ReadableTable, StorageBackend};

use super::disk_pace::DiskPace;
use super::open::{looks_like_a_store, quietly};
use super::record::StoredValue;
use super::tables::DATA;

/// Asked before every page read; `true` ends the check (shutdown, a reopen of the store).
pub(crate) type StopWhen = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the read error of a stopped check says, so it is not taken for damage.
pub(crate) const STOPPED: &str = "integrity check stopped";

/// Page cache of the checking database: the check reads each page about three times in
/// tree order, so a small cache does; it bounds the check's memory whatever the file's size.
const CHECK_CACHE_BYTES: usize = 32 << 20;

/// Records read between two looks at the stop flag (pages read ask it each time).
const STOP_EVERY: u64 = 4096;

/// The outcome of [`verify_pages`] that is not a pass.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Pages whose checksums do not match, or a file redb cannot read as a store.
    Damaged(String),
    /// Stopped on request, or the file could not be read (an I/O error, not damage).
    Incomplete(String),
}

/// How [`verify_pages`] sees the file.
pub(crate) enum View<'a> {
    /// A stopped file; after a power loss redb going back to the commit before is its
    /// ordinary recovery of a commit cut short, not damage.
    Stopped,
    /// Open in a running store, seen as of a commit it holds: that commit is complete, so
    /// redb going back to the one before means damage.
    Running(Commit<'a>),
}

/// A commit of a running store as the check sees the file: its first page and its length,
/// both read between two commits while the caller began the read transaction it holds to
/// the end (see `pin`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Commit<'a> {
    pub(crate) header: &'a [u8],
    pub(crate) len: u64,
}

/// How [`verify_pages`] reads the file.
pub(crate) enum Reads {
    /// With the kernel's readahead: nothing else needs the disk (a stopped store, a copy).
    Ahead,
    /// Beside a serving store, whose commits wait on the same disk: only the pages redb asks
    /// for (`POSIX_FADV_RANDOM`), and those the page cache does not hold at the pace given
    /// (`None`: no limit; see `disk_pace`). The check reads in tree order, which jumps about
    /// the file; with readahead each page read from the disk became several requests queued
    /// at once (up to 29 in flight, 1–9 ms each at 10 M records).
    Asked(Option<Arc<DiskPace>>),
}

/// The checking database after a pass, kept to read the records of the commit it checked
/// through its own small cache (a running store's cache keeps the pages requests use).
pub(crate) struct Checked {
    db: Option<Database>,
    /// A running store's: set before the database closes (see `verify_pages`).
    closed: Option<Arc<AtomicBool>>,
}

impl Checked {
    pub(crate) fn db(&self) -> &Database {
        self.db.as_ref().expect("held until dropped")
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        if let Some(closed) = &self.closed {
            // Closing writes redb's free-page state, which reads pages the running store may
            // since have reused: the file is not read any more, so the close does nothing.
            closed.store(true, Ordering::SeqCst);
        }
        drop(self.db.take());
    }
}

/// Runs redb's integrity check of every page reachable from the newest commit of `path`;
/// the checking database is handed back to read that commit's records through.
pub(crate) fn verify_pages(path: &Path, stop: StopWhen, view: View<'_>, reads: Reads) -> Result<Checked, Failed> {
    let file = File::open(path).map_err(|e| Failed::Incomplete(format!("cannot read {}: {e}", path.display())))?;
    let pace = match reads {
        Reads::Ahead => None,
        Reads::Asked(pace) => {
            advise_random(&file);
            pace
        }
    };
    let closed = Arc::new(AtomicBool::new(false));
    let grown = Arc::new(AtomicBool::new(false));
    let overlay = Overlay {
        file,
        pace,
        until: match view {
            View::Stopped => None,
            View::Running(commit) => Some(commit.len),
        },
        writes: Mutex::default(),
        len: Mutex::default(),
        grown: grown.clone(),
        stop,
        closed: closed.clone(),
    };
    let live = !matches!(view, View::Stopped);
    if let View::Running(commit) = view {
        overlay.writes.lock().unwrap_or_else(|p| p.into_inner()).push((0, commit.header.to_vec()));
    }
    // redb reports 0.3 only when the newest commit's pages fail their checksums and it falls
    // back to the commit before: for the check that is damage, whatever it recovers.
    let rolled_back = Arc::new(AtomicBool::new(false));
    let seen = rolled_back.clone();
    let mut builder = Database::builder();
    builder.set_cache_size(CHECK_CACHE_BYTES).set_repair_callback(move |s| {
        if (s.progress() - 0.3).abs() < 0.01 {
            seen.store(true, Ordering::SeqCst);
        }
    });
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut db = builder.create_with_backend(overlay).map_err(boxed)?;
        if grown.load(Ordering::SeqCst) {
            agree_layout(&db)?;
        }
        let clean = match db.check_integrity() {
            Ok(clean) => clean,
            Err(e) => {
                // redb's close commits its free-page state, and after a failed check that
                // commit panics: the check's own error is the one to report.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
                return Err(boxed(e));
            }
        };
        Ok::<_, Box<redb::Error>>((Checked { db: Some(db), closed: live.then_some(closed) }, clean))
    }));
    match outcome {
        Err(p) => {
            let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Err(Failed::Damaged(format!("the storage engine failed reading it ({})", msg.unwrap_or_default())))
        }
        Ok(Err(e)) if e.to_string().contains(STOPPED) => Err(Failed::Incomplete(STOPPED.into())),
        Ok(Err(e)) if matches!(*e, redb::Error::Io(_) | redb::Error::DatabaseAlreadyOpen) => {
            Err(Failed::Incomplete(format!("reading the file failed: {e}")))
        }
        Ok(Err(e)) => Err(Failed::Damaged(format!("its pages are damaged: {e}"))),
        Ok(Ok(_)) if live && rolled_back.load(Ordering::SeqCst) => {
            Err(Failed::Damaged("the newest commit's page checksums do not match".into()))
        }
        Ok(Ok((_, false))) => Err(Failed::Damaged("some page checksums do not match".into())),
        Ok(Ok((db, true))) => Ok(db),
    }
}

/// Commits nothing, durably (into the overlay), so the file's header holds the length redb
/// grew the file to while opening it.
///
/// redb's open looks up persistent savepoints in a write transaction, which creates their
/// table, uncommitted, and so takes a page; in a file with no free page (what `kv compact`
/// leaves, every page in use) that grows the file. `check_integrity` then compares the
/// free-page state held in memory (for the grown file) with one rebuilt from the header
/// (for the file as it was) and answers `false` for a file whose every checksum matches: it
/// showed as damage in about one `kv compact` in ten. After this commit both describe the
/// same length, so a `false` means what it says. The commit changes no table: a page that
/// does not match its checksum is still found, as are newest commits that do not.
fn agree_layout(db: &Database) -> Result<(), Box<redb::Error>> {
    let mut txn = db.begin_write().map_err(boxed)?;
    txn.set_durability(redb::Durability::Immediate);
    // As a stopped store's last commit is (redb's close writes its free-page state so): a
    // damaged page is then reported as such, not as a failed rollback to the commit before.
    txn.set_two_phase_commit(true);
    txn.commit().map_err(boxed)
}

/// Any of redb's errors as the one the check reports (boxed: `redb::Error` is large).
fn boxed(e: impl Into<redb::Error>) -> Box<redb::Error> {
    Box::new(e.into())
}

/// Tells the kernel this descriptor's reads are not sequential: no readahead for them.
fn advise_random(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: advice on a descriptor this function borrows; a failure leaves readahead on,
    // which is slower for the server beside the check, never wrong.
    let failed = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    if failed != 0 {
        tracing::debug!("kv: posix_fadvise(RANDOM) on the checked file failed: {failed}");
    }
}

/// Checks an existing data file (server stopped): every page, then every record; `Err` says
/// what is wrong with it. Nothing is written to the file, and no copy of it is made.
pub(crate) fn check(path: &Path) -> Result<u64, String> {
    looks_like_a_store(path)?;
    let never: StopWhen = Arc::new(|| false);
    // redb's recovery of an unclean file (a power loss mid-commit goes back to the commit
    // before) is what a start does too: not damage here.
    let why = |f| match f {
        Failed::Damaged(why) | Failed::Incomplete(why) => why,
    };
    let checked = quietly(|| verify_pages(path, never.clone(), View::Stopped, Reads::Ahead))?.map_err(why)?;
    quietly(|| read_records(checked.db(), &never))?.map_err(why)
}

/// Reads every record of the checked commit once, checking its own checksum, so damage a
/// page checksum cannot see (a foreign layout) is found; how many there are.
pub(crate) fn read_records(db: &Database, stop: &StopWhen) -> Result<u64, Failed> {
    let failed = |e: &dyn std::fmt::Display| match e.to_string() {
        s if s.contains(STOPPED) => Failed::Incomplete(STOPPED.into()),
        s => Failed::Damaged(format!("reading a record failed: {s}")),
    };
    let txn = db.begin_read().map_err(|e| failed(&e))?;
    let table = match txn.open_table(DATA) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(failed(&e)),
    };
    let mut records = 0u64;
    for entry in table.iter().map_err(|e| failed(&e))? {
        let (key, value) = entry.map_err(|e| failed(&e))?;
        StoredValue::decode(value.value())
            .map_err(|e| Failed::Damaged(format!("the record under key {:?} is damaged: {e}", key.value())))?;
        records += 1;
        if records.is_multiple_of(STOP_EVERY) && stop() {
            return Err(Failed::Incomplete(STOPPED.into()));
        }
    }
    Ok(records)
}

/// The data file, read-only, with redb's writes kept in memory on top of it.
struct Overlay {
    file: File,
    /// Beside a serving store: reads from the disk at a pace.
    pace: Option<Arc<DiskPace>>,
    /// A running store's file length as of the commit read, which is the length the check
    /// sees: the writer's commits since grow the file or trim free pages off its end, and
    /// redb's open of a file whose length does not match the header it is given panicked
    /// (longer, through the clean start's header, which has no recovery flag; shorter,
    /// through any), which read as damage: on a loaded machine, requests commit before the
    /// check's process opens the file. What the writer appended is not read; a page trimmed
    /// off was free in that commit, and reads as zeros, as a page past the end does.
    until: Option<u64>,
    /// (offset, bytes) in the order written; a rewrite of the same range replaces it.
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// The length redb set, once it sets one; until then `until`, or else the file's own.
    len: Mutex<Option<u64>>,
    /// redb made the file longer than it was (see `agree_layout`).
    grown: Arc<AtomicBool>,
    stop: StopWhen,
    /// Set once the check is done: every read fails from then on.
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overlay").field("file", &self.file).finish_non_exhaustive()
    }
}

impl Overlay {
    /// How much of the file is read: up to the commit's length where that is given.
    fn file_len(&self) -> io::Result<u64> {
        let now = self.file.metadata()?.len();
        Ok(self.until.map_or(now, |until| until.min(now)))
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> io::Result<u64> {
        match self.len.lock().unwrap_or_else(|p| p.into_inner()).or(self.until) {
            Some(len) => Ok(len),
            None => self.file_len(),
        }
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if self.closed.load(Ordering::SeqCst) || (self.stop)() {
            return Err(io::Error::other(STOPPED));
        }
        let mut buf = vec![0u8; len];
        // Past the file's end (a length redb set) reads as zeros, as the trait asks.
        let in_file = self.file_len()?.saturating_sub(offset).min(len as u64) as usize;
        match &self.pace {
            Some(pace) => pace.read_exact_at(&self.file, &mut buf[..in_file], offset)?,
            None => self.file.read_exact_at(&mut buf[..in_file], offset)?,
        }
        let end = offset + len as u64;
        for (at, data) in self.writes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let (from, to) = ((*at).max(offset), (at + data.len() as u64).min(end));
            if from < to {
                let dst = (from - offset) as usize..(to - offset) as usize;
                buf[dst].copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if len > self.len()? {
            self.grown.store(true, Ordering::SeqCst);
        }
        *self.len.lock().unwrap_or_else(|p| p.into_inner()) = Some(len);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        match writes.iter_mut().find(|(at, old)| *at == offset && old.len() == data.len()) {
            Some((_, old)) => old.copy_from_slice(data),
            None => writes.push((offset, data.to_vec())),
        }
        Ok(())
    }
}
