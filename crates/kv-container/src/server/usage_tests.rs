//! `kv usage`: its records and bytes equal a full scan's, its page counts fit the file, and it
//! writes nothing to the file it measures.

use redb::{ReadableTable, ReadableTableMetadata, TableHandle};

use super::*;
use crate::server::compact::tests::thinned_store;

#[tokio::test]
async fn the_figures_equal_a_full_scan_and_fit_the_file() {
    let dir = tempfile::tempdir().unwrap();
    thinned_store(dir.path(), 1000).await;
    let path = dir.path().join(DB_FILE);
    let bytes_before = std::fs::read(&path).unwrap();

    let u = measure(&path).unwrap();

    assert_eq!(std::fs::read(&path).unwrap(), bytes_before, "measuring wrote to the file");
    let db = Database::open(&path).unwrap();
    let read = db.begin_read().unwrap();
    let (mut records, mut bytes) = (0u64, 0u64);
    for e in read.open_table(DATA).unwrap().iter().unwrap() {
        let (k, v) = e.unwrap();
        records += 1;
        bytes += (k.value().len() + v.value().len()) as u64;
    }
    assert_eq!((u.records(), u.record_bytes()), (records, bytes));
    let expiring = read.open_table(EXPIRY).unwrap().len().unwrap();
    let expiry = u.tables.iter().find(|t| t.name == EXPIRY.name()).unwrap();
    assert_eq!(expiry.entries, expiring);
    assert!(u.tables.iter().any(|t| t.name == LISTED.name() && t.entries > 0));
    assert_eq!(u.file_len, bytes_before.len() as u64);
    assert!(u.pages_in_use * u.page_size <= u.file_len);
    for t in &u.tables {
        let pages = (t.leaf_pages + t.branch_pages) * u.page_size;
        assert!(t.stored + t.overhead + t.unused >= pages, "{t:?}");
    }
    let text = report(&u);
    assert!(text.contains(&format!("records: {records},")), "{text}");
    assert!(text.contains("kv_data_v1"), "{text}");
}

#[test]
fn a_store_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let _open = Database::create(&path).unwrap();
    assert!(measure(&path).is_err());
}
