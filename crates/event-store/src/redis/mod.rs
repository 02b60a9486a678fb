//! Redis backend (`redis://`, `redis+cluster://`, `redis+sentinel://` and their TLS forms):
//! every operation is one atomic step on one key (valid on a Cluster) that also reads `TIME`
//! on the node owning the key (the lease clock is that node's clock).

mod errors;
mod guard;
mod link;
mod probe;
mod replicas;
mod scripts;
pub(crate) mod url;

use std::time::Duration;

use redis::{RedisError, Value as RV};

use self::errors::classify;
use self::link::{Connector, Link};
use self::replicas::wait_ms;
use self::scripts::Scripts;
use super::hosts::AllowedHosts;
use crate::clock::{HostClock, StoreClock, StoreDeadline};
use crate::contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
use crate::error::StoreError;

pub(crate) struct RedisStore {
    /// The shared connection and its generation (bumped each time it is replaced).
    link: std::sync::Mutex<(u64, Link)>,
    connector: Connector,
    /// Held while a replacement connection is being made; others do not wait for it.
    reconnecting: tokio::sync::Mutex<()>,
    scripts: Scripts,
    /// Replicas that must acknowledge each write (`WAIT`) before it counts; 0 = none.
    min_replicas: u32,
    clock: StoreClock,
    display: std::sync::Mutex<String>,
    /// Bound of connecting and of calls that carry no timeout of their own (probe, reconnect).
    timeout: Duration,
    /// The store hosts this process may dial, checked again for every node Redis names.
    allowed: AllowedHosts,
}

impl RedisStore {
    /// Connects (bounded by the call timeout). One multiplexed connection (per node, on a
    /// Cluster) serves every session: Redis executes commands one at a time anyway.
    pub(crate) async fn connect(
        url: &str,
        min_replicas: u32,
        host: HostClock,
        timeout: Duration,
        allowed: AllowedHosts,
    ) -> Result<Self, StoreError> {
        let parsed = url::Parsed::parse(url)?;
        let (connector, link, display) = Connector::open(parsed, timeout, allowed.clone()).await?;
        Ok(RedisStore {
            link: std::sync::Mutex::new((0, link)),
            connector,
            reconnecting: tokio::sync::Mutex::new(()),
            scripts: Scripts::new(),
            min_replicas,
            clock: StoreClock::new(host),
            display: std::sync::Mutex::new(display),
            timeout,
            allowed,
        })
    }

    /// The shared connection (a cheap handle) and its generation.
    fn link(&self) -> (u64, Link) {
        let g = self.link.lock().unwrap_or_else(|p| p.into_inner());
        (g.0, g.1.clone())
    }

