//! `AnyStore`: the backend a `kv_url` chose, behind the one `EventStore` interface.

use std::time::Duration;

use super::{kv_client, memory, postgres, redis};
use super::{Created, Current, EventStore, Probe, StoreClock, StoreDeadline, StoreError, Swapped, Version};

/// One of the backends, chosen by the `kv_url` scheme.
pub enum AnyStore {
    KvContainer(kv_client::KvClientStore),
    Redis(Box<redis::RedisStore>),
    Postgres(Box<postgres::PostgresStore>),
    Memory(memory::MemoryStore),
}

macro_rules! each_backend {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::KvContainer($s) => $e,
            AnyStore::Redis($s) => $e,
            AnyStore::Postgres($s) => $e,
            AnyStore::Memory($s) => $e,
        }
    };
}

impl EventStore for AnyStore {
    async fn create(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<Created, StoreError> {
        each_backend!(self, s => s.create(key, value, ttl, timeout, until).await)
    }
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        each_backend!(self, s => s.read_at(key, timeout).await)
    }
    async fn read(&self, key: &str, timeout: Duration) -> Result<Option<Current>, StoreError> {
        each_backend!(self, s => s.read(key, timeout).await)
    }
    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        value: &[u8],
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<Swapped, StoreError> {
        each_backend!(self, s => s.swap(key, expected, value, ttl, timeout, until).await)
    }
    async fn release(
        &self,
        key: &str,
        claim_id: &str,
        restore: Option<&[u8]>,
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<bool, StoreError> {
        each_backend!(self, s => s.release(key, claim_id, restore, ttl, timeout, until).await)
    }
    async fn probe(&self) -> Result<Probe, StoreError> {
        each_backend!(self, s => s.probe().await)
    }
    fn clock(&self) -> &StoreClock {
        each_backend!(self, s => s.clock())
    }
}
