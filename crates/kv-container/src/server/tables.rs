//! The data file's record tables, named in one place: the write path (`batch`), the counts
//! kept beside them (`counts`), and every reader open them by these definitions.

use redb::TableDefinition;

/// key → encoded `StoredValue`.
pub(crate) const DATA: TableDefinition<&str, &[u8]> = TableDefinition::new("kv_data_v1");
/// (expires_ms, key) → (); lets the purge find expired keys in order without a full scan.
pub(crate) const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("kv_expiry_v1");
/// The expiry index's entries of records expired at `now_ms` (expires_ms ≤ now), earliest
/// first: the purge deletes them in this order, the warm-up reads them ahead of it, and the
/// census leaves them out of its counts.
pub(crate) fn expired_at(now_ms: u64) -> std::ops::RangeTo<(u64, &'static str)> {
    ..(now_ms.saturating_add(1), "")
}

/// Small named counters; today only the revision counter.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("kv_meta_v1");
/// Highest revision ever handed out. Stored in the same transaction as the writes that use
/// it, so it survives restarts exactly as far as the data does (ETags never repeat).
pub(crate) const REV_KEY: &str = "last_rev";
