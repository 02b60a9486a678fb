//! One store client per (kv_url, kv_token), shared by every session: pools are reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{kv_client::KvClientStore, memory::MemoryStore, redis::RedisStore, AnyStore, Clock, StoreError};

/// Where the store is and how to authenticate, from the provider credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreConfig {
    pub url: String,
    pub token: Option<String>,
    /// Redis replicas that must acknowledge every write (`WAIT`); 0 = none.
    pub min_replicas: u32,
}

/// Different workspaces may configure different stores; a handful is normal, so the cache
/// is small and simply starts over if a misbehaving caller cycles through many URLs.
const MAX_STORES: usize = 64;

type Slot = Arc<OnceCell<Arc<AnyStore>>>;

pub struct StoreCache {
    host: Clock,
    slots: Mutex<HashMap<StoreConfig, Slot>>,
}

impl StoreCache {
    pub fn new(host: Clock) -> Self {
        StoreCache { host, slots: Mutex::new(HashMap::new()) }
    }

    pub fn host_clock(&self) -> &Clock {
        &self.host
    }

    /// The shared client for `cfg`, connecting on first use. A failed connect is not
    /// cached, so the next call tries again.
    pub async fn get(&self, cfg: &StoreConfig) -> Result<Arc<AnyStore>, StoreError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = slots.get(cfg) {
                slot.clone()
            } else {
                if slots.len() >= MAX_STORES {
                    slots.clear();
                }
                slots.entry(cfg.clone()).or_default().clone()
            }
        };
        let store = slot.get_or_try_init(|| connect(cfg, self.host.clone())).await?;
        Ok(store.clone())
    }
}

async fn connect(cfg: &StoreConfig, host: Clock) -> Result<Arc<AnyStore>, StoreError> {
    let scheme = cfg.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    let store = match scheme.as_str() {
        "http" | "https" => AnyStore::KvContainer(KvClientStore::new(&cfg.url, cfg.token.as_deref(), host)?),
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel" | "rediss+sentinel" => {
            AnyStore::Redis(Box::new(RedisStore::connect(&cfg.url, cfg.min_replicas, host).await?))
        }
        "memory" if std::env::var_os("STATEFUL_TOOL_ALLOW_MEMORY_STORE").is_some() => {
            AnyStore::Memory(MemoryStore::new(host, 0))
        }
        _ => {
            return Err(StoreError::Config(format!(
                "kv_url {:?} has no supported scheme: use http(s)://host:port for the KV container or redis(s)://host:port, redis(s)+cluster://host:port,… or redis(s)+sentinel://host:port,…/master for Redis",
                redact(&cfg.url)
            )))
        }
    };
    Ok(Arc::new(store))
}

/// The URL with any password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => url.chars().take(80).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords() {
        assert_eq!(redact("redis://:s3cret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(redact("http://127.0.0.1:8123"), "http://127.0.0.1:8123/");
    }

    #[tokio::test]
    async fn unknown_scheme_is_a_config_error() {
        let cache = StoreCache::new(Clock::system());
        let cfg = StoreConfig { url: "ftp://x".into(), token: None, min_replicas: 0 };
        let err = cache.get(&cfg).await.err().unwrap();
        assert!(matches!(err, StoreError::Config(_)), "{err}");
    }

    #[tokio::test]
    async fn clients_are_shared_per_config() {
        let cache = StoreCache::new(Clock::system());
        let cfg = StoreConfig { url: "http://127.0.0.1:9".into(), token: None, min_replicas: 0 };
        let a = cache.get(&cfg).await.unwrap();
        let b = cache.get(&cfg).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
