//! One deadline per tool call: the store timeout bounds all of a call's round trips together.

use std::time::Duration;

use crate::error::ToolError;
use event_store::{HostClock, StoreError};

/// A round trip is not started with less time than this left: it could not finish.
const MIN_ROUND_TRIP: Duration = Duration::from_millis(2);

/// At most this much of the deadline is kept back from a round trip for the round trips that
/// may have to resolve it (a read-back, a roll-back): a slow but working store gets most of
/// the deadline for the claim itself.
const RESERVE: Duration = Duration::from_secs(1);

/// When the call started and how long all of its store round trips may take together, on
/// the host's monotonic clock (a simulation's virtual one).
#[derive(Debug, Clone)]
pub(crate) struct Deadline {
    clock: HostClock,
    started_ms: i64,
    budget: Duration,
    /// The setting the budget comes from (named when the call runs out of it).
    setting: &'static str,
}

impl Deadline {
    pub(crate) fn start(clock: &HostClock, budget: Duration, setting: &'static str) -> Deadline {
        Deadline { clock: clock.clone(), started_ms: clock.mono_ms(), budget, setting }
    }

    fn elapsed(&self) -> Duration {
        Duration::from_millis((self.clock.mono_ms() - self.started_ms).max(0) as u64)
    }

    fn remaining(&self) -> Duration {
        self.budget.saturating_sub(self.elapsed())
    }

    /// Waits up to `ms` of the call's clock, never past the point where `keep` is all that is
    /// left; false when the wait would not fit.
    pub(crate) async fn wait(&self, ms: i64, keep: Duration) -> bool {
        if ms > 0 && Duration::from_millis(ms as u64) + keep > self.remaining() {
            return false;
        }
        self.clock.sleep_ms(ms).await;
        true
    }

    fn bounded(&self, t: Duration) -> Result<Duration, StoreError> {
        if t < MIN_ROUND_TRIP {
            return Err(StoreError::Timeout(self.waited_ms()));
        }
        Ok(t)
    }

    /// The timeout of a round trip whose failure still needs round trips to resolve (a write
    /// whose lost answer is read back, a read-back whose failure leads to a roll-back): what
    /// is left before the final reserve, minus a reserve of half of it, at most [`RESERVE`],
    /// so the resolution always has time too.
    pub(crate) fn share(&self) -> Result<Duration, StoreError> {
        let left = self.remaining().saturating_sub(self.final_reserve());
        self.bounded(left - (left / 2).min(RESERVE))
    }

    /// Kept back from every [`Deadline::share`] for the one read that settles a call whose
    /// write answers were lost, after their store deadlines have passed: a fifth of the
    /// budget, at most [`RESERVE`].
    fn final_reserve(&self) -> Duration {
        (self.budget / 5).min(RESERVE)
    }

    /// The timeout of a call's last round trip: all that is left.
    pub(crate) fn rest(&self) -> Result<Duration, StoreError> {
        self.bounded(self.remaining())
    }

    /// Milliseconds since the call started.
    pub(crate) fn waited_ms(&self) -> u64 {
        self.elapsed().as_millis() as u64
    }

    /// A store failure as the tool reports it; a timeout says how long the whole call waited.
    pub(crate) fn error(&self, e: StoreError) -> ToolError {
        match e {
            StoreError::Timeout(_) => ToolError::upstream(format!(
                "the store did not answer in time: this call waited {} ms in all; {} ({} ms) bounds all of \
                 one call's store round trips together",
                self.waited_ms(),
                self.setting,
                self.budget.as_millis()
            )),
            other => other.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTING: &str = "STATEFUL_TOOL_X_MS";

    #[test]
    fn shares_halve_what_is_left_and_an_exhausted_budget_is_a_timeout() {
        let (clock, hand) = HostClock::manual(1000);
        let d = Deadline::start(&clock, Duration::from_secs(3600), SETTING);
        let share = d.share().unwrap();
        assert_eq!(share, Duration::from_secs(3598));
        assert!(d.rest().unwrap() > share);
        let short = Deadline::start(&clock, Duration::from_millis(1000), SETTING).share().unwrap();
        assert_eq!(short, Duration::from_millis(400), "a fifth kept for the settling read, half of the rest");
        let spent = Deadline::start(&clock, Duration::from_secs(1), SETTING);
        hand.advance(2000);
        assert!(matches!(spent.share(), Err(StoreError::Timeout(_))));
        let msg = spent.error(StoreError::Timeout(500)).message;
        assert!(msg.contains("this call waited 2") && msg.contains("STATEFUL_TOOL_X_MS (1000 ms)"), "{msg}");
    }
}
