//! Opening the data file: a new store only in a directory without one, and never a data file
//! that is not a complete, valid store (empty, cut short, overwritten): that is refused with
//! what to do, so a damaged file can never come back as an empty store.

use std::fs::File;
use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, ReadableTableMetadata};

use super::counts;
use super::read_ahead::ReadAhead;
use super::tables::{DATA, EXPIRY, META};

/// The database file inside `--data`.
pub(crate) const DB_FILE: &str = "kv.redb";

/// The page cache by default (`--cache-mb`): pages read or written stay in memory up to this
/// size, so damage to the file under them is only seen once they are read from the file
/// again. A quarter of redb's own default (1 GiB), which the container filled whatever the
/// host: the hot records (claims in flight, the counts, the indexes' upper levels) fit in it.
pub(crate) const DEFAULT_CACHE_MB: usize = 256;

/// redb's file signature (the first bytes of every redb file).
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Why a data file was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path} is not a complete, valid store: {why}. Restore it from a backup, or, if its \
     events may be forgotten, move it away and start again to create a new, empty store \
     (`stateful-tool kv check --data {dir}` re-checks it)"
)]
pub(crate) struct Damaged {
    pub(crate) path: String,
    pub(crate) dir: String,
    pub(crate) why: String,
}

/// What a check found in a valid store.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) records: u64,
    pub(crate) created: bool,
    /// The file as found, when it was closed cleanly: the first background check sees it
    /// through its first page then, while it is still that file (see `integrity`).
    pub(crate) clean_start: Option<CleanStart>,
}

/// A file closed cleanly, as found before it was opened.
#[derive(Debug, Clone)]
pub(crate) struct CleanStart {
    /// Its first page then.
    pub(crate) header: Vec<u8>,
    /// Its length then.
    pub(crate) len: u64,
    /// Its first page once opened: while the file still has it, no commit has been made since.
    pub(crate) opened: Vec<u8>,
}

impl CleanStart {
    /// Whether a file whose first page and length are now `header` and `len` is still the one
    /// found at start: no commit since the open (its first page as the open left it), and
    /// its length as found. redb's open takes a page, and grows a file that has none free
    /// (what `kv compact` can leave), and commits grow it or reuse pages of the commit found;
    /// a header describing a file other than the one there is opens as no file redb knows
    /// (its open panicked, which read as damage, and every write was refused).
    pub(crate) fn describes(&self, header: &[u8], len: u64) -> bool {
        header == self.opened.as_slice() && len == self.len
    }
}

/// redb's file header lives in the first page; its flags byte follows the signature, and
/// this bit of it says the file was not closed cleanly.
const HEADER_PAGE: usize = 4096;
const RECOVERY_REQUIRED: u8 = 2;

/// Opens `<dir>/kv.redb`, creating it only when the directory holds no data file; an existing
/// one is refused unless it opens as a store (its pages are checked later, see `integrity`).
pub(crate) fn open(dir: &Path, cache_bytes: usize) -> anyhow::Result<(Database, Checked)> {
    use anyhow::Context;
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        anyhow::bail!(
            "--data {}: that path is a file, not a directory; give a directory (created if missing)",
            dir.display()
        );
    }
    let created_dir = !dir.exists();
    std::fs::create_dir_all(dir).with_context(|| format!("creating data directory {}", dir.display()))?;
    if created_dir {
        sync_parent(dir)?;
    }
    let path = dir.join(DB_FILE);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let db = quietly(|| builder(cache_bytes, None).create(&path))
                .map_err(|why| damaged(&path, dir, why))?
                .with_context(|| format!("creating {}", path.display()))?;
            // The new file's directory entry must survive a power loss like its contents.
            sync_dir(dir)?;
            let db = create_tables(db)?;
            tracing::info!("kv: created a new, empty store at {}", path.display());
            Ok((db, Checked { records: 0, created: true, clean_start: None }))
        }
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        Ok(_) => {
            refuse_if_open_elsewhere(&path)?;
            let (clean_header, len) = (clean_header(&path), std::fs::metadata(&path)?.len());
            let db = open_existing(&path, cache_bytes).map_err(|why| damaged(&path, dir, why))?;
            // Read before `create_tables`, which commits when it builds the counts (a store
            // from before them): that commit may reuse pages the clean header names, and
            // its first page then differs from this, so the first check reads the file anew.
            let clean_start = match (clean_header, header_page(&path)) {
                (Some(header), Ok(opened)) => Some(CleanStart { header, len, opened }),
                _ => None,
            };
            let db = create_tables(db)?;
            let records = db.begin_read()?.open_table(DATA)?.len()?;
            Ok((db, Checked { records, created: false, clean_start }))
        }
    }
}

