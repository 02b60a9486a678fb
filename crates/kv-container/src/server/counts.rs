//! Record counts kept as writes happen: the status page and `/metrics` read them instead of
//! scanning every record, so they answer at once at any size.
//!
//! Two tables, written in the same transaction as the records they describe (so they are
//! exactly as durable, and right after a crash or restart): `COUNTS` (category → records in
//! the data table, expired ones until the purge deletes them) and `LISTED` ((category,
//! modified_ms, key) → lease) for the categories the page lists (`processing`, to judge
//! "stuck" by the clock, and `failed`, newest first). A store without them (written before
//! they existed) gets them from one scan at start.
//!
//! A new category (say, claims reserved at the door whose run never started) plugs in at
//! [`classify`] (and in [`LISTED_CATEGORIES`] if the page should list it); its count then
//! appears in [`Counts`] under its name, and `ops_metrics::Census` names what is exported.

use std::collections::BTreeMap;

use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition, TableHandle, WriteTransaction};
use serde::Deserialize;

use super::record::{CorruptRecord, StoredValue};
use super::tables::DATA;

/// category → records of that category in the data table.
pub(crate) const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("kv_counts_v1");
/// (category, modified_ms, key) → lease_until_ms ([`NO_LEASE`] = none), for [`LISTED_CATEGORIES`].
pub(crate) const LISTED: TableDefinition<(&str, u64, &str), i64> = TableDefinition::new("kv_listed_v1");
/// The lease of a listed record that has none.
pub(crate) const NO_LEASE: i64 = i64::MIN;
/// Categories whose records are indexed in [`LISTED`].
pub(crate) const LISTED_CATEGORIES: [&str; 2] = ["processing", "failed"];

/// The fields of an event record its category depends on; the payload is skipped unread.
#[derive(Deserialize)]
struct Fields<'a> {
    v: u32,
    #[serde(borrow)]
    status: std::borrow::Cow<'a, str>,
    #[serde(default)]
    lease_until_ms: Option<i64>,
}

/// What counting needs of one stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Class {
    /// `processing`, `completed`, `failed`, or `other` (not an event record).
    pub(crate) category: &'static str,
    pub(crate) lease_until_ms: Option<i64>,
}

/// The category of a stored value: the plugin's event records by their status.
pub(crate) fn classify(value: &[u8]) -> Class {
    let other = Class { category: "other", lease_until_ms: None };
    let Some(f) = serde_json::from_slice::<Fields>(value).ok().filter(|f| f.v == 1) else {
        return other;
    };
    let category = match f.status.as_ref() {
        "processing" => "processing",
        "completed" => "completed",
        "failed" => "failed",
        _ => return other,
    };
    Class { category, lease_until_ms: f.lease_until_ms }
}

/// Records by category.
pub(crate) type Counts = BTreeMap<String, u64>;

/// A storage error of the counting tables (boxed: redb's error is large).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct CountError(Box<redb::Error>);

macro_rules! count_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for CountError {
            fn from(e: $t) -> Self { CountError(Box::new(e.into())) }
        }
    )*};
}
count_error_from!(redb::TableError, redb::StorageError, redb::TransactionError, redb::Error);

impl From<CountError> for redb::Error {
    fn from(e: CountError) -> Self {
        *e.0
    }
}

/// The counting tables inside one write transaction; count changes are summed in memory and
/// written once per batch.
pub(crate) struct Counter<'t> {
    listed: Table<'t, (&'static str, u64, &'static str), i64>,
    deltas: BTreeMap<&'static str, i64>,
}

impl<'t> Counter<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Counter { listed: txn.open_table(LISTED)?, deltas: BTreeMap::new() })
    }

    /// `value`, written at `modified_ms`, was stored under `key`.
    pub(crate) fn added(&mut self, key: &str, value: &[u8], modified_ms: u64) -> Result<(), redb::StorageError> {
        let class = classify(value);
        *self.deltas.entry(class.category).or_default() += 1;
        if LISTED_CATEGORIES.contains(&class.category) {
            self.listed.insert((class.category, modified_ms, key), class.lease_until_ms.unwrap_or(NO_LEASE))?;
        }
        Ok(())
    }

    /// `rec`, stored under `key`, was replaced, deleted or purged.
    pub(crate) fn removed(&mut self, key: &str, rec: &StoredValue) -> Result<(), redb::StorageError> {
        let class = classify(&rec.value);
        *self.deltas.entry(class.category).or_default() -= 1;
        if LISTED_CATEGORIES.contains(&class.category) {
            self.listed.remove((class.category, rec.modified_ms, key))?;
        }
        Ok(())
    }

    /// Writes the batch's count changes.
    pub(crate) fn finish(self, txn: &WriteTransaction) -> Result<(), CountError> {
        if self.deltas.values().all(|d| *d == 0) {
            return Ok(());
        }
        let mut counts = txn.open_table(COUNTS)?;
        for (category, delta) in self.deltas {
            let now = counts.get(category)?.map_or(0, |g| g.value());
            counts.insert(category, now.checked_add_signed(delta).unwrap_or(0))?;
        }
        Ok(())
    }
}

/// Whether the store has its counts (a store from before them has not).
pub(crate) fn present(txn: &WriteTransaction) -> Result<bool, CountError> {
    Ok(txn.list_tables()?.any(|t| t.name() == COUNTS.name()))
}

/// Whether the counts add up to the records in the data table (a count redb keeps): they do
/// not once a release from before the counts has created or deleted records in the file.
pub(crate) fn agree(txn: &redb::ReadTransaction) -> Result<bool, CountError> {
    let Ok(counts) = txn.open_table(COUNTS) else { return Ok(false) };
    let mut sum = 0u64;
    for entry in counts.iter()? {
        sum += entry?.1.value();
    }
    Ok(sum == txn.open_table(DATA)?.len()?)
}

/// [`agree`] inside a write transaction.
pub(crate) fn agree_in(txn: &WriteTransaction) -> Result<bool, CountError> {
    let counts = txn.open_table(COUNTS)?;
    let mut sum = 0u64;
    for entry in counts.iter()? {
        sum += entry?.1.value();
    }
    Ok(sum == txn.open_table(DATA)?.len()?)
}

/// Builds both tables from one scan of the data table (a store from before them, or whose
/// counts no longer add up), replacing what they held.
pub(crate) fn build(txn: &WriteTransaction) -> anyhow::Result<u64> {
    txn.delete_table(COUNTS)?;
    txn.delete_table(LISTED)?;
    let data = txn.open_table(DATA)?;
    let mut counter = Counter::open(txn)?;
    let mut records = 0;
    for entry in data.iter()? {
        let (key, value) = entry?;
        let rec = StoredValue::decode(value.value())
            .map_err(|e: CorruptRecord| anyhow::anyhow!("the record under key {:?}: {e}", key.value()))?;
        counter.added(key.value(), &rec.value, rec.modified_ms)?;
        records += 1;
    }
    // Even an empty store gets its table, so the next start does not scan again.
    txn.open_table(COUNTS)?;
    counter.finish(txn)?;
    Ok(records)
}

/// The counts as of `txn`'s snapshot.
pub(crate) fn read(txn: &redb::ReadTransaction) -> Result<Counts, CountError> {
    let table = txn.open_table(COUNTS)?;
    let mut counts = Counts::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        if v.value() > 0 {
            counts.insert(k.value().to_owned(), v.value());
        }
    }
    Ok(counts)
}