    fn display(&self) -> String {
        self.display.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn run<T>(
        &self,
        generation: u64,
        timeout: Duration,
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(timeout, fut).await {
            Err(_) => Err(StoreError::Timeout(timeout.as_millis() as u64)),
            Ok(r) => r.map_err(|e| classify(&self.display(), timeout, e)),
        };
        if let Err(e) = &result {
            let moved = matches!(
                e,
                StoreError::Unreachable { .. } | StoreError::Interrupted { .. } | StoreError::Unexpected { .. }
            );
            if matches!(e, StoreError::Timeout(_)) || (moved && self.connector.rediscovers()) {
                self.replace_link(generation).await;
            }
        }
        result
    }

    /// After a timeout (and, behind Sentinel, after any failure: the master may have moved).
    /// A timed-out command's answer is still owed on the multiplexed connection and every
    /// later command queues behind it, so a silent connection would time out every session
    /// forever. The connection is replaced once per generation, by one caller; the others
    /// return their error without waiting.
    async fn replace_link(&self, generation: u64) {
        let Ok(_one) = self.reconnecting.try_lock() else { return };
        if self.link().0 != generation {
            return;
        }
        match self.connector.connect(self.timeout).await {
            Ok((link, at)) => {
                *self.link.lock().unwrap_or_else(|p| p.into_inner()) = (generation + 1, link);
                tracing::warn!("redis: a command failed; now using a new connection to {at}");
                *self.display.lock().unwrap_or_else(|p| p.into_inner()) = at;
            }
            Err(e) => tracing::warn!("redis at {}: a command failed and reconnecting failed: {e}", self.display()),
        }
    }

    fn observe(&self, secs: i64, micros: i64) -> i64 {
        let now = secs * 1000 + micros / 1000;
        self.clock.observe(now);
        now
    }

    /// Runs one of the scripts on `key`: `[secs, micros, ...]`, the owning node's clock first.
    /// With `min_replicas`, the script and a `WAIT` go down one connection in one pipeline,
    /// and the number of replicas that acknowledged comes back too.
    async fn script(
        &self,
        key: &str,
        which: &redis::Script,
        args: &[&[u8]],
        wait: bool,
        timeout: Duration,
    ) -> Result<(Vec<RV>, i64, Option<i64>), StoreError> {
        let (generation, mut link) = self.link();
        let plain = match &link {
            Link::Node(_) => self.scripts.plain(which, key, args),
            Link::Cluster(_) => None,
        };
        let (reply, acks) = if let Some(mut pipe) = plain {
            // One node: the claim and the read are plain commands pipelined with `TIME` (one
            // round trip, no script), in the same reply shape as the scripts.
            let waits = wait && self.min_replicas > 0;
            if waits {
                pipe.cmd("WAIT").arg(self.min_replicas).arg(wait_ms(timeout));
            }
            let replies = self.run(generation, timeout, self.scripts.run_plain(&mut link, key, &pipe)).await?;
            let mut replies = replies.into_iter();
            let (time, value) = (replies.next(), replies.next().unwrap_or(RV::Nil));
            let mut reply = match time {
                Some(RV::Array(t)) => t,
                _ => vec![],
            };
            reply.push(value);
            (reply, if waits { Some(replies.next().as_ref().and_then(int).unwrap_or(0)) } else { None })
        } else if wait && self.min_replicas > 0 {
            let waiting = self.scripts.with_wait(&mut link, which, key, args, self.min_replicas, wait_ms(timeout));
            let (reply, acks) = self.run(generation, timeout, waiting).await?;
            (reply, Some(acks))
        } else {
            (self.run(generation, timeout, self.scripts.invoke(&mut link, which, key, args)).await?, None)
        };
        let bad = || StoreError::unexpected("an unexpected reply to a store script");
        let (secs, micros) = match reply.as_slice() {
            [s, m, ..] => (int(s).ok_or_else(bad)?, int(m).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        let now = self.observe(secs, micros);
        if let Some(RV::Int(-1)) = reply.get(2) {
            // The write reached the node after its deadline and wrote nothing.
            return Err(StoreError::TooLate { deadline_ms: deadline_of(args), store_now_ms: now });
        }
        Ok((reply, now, acks))
    }
}

/// A write's TTL (ms, at least 1) and deadline (its last argument: unix ms, or empty for
/// none) as text, the digits written into this, on the caller's stack.
#[derive(Default)]
struct WriteArgs([itoa::Buffer; 2]);

impl WriteArgs {
    fn text(&mut self, ttl: Duration, until: Option<StoreDeadline>) -> (&[u8], &[u8]) {
        let [ttl_digits, until_digits] = &mut self.0;
        let ttl = ttl_digits.format((ttl.as_millis() as u64).max(1)).as_bytes();
        (ttl, until.map_or(&b""[..], |d| until_digits.format(d.0).as_bytes()))
    }
}

fn deadline_of(args: &[&[u8]]) -> i64 {
    args.last().and_then(|a| std::str::from_utf8(a).ok()).and_then(|a| a.parse().ok()).unwrap_or(0)
}

fn int(v: &RV) -> Option<i64> {
    match v {
        RV::Int(i) => Some(*i),
        RV::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        RV::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn bytes(v: Option<&RV>) -> Option<Vec<u8>> {
    match v {
        Some(RV::BulkString(b)) => Some(b.clone()),
        _ => None,
    }
}

fn current(value: Vec<u8>, now: i64) -> Current {
    Current { version: Version::Value(value.clone()), value, store_now_ms: now }
}

impl EventStore for RedisStore {
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        let Write { value, ttl, until } = write;
        let mut digits = WriteArgs::default();
        let (ttl_arg, until_arg) = digits.text(ttl, until);
        let args: [&[u8]; 3] = [value, ttl_arg, until_arg];
        let (reply, now, acks) = match self.script(key, &self.scripts.create, &args, true, timeout).await {
            Err(e) if e.is_ambiguous() && self.min_replicas > 0 => {
                // Unknown whether it landed or replicated: never let a read-back accept it.
                let undone = self.undo(key, value, None, ttl, timeout).await;
                let what = format!("{e}; the claim was not confirmed replicated ({undone})");
                return Err(StoreError::unexpected(what).caused_by(e));
            }
            r => r?,
        };
        match bytes(reply.get(2)) {
            // A retried command can find its own first attempt: that is still our claim.
            Some(prev) if prev != value => Ok(Created::Exists(current(prev, now))),
            _ => match acks {
                Some(acks) if acks < self.min_replicas as i64 => {
                    let undone = self.undo(key, value, None, ttl, timeout).await;
                    let undone = !undone.starts_with("rolling it back failed");
                    Err(self.unreplicated(acks, undone, timeout).await)
                }
                _ => Ok(Created::Created),
            },
        }
    }

    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        let (reply, now, _) = self.script(key, &self.scripts.read, &[], false, timeout).await?;
        Ok((bytes(reply.get(2)).map(|v| current(v, now)), now))
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        let Version::Value(expected) = expected else {
            return Err(StoreError::unexpected("a version from another backend"));
        };
        let Write { value, ttl, until } = write;
        let mut digits = WriteArgs::default();
        let (ttl_arg, until_arg) = digits.text(ttl, until);
        let args: [&[u8]; 4] = [expected, value, ttl_arg, until_arg];
        let (reply, now, acks) = match self.script(key, &self.scripts.swap, &args, true, timeout).await {
            Err(e) if e.is_ambiguous() && self.min_replicas > 0 => {
                let undone = self.undo(key, value, Some(expected), ttl, timeout).await;
                let what = format!("{e}; the write was not confirmed replicated ({undone})");
                return Err(StoreError::unexpected(what).caused_by(e));
            }
            r => r?,
        };
        let swapped = matches!(reply.get(2).and_then(int), Some(1));
        let cur = bytes(reply.get(3));
        // A retried command can find its own first attempt: that is still our swap.
        if swapped || cur.as_deref() == Some(value) {
            if let Some(acks) = acks.filter(|&a| a < self.min_replicas as i64) {
                let undone = self.undo(key, value, Some(expected), ttl, timeout).await;
                let undone = !undone.starts_with("rolling it back failed");
                return Err(self.unreplicated(acks, undone, timeout).await);
            }
            return Ok(Swapped::Swapped);
        }
        Ok(Swapped::Changed(cur.map(|v| current(v, now))))
    }

    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        let Rollback { claim_id, restore, ttl, until } = rollback;
        let mut digits = WriteArgs::default();
        let (ttl_arg, until_arg) = digits.text(ttl, until);
        let args: [&[u8]; 4] = [claim_id.as_bytes(), restore.unwrap_or_default(), ttl_arg, until_arg];
        let (reply, _, _) = self.script(key, &self.scripts.release, &args, false, timeout).await?;
        Ok(matches!(reply.get(2).and_then(int), Some(1)))
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        let t = self.timeout;
        let (generation, mut link) = self.link();
        let (kind, here) = (self.connector.kind(), self.display());
        let found =
            self.run(generation, t, probe::inspect(&mut link, kind, &here, self.min_replicas, &self.allowed)).await?;
        let found = found.map_err(StoreError::config)?;
        // Learn the store's clock (of the node owning this key; all masters' clocks agree
        // within NTP accuracy, far below any lease).
        self.script("probe", &self.scripts.read, &[], false, t).await?;
        Ok(Probe {
            backend: "redis",
            server: format!("{} ({})", found.summary, self.display()),
            warnings: found.warnings,
        })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}
