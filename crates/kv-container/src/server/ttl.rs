//! Background purge of expired keys. Expired keys already read as absent; this only
//! reclaims their space, in batches that go through the writer like any write, sized so one
//! never holds the writer long and spaced so they take a small share of it while the store
//! serves requests.
//
// Why: a purge batch deletes records whose ids are random, so at 10 M records each key is in
// a leaf of its own, often not in memory; the issue measured new claims at p99 126–479 ms
// during a purge of 200,000 records at 10 M, when a batch was a fixed 1,000 keys read and
// rewritten by the writer while every claim queued behind it waited. Now the batch's pages
// are read first, off the writer (`warm`), the batch is cut to what the writer applies and
// commits in about [`BATCH_TARGET`], and while requests come in the purge takes at most
// [`SHARE_BUSY`] of each tick; a backlog drains at [`SHARE_QUIET`] once the store is quiet.

use std::time::{Duration, Instant};

use super::batch::{WriteOp, WriteOutcome};
use super::engine::Engine;
use super::traffic::QuietWatch;

/// Most keys deleted per purge transaction.
pub(crate) const PURGE_BATCH: usize = 1000;
/// Fewest keys a batch is cut down to: a commit's fixed cost (its fsync) is then spread over
/// some keys at least.
const MIN_BATCH: usize = 16;
/// Keys in the first batch, before any was timed.
const FIRST_BATCH: usize = 64;
/// How long one purge batch should hold the writer: writes queued behind it wait that long.
const BATCH_TARGET: Duration = Duration::from_millis(2);
/// The share of a tick that purge batches may take while requests reach the store, and once
/// none has for a second. At least one batch runs every tick whatever its time.
const SHARE_BUSY: f64 = 0.01;
const SHARE_QUIET: f64 = 0.5;

/// Keys per purge batch, from how long the last full batches took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSize(usize);

impl Default for BatchSize {
    fn default() -> Self {
        BatchSize(FIRST_BATCH)
    }
}

impl BatchSize {
    pub(crate) fn keys(self) -> usize {
        self.0
    }

    /// A batch asked for `self.keys()` deleted `purged` in `took`: the next batch aims at
    /// [`BATCH_TARGET`], growing at most twofold a batch (a batch's time is not all per key:
    /// its commit costs the same for 16 keys or 1,000). A batch that ran out of expired keys
    /// says nothing about a larger one, unless it already took too long.
    pub(crate) fn after(self, purged: usize, took: Duration) -> BatchSize {
        if purged == 0 || (purged < self.0 && took <= BATCH_TARGET) {
            return self;
        }
        let aimed = purged as f64 * BATCH_TARGET.as_secs_f64() / took.as_secs_f64().max(1e-6);
        BatchSize((aimed as usize).min(2 * purged).clamp(MIN_BATCH, PURGE_BATCH))
    }
}

/// Runs until the task is aborted (at shutdown).
pub(crate) async fn purge_loop(engine: Engine, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let traffic = engine.metrics().traffic.clone();
    let mut watch = QuietWatch::new(traffic.seen(), Instant::now());
    let mut size = BatchSize::default();
    loop {
        tick.tick().await;
        if engine.health().damage().is_some() {
            // Reported once by /healthz and the log; nothing to purge until a restart.
            continue;
        }
        let share = if watch.quiet(traffic.seen(), Instant::now()) { SHARE_QUIET } else { SHARE_BUSY };
        let budget = every.mul_f64(share);
        let mut spent = Duration::ZERO;
        loop {
            let limit = size.keys();
            engine.warm_expired(limit).await;
            let started = Instant::now();
            match engine.write(WriteOp::Purge { limit }).await {
                Ok(WriteOutcome::Purged(n)) => {
                    let took = started.elapsed();
                    size = size.after(n, took);
                    spent += took;
                    if n > 0 {
                        engine.metrics().purged(n);
                        tracing::debug!("kv: purged {n} expired keys in {took:?}");
                    }
                    if n < limit || spent >= budget {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("kv: purge failed (will retry): {e}");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_batch_aims_at_its_target_time_grows_at_most_twofold_and_stays_in_bounds() {
        let first = BatchSize::default();
        assert_eq!(first.keys(), FIRST_BATCH);
        // Fast full batches grow, twofold at most, up to the most a batch may hold.
        assert_eq!(first.after(64, MS / 10).keys(), 128);
        assert_eq!(BatchSize(800).after(800, MS / 10).keys(), PURGE_BATCH);
        // A slow one is cut to what the target allows: 1,000 keys in 40 ms, 50 in 2 ms.
        assert_eq!(BatchSize(1000).after(1000, 40 * MS).keys(), 50);
        // Never below the fewest, however slow (a cold disk, a commit queued behind others).
        assert_eq!(BatchSize(64).after(64, 2000 * MS).keys(), MIN_BATCH);
        // A fixed commit cost of 1 ms and 10 µs a key: from the first batch it settles on the
        // 100 keys that take the target, without overshooting.
        let mut size = first;
        for _ in 0..30 {
            let took = MS + Duration::from_micros(10) * size.keys() as u32;
            size = size.after(size.keys(), took);
            assert!(size.keys() <= 100, "{size:?}");
        }
        assert!((95..=100).contains(&size.keys()), "{size:?}");
        // Nothing expired, or fewer than asked in good time: nothing learnt.
        assert_eq!(BatchSize(300).after(0, 50 * MS), BatchSize(300));
        assert_eq!(BatchSize(300).after(12, MS), BatchSize(300));
        // Fewer than asked but slow: cut all the same.
        assert_eq!(BatchSize(300).after(100, 10 * MS).keys(), 20);
    }
}
