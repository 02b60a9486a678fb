//! The store contract: the few atomic operations the tools need ([`EventStore`]) and what
//! they take and return. Every backend implements it; nothing here knows a backend.

use std::future::Future;
use std::time::Duration;

use crate::clock::{StoreClock, StoreDeadline};
use crate::error::StoreError;

/// A conditional write: the value, how long the store keeps it, and by when (in the store's
/// clock) it must land.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub value: &'a [u8],
    /// The store-side retention.
    pub ttl: Duration,
    /// None = no deadline: see [`StoreDeadline`].
    pub until: Option<StoreDeadline>,
}

/// The roll-back of a claim whose outcome is unknown, applied only while the record still
/// carries `claim_id`.
#[derive(Debug, Clone, Copy)]
pub struct Rollback<'a> {
    pub claim_id: &'a str,
    /// None = delete the record; else the record the claim replaced, put back for `ttl`.
    pub restore: Option<&'a [u8]>,
    /// The retention of a restored record.
    pub ttl: Duration,
    /// None = no deadline: see [`StoreDeadline`].
    pub until: Option<StoreDeadline>,
}

/// Opaque version of a stored value: what a compare-and-swap compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// KV container revision (ETag).
    Etag(String),
    /// Redis compares the whole value.
    Value(Vec<u8>),
    /// In-memory store revision; PostgreSQL row version (from a sequence, never reused).
    Rev(u64),
}

/// A value as read from the store, with the store's own clock at the time of the read.
#[derive(Debug, Clone)]
pub struct Current {
    pub value: Vec<u8>,
    pub version: Version,
    /// The store's clock (unix ms) when it answered: leases are judged against this.
    pub store_now_ms: i64,
}

/// Result of an atomic create-if-absent.
#[derive(Debug, Clone)]
pub enum Created {
    Created,
    Exists(Current),
}

/// Result of a compare-and-swap.
#[derive(Debug, Clone)]
pub enum Swapped {
    Swapped,
    /// The value changed (or vanished) since it was read.
    Changed(Option<Current>),
}

/// What credential validation learned about the store.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub backend: &'static str,
    pub server: String,
    pub warnings: Vec<String>,
}

/// The atomic operations the tools need, and nothing else. Every call takes the timeout of
/// its one round trip: the tools split one deadline over all round trips of a tool call.
/// Every write carries its deadline (`until`): see [`StoreDeadline`].
pub trait EventStore: Send + Sync {
    /// Creates `key` holding `write.value` only if it is absent, in one atomic operation;
    /// otherwise returns the current value.
    fn create(
        &self,
        key: &str,
        write: Write<'_>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Created, StoreError>> + Send;
    /// The settling read: `key`, with the store's time T of the read. Every write the store
    /// accepted at a store time up to T is visible in it, including one still committing
    /// (the read waits for it), so a write whose deadline is before T that is not there never
    /// will be.
    fn read_at(
        &self,
        key: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Option<Current>, i64), StoreError>> + Send;
    /// Reads `key`: what is visible now (a backend may answer it more cheaply than
    /// [`EventStore::read_at`]).
    fn read(&self, key: &str, timeout: Duration) -> impl Future<Output = Result<Option<Current>, StoreError>> + Send {
        async move { self.read_at(key, timeout).await.map(|(cur, _)| cur) }
    }
    /// Replaces `key` by `write.value` only if it still holds `expected`, in one atomic
    /// operation.
    fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Swapped, StoreError>> + Send;
    /// Rolls back a claim whose outcome is unknown: only while the record under `key` still
    /// carries `rollback.claim_id`, deletes it or puts `rollback.restore` back (the record
    /// the claim replaced). True when the claim was there and was rolled back.
    fn release(
        &self,
        key: &str,
        rollback: Rollback<'_>,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Checks reachability, authentication, and that atomic creates are supported.
    fn probe(&self) -> impl Future<Output = Result<Probe, StoreError>> + Send;
    /// The store's clock, as last observed (used to stamp lease deadlines).
    fn clock(&self) -> &StoreClock;
}
