//! Clocks: the plugin host's (injectable for skew tests) and our estimate of the store's.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

/// A conditional write's deadline in the STORE's own clock (unix ms). The store applies the
/// write only while its clock, at the moment it applies it, is at most this; later it refuses
/// with [`crate::StoreError::TooLate`], so a write held in the network can never land after its
/// caller has given up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StoreDeadline(pub i64);

/// The plugin host's wall clock in unix ms, with an optional offset (the in-memory store
/// plays a skewed store clock with it; a skewed plugin host is tested on the real binary with
/// libfaketime).
#[derive(Debug, Clone)]
pub struct HostClock {
    offset_ms: i64,
    /// A virtual time a test moves by hand with its [`ClockHand`]; None = wall clock.
    #[cfg(feature = "testkit")]
    manual: Option<tokio::sync::watch::Receiver<i64>>,
}

impl HostClock {
    pub fn system() -> Self {
        Self::with_offset(0)
    }
    pub(crate) fn with_offset(offset_ms: i64) -> Self {
        HostClock {
            offset_ms,
            #[cfg(feature = "testkit")]
            manual: None,
        }
    }
    /// A clock that reads `start_ms` and moves only when the returned hand moves it.
    #[cfg(feature = "testkit")]
    pub fn manual(start_ms: i64) -> (Self, ClockHand) {
        let (hand, time) = tokio::sync::watch::channel(start_ms);
        (HostClock { offset_ms: 0, manual: Some(time) }, ClockHand(std::sync::Arc::new(hand)))
    }

    /// The manual time, when this is a test's clock.
    fn manual_ms(&self) -> Option<i64> {
        #[cfg(feature = "testkit")]
        if let Some(t) = &self.manual {
            return Some(*t.borrow());
        }
        None
    }

    pub(crate) fn now_ms(&self) -> i64 {
        if let Some(t) = self.manual_ms() {
            return t + self.offset_ms;
        }
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        d.as_millis() as i64 + self.offset_ms
    }

    /// A monotonic time in ms (for a call's deadline: wall-clock steps must not stretch or
    /// cut it); a manual clock's own time.
    pub fn mono_ms(&self) -> i64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        match self.manual_ms() {
            Some(t) => t,
            None => ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_millis() as i64,
        }
    }

    /// Waits `ms` of this clock (a manual clock: until its hand has moved it that far).
    pub async fn sleep_ms(&self, ms: i64) {
        if ms <= 0 {
            return;
        }
        #[cfg(feature = "testkit")]
        if let Some(time) = &self.manual {
            let until = *time.borrow() + ms;
            // Woken by the hand's move, never by polling. A clock whose hand is gone can never
            // reach `until`: its sleeper returns rather than hang the test.
            let _ = time.clone().wait_for(|now| *now >= until).await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await
    }
}

/// What moves a manual [`HostClock`] (and every clone of it): a test's hand on time.
#[cfg(feature = "testkit")]
#[derive(Debug, Clone)]
pub struct ClockHand(std::sync::Arc<tokio::sync::watch::Sender<i64>>);

#[cfg(feature = "testkit")]
impl ClockHand {
    /// Moves the clock `ms` forward, waking whoever sleeps on it.
    pub fn advance(&self, ms: i64) {
        self.0.send_modify(|now| *now += ms);
    }
    /// Sets the clock to `now_ms` (a simulation's world time), waking whoever sleeps on it.
    pub fn set(&self, now_ms: i64) {
        self.0.send_replace(now_ms);
    }
    /// The clock's time now.
    pub fn now_ms(&self) -> i64 {
        *self.0.borrow()
    }
}

/// The store's clock as seen from here: host time plus the offset measured on the last
/// answer that carried the store's time. Deadlines are stamped with it and judged against
/// the store's own time, so host clock skew cannot change an outcome.
#[derive(Debug, Clone)]
pub struct StoreClock {
    host: HostClock,
    inner: Arc<(AtomicI64, AtomicBool)>,
    /// Held by the one call that learns the store's time; concurrent first calls wait for it
    /// instead of all reading the store at once.
    syncing: Arc<tokio::sync::Mutex<()>>,
}

impl StoreClock {
    pub fn new(host: HostClock) -> Self {
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
    pub fn host(&self) -> &HostClock {
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
    pub fn deadline_after(&self, timeout: std::time::Duration) -> StoreDeadline {
        StoreDeadline(self.now_ms() + timeout.as_millis() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "testkit")]
    #[tokio::test]
    async fn a_manual_clock_sleeper_wakes_when_the_hand_moves_it_and_not_before() {
        let (clock, hand) = HostClock::manual(1_000);
        let (started, asleep) = tokio::sync::oneshot::channel();
        let sleeper = tokio::spawn({
            let clock = clock.clone();
            async move {
                started.send(()).unwrap();
                clock.sleep_ms(500).await
            }
        });
        asleep.await.unwrap();
        tokio::task::yield_now().await;
        hand.advance(499);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its time");
        hand.advance(1);
        sleeper.await.unwrap();
        assert_eq!((clock.mono_ms(), hand.now_ms()), (1_500, 1_500));
    }

    #[test]
    fn store_clock_cancels_host_skew() {
        let skewed = StoreClock::new(HostClock::with_offset(-3_600_000));
        let real = HostClock::with_offset(0).now_ms();
        skewed.observe(real);
        assert!((skewed.now_ms() - real).abs() < 1000);
        assert!(skewed.is_synced());
    }
}
