//! The data file read front to back while redb repairs it after an unclean shutdown, so the
//! repair finds its pages in the host's page cache.
//!
//! Why: after a crash or a power loss redb walks every tree of the file before the store can
//! serve, one page at a time in tree order, which jumps about the file. At 10 M records with
//! the file not in the page cache (a host reboot) that took 159 s for 11 GB, against 23–42 s
//! with most of it cached: the walk waited on one small read after another. Read in order,
//! with the kernel's readahead, the same disk gives the whole file far faster. Only a file
//! the host can hold in its page cache is read so (at most three quarters of the memory
//! available): a larger one would push out the pages the walk has yet to read again.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Bytes per read: large enough for the kernel's readahead to keep the disk busy.
const CHUNK: usize = 4 << 20;

/// Starts once, when redb's repair begins ([`ReadAhead::begin`]), and stops when the open
/// ends (dropped with the builder that holds it, a panic included), whichever comes first:
/// the read or the repair.
pub(crate) struct ReadAhead {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ReadAhead {
    pub(crate) fn new(path: &Path) -> Arc<ReadAhead> {
        Arc::new(ReadAhead { path: path.to_owned(), stop: Arc::default(), thread: Mutex::default() })
    }

    /// Starts reading the file in a thread of its own, unless it already began or the file
    /// would not fit in the page cache the host has free.
    pub(crate) fn begin(&self) {
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if thread.is_some() || self.stop.load(Ordering::SeqCst) {
            return;
        }
        let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if !fits(len, mem_available()) {
            tracing::info!(
                "kv: the data file ({} MB) is larger than 3/4 of the memory available: the repair reads it as it goes",
                len >> 20
            );
            return;
        }
        let (path, stop) = (self.path.clone(), self.stop.clone());
        let spawned = std::thread::Builder::new().name("kv-read-ahead".into()).spawn(move || {
            let started = Instant::now();
            match read_through(&path, &stop) {
                Ok(bytes) => tracing::info!(
                    "kv: read {} MB of the data file ahead of the repair in {:.1} s",
                    bytes >> 20,
                    started.elapsed().as_secs_f64()
                ),
                Err(e) => tracing::info!("kv: reading the data file ahead of the repair stopped: {e}"),
            }
        });
        *thread = spawned.ok();
    }

    /// Stops the read (if it runs) and waits for it.
    fn end(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.end();
    }
}

/// Whether a file of `len` bytes is read ahead with `available` bytes of memory free.
fn fits(len: u64, available: Option<u64>) -> bool {
    available.is_some_and(|a| len <= a / 4 * 3)
}

/// `MemAvailable` of `/proc/meminfo`, in bytes; `None` where there is none.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads `path` to its end (or until `stop`), into one reused buffer; the bytes read.
fn read_through(path: &Path, stop: &AtomicBool) -> io::Result<u64> {
    let mut file = File::open(path)?;
    advise_sequential(&file);
    let (mut buf, mut total) = (vec![0u8; CHUNK], 0u64);
    while !stop.load(Ordering::SeqCst) {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// Doubles the kernel's readahead window for this descriptor.
fn advise_sequential(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: advice on a descriptor this function borrows; a failure only leaves the default
    // readahead.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_whole_file_once_begun_and_stops_when_told() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, vec![1u8; 3 * CHUNK + 17]).unwrap();
        assert_eq!(read_through(&path, &AtomicBool::new(false)).unwrap(), 3 * CHUNK as u64 + 17);
        assert_eq!(read_through(&path, &AtomicBool::new(true)).unwrap(), 0, "stopped before the first read");
        // Ended before it began: it never starts.
        let ahead = ReadAhead::new(&path);
        ahead.end();
        ahead.begin();
        assert!(ahead.thread.lock().unwrap().is_none());
    }

    #[test]
    fn only_a_file_within_three_quarters_of_the_free_memory_is_read_ahead() {
        assert!(fits(6 << 30, Some(8 << 30)));
        assert!(!fits((6 << 30) + 1, Some(8 << 30)));
        assert!(!fits(1, None), "no figure for the free memory: not read ahead");
        assert!(mem_available().is_some_and(|m| m > 0), "Linux reports MemAvailable");
    }
}
