//! The background integrity check's reads of a serving store's file, paced: pages already in
//! the host's page cache are read at once, and pages the disk must supply at most so many a
//! second, so the writer's commits, which wait on the same disk, keep theirs. While the store
//! is quiet (no request for a second, see `traffic`) there are no commits to keep theirs,
//! and every read goes at once.
//!
//! Why: at 10 M records part of a 17 GB file is not in the page cache, and the check reads
//! every page. On the development machine's virtual disk, reads and writes slowed together
//! while the check read from it (4 KB reads of 1–26 ms each, where 0.1–0.2 ms is usual), and
//! new claims beside the check had p99 of 8–260 ms against 1.7–3 ms on the empty store
//! (performance.md). A cloud disk throttles by operations per second: every read the check
//! takes from the budget, a commit waits for.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `per_s` reads a second that the page cache cannot answer.
#[derive(Debug)]
pub(crate) struct DiskPace {
    step: Duration,
    /// When the next read from the disk may start.
    next: Mutex<Option<Instant>>,
    /// Set while the store serves no requests: reads from the disk are not spaced.
    quiet: AtomicBool,
}

impl DiskPace {
    /// `None` for 0: no limit.
    pub(crate) fn per_second(per_s: u32) -> Option<DiskPace> {
        (per_s > 0).then(|| DiskPace {
            step: Duration::from_secs(1) / per_s,
            next: Mutex::new(None),
            quiet: AtomicBool::new(false),
        })
    }

    /// Whether the store is quiet now (reads go at once) or serving (reads are spaced).
    pub(crate) fn set_quiet(&self, quiet: bool) {
        self.quiet.store(quiet, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed)
    }

    /// Reads `buf.len()` bytes at `offset`: from the page cache at once, else once the pace
    /// allows.
    pub(crate) fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() || cached_read(file, buf, offset) {
            return Ok(());
        }
        if let Some(wait) = self.turn(Instant::now()) {
            std::thread::sleep(wait);
        }
        file.read_exact_at(buf, offset)
    }

    /// A read from the disk's turn, asked for at `now`: how long it waits; `None` while the
    /// store is quiet (it takes no turn, and the ones after it are not pushed back).
    fn turn(&self, now: Instant) -> Option<Duration> {
        if self.quiet.load(Ordering::Relaxed) {
            return None;
        }
        let wait = wait_for(&mut self.next.lock().unwrap_or_else(|p| p.into_inner()), now, self.step);
        (!wait.is_zero()).then_some(wait)
    }
}

/// How long a read from the disk asked for at `now` waits: reads are `step` apart, and time
/// not used (a stretch of cached pages) is not saved up for a burst later.
fn wait_for(next: &mut Option<Instant>, now: Instant, step: Duration) -> Duration {
    let at = next.map_or(now, |n| n.max(now));
    *next = Some(at + step);
    at.saturating_duration_since(now)
}

/// Fills `buf` from the page cache only (`RWF_NOWAIT`); `false` when any of it would come
/// from the disk (or the kernel cannot tell), and the caller reads it the usual way.
fn cached_read(file: &File, buf: &mut [u8], offset: u64) -> bool {
    let Ok(at) = libc::off_t::try_from(offset) else { return false };
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: one iovec over `buf`, which outlives the call; the kernel writes at most
    // `buf.len()` bytes into it.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
    usize::try_from(n).is_ok_and(|n| n == buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_file_holds_whether_cached_or_not() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let bytes: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let pace = DiskPace::per_second(1000).unwrap();
        let mut buf = vec![0u8; 4096];
        pace.read_exact_at(&file, &mut buf, 8192).unwrap();
        assert_eq!(buf, bytes[8192..8192 + 4096]);
        // Past the end: the usual read's error, not a short buffer taken for data.
        assert!(pace.read_exact_at(&file, &mut buf, bytes.len() as u64 - 100).is_err());
        assert!(DiskPace::per_second(0).is_none());
    }

    #[test]
    fn a_quiet_store_takes_no_turn_and_pushes_none_back() {
        let pace = DiskPace::per_second(1).unwrap();
        let t0 = Instant::now();
        assert_eq!(pace.turn(t0), None, "the first read goes at once");
        assert_eq!(pace.turn(t0), Some(Duration::from_secs(1)), "the second waits a second");
        pace.set_quiet(true);
        assert_eq!(pace.turn(t0), None);
        assert_eq!(pace.turn(t0), None);
        pace.set_quiet(false);
        // Serving again: the turn after the last spaced one, as if the quiet reads were not.
        assert_eq!(pace.turn(t0), Some(Duration::from_secs(2)));
    }

    #[test]
    fn disk_reads_are_spaced_by_the_step_and_idle_time_is_not_saved() {
        let (t0, step) = (Instant::now(), Duration::from_millis(10));
        let mut next = None;
        let ms = |d: Duration| d.as_millis();
        // Three asked at once: the first goes, the others wait their turn.
        assert_eq!(ms(wait_for(&mut next, t0, step)), 0);
        assert_eq!(ms(wait_for(&mut next, t0, step)), 10);
        assert_eq!(ms(wait_for(&mut next, t0, step)), 20);
        // Asked a second later: at once, and the next one step after it, not a burst.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(ms(wait_for(&mut next, later, step)), 0);
        assert_eq!(ms(wait_for(&mut next, later, step)), 10);
        assert_eq!(DiskPace::per_second(1000).unwrap().step, Duration::from_millis(1));
    }
}
