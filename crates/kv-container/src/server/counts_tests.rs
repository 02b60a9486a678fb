//! The counts kept as writes happen equal a full scan of the records after creates,
//! completions, failures, deletes, expiry and its purge, a restart, and a store from before
//! the counts (built once at start).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use redb::ReadableTable;
use serde_json::json;

use super::batch::{Precondition, WriteOp};
use super::counts::{self, Counts, LISTED, NO_LEASE};
use super::engine::{DurabilityMode, Engine, WriterHandle};
use super::open::DEFAULT_CACHE_MB;
use super::record::{ServerClock, StoredValue};
use super::tables::DATA;

const T0: u64 = 1_785_924_000_000;

fn event(status: &str, lease: Option<u64>) -> String {
    let mut v = json!({"v": 1, "event_id": "e", "event_type": "t", "payload": "{}", "status": status, "attempt": 1});
    if let Some(l) = lease {
        v["lease_until_ms"] = l.into();
    }
    v.to_string()
}

async fn put(engine: &Engine, key: &str, value: String, ttl_ms: Option<u64>) {
    engine.write(WriteOp::put(key, value, Precondition::None, ttl_ms)).await.expect("written");
}

async fn delete(engine: &Engine, key: &str) {
    engine.write(WriteOp::Delete { key: key.into(), pre: Precondition::None, until_ms: None }).await.expect("deleted");
}

fn open(dir: &Path, at: u64) -> (Engine, WriterHandle, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let (clock, now) = ServerClock::manual(at);
    let (engine, writer) = Engine::open_cached(dir, DurabilityMode::Immediate, clock, DEFAULT_CACHE_MB << 20).unwrap();
    (engine, writer, now)
}

pub(super) type Listed = BTreeMap<(String, u64, String), i64>;

/// Every record read and classified: what the kept counts and index must equal.
pub(super) fn full_scan(db: &redb::Database) -> (Counts, Listed) {
    let txn = db.begin_read().unwrap();
    let (mut counts, mut listed) = (Counts::new(), Listed::new());
    for entry in txn.open_table(DATA).unwrap().iter().unwrap() {
        let (k, v) = entry.unwrap();
        let rec = StoredValue::decode(v.value()).unwrap();
        let class = counts::classify(&rec.value);
        *counts.entry(class.category.to_owned()).or_default() += 1;
        if counts::LISTED_CATEGORIES.contains(&class.category) {
            let key = (class.category.to_owned(), rec.modified_ms, k.value().to_owned());
            listed.insert(key, class.lease_until_ms.unwrap_or(NO_LEASE));
        }
    }
    (counts, listed)
}

pub(super) fn kept(db: &redb::Database) -> (Counts, Listed) {
    let txn = db.begin_read().unwrap();
    let mut listed = Listed::new();
    for entry in txn.open_table(LISTED).unwrap().iter().unwrap() {
        let (k, v) = entry.unwrap();
        let (category, modified, key) = k.value();
        listed.insert((category.to_owned(), modified, key.to_owned()), v.value());
    }
    (counts::read(&txn).unwrap(), listed)
}

fn assert_exact(engine: &Engine, when: &str) -> Counts {
    let db = engine.db().unwrap();
    let (scanned, kept) = (full_scan(&db), kept(&db));
    assert_eq!(kept, scanned, "{when}: the kept counts differ from a full scan");
    scanned.0
}

