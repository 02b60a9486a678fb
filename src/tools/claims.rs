//! The writes one tool call made: how it recognises its own record and rolls back a claim
//! whose outcome it could not learn.
//
// Every write of a call carries a fresh `claim_id`. A record carrying one of them is this
// call's own write (it landed although its answer was lost, came late, or the request was
// delivered twice), so it is this call's success, never someone else's `duplicate`.

use std::time::Duration;

use super::Deadline;
use crate::error::ToolError;
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

/// One write of this call.
struct Write {
    claim_id: String,
    /// What rolling it back writes: `None` deletes the key (a create), `Some` restores the
    /// record the write replaced (a re-claim).
    restore: Option<Vec<u8>>,
    /// True once the store's answer was lost: the write may land at any later time.
    unknown: bool,
}

#[derive(Default)]
pub struct Claims {
    writes: Vec<Write>,
}

impl Claims {
    /// Registers a write about to be sent.
    pub fn push(&mut self, claim_id: &str, restore: Option<Vec<u8>>) {
        self.writes.push(Write { claim_id: claim_id.to_owned(), restore, unknown: false });
    }

    /// The answer to the write carrying `claim_id` was lost.
    pub fn lost(&mut self, claim_id: &str) {
        if let Some(w) = self.writes.iter_mut().find(|w| w.claim_id == claim_id) {
            w.unknown = true;
        }
    }

    /// True when `claim_id` is one of this call's writes.
    pub fn owns(&self, claim_id: &str) -> bool {
        self.writes.iter().any(|w| w.claim_id == claim_id)
    }

    /// Before answering `err`: rolls back every write whose outcome is unknown (compare-and-
    /// delete / compare-and-restore by its claim_id), newest first, within the call's
    /// deadline, and says in the message what became of them.
    pub async fn roll_back<S: EventStore>(
        &self,
        store: &S,
        key: &str,
        ttl: Duration,
        deadline: &Deadline,
        mut err: ToolError,
    ) -> ToolError {
        let unknown: Vec<&Write> = self.writes.iter().rev().filter(|w| w.unknown).collect();
        if unknown.is_empty() {
            return err;
        }
        let (mut undone, mut absent, mut unchecked) = (0, 0, 0);
        for w in unknown {
            let Ok(timeout) = deadline.rest() else {
                unchecked += 1;
                continue;
            };
            match store.release(key, &w.claim_id, w.restore.as_deref(), ttl, timeout).await {
                Ok(true) => undone += 1,
                Ok(false) => absent += 1,
                Err(_) => unchecked += 1,
            }
        }
        let what = if unchecked > 0 {
            "a claim of this call whose answer was lost could not be checked; if it landed, its lease lets a later \
             delivery take the event over"
        } else if undone > 0 {
            "a claim of this call that had landed was rolled back, so the next delivery is accepted"
        } else {
            let _ = absent;
            "no claim of this call was found in the store; should a lost one still land, its lease lets a later \
             delivery take the event over"
        };
        err.message = format!("{} ({what})", err.message);
        err
    }
}
