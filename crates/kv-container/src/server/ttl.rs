//! Background purge of expired keys. Expired keys already read as absent; this only
//! reclaims their space, in bounded batches that go through the writer like any write.

use std::time::Duration;

use super::batch::{WriteOp, WriteOutcome};
use super::engine::Engine;

/// Most keys deleted per purge transaction, so a mass expiry never stalls client writes
/// queued behind it for long.
pub(crate) const PURGE_BATCH: usize = 1000;
/// Upper bound on back-to-back purge batches per tick; the rest waits for the next tick.
const MAX_BATCHES_PER_TICK: usize = 10;

/// Runs until the task is aborted (at shutdown).
pub(crate) async fn purge_loop(engine: Engine, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if engine.health().damage().is_some() {
            // Reported once by /healthz and the log; nothing to purge until a restart.
            continue;
        }
        for _ in 0..MAX_BATCHES_PER_TICK {
            match engine.write(WriteOp::Purge { limit: PURGE_BATCH }).await {
                Ok(WriteOutcome::Purged(n)) => {
                    if n > 0 {
                        engine.metrics().purged(n);
                        tracing::debug!("kv: purged {n} expired keys");
                    }
                    if n < PURGE_BATCH {
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