/// The first page of a file closed cleanly (`None` after a crash: redb's recovery at open
/// rewrites what it points to).
fn clean_header(path: &Path) -> Option<Vec<u8>> {
    let page = header_page(path).ok()?;
    let flags = *page.get(REDB_MAGIC.len())?;
    (flags & RECOVERY_REQUIRED == 0).then_some(page)
}

/// The file's first page (its header).
pub(crate) fn header_page(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut page = Vec::with_capacity(HEADER_PAGE);
    File::open(path)?.take(HEADER_PAGE as u64).read_to_end(&mut page)?;
    Ok(page)
}

/// A store held by another process (redb locks its file while a database is open) is in
/// use, not damaged: say so before checking it.
pub(crate) fn refuse_if_open_elsewhere(path: &Path) -> anyhow::Result<()> {
    let file = File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if let Err(std::fs::TryLockError::WouldBlock) = file.try_lock() {
        anyhow::bail!(
            "{} is already open in another process (a `stateful-tool kv serve` still running with this --data?); \
             stop that one, or give this one another --data directory",
            path.display()
        );
    }
    Ok(())
}

/// What can be seen without reading the store: a regular, non-empty file with redb's signature.
pub(super) fn looks_like_a_store(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() == 0 {
        return Err("it is empty (0 bytes)".into());
    }
    let mut head = [0u8; REDB_MAGIC.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(|e| format!("its header cannot be read ({e}); the file is cut short"))?;
    if head != REDB_MAGIC {
        return Err("it does not start with the store's file signature (overwritten, or not a store)".into());
    }
    Ok(())
}

/// Opens an existing data file to serve it: redb's recovery runs here after an unclean
/// shutdown (committed data is intact); the check of every page runs later, in the
/// background (`integrity`), so a start takes seconds whatever the file's size.
fn open_existing(path: &Path, cache_bytes: usize) -> Result<Database, String> {
    looks_like_a_store(path)?;
    quietly(|| builder(cache_bytes, Some(ReadAhead::new(path))).open(path))?
        .map_err(|e| format!("it cannot be opened: {e}"))
}

/// redb's settings; `ahead` reads the file ahead of a repair (see `read_ahead`), and stops
/// when the builder is dropped, at the end of the open.
fn builder(cache_bytes: usize, ahead: Option<Arc<ReadAhead>>) -> redb::Builder {
    let mut builder = Database::builder();
    builder.set_cache_size(cache_bytes).set_repair_callback(move |s| {
        // Only after an unclean shutdown (kill -9, power loss): committed data is intact.
        tracing::warn!("kv: database was not closed cleanly, repairing ({:.0}%)", s.progress() * 100.0);
        if let Some(ahead) = &ahead {
            ahead.begin();
        }
    });
    builder
}

fn create_tables(db: Database) -> anyhow::Result<Database> {
    // A store that has them is not written to at start: a file found damaged later is then
    // as it was, but for redb's "open" marker in its header.
    let read = db.begin_read()?;
    let complete = read.open_table(DATA).is_ok()
        && read.open_table(EXPIRY).is_ok()
        && read.open_table(META).is_ok()
        && read.open_table(counts::LISTED).is_ok()
        && counts::agree(&read)?;
    drop(read);
    if complete {
        return Ok(db);
    }
    // Create the tables up front so readers never see "table does not exist".
    let txn = db.begin_write()?;
    txn.open_table(DATA)?;
    txn.open_table(EXPIRY)?;
    txn.open_table(META)?;
    if !counts::present(&txn)? || !counts::agree_in(&txn)? {
        // A store from before the counts, or one an older release wrote to since: one scan,
        // in the same transaction.
        let started = Instant::now();
        let records = counts::build(&txn)?;
        tracing::info!("kv: record counts built from {records} records ({:.1} s)", started.elapsed().as_secs_f64());
    }
    txn.commit()?;
    Ok(db)
}

fn damaged(path: &Path, dir: &Path, why: String) -> anyhow::Error {
    Damaged { path: path.display().to_string(), dir: dir.display().to_string(), why }.into()
}

/// fsync of the directory holding `path`, after `path` was created or renamed into it.
pub(crate) fn sync_parent(path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => sync_dir(Path::new(".")),
    }
}

