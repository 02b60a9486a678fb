//! Clocks: the plugin host's (injectable for skew tests) and our estimate of the store's.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

/// The plugin host's wall clock in unix ms, with an optional offset (the in-memory store
/// plays a skewed store clock with it; a skewed plugin host is tested on the real binary with
/// libfaketime).
#[derive(Debug, Clone)]
pub struct Clock {
    offset_ms: i64,
    /// A virtual time the owner moves by hand (deterministic simulations); None = wall clock.
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    pub fn system() -> Self {
        Clock { offset_ms: 0, manual: None }
    }
    #[cfg(test)]
    pub(crate) fn with_offset(offset_ms: i64) -> Self {
        Clock { offset_ms, manual: None }
    }
    /// A clock that reads `now_ms` and moves only when its owner changes it.
    pub fn manual(now_ms: Arc<AtomicI64>) -> Self {
        Clock { offset_ms: 0, manual: Some(now_ms) }
    }
    pub(crate) fn now_ms(&self) -> i64 {
        if let Some(t) = &self.manual {
            return t.load(Ordering::SeqCst) + self.offset_ms;
        }
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        d.as_millis() as i64 + self.offset_ms
    }

    /// A monotonic time in ms (for a call's deadline: wall-clock steps must not stretch or
    /// cut it); a manual clock's own time.
    pub fn mono_ms(&self) -> i64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_millis() as i64,
        }
    }

    /// Waits `ms` of this clock (a manual clock: until its owner has moved it that far).
    pub async fn sleep_ms(&self, ms: i64) {
        if ms <= 0 {
            return;
        }
        match &self.manual {
            None => tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await,
            Some(_) => {
                let until = self.mono_ms() + ms;
                std::future::poll_fn(|cx| {
                    if self.mono_ms() >= until {
                        return std::task::Poll::Ready(());
                    }
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                })
                .await
            }
        }
    }
}

/// The store's clock as seen from here: host time plus the offset measured on the last
/// answer that carried the store's time. Deadlines are stamped with it and judged against
/// the store's own time, so host clock skew cannot change an outcome.
#[derive(Debug, Clone)]
pub struct StoreClock {
    host: Clock,
    inner: Arc<(AtomicI64, AtomicBool)>,
    /// Held by the one call that learns the store's time; concurrent first calls wait for it
    /// instead of all reading the store at once.
    syncing: Arc<tokio::sync::Mutex<()>>,
}

impl StoreClock {
    pub fn new(host: Clock) -> Self {
        StoreClock {
            host,
            inner: Arc::new((AtomicI64::new(0), AtomicBool::new(false))),
            syncing: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
    /// Taken before reading the store only to learn its time (then check [`Self::is_synced`]
    /// again: another call may have learnt it meanwhile).
    pub async fn syncing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.syncing.lock().await
    }
    /// Records the store's time as reported in an answer.
    pub fn observe(&self, store_now_ms: i64) {
        self.inner.0.store(store_now_ms - self.host.now_ms(), Ordering::Relaxed);
        self.inner.1.store(true, Ordering::Relaxed);
    }
    /// The plugin host's clock this estimate is based on.
    pub fn host(&self) -> &Clock {
        &self.host
    }
    /// True once any answer carried the store's time.
    pub fn is_synced(&self) -> bool {
        self.inner.1.load(Ordering::Relaxed)
    }
    /// Estimated current store time in unix ms. The offset is measured when an answer is
    /// received (store time minus host time then), so it is the LOWEST offset the round trip
    /// allows: the estimate is never ahead of the store's real clock (short of clock jumps).
    pub fn now_ms(&self) -> i64 {
        self.host.now_ms() + self.inner.0.load(Ordering::Relaxed)
    }

    /// The store deadline of a write sent now with `timeout`: since the estimate is never
    /// ahead of the store, the store reaches it no later than the caller's timeout fires.
    pub fn deadline_after(&self, timeout: std::time::Duration) -> super::StoreDeadline {
        super::StoreDeadline(self.now_ms() + timeout.as_millis() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_clock_cancels_host_skew() {
        let skewed = StoreClock::new(Clock::with_offset(-3_600_000));
        let real = Clock::with_offset(0).now_ms();
        skewed.observe(real);
        assert!((skewed.now_ms() - real).abs() < 1000);
        assert!(skewed.is_synced());
    }
}
