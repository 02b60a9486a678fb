//! In-process store for unit tests of the tool logic (never a user-facing backend).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::record::Record;
use crate::clock::{HostClock, StoreClock, StoreDeadline};
use crate::contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
use crate::error::StoreError;

/// What a key holds: its value, its revision, and when it expires (store ms; 0 = never).
#[derive(Default)]
struct Entry {
    value: Vec<u8>,
    rev: u64,
    expires_ms: i64,
}

/// A mutex-guarded map with the same atomicity as the real backends. Its "store clock" is
/// the host clock it was given (a test's manual clock moves it too) plus `store_skew_ms`, so
/// tests can skew host and store apart.
pub struct MemoryStore {
    map: Mutex<(HashMap<String, Entry>, u64)>,
    clock: StoreClock,
    store_skew_ms: i64,
}

impl MemoryStore {
    pub fn new(host: HostClock, store_skew_ms: i64) -> Self {
        let clock = StoreClock::new(host);
        let store = MemoryStore { map: Mutex::new((HashMap::new(), 0)), clock, store_skew_ms };
        store.clock.observe(store.store_now());
        store
    }

    fn store_now(&self) -> i64 {
        self.clock.host().now_ms() + self.store_skew_ms
    }

    /// Refuses a write whose deadline has passed by this store's clock.
    fn in_time(now: i64, until: Option<StoreDeadline>) -> Result<(), StoreError> {
        match until {
            Some(StoreDeadline(d)) if now > d => Err(StoreError::TooLate { deadline_ms: d, store_now_ms: now }),
            _ => Ok(()),
        }
    }

    fn live<'a>(map: &'a HashMap<String, Entry>, key: &str, now: i64) -> Option<&'a Entry> {
        map.get(key).filter(|e| e.expires_ms == 0 || e.expires_ms > now)
    }

    fn current(e: &Entry, now: i64) -> Current {
        Current { value: e.value.clone(), version: Version::Rev(e.rev), store_now_ms: now }
    }

    /// Number of live keys (tests assert "one record in the store").
    pub fn len(&self) -> usize {
        let now = self.store_now();
        let g = self.map.lock().unwrap();
        g.0.values().filter(|e| e.expires_ms == 0 || e.expires_ms > now).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EventStore for MemoryStore {
    async fn create(&self, key: &str, write: Write<'_>, _: Duration) -> Result<Created, StoreError> {
        let Write { value, ttl, until } = write;
        let now = self.store_now();
        Self::in_time(now, until)?;
        let mut g = self.map.lock().unwrap();
        if let Some(e) = Self::live(&g.0, key, now) {
            return Ok(Created::Exists(Self::current(e, now)));
        }
        g.1 += 1;
        let rev = g.1;
        g.0.insert(key.to_owned(), Entry { value: value.to_vec(), rev, expires_ms: now + ttl.as_millis() as i64 });
        Ok(Created::Created)
    }

    async fn read_at(&self, key: &str, _: Duration) -> Result<(Option<Current>, i64), StoreError> {
        let now = self.store_now();
        let g = self.map.lock().unwrap();
        Ok((Self::live(&g.0, key, now).map(|e| Self::current(e, now)), now))
    }

    async fn swap(&self, key: &str, expected: &Version, write: Write<'_>, _: Duration) -> Result<Swapped, StoreError> {
        let Write { value, ttl, until } = write;
        let now = self.store_now();
        Self::in_time(now, until)?;
        let mut g = self.map.lock().unwrap();
        match Self::live(&g.0, key, now) {
            Some(e) if Version::Rev(e.rev) == *expected => {}
            other => return Ok(Swapped::Changed(other.map(|e| Self::current(e, now)))),
        }
        g.1 += 1;
        let rev = g.1;
        g.0.insert(key.to_owned(), Entry { value: value.to_vec(), rev, expires_ms: now + ttl.as_millis() as i64 });
        Ok(Swapped::Swapped)
    }

    async fn release(&self, key: &str, rollback: Rollback<'_>, _: Duration) -> Result<bool, StoreError> {
        let Rollback { claim_id, restore, ttl, until } = rollback;
        let now = self.store_now();
        Self::in_time(now, until)?;
        let mut g = self.map.lock().unwrap();
        let ours = Self::live(&g.0, key, now)
            .and_then(|e| Record::from_bytes(&e.value).ok())
            .is_some_and(|r| r.claim_id == claim_id);
        if ours {
            match restore {
                Some(value) => {
                    g.1 += 1;
                    let rev = g.1;
                    let expires_ms = now + ttl.as_millis() as i64;
                    g.0.insert(key.to_owned(), Entry { value: value.to_vec(), rev, expires_ms });
                }
                None => {
                    g.0.remove(key);
                }
            }
        }
        Ok(ours)
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        Ok(Probe { backend: "memory", server: "in-process".into(), warnings: vec![] })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}
