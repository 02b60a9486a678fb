//! One store client per (kv_url, kv_token), shared by every session: pools are reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::any::AnyStore;
use super::hosts::AllowedHosts;
use super::url::{self, Scheme};
use super::{kv_client::KvClientStore, postgres::PostgresStore, redis::RedisStore};
use crate::clock::HostClock;
use crate::contract::EventStore;
use crate::error::StoreError;

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
        StoreOptions::new(Duration::from_secs(5), Duration::from_millis(1500), AllowedHosts::default())
    }
}

impl StoreOptions {
    /// Options with these bounds and allow-list (and no in-process store): what a plugin
    /// sets from its environment, whichever features this crate was built with.
    pub fn new(call_timeout: Duration, door_timeout: Duration, allowed_hosts: AllowedHosts) -> StoreOptions {
        StoreOptions {
            call_timeout,
            #[cfg(feature = "testkit")]
            allow_memory: false,
            allowed_hosts,
            door_timeout,
        }
    }
}

pub struct StoreCache {
    host: HostClock,
    options: StoreOptions,
    stores: Mutex<HashMap<StoreConfig, SharedStore, foldhash::fast::RandomState>>,
}

impl StoreCache {
    pub fn new(host: HostClock, options: StoreOptions) -> Self {
        StoreCache { host, options, stores: Mutex::new(HashMap::default()) }
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
            check_hosts(&self.options.allowed_hosts, &cfg.url)?;
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

/// Checks every host `url` dials against the allow-list: each seed of a Cluster, Sentinel or
/// PostgreSQL kv_url (as its backend reads them), else the URL's one host.
fn check_hosts(allowed: &AllowedHosts, url: &str) -> Result<(), StoreError> {
    allowed.check(url, || match Scheme::of(url) {
        Ok(Scheme::Redis) => super::redis::url::seed_hosts(url).ok().flatten(),
        Ok(Scheme::Postgres) => super::postgres::url::Parsed::parse(url, Duration::from_secs(1))
            .ok()
            .map(|p| p.hosts().into_iter().map(|(h, port)| format!("{h}:{port}")).collect()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_a_kv_url_dials_must_be_allowed() {
        let allowed = AllowedHosts::parse(Some("kv.internal, 10.0.0.5:6379")).unwrap();
        assert!(check_hosts(&allowed, "http://KV.internal:8123").is_ok());
        assert!(check_hosts(&allowed, "redis://:pw@10.0.0.5:6379/0").is_ok());
        for refused in ["redis://10.0.0.5:6380/0", "http://169.254.169.254/", "http://kv.internal.evil:80", "nonsense"]
        {
            assert!(matches!(check_hosts(&allowed, refused), Err(StoreError::Config { .. })), "{refused}");
        }
        let seeds = AllowedHosts::parse(Some("r1,r2:7001,[::1]")).unwrap();
        assert!(check_hosts(&seeds, "rediss+cluster://:pw@R1:7000,r2:7001,[::1]:7002").is_ok());
        assert!(check_hosts(&seeds, "redis+sentinel://r1,[::1]:26380/m?sentinel_password=x").is_ok());
        assert!(check_hosts(&seeds, "postgres://u:pw@r1:5432,r2:7001/db").is_ok());
        assert!(check_hosts(&seeds, "postgresql://u:pw@r1:5432,evil:5432/db").is_err());
        for refused in ["redis+cluster://r1:7000,r2:7002", "redis+sentinel://r1,evil:26379/m", "redis+cluster://r1,r3"]
        {
            let e = check_hosts(&seeds, refused).unwrap_err();
            assert!(
                matches!(&e, StoreError::Config { why: m, .. } if m.contains("not in the store hosts")),
                "{refused}: {e}"
            );
        }
        assert!(check_hosts(&AllowedHosts::parse(Some("")).unwrap(), "http://anything").is_ok());
    }

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