/// fsync of a directory: makes the entries created or renamed in it durable.
pub(crate) fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| anyhow::anyhow!("cannot fsync directory {}: {e}", dir.display()))
}

/// Runs `f`, turning a panic inside the storage engine (it asserts on some damaged files)
/// into an error, without the panic message on stderr.
pub(super) fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(hook);
    result.map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        format!("the storage engine failed reading it ({msg})")
    })
}

/// The open database, swappable: after an I/O error redb refuses every later write until it
/// is reopened, so the writer closes and reopens it once writes can succeed again.
pub(crate) struct DbSlot {
    path: PathBuf,
    cache_bytes: usize,
    db: RwLock<Option<Arc<Database>>>,
    /// Counts reopens: a background check holding the old handle stops when it moves, so the
    /// reopen is not kept waiting for it.
    generation: Arc<AtomicU64>,
    /// Held by the writer for each commit, and by an integrity check while it takes its
    /// snapshot and reads the file's header.
    commits: std::sync::Mutex<()>,
}

/// How long a reopen waits for in-flight reads to let go of the old handle.
const READERS_GRACE: Duration = Duration::from_secs(2);

impl DbSlot {
    pub(crate) fn new(path: PathBuf, db: Database, cache_bytes: usize) -> Self {
        DbSlot {
            path,
            cache_bytes,
            db: RwLock::new(Some(Arc::new(db))),
            generation: Arc::default(),
            commits: std::sync::Mutex::default(),
        }
    }

    /// `<data>/kv.redb`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// No commit runs while this is held.
    pub(crate) fn commit_gate(&self) -> std::sync::MutexGuard<'_, ()> {
        self.commits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many reopens there were so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The reopen counter itself, for a check that watches it from another thread.
    pub(crate) fn generation_counter(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// The current handle; `None` while a reopen is under way or failed.
    pub(crate) fn get(&self) -> Option<Arc<Database>> {
        self.db.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Lets go of the database without closing it: a file found damaged gets no further
    /// write, not even the clean close (redb's recovery runs at the next start instead).
    pub(crate) fn leave_unclosed(&self) {
        if let Some(db) = self.db.write().unwrap_or_else(|p| p.into_inner()).take() {
            std::mem::forget(db);
        }
    }

    /// Closes the database and opens it again (redb repairs it as after a crash: committed,
    /// fsync'd transactions survive). Readers in flight keep their handle until they finish.
    pub(crate) fn reopen(&self) -> Result<(), String> {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let old = self.db.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut old) = old {
            let deadline = Instant::now() + READERS_GRACE;
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        // Closing a database that saw an I/O error may itself fail; it must
                        // not take the writer thread down.
                        let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(db)));
                        break;
                    }
                    Err(still_shared) if Instant::now() < deadline => {
                        old = still_shared;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(still_shared) => {
                        *self.db.write().unwrap_or_else(|p| p.into_inner()) = Some(still_shared);
                        return Err("reads still hold the old database handle".into());
                    }
                }
            }
        }
        let read_ahead = Some(ReadAhead::new(&self.path));
        let opened = panic::catch_unwind(AssertUnwindSafe(|| builder(self.cache_bytes, read_ahead).open(&self.path)))
            .map_err(|_| "the storage engine panicked reopening the data file".to_owned())?
            .map_err(|e| format!("reopening {} failed: {e}", self.path.display()))?;
        *self.db.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(opened));
        Ok(())
    }
}
