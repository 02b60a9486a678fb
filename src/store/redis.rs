//! Redis backend (`redis://` / `rediss://` kv_url): claim = `SET key value NX GET PX ttl`.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Value as RV};

use super::{Clock, Created, Current, EventStore, Probe, StoreClock, StoreError, Swapped, Version};

/// Compare-and-swap on the whole value, reporting the server's clock. One script call is one
/// atomic step on the server, and it touches only KEYS[1], so it is Cluster-safe.
const SWAP_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
if cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, t[1], t[2]}
end
return {0, t[1], t[2], cur}
";

/// Roll-back of a claim whose outcome is unknown: only while the record still carries the
/// claim's id (ARGV[1]), delete it, or put back the record it replaced (ARGV[2], non-empty).
/// A value that is not a JSON object is never ours and is left alone.
const RELEASE_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, rec = pcall(cjson.decode, cur)
if not ok or type(rec) ~= 'table' or rec['claim_id'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
";

pub struct RedisStore {
    /// The shared connection and its generation (bumped each time it is replaced).
    conn: std::sync::Mutex<(u64, ConnectionManager)>,
    /// What a replacement connection is made from.
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// Held while a replacement connection is being made; others do not wait for it.
    reconnecting: tokio::sync::Mutex<()>,
    swap: redis::Script,
    release: redis::Script,
    clock: StoreClock,
    display: String,
    /// Bound of every call (connect, command, reconnect).
    timeout: Duration,
}

impl RedisStore {
    /// Connects (bounded by the call timeout). One multiplexed connection serves every
    /// session: Redis executes commands one at a time anyway, and pipelining keeps it busy.
    pub async fn connect(url: &str, host: Clock, timeout: Duration) -> Result<Self, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::BadUrl(format!("kv_url is not a Redis URL: {e}")))?;
        let info = client.get_connection_info();
        let display = format!("{}", info.addr);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            .set_number_of_retries(2)
            .set_max_delay(500);
        let conn = match tokio::time::timeout(timeout, client.get_connection_manager_with_config(config.clone()))
            .await
            .map_err(|_| StoreError::Timeout(timeout.as_millis() as u64))?
        {
            Ok(conn) => conn,
            Err(e) if is_auth_error(&e) && info.redis.password.is_some() => {
                return Err(refused_password(&display, info, timeout).await)
            }
            Err(e) => return Err(classify(&display, timeout, e)),
        };
        let store = RedisStore {
            conn: std::sync::Mutex::new((0, conn)),
            client,
            config,
            reconnecting: tokio::sync::Mutex::new(()),
            swap: redis::Script::new(SWAP_LUA),
            release: redis::Script::new(RELEASE_LUA),
            clock: StoreClock::new(host),
            display,
            timeout,
        };
        Ok(store)
    }

    /// The shared connection (a cheap handle) and its generation.
    fn connection(&self) -> (u64, ConnectionManager) {
        let g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        (g.0, g.1.clone())
    }

    async fn run<T>(
        &self,
        generation: u64,
        timeout: Duration,
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(timeout, fut).await {
            Err(_) => Err(StoreError::Timeout(timeout.as_millis() as u64)),
            Ok(r) => r.map_err(|e| classify(&self.display, timeout, e)),
        };
        if matches!(result, Err(StoreError::Timeout(_))) {
            self.replace_connection(generation).await;
        }
        result
    }

    /// After a timeout. The command's answer is still owed on the multiplexed connection, and
    /// every later command queues behind it: a connection that went silent (a half-open TCP
    /// connection, a stalled proxy) would time out every session forever, and the connection
    /// manager only reconnects on I/O errors. So the connection is replaced, once per
    /// generation, by one caller; the others return their timeout without waiting.
    async fn replace_connection(&self, generation: u64) {
        let Ok(_one) = self.reconnecting.try_lock() else { return };
        if self.connection().0 != generation {
            return;
        }
        let fresh = self.client.get_connection_manager_with_config(self.config.clone());
        match tokio::time::timeout(self.timeout, fresh).await {
            Ok(Ok(conn)) => {
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = (generation + 1, conn);
                tracing::warn!("redis at {}: a command timed out; now using a new connection", self.display);
            }
            _ => tracing::warn!("redis at {}: a command timed out and reconnecting failed", self.display),
        }
    }

    fn observe(&self, secs: i64, micros: i64) -> i64 {
        let now = secs * 1000 + micros / 1000;
        self.clock.observe(now);
        now
    }
}

fn classify(addr: &str, timeout: Duration, e: RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout(timeout.as_millis() as u64)
    } else if e.is_connection_refusal() {
        StoreError::Unreachable(addr.to_owned(), e.to_string())
    } else if e.code() == Some("NOAUTH") {
        StoreError::Unauthorized(format!(
            "the Redis server at {addr} requires a password (NOAUTH); put it in kv_url: redis://:password@host:port/db"
        ))
    } else if is_auth_error(&e) {
        StoreError::Unauthorized(format!("the Redis server at {addr} refused the password in kv_url: {e}"))
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        StoreError::Interrupted(e.to_string())
    } else {
        StoreError::Bad(format!("a Redis error: {e}"))
    }
}

fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS")
}

