//! A write's pages read before the write is queued, while the store reads from the disk;
//! a purge batch's always (see `ttl`).
//!
//! Why: the single writer applies every write, and a page it needs that is in neither its
//! cache nor the host's page cache (a record's leaf, at 10 M records with the file not
//! cached) it reads from the disk while every write queued behind it waits. Read first on the
//! request's own blocking thread, beside other requests' reads, the writer finds the page in
//! memory. On 9 M records right after the host's page cache was dropped, new claims at 500/s
//! had p99 1.7–2.1 ms (max 12–15 ms) with the pages read first and 2.7–8.5 ms (max 58–60 ms)
//! without. It is not free: a read transaction and a hop to a blocking thread per write cost
//! CPU, which a store whose pages are all in memory spends for nothing (at 64 connections on
//! a small store, 12–14k conditional PUTs a second against 17–30k without). So writes are
//! warmed only while this process reads from the disk at all (`read_bytes` of
//! `/proc/self/io` grew in the last second); a store the host's page cache holds never does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use redb::Database;

use super::tables::{expired_at, DATA, EXPIRY};

/// How often the bytes read from the disk are looked at again.
const LOOK_EVERY_MS: u64 = 1000;

/// Whether writes are warmed: this process read from the disk since the last look.
#[derive(Debug, Default)]
pub(crate) struct Warmer {
    /// When it last looked (store ms + 1; 0: never).
    looked_ms: AtomicU64,
    /// `read_bytes` then.
    read_bytes: AtomicU64,
    reading: AtomicBool,
}

impl Warmer {
    /// Whether a write at `now_ms` is warmed; `read_bytes` (this process's bytes read from
    /// the disk so far) is asked at most once a second.
    pub(crate) fn wanted(&self, now_ms: u64, read_bytes: impl FnOnce() -> Option<u64>) -> bool {
        let looked = self.looked_ms.load(Ordering::Relaxed);
        if looked == 0 || now_ms.saturating_sub(looked - 1) >= LOOK_EVERY_MS {
            self.looked_ms.store(now_ms + 1, Ordering::Relaxed);
            let read = read_bytes();
            let before = self.read_bytes.swap(read.unwrap_or(0), Ordering::Relaxed);
            self.reading.store(looked != 0 && read.is_some_and(|r| r > before), Ordering::Relaxed);
        }
        self.reading.load(Ordering::Relaxed)
    }
}

/// `read_bytes` of `/proc/self/io`: bytes this process had read from the disk (not the page
/// cache); `None` where there is no such file.
pub(crate) fn read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines().find_map(|l| l.strip_prefix("read_bytes:")).and_then(|v| v.trim().parse().ok())
}

/// Reads the pages that lead to `key` on a blocking thread. A failed read is left for the
/// writer to meet and report.
pub(crate) async fn warm(db: Arc<Database>, key: String) {
    let read = move || {
        let txn = db.begin_read().ok()?;
        let table = txn.open_table(DATA).ok()?;
        table.get(key.as_str()).ok().flatten().map(|_| ())
    };
    let _ = tokio::task::spawn_blocking(read).await;
}

/// Reads the pages of the first `limit` records expired at `now_ms`, in the order a purge
/// deletes them, on a blocking thread (see `ttl`). A failed read is left to the writer.
pub(crate) async fn warm_expired(db: Arc<Database>, now_ms: u64, limit: usize) {
    let read = move || -> Option<()> {
        let txn = db.begin_read().ok()?;
        let (expiry, data) = (txn.open_table(EXPIRY).ok()?, txn.open_table(DATA).ok()?);
        for entry in expiry.range(expired_at(now_ms)).ok()?.take(limit) {
            let (k, _) = entry.ok()?;
            data.get(k.value().1).ok()?;
        }
        Some(())
    };
    let _ = tokio::task::spawn_blocking(read).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmed_while_the_process_reads_from_the_disk_looked_at_once_a_second() {
        let warmer = Warmer::default();
        assert!(!warmer.wanted(5, || Some(100)), "the first look has nothing to compare with");
        assert!(!warmer.wanted(900, || panic!("looked at again within the second")));
        assert!(warmer.wanted(1005, || Some(4196)), "read from the disk since");
        assert!(warmer.wanted(1500, || panic!("within the second")));
        assert!(!warmer.wanted(2005, || Some(4196)), "nothing read since");
        assert!(!warmer.wanted(3005, || None), "no figure: not warmed");
        assert!(read_bytes().is_some(), "Linux has /proc/self/io");
    }
}
