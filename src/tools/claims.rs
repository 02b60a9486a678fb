//! The writes one tool call made: how it recognises its own record and rolls back a claim
//! whose outcome it could not learn.
//
// Every write of a call carries a fresh `claim_id`. A record carrying one of them is this
// call's own write (it landed although its answer was lost, came late, or the request was
// delivered twice), so it is this call's success, never someone else's `duplicate`.

use std::time::Duration;

use super::Deadline;
use crate::error::ToolError;
use crate::store::record::{new_claim_id, Record, Status};
use crate::store::EventStore;

#[cfg(test)]
thread_local! {
    /// Test-only switch to the protocol before own-write recognition everywhere ("the old
    /// settle"): a call recognised its record only in the read-back right after a lost
    /// answer, and took it for someone else's anywhere else. The simulation must catch it.
    pub static OLD_SETTLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
pub fn old_settle() -> bool {
    OLD_SETTLE.with(|o| o.get())
}

#[cfg(not(test))]
pub fn old_settle() -> bool {
    false
}

/// Why a rolled-back claim's record says `failed` (its `result`).
const ROLLED_BACK: &str =
    "rolled back: the claim's answer was lost and the call answered upstream_error; never processed";

#[derive(Default)]
pub struct Claims {
    /// The claim ids of every write this call sent.
    sent: Vec<String>,
    /// Writes whose answer was lost: they may have landed, or may still land.
    unknown: Vec<Record>,
}

impl Claims {
    /// Registers a write about to be sent.
    pub fn push(&mut self, claim_id: &str) {
        self.sent.push(claim_id.to_owned());
    }

    /// The answer to the write of `rec` was lost.
    pub fn lost(&mut self, rec: &Record) {
        if !self.unknown.iter().any(|r| r.claim_id == rec.claim_id) {
            self.unknown.push(rec.clone());
        }
    }

    /// True when `claim_id` is one of this call's writes.
    pub fn owns(&self, claim_id: &str) -> bool {
        self.sent.iter().any(|c| c == claim_id)
    }

    /// Before answering `err`: rolls back every claim whose outcome is unknown, newest first,
    /// within the call's deadline, and says in the message what became of them.
    ///
    /// Rolling back is a compare-and-swap by claim_id that turns the claim into a `failed`
    /// attempt (so the next delivery re-claims the event at once) rather than a delete: a
    /// deleted key would let another delivery's create that is still on its way land later
    /// and leave a claim nobody was told to run.
    pub async fn roll_back<S: EventStore>(
        &self,
        store: &S,
        key: &str,
        retention: Duration,
        deadline: &Deadline,
        mut err: ToolError,
    ) -> ToolError {
        if self.unknown.is_empty() {
            return err;
        }
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
                claim_id: new_claim_id(),
                ..rec.clone()
            };
            match store.release(key, &rec.claim_id, Some(&released.to_bytes()), retention, timeout, None).await {
                Ok(true) => undone += 1,
                Ok(false) => {}
                Err(_) => unchecked += 1,
            }
        }
        let what = if unchecked > 0 {
            "a claim of this call whose answer was lost could not be checked; if it landed, its lease (if any) lets a \
             later delivery take the event over"
        } else if undone > 0 {
            "a claim of this call that had landed was rolled back to failed, so the next delivery retries the event"
        } else {
            "no claim of this call was found in the store"
        };
        err.message = format!("{} ({what})", err.message);
        err
    }
}
