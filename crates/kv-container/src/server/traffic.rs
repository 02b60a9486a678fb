//! Whether the store is serving requests: the background integrity check reads the disk at
//! `--check-disk-reads` while it is, and as fast as the disk answers once it has been quiet.
//!
//! Why: paced at 1,000 disk reads a second, the check of a 10 M store whose file the host
//! cannot cache took more than 30 minutes, most of it with no request to protect (a night,
//! the bench's wait). The pace is there for the requests; with none, it only keeps the store
//! unchecked longer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long without a request beginning or ending before the store counts as quiet.
pub(crate) const QUIET_AFTER: Duration = Duration::from_secs(1);

/// Requests seen by the HTTP layer: each counts when it begins and when its answer is ready.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    seen: AtomicU64,
}

impl Traffic {
    /// A request began or was answered.
    pub(crate) fn saw(&self) {
        self.seen.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }
}

/// Samples of [`Traffic::seen`] taken by a watcher, told apart into busy and quiet.
#[derive(Debug)]
pub(crate) struct QuietWatch {
    last_seen: u64,
    changed_at: Instant,
}

impl QuietWatch {
    /// Starts busy: the check begins right after a start, when the requests that waited for
    /// the store arrive.
    pub(crate) fn new(seen: u64, now: Instant) -> QuietWatch {
        QuietWatch { last_seen: seen, changed_at: now }
    }

    /// Whether, at `now`, no request began or ended for [`QUIET_AFTER`]. A request still in
    /// flight after that long (a slow client) does not hold the check back.
    pub(crate) fn quiet(&mut self, seen: u64, now: Instant) -> bool {
        if seen != self.last_seen {
            self.last_seen = seen;
            self.changed_at = now;
        }
        now.saturating_duration_since(self.changed_at) >= QUIET_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_once_a_second_passes_without_a_request() {
        let (t0, traffic) = (Instant::now(), Traffic::default());
        let mut watch = QuietWatch::new(traffic.seen(), t0);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!watch.quiet(traffic.seen(), at(999)), "busy from the start");
        assert!(watch.quiet(traffic.seen(), at(1000)));
        // One request: busy again until a second after it was answered.
        traffic.saw();
        assert!(!watch.quiet(traffic.seen(), at(1500)));
        traffic.saw();
        assert!(!watch.quiet(traffic.seen(), at(1600)));
        assert!(!watch.quiet(traffic.seen(), at(2599)));
        assert!(watch.quiet(traffic.seen(), at(2600)));
    }
}
