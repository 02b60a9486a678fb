//! `min_replicas`: how long a `WAIT` may block, and rolling back a write that too few
//! replicas confirmed (by its claim_id, through `release`).

use std::time::Duration;

use super::RedisStore;
use crate::contract::{EventStore, Rollback};
use crate::error::StoreError;

/// How long a `WAIT` may block: a part of the operation's timeout, so the answer still arrives.
pub(super) fn wait_ms(timeout: Duration) -> u64 {
    (timeout.as_millis() as u64 / 2).max(1)
}

// Undoing a write that too few replicas confirmed goes through `release`, the one
// compare-by-claim_id roll-back of this backend (the tools use it for a claim whose answer
// was lost). Every write carries a fresh claim_id, so "the record still carries the
// claim_id of our write" is "our write is still there". The two callers restore different
// records on purpose: a lost answer is rolled forward to a `failed` attempt (a delete would
// let a late create land unseen), while an unreplicated write is put back to exactly what
// the replicas still hold (nothing, or the record it replaced), so that a failover and a
// roll-back leave the same state.
impl RedisStore {
    /// Why a write does not count: fewer replicas than `min_replicas` confirmed it. Behind
    /// Sentinel this may be a master that was just demoted or not yet reconfigured: ask again.
    pub(super) async fn unreplicated(&self, acks: i64, undone: bool, timeout: Duration) -> StoreError {
        if self.connector.rediscovers() {
            self.replace_link(self.link().0).await;
        }
        let undone =
            if undone { "it was rolled back" } else { "rolling it back failed, so it stays until its lease ends" };
        StoreError::unexpected(format!(
            "only {acks} of the {} replicas required by min_replicas confirmed the write within {} ms; {undone}",
            self.min_replicas,
            wait_ms(timeout)
        ))
    }

    /// Rolls back our write of `value` (delete it, or put `restore` back) while the key still
    /// carries its claim_id.
    pub(super) async fn undo(
        &self,
        key: &str,
        value: &[u8],
        restore: Option<&[u8]>,
        ttl: Duration,
        timeout: Duration,
    ) -> &'static str {
        let Some(claim_id) = claim_id_of(value) else {
            return "rolling it back failed (the write carries no claim_id)";
        };
        // No deadline: this undoes our own write, and must still do so when it arrives late.
        let rollback = Rollback { claim_id: &claim_id, restore, ttl, until: None };
        match self.release(key, rollback, timeout).await {
            Ok(true) => "rolled back",
            // Replaced since by another writer's compare-and-swap, or (after a lost answer)
            // never applied: nothing of ours is left.
            Ok(false) => "nothing of it was left to roll back",
            Err(_) => "rolling it back failed",
        }
    }
}

/// The `claim_id` of a record as written.
fn claim_id_of(value: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Claim {
        claim_id: String,
    }
    serde_json::from_slice::<Claim>(value).ok().map(|c| c.claim_id).filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_id_of_a_write_is_found_or_none() {
        assert_eq!(claim_id_of(br#"{"status":"processing","claim_id":"c-1"}"#).as_deref(), Some("c-1"));
        assert_eq!(claim_id_of(br#"{"claim_id":""}"#), None);
        assert_eq!(claim_id_of(b"plain text"), None);
    }
}
