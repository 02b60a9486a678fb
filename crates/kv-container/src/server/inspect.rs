//! Offline inspection of a data directory (server stopped: redb locks the file while open).

use std::path::Path;

use redb::{Database, ReadableTableMetadata};

use super::engine::DB_FILE;
use super::tables::{DATA, EXPIRY, META, REV_KEY};

/// What is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inventory {
    /// Keys in the data table, live or expired but not yet purged.
    pub records: u64,
    /// Entries in the expiry index (one per key with a TTL), which the purge walks.
    pub expiry_entries: u64,
    pub(crate) last_rev: u64,
}

/// Counts what a stopped store's data directory holds (the server must not be running: redb
/// locks the file while it is open).
pub fn inventory(dir: &Path) -> anyhow::Result<Inventory> {
    let db = Database::create(dir.join(DB_FILE))?;
    let txn = db.begin_read()?;
    let last_rev = txn.open_table(META)?.get(REV_KEY)?.map_or(0, |g| g.value());
    Ok(Inventory { records: txn.open_table(DATA)?.len()?, expiry_entries: txn.open_table(EXPIRY)?.len()?, last_rev })
}
