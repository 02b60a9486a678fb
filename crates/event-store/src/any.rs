//! `AnyStore`: the backend a `kv_url` chose, behind the one `EventStore` interface.

use std::time::Duration;

#[cfg(feature = "testkit")]
use super::memory;
use super::{kv_client, postgres, redis};
use crate::clock::StoreClock;
use crate::contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
use crate::error::StoreError;

/// One of the backends, chosen by the `kv_url` scheme.
pub(crate) enum AnyStore {
    KvContainer(Box<kv_client::KvClientStore>),
    Redis(Box<redis::RedisStore>),
    Postgres(Box<postgres::PostgresStore>),
    #[cfg(feature = "testkit")]
    Memory(memory::MemoryStore),
}

macro_rules! each_backend {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::KvContainer($s) => $e,
            AnyStore::Redis($s) => $e,
            AnyStore::Postgres($s) => $e,
            #[cfg(feature = "testkit")]
            AnyStore::Memory($s) => $e,
        }
    };
}

/// Awaits a backend's call behind a box. A call's future holds its backend's whole state (the
/// HTTP client's, the Redis client's, the PostgreSQL pool's), and unboxed the largest of them
/// sized every future that awaits a store, up to the session's: about 11 KB, copied each time
/// such a future moves. Boxed, each call copies its own backend's state once.
macro_rules! each_backend_call {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::KvContainer($s) => Box::pin($e).await,
            AnyStore::Redis($s) => Box::pin($e).await,
            AnyStore::Postgres($s) => Box::pin($e).await,
            #[cfg(feature = "testkit")]
            AnyStore::Memory($s) => Box::pin($e).await,
        }
    };
}

impl EventStore for AnyStore {
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        each_backend_call!(self, s => s.create(key, write, timeout))
    }
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        each_backend_call!(self, s => s.read_at(key, timeout))
    }
    async fn read(&self, key: &str, timeout: Duration) -> Result<Option<Current>, StoreError> {
        each_backend_call!(self, s => s.read(key, timeout))
    }
    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        each_backend_call!(self, s => s.swap(key, expected, write, timeout))
    }
    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        each_backend_call!(self, s => s.release(key, rollback, timeout))
    }
    async fn probe(&self) -> Result<Probe, StoreError> {
        each_backend_call!(self, s => s.probe())
    }
    fn clock(&self) -> &StoreClock {
        each_backend!(self, s => s.clock())
    }
}
