//! The background check of a serving store reads the commit held when it was asked for, while
//! requests go on committing before and while its process opens the file: what a loaded
//! machine did, made deterministic.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability};

use super::open::{self, DB_FILE, DEFAULT_CACHE_MB};
use super::pin::{pin, First, Pinned};
use super::record::StoredValue;
use super::tables::DATA;
use super::verify::{self, Failed, Reads, StopWhen, View};

/// Writes `n` records of about 1 KB, keys `{prefix}{i}`, in one durable commit, straight into
/// the records' table (the counts are not kept: the next open builds them, a commit).
fn put_many(db: &Database, prefix: &str, n: u64) {
    let mut txn = db.begin_write().unwrap();
    txn.set_durability(Durability::Immediate);
    {
        let mut data = txn.open_table(DATA).unwrap();
        for i in 0..n {
            let value = StoredValue::encode(&[b'x'; 1000], i + 1, 1, 0);
            data.insert(format!("{prefix}{i:08}").as_str(), value.as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The check of `pinned` as the server runs it (here in this thread): its records.
fn check(path: &Path, pinned: &Pinned) -> Result<u64, Failed> {
    let never: StopWhen = Arc::new(|| false);
    let checked = verify::verify_pages(path, never.clone(), View::Running(pinned.commit()), Reads::Asked(None))?;
    verify::read_records(checked.db(), &never)
}

/// A store of 300 records at `dir`, closed cleanly, whose next open commits nothing.
fn closed_store(dir: &Path) {
    let (db, _) = open::open(dir, DEFAULT_CACHE_MB << 20).unwrap();
    put_many(&db, "before-", 300);
    drop(db);
    // Opened once more, it builds the counts (a commit) and is closed cleanly again.
    drop(open::open(dir, DEFAULT_CACHE_MB << 20).unwrap());
}

/// The first check after a clean start reads the commit found through the header the file had
/// before it was opened. It is pinned before any write, but its process opened the file only
/// after requests had grown it: redb saw a file longer than that header's layout, with no
/// recovery flag to say why, and its open panicked (`!self.needs_recovery`). The check said
/// "damaged", and the container refused every write until a restart (a loaded machine, about
/// one restart in two in the scale bench).
#[test]
fn the_first_check_reads_the_commit_found_at_a_clean_start_after_writes_grew_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    closed_store(dir.path());
    let (db, found) = open::open(dir.path(), DEFAULT_CACHE_MB << 20).unwrap();
    let start = found.clean_start.expect("a file closed cleanly");
    let db = Arc::new(db);
    let mut pinned = pin(db.clone(), &path, First::AsIs).unwrap();
    assert!(start.describes(&pinned.header, pinned.len), "no commit came between the open and the pin");
    pinned.header = start.header;

    // Requests commit before the check opens the file: it grows.
    for round in 0..8 {
        put_many(&db, &format!("after-{round}-"), 2000);
    }
    assert!(file_len(&path) > pinned.len, "{} bytes, pinned at {}", file_len(&path), pinned.len);
    assert_eq!(check(&path, &pinned).unwrap(), 300, "the pinned commit's records");
}

/// An open that commits (it builds the counts of a store from before them) is not followed by
/// a check through the header found before it: that commit may reuse pages the header names
/// (the check then read garbage for the system tree). And any commit may trim free pages off
/// the file's end: a check through the held commit's header (which names a longer file) then
/// failed redb's `raw_file_len() >= layout().len()`. Both read as damage.
#[test]
fn a_check_after_an_open_that_commits_and_a_commit_that_trims_the_file_reads_the_held_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let (db, _) = open::open(dir.path(), DEFAULT_CACHE_MB << 20).unwrap();
    put_many(&db, "before-", 300);
    drop(db);

    let (db, found) = open::open(dir.path(), DEFAULT_CACHE_MB << 20).unwrap();
    let start = found.clean_start.expect("a file closed cleanly");
    let db = Arc::new(db);
    let pinned = pin(db.clone(), &path, First::AsIs).unwrap();
    assert!(!start.describes(&pinned.header, pinned.len), "the open committed: the header found is not this file's");

    put_many(&db, "after-", 100);
    assert!(file_len(&path) < pinned.len, "{} bytes, pinned at {}: nothing trimmed", file_len(&path), pinned.len);
    assert_eq!(check(&path, &pinned).unwrap(), 300, "the pinned commit's records");
}
