//! The writes one tool call made: how it recognises its own record and rolls back a claim
//! whose outcome it could not learn.
//
// Every write of a call carries a fresh `claim_id`. A record carrying one of them is this
// call's own write (it landed although its answer was lost, came late, or the request was
// delivered twice), so it is this call's success, never someone else's `duplicate`.

use std::time::Duration;

use super::settings::ClaimIds;
use super::Deadline;
use crate::error::ToolError;
use event_store::record::{Record, Status};
use event_store::{EventStore, Rollback, StoreClock, StoreDeadline};

/// Why a rolled-back claim's record says `failed` (its `result`).
const ROLLED_BACK: &str =
    "rolled back: the claim's answer was lost and the call answered upstream_error; never processed";

/// The least time kept for the one read that settles a call's lost writes.
const KEEP_FOR_READ: Duration = Duration::from_millis(100);
/// Reads a settling may take while the store's time in its answers is not yet past the
/// deadline, and the least wait between them.
const SETTLE_READS: usize = 4;
const MIN_SETTLE_WAIT_MS: i64 = 10;

pub(crate) struct Claims {
    /// Where the claim ids of this call's writes come from.
    ids: ClaimIds,
    /// The claim ids of every write this call sent.
    sent: Vec<String>,
    /// Writes whose answer was lost: they may have landed, or may still land until `latest`.
    unknown: Vec<Record>,
    /// The latest deadline (store clock) any write of this call carried.
    latest: Option<StoreDeadline>,
}

/// What the settling read found.
enum Settled {
    /// A record of this call's is in the store.
    Own(Box<Record>),
    /// None is, and none can land any more.
    Nothing,
    /// The read could not be made (or judged) in time.
    Unknown,
}

impl Claims {
    pub(crate) fn new(ids: ClaimIds) -> Claims {
        Claims { ids, sent: Vec::new(), unknown: Vec::new(), latest: None }
    }

    /// A claim id for this call's next write.
    pub(crate) fn new_id(&self) -> String {
        self.ids.next()
    }

    /// Registers a write about to be sent with `timeout`; returns its deadline in the store's
    /// clock, which the store reaches no later than `timeout` expires here.
    pub(crate) fn push(&mut self, clock: &StoreClock, claim_id: &str, timeout: Duration) -> Option<StoreDeadline> {
        if !self.owns(claim_id) {
            self.sent.push(claim_id.to_owned());
        }
        let until = clock.deadline_after(timeout);
        self.latest = self.latest.max(Some(until));
        Some(until)
    }

    /// The answer to the write of `rec` was lost.
    pub(crate) fn lost(&mut self, rec: &Record) {
        if !self.unknown.iter().any(|r| r.claim_id == rec.claim_id) {
            self.unknown.push(rec.clone());
        }
    }

    /// True when `claim_id` is one of this call's writes.
    pub(crate) fn owns(&self, claim_id: &str) -> bool {
        self.sent.iter().any(|c| c == claim_id)
    }

    /// Before answering `err` when some write's answer was lost: once the store's clock is
    /// past every deadline this call's writes carried, one read tells the final truth. This
    /// call's own record there → `Ok(record)`: the call succeeded after all. Absent → `err`,
    /// now final: nothing of this call is in the store, and nothing can land any more. Only
    /// when that read cannot be made in time are the writes rolled back as before.
    pub(crate) async fn resolve<S: EventStore>(
        &self,
        store: &S,
        key: &str,
        retention: Duration,
        deadline: &Deadline,
        mut err: ToolError,
    ) -> Result<Record, ToolError> {
        if self.unknown.is_empty() {
            return Err(err);
        }
        match self.settle(store, key, deadline).await {
            Settled::Own(rec) => Ok(*rec),
            Settled::Nothing => {
                err.message = format!(
                    "{} (no write of this call is in the store, and none can land any more: the store refuses each \
                     after its deadline, which has passed; the next delivery can claim the event at once)",
                    err.message
                );
                Err(err)
            }
            Settled::Unknown => Err(self.roll_back(store, key, retention, deadline, err).await),
        }
    }

    /// Waits until the store's clock (as estimated; never ahead of the store) is past the
    /// latest deadline, then reads, and believes the read only if the store's own time in its
    /// answer is past it too; otherwise (the store's clock is behind the estimate, or a read
    /// reports a time before a batch it is still committing) waits that gap and reads again,
    /// while the call's deadline allows.
    async fn settle<S: EventStore>(&self, store: &S, key: &str, deadline: &Deadline) -> Settled {
        let Some(StoreDeadline(until)) = self.latest else { return Settled::Unknown };
        let mut wait = until + 1 - store.clock().now_ms();
        for _ in 0..SETTLE_READS {
            if !deadline.wait(wait, KEEP_FOR_READ).await {
                return Settled::Unknown;
            }
            let Ok(timeout) = deadline.rest() else { return Settled::Unknown };
            match store.read_at(key, timeout).await {
                Ok((cur, at)) if at > until => {
                    let rec = cur.and_then(|c| Record::from_bytes(&c.value).ok());
                    return match rec {
                        Some(rec) if self.owns(&rec.claim_id) => Settled::Own(Box::new(rec)),
                        _ => Settled::Nothing,
                    };
                }
                Ok((_, at)) => wait = (until + 1 - at).max(MIN_SETTLE_WAIT_MS),
                Err(_) => return Settled::Unknown,
            }
        }
        Settled::Unknown
    }

    /// Rolls back every claim whose outcome is unknown, newest first, within the call's
    /// deadline, and says in the message what became of them.
    ///
    /// Rolling back is a compare-and-swap by claim_id that turns the claim into a `failed`
    /// attempt (so the next delivery re-claims the event at once) rather than a delete: a
    /// deleted key would let another delivery's create that is still on its way land later
    /// and leave a claim nobody was told to run.
    async fn roll_back<S: EventStore>(
        &self,
        store: &S,
        key: &str,
        retention: Duration,
        deadline: &Deadline,
        mut err: ToolError,
    ) -> ToolError {
        let (mut undone, mut unchecked) = (0, 0);
        for rec in self.unknown.iter().rev() {
            let Ok(timeout) = deadline.rest() else {
                unchecked += 1;
                continue;
            };
            let released = Record {
                status: Status::Failed,
                lease_until_ms: None,
                result: Some(ROLLED_BACK.to_owned()),
                claim_id: self.new_id(),
                ..rec.clone()
            };
            let until = Some(store.clock().deadline_after(timeout));
            match store
                .release(
                    key,
                    Rollback { claim_id: &rec.claim_id, restore: Some(&released.to_bytes()), ttl: retention, until },
                    timeout,
                )
                .await
            {
                Ok(true) => undone += 1,
                Ok(false) => {}
                Err(_) => unchecked += 1,
            }
        }
        let what = if unchecked > 0 {
            "a claim of this call whose answer was lost could not be checked before the call's deadline; if it \
             landed, its lease (if any) lets a later delivery take the event over"
        } else if undone > 0 {
            "a claim of this call that had landed was rolled back to failed, so the next delivery retries the event"
        } else {
            "no claim of this call was found in the store"
        };
        err.message = format!("{} ({what})", err.message);
        err
    }
}
