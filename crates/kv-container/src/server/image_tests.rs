//! Image backups: what a held commit's image restores while the writer rewrites and deletes
//! every record meanwhile, and what the reader refuses.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability, ReadableTable};

use super::image::{self, ImageReader};
use super::pin::{pin, First};
use super::record::StoredValue;
use super::tables::{DATA, META, REV_KEY};

/// Writes `records` (key → value) in one durable commit, with revision `rev`.
fn put_all(db: &Database, records: &BTreeMap<String, String>, rev: u64) {
    let mut txn = db.begin_write().unwrap();
    txn.set_durability(Durability::Immediate);
    {
        let mut data = txn.open_table(DATA).unwrap();
        for (k, v) in records {
            data.insert(k.as_str(), StoredValue::encode(v.as_bytes(), rev, 1, 0).as_slice()).unwrap();
        }
        txn.open_table(META).unwrap().insert(REV_KEY, rev).unwrap();
    }
    txn.commit().unwrap();
}

fn records_of(path: &Path) -> BTreeMap<String, String> {
    let db = Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(DATA).unwrap();
    let all = table.iter().unwrap().map(|e| {
        let (k, v) = e.unwrap();
        let rec = StoredValue::decode(v.value()).unwrap();
        (k.value().to_owned(), String::from_utf8(rec.value.to_vec()).unwrap())
    });
    all.collect()
}

fn records(n: usize, tag: &str) -> BTreeMap<String, String> {
    (0..n).map(|i| (format!("k{:05}", (i * 7919) % n), format!("{{\"v\":\"{tag}{i}{}\"}}", "x".repeat(300)))).collect()
}

#[test]
fn an_image_restores_the_held_commit_while_every_record_is_rewritten_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let db = Arc::new(Database::create(&path).unwrap());
    let first = records(3000, "first");
    put_all(&db, &first, 1);
    let held = pin(db.clone(), &path, First::Durable).unwrap();
    // While the commit is held: every record rewritten several times over, then half of
    // them deleted, each in durable commits, so redb frees and reuses pages throughout.
    for round in 2..6 {
        put_all(&db, &records(3000, &format!("round{round}")), round);
    }
    let mut txn = db.begin_write().unwrap();
    {
        let mut data = txn.open_table(DATA).unwrap();
        for k in first.keys().step_by(2) {
            data.remove(k.as_str()).unwrap();
        }
    }
    txn.set_durability(Durability::Immediate);
    txn.commit().unwrap();

    let mut out = Vec::new();
    let summary = image::write_image(&held, &path, 7, &|| true, &mut out).unwrap();
    assert_eq!((summary.records, summary.last_rev), (3000, 1));
    drop(held);
    let file = dir.path().join("backup.img");
    std::fs::write(&file, &out).unwrap();
    let restored = dir.path().join("restored.redb");
    let summary = image::restore(&file, &restored).unwrap();
    assert_eq!((summary.records, summary.last_rev), (3000, 1));
    assert_eq!(records_of(&restored), first, "the held commit, not what came after");
    drop(db);
    assert_eq!(records_of(&path).len(), 1500, "the store itself went on");
}

#[test]
fn the_reader_takes_an_image_in_any_pieces_and_refuses_a_changed_or_short_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let db = Arc::new(Database::create(&path).unwrap());
    put_all(&db, &records(200, "a"), 3);
    let held = pin(db.clone(), &path, First::Durable).unwrap();
    let mut out = Vec::new();
    image::write_image(&held, &path, 7, &|| true, &mut out).unwrap();
    let read = |bytes: &[u8], piece: usize| -> anyhow::Result<(u64, u64)> {
        let (mut reader, mut body) = (ImageReader::default(), 0u64);
        for chunk in bytes.chunks(piece) {
            reader.push(chunk, &mut |b| {
                body += b.len() as u64;
                Ok(())
            })?;
        }
        let header = reader.finish()?;
        assert_eq!(body, header.data);
        Ok((header.records, header.last_rev))
    };
    for piece in [1, 7, 4096, out.len()] {
        assert_eq!(read(&out, piece).unwrap(), (200, 3), "in pieces of {piece}");
    }
    let mut changed = out.clone();
    let at = out.len() / 2;
    changed[at] ^= 1;
    assert!(read(&changed, 4096).unwrap_err().to_string().contains("checksum does not match"));
    for cut in [10, out.len() / 2, out.len() - 3] {
        let err = read(&out[..cut], 4096).unwrap_err().to_string();
        assert!(err.contains("truncated") || err.contains("bad header"), "cut at {cut}: {err}");
    }
    let mut longer = out.clone();
    longer.extend_from_slice(b"{}\n");
    assert!(read(&longer, 4096).is_err(), "bytes after the trailer");
    // A reopened store: the backup does not end with a trailer.
    let mut partial = Vec::new();
    assert!(image::write_image(&held, &path, 7, &|| false, &mut partial).is_err());
    assert!(read(&partial, 4096).is_err());
}
