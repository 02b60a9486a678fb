//! `kv usage`: where a stopped store's disk goes, table by table, and what it costs per record.
//!
//! A data file has two sizes: its length, and the blocks it holds on disk. redb grows the file
//! with `set_len` (doubling it below 4 GiB), and the space it has not written yet is a hole that
//! costs no disk, so the length can be twice what `du` and `df` count. Both are shown, and per
//! table the bytes of keys and values, redb's per-entry and branch overhead, and the unused
//! space inside the pages (a B-tree's leaves are part full). The file is read through the
//! integrity check's view: nothing is written to it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use redb::{Database, ReadableTableMetadata, TableDefinition, TableHandle};

use super::counts::{COUNTS, LISTED};
use super::open::{quietly, refuse_if_open_elsewhere, DB_FILE};
use super::tables::{DATA, EXPIRY, META};
use super::verify::{verify_pages, Failed, Reads, StopWhen, View};

/// One table's share of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableUsage {
    pub(crate) name: String,
    pub(crate) entries: u64,
    pub(crate) leaf_pages: u64,
    pub(crate) branch_pages: u64,
    /// Keys and values as stored.
    pub(crate) stored: u64,
    /// redb's per-entry offsets and the branch pages' keys.
    pub(crate) overhead: u64,
    /// Unused bytes inside the table's pages.
    pub(crate) unused: u64,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) file_len: u64,
    /// `st_blocks` × 512: what the file holds on disk.
    pub(crate) on_disk: u64,
    pub(crate) page_size: u64,
    /// Pages in use by every tree (tables, redb's own); the rest of the length is free.
    pub(crate) pages_in_use: u64,
    pub(crate) tables: Vec<TableUsage>,
}

impl Usage {
    /// Records in the data table.
    pub(crate) fn records(&self) -> u64 {
        self.tables.iter().find(|t| t.name == DATA.name()).map_or(0, |t| t.entries)
    }

    /// The records' keys and values (what they would take written end to end).
    pub(crate) fn record_bytes(&self) -> u64 {
        self.tables.iter().find(|t| t.name == DATA.name()).map_or(0, |t| t.stored)
    }
}

/// Measures the store file `path` (no server may hold it).
pub(crate) fn measure(path: &Path) -> anyhow::Result<Usage> {
    refuse_if_open_elsewhere(path)?;
    let never: StopWhen = Arc::new(|| false);
    let checked = match quietly(|| verify_pages(path, never, View::Stopped, Reads::Ahead)) {
        Ok(Ok(checked)) => checked,
        Ok(Err(Failed::Damaged(why) | Failed::Incomplete(why))) | Err(why) => {
            anyhow::bail!("{} cannot be measured: {why}", path.display())
        }
    };
    let db = checked.db();
    let meta = std::fs::metadata(path)?;
    of(db, meta.len(), meta.blocks() * 512)
}

/// The tables of `db` and redb's page counts, with the file's sizes as given.
pub(crate) fn of(db: &Database, file_len: u64, on_disk: u64) -> anyhow::Result<Usage> {
    let read = db.begin_read()?;
    let mut tables = Vec::new();
    fn one<K: redb::Key + 'static, V: redb::Value + 'static>(
        read: &redb::ReadTransaction,
        def: TableDefinition<K, V>,
        out: &mut Vec<TableUsage>,
    ) -> anyhow::Result<()> {
        let table = match read.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let s = table.stats()?;
        out.push(TableUsage {
            name: def.name().to_owned(),
            entries: table.len()?,
            leaf_pages: s.leaf_pages(),
            branch_pages: s.branch_pages(),
            stored: s.stored_bytes(),
            overhead: s.metadata_bytes(),
            unused: s.fragmented_bytes(),
        });
        Ok(())
    }
    one(&read, DATA, &mut tables)?;
    one(&read, EXPIRY, &mut tables)?;
    one(&read, LISTED, &mut tables)?;
    one(&read, COUNTS, &mut tables)?;
    one(&read, META, &mut tables)?;
    drop(read);
    // redb counts the pages in use only in a write transaction; on the check's view its
    // writes stay in memory, and it is dropped uncommitted.
    let stats = db.begin_write()?.stats()?;
    Ok(Usage { file_len, on_disk, page_size: stats.page_size() as u64, pages_in_use: stats.allocated_pages(), tables })
}

/// `kv usage --data DIR`: prints where the bytes go; exit 1 when there is no store.
pub(crate) fn run(dir: &Path) -> anyhow::Result<ExitCode> {
    let path = dir.join(DB_FILE);
    if !path.exists() {
        eprintln!("kv usage: {} does not exist (no store in {})", path.display(), dir.display());
        return Ok(ExitCode::FAILURE);
    }
    print!("{}", report(&measure(&path)?));
    Ok(ExitCode::SUCCESS)
}

/// The report `kv usage` prints.
pub(crate) fn report(u: &Usage) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let records = u.records().max(1);
    let in_use = u.pages_in_use * u.page_size;
    let mut out = format!(
        "data file: {:.1} MB long, {:.1} MB on disk (the rest of the length is a hole: space redb reserved and has not written)\n\
         pages in use: {} of {} bytes = {:.1} MB; free pages inside the file: {:.1} MB\n\
         records: {}, keys and values {:.1} MB ({} B/record)\n\
         per record: {} B of file length, {} B on disk, {} B in pages in use\n\n",
        mb(u.file_len),
        mb(u.on_disk),
        u.pages_in_use,
        u.page_size,
        mb(in_use),
        mb(u.on_disk.min(u.file_len).saturating_sub(in_use)),
        u.records(),
        mb(u.record_bytes()),
        u.record_bytes() / records,
        u.file_len / records,
        u.on_disk / records,
        in_use / records,
    );
    out.push_str(
        "table           entries  leaf pages  branch pages  stored MB  overhead MB  unused in pages MB  page fill\n",
    );
    for t in &u.tables {
        let used = t.stored + t.overhead;
        let fill = 100.0 * used as f64 / (used + t.unused).max(1) as f64;
        out.push_str(&format!(
            "{:<14} {:>8} {:>11} {:>13} {:>10.1} {:>12.1} {:>19.1} {:>9.0} %\n",
            t.name,
            t.entries,
            t.leaf_pages,
            t.branch_pages,
            mb(t.stored),
            mb(t.overhead),
            mb(t.unused),
            fill,
        ));
    }
    out
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