/// Redis refused the password in kv_url; the client library reports every refusal alike.
/// One unauthenticated PING tells the two common mistakes apart: a server without a
/// password answers it, a server with one answers NOAUTH.
async fn refused_password(addr: &str, info: &redis::ConnectionInfo, timeout: Duration) -> StoreError {
    let mut bare = info.clone();
    bare.redis.username = None;
    bare.redis.password = None;
    let ping = async {
        let mut conn = redis::Client::open(bare)?.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    let what = match tokio::time::timeout(timeout, ping).await {
        Ok(Ok(_)) => "the server has no password set (it answers without one): remove the user and \
                      password from kv_url (redis://host:port/db), or set a password on the server"
            .to_owned(),
        Ok(Err(e)) if e.code() == Some("NOAUTH") => {
            "the server requires a password and this one is wrong (or the user does not exist)".to_owned()
        }
        _ => "the password is wrong, or the server has none set".to_owned(),
    };
    StoreError::Unauthorized(format!("the Redis server at {addr} refused the password in kv_url: {what}"))
}

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

fn int(v: &RV) -> Option<i64> {
    match v {
        RV::Int(i) => Some(*i),
        RV::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        RV::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

impl EventStore for RedisStore {
    async fn create(&self, key: &str, value: &[u8], ttl: Duration, timeout: Duration) -> Result<Created, StoreError> {
        let (generation, mut conn) = self.connection();
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(key).arg(value).arg("NX").arg("GET").arg("PX").arg(ttl_ms(ttl)).cmd("TIME");
        let (prev, (secs, micros)): (Option<Vec<u8>>, (i64, i64)) =
            self.run(generation, timeout, pipe.query_async(&mut conn)).await?;
        let now = self.observe(secs, micros);
        Ok(match prev {
            None => Created::Created,
            Some(value) => {
                Created::Exists(Current { version: Version::Value(value.clone()), value, store_now_ms: now })
            }
        })
    }

    async fn read(&self, key: &str, timeout: Duration) -> Result<Option<Current>, StoreError> {
        let (generation, mut conn) = self.connection();
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(key).cmd("TIME");
        let (value, (secs, micros)): (Option<Vec<u8>>, (i64, i64)) =
            self.run(generation, timeout, pipe.query_async(&mut conn)).await?;
        let now = self.observe(secs, micros);
        Ok(value.map(|value| Current { version: Version::Value(value.clone()), value, store_now_ms: now }))
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        value: &[u8],
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        let Version::Value(expected) = expected else {
            return Err(StoreError::Bad("a version from another backend".into()));
        };
        let (generation, mut conn) = self.connection();
        let mut inv = self.swap.key(key);
        inv.arg(expected.as_slice()).arg(value).arg(ttl_ms(ttl));
        let reply: Vec<RV> = self.run(generation, timeout, inv.invoke_async(&mut conn)).await?;
        let bad = || StoreError::Bad("an unexpected reply to the swap script".into());
        let (ok, secs, micros) = match reply.as_slice() {
            [ok, s, m, ..] => (int(ok).ok_or_else(bad)?, int(s).ok_or_else(bad)?, int(m).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        let now = self.observe(secs, micros);
        if ok == 1 {
            return Ok(Swapped::Swapped);
        }
        Ok(Swapped::Changed(match reply.get(3) {
            Some(RV::BulkString(v)) => {
                Some(Current { version: Version::Value(v.clone()), value: v.clone(), store_now_ms: now })
            }
            _ => None,
        }))
    }

    async fn release(
        &self,
        key: &str,
        claim_id: &str,
        restore: Option<&[u8]>,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<bool, StoreError> {
        let (generation, mut conn) = self.connection();
        let mut inv = self.release.key(key);
        inv.arg(claim_id).arg(restore.unwrap_or_default()).arg(ttl_ms(ttl));
        let done: i64 = self.run(generation, timeout, inv.invoke_async(&mut conn)).await?;
        Ok(done == 1)
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        let t = self.timeout;
        let (generation, mut conn) = self.connection();
        let info: String = self.run(generation, t, redis::cmd("INFO").arg("server").query_async(&mut conn)).await?;
        let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("0").trim().to_owned();
        let major: u32 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        if major < 7 {
            return Err(StoreError::Config(format!(
                "Redis {version} at {} cannot create-or-read in one atomic step (SET … NX GET needs Redis ≥ 7.0)",
                self.display
            )));
        }
        let mut warnings = vec![];
        let policy: Result<Vec<String>, StoreError> = self
            .run(generation, t, redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut conn))
            .await;
        match policy.as_deref() {
            Ok([_, p]) if p != "noeviction" => warnings.push(format!(
                "maxmemory-policy is {p}: Redis may evict event records (they all carry a TTL) under memory pressure, \
                 and an evicted id would be accepted again; use noeviction"
            )),
            Ok(_) => {}
            Err(_) => warnings
                .push("could not read maxmemory-policy (CONFIG GET is disabled); make sure it is noeviction".into()),
        }
        let time: Vec<RV> = self.run(generation, t, redis::cmd("TIME").query_async(&mut conn)).await?;
        if let [secs, micros] = time.as_slice() {
            if let (Some(secs), Some(micros)) = (int(secs), int(micros)) {
                self.observe(secs, micros);
            }
        }
        Ok(Probe { backend: "redis", server: format!("Redis {version} at {}", self.display), warnings })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}