#[tokio::test]
async fn counts_equal_a_full_scan_across_writes_completions_expiry_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, clock) = open(dir.path(), T0);
    for i in 0..40u64 {
        // Every fourth expires after a second, as retention does.
        let ttl = (i % 4 == 0).then_some(1000);
        put(&engine, &format!("evt_{i}"), event("processing", (i % 2 == 0).then_some(T0 + 60_000)), ttl).await;
    }
    put(&engine, "plain", "[1]".into(), None).await;
    let c = assert_exact(&engine, "after the claims");
    assert_eq!((c["processing"], c["other"]), (40, 1));
    clock.store(T0 + 10, Ordering::SeqCst);
    for i in 0..30u64 {
        let status = if i % 3 == 0 { "failed" } else { "completed" };
        put(&engine, &format!("evt_{i}"), event(status, None), Some(1000)).await;
    }
    for i in 30..35u64 {
        delete(&engine, &format!("evt_{i}")).await;
    }
    // A non-event value replaced by an event record and back.
    put(&engine, "plain", event("failed", None), None).await;
    put(&engine, "plain", "{\"v\":2}".into(), None).await;
    let c = assert_exact(&engine, "after completions, failures and deletes");
    assert_eq!((c["processing"], c["completed"], c["failed"], c["other"]), (5, 20, 10, 1));

    // Expired: counted until the purge deletes them, then gone from counts and index alike.
    clock.store(T0 + 5000, Ordering::SeqCst);
    engine.write(WriteOp::Purge { limit: 7 }).await.unwrap();
    assert_exact(&engine, "half way through a purge");
    engine.write(WriteOp::Purge { limit: 1000 }).await.unwrap();
    let c = assert_exact(&engine, "after the purge");
    assert_eq!((c.get("completed"), c.get("failed"), c["processing"]), (None, None, 4));

    drop(engine);
    writer.join();
    let (engine, writer, _) = open(dir.path(), T0 + 6000);
    put(&engine, "evt_after", event("processing", None), None).await;
    let c = assert_exact(&engine, "after a restart");
    assert_eq!(c["processing"], 5);
    drop(engine);
    writer.join();
}

#[tokio::test]
async fn a_store_from_before_the_counts_or_written_by_an_older_release_gets_them_from_one_scan_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, _) = open(dir.path(), T0);
    for (i, status) in ["processing", "completed", "failed", "failed"].iter().enumerate() {
        put(&engine, &format!("evt_{i}"), event(status, Some(T0 + 1)), None).await;
    }
    drop(engine);
    writer.join();
    // As a store written before the counts existed: the records, no counting tables.
    {
        let db = redb::Database::open(dir.path().join(super::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(counts::COUNTS).unwrap() && txn.delete_table(LISTED).unwrap());
        txn.commit().unwrap();
    }
    let (engine, writer, _) = open(dir.path(), T0);
    let c = assert_exact(&engine, "after the build at start");
    assert_eq!((c["processing"], c["completed"], c["failed"]), (1, 1, 2));
    drop(engine);
    writer.join();
    // An older release, which keeps no counts, deletes a record: the next start sees the
    // counts no longer add up and builds them again.
    {
        let db = redb::Database::open(dir.path().join(super::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.open_table(DATA).unwrap().remove("evt_2").unwrap().is_some());
        txn.commit().unwrap();
    }
    let (engine, writer, _) = open(dir.path(), T0);
    let c = assert_exact(&engine, "after an older release wrote to the store");
    assert_eq!((c["processing"], c["completed"], c["failed"]), (1, 1, 1));
    drop(engine);
    writer.join();
}

#[tokio::test]
async fn a_restored_store_carries_exact_counts_in_either_format() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, _) = open(dir.path(), T0);
    for (i, status) in ["processing", "completed", "failed", "failed", "completed"].iter().enumerate() {
        put(&engine, &format!("evt_{i}"), event(status, Some(T0 + 1)), None).await;
    }
    put(&engine, "plain", "[1]".into(), None).await;
    drop(engine);
    writer.join();
    for format in [super::BackupFormat::Jsonl, super::BackupFormat::Image] {
        let file = dir.path().join(format!("backup.{}", format.name()));
        super::backup_dir(dir.path(), &file, format).unwrap();
        let into = dir.path().join(format!("restored-{}", format.name()));
        super::restore(&file, &into).unwrap();
        // Read as the file is, before any start could build them.
        let db = redb::Database::open(into.join(super::DB_FILE)).unwrap();
        let (scanned, kept) = (full_scan(&db), kept(&db));
        assert_eq!(kept, scanned, "{format:?}: the restored counts differ from a full scan");
        assert_eq!((scanned.0["processing"], scanned.0["completed"], scanned.0["failed"]), (1, 2, 2), "{format:?}");
    }
}
