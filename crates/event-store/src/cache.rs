//! One store client per (kv_url, kv_token), shared by every session: pools are reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::any::AnyStore;
use super::hosts::AllowedHosts;
use super::url::{self, Scheme};
use super::{kv_client::KvClientStore, postgres::PostgresStore, redis::RedisStore, EventStore, HostClock, StoreError};

/// Where the store is and how to authenticate, from the provider credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreConfig {
    pub url: String,
    pub token: Option<String>,
    /// Redis replicas that must acknowledge every write (`WAIT`), or PostgreSQL synchronous
    /// standbys the server's settings must wait for; 0 = none.
    pub min_replicas: u32,
}

/// Different workspaces may configure different stores; a handful is normal, so the cache
/// is small and simply starts over if a misbehaving caller cycles through many URLs.
const MAX_STORES: usize = 64;

/// The one client of a config, shared by every session once connected; the first caller
/// connects it while the others wait.
type SharedStore = Arc<OnceCell<Arc<AnyStore>>>;

/// How the runtime lets the store layer work, decided once at start-up.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Bound of each store call (connect, command, HTTP request).
    pub call_timeout: Duration,
    /// Whether `memory://` (the in-process store, a test double) is accepted; without the
    /// `testkit` feature it never is.
    #[cfg(feature = "testkit")]
    pub allow_memory: bool,
    /// The store hosts `kv_url` may name (`STATEFUL_TOOL_STORE_HOSTS`; all when unset).
    pub allowed_hosts: AllowedHosts,
    /// Bound of a trigger's claim at the door (`STATEFUL_TOOL_TRIGGER_TIMEOUT_MS`): the
    /// webhook sender is waiting (GitHub gives up after 10 s).
    pub door_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            call_timeout: Duration::from_secs(5),
            #[cfg(feature = "testkit")]
            allow_memory: false,
            allowed_hosts: AllowedHosts::default(),
            door_timeout: Duration::from_millis(1500),
        }
    }
}

pub struct StoreCache {
    host: HostClock,
    options: StoreOptions,
    stores: Mutex<HashMap<StoreConfig, SharedStore>>,
}

impl StoreCache {
    pub fn new(host: HostClock, options: StoreOptions) -> Self {
        StoreCache { host, options, stores: Mutex::new(HashMap::new()) }
    }

    /// How long one tool call may spend on its store round trips together.
    pub fn call_timeout(&self) -> std::time::Duration {
        self.options.call_timeout
    }

    /// How long a trigger's claim at the door may take in all.
    pub fn door_timeout(&self) -> std::time::Duration {
        self.options.door_timeout
    }

    /// Like [`StoreCache::get`], bounded by `within`: a connection not made in time is a
    /// [`StoreError::Timeout`], as a round trip that took too long would be.
    pub async fn get_within(
        &self,
        cfg: &StoreConfig,
        within: std::time::Duration,
    ) -> Result<Arc<impl EventStore + use<>>, StoreError> {
        tokio::time::timeout(within, self.get(cfg)).await.unwrap_or(Err(StoreError::Timeout(within.as_millis() as u64)))
    }

    /// The shared client for `cfg`, connecting on first use: the backend its `kv_url` chose,
    /// seen only through [`EventStore`]. A failed connect is not cached, so the next call
    /// tries again.
    pub async fn get(&self, cfg: &StoreConfig) -> Result<Arc<impl EventStore + use<>>, StoreError> {
        if !cfg.url.starts_with("memory:") {
            self.options.allowed_hosts.check(&cfg.url)?;
        }
        let shared = {
            let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(shared) = stores.get(cfg) {
                shared.clone()
            } else {
                if stores.len() >= MAX_STORES {
                    stores.clear();
                }
                stores.entry(cfg.clone()).or_default().clone()
            }
        };
        // Connecting is boxed: its state (a Redis or PostgreSQL handshake) is large, and every
        // caller's future would otherwise be sized for it although a store is connected once.
        let store = shared.get_or_try_init(|| Box::pin(connect(cfg, self.host.clone(), &self.options))).await?;
        Ok(store.clone())
    }
}

async fn connect(cfg: &StoreConfig, host: HostClock, options: &StoreOptions) -> Result<Arc<AnyStore>, StoreError> {
    let timeout = options.call_timeout;
    let store = match Scheme::of(&cfg.url)? {
        Scheme::KvContainer => {
            AnyStore::KvContainer(Box::new(KvClientStore::new(&cfg.url, cfg.token.as_deref(), host, timeout)?))
        }
        Scheme::Redis => AnyStore::Redis(Box::new(
            RedisStore::connect(&cfg.url, cfg.min_replicas, host, timeout, options.allowed_hosts.clone()).await?,
        )),
        Scheme::Postgres => {
            AnyStore::Postgres(Box::new(PostgresStore::connect(&cfg.url, cfg.min_replicas, host, timeout).await?))
        }
        #[cfg(feature = "testkit")]
        Scheme::Memory if options.allow_memory => AnyStore::Memory(super::memory::MemoryStore::new(host, 0)),
        Scheme::Memory => return Err(url::unsupported(&cfg.url)),
    };
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_scheme_is_a_bad_url() {
        let cache = StoreCache::new(HostClock::system(), StoreOptions::default());
        let cfg = StoreConfig { url: "ftp://x".into(), token: None, min_replicas: 0 };
        let err = cache.get(&cfg).await.err().unwrap();
        assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    }

    #[tokio::test]
    async fn clients_are_shared_per_config() {
        let cache = StoreCache::new(HostClock::system(), StoreOptions::default());
        let cfg = StoreConfig { url: "http://127.0.0.1:9".into(), token: None, min_replicas: 0 };
        let a = cache.get(&cfg).await.unwrap();
        let b = cache.get(&cfg).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
