//! The Lua scripts: each touches only KEYS[1] (one atomic step on the node owning the key,
//! valid on a Cluster) and reports that node's `TIME` first. A write's last argument is its
//! deadline in that node's clock (unix ms, '' = none): a write the node runs later is refused
//! with `{secs, micros, -1}` and writes nothing.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisResult, Script, ServerErrorKind, Value};

use super::link::Link;

/// Shared head of the writes: the node's time, and the refusal of a write past its deadline.
macro_rules! guarded {
    ($deadline:literal, $body:literal) => {
        concat!(
            "local t = redis.call('TIME')\n",
            "local d = ARGV[",
            $deadline,
            "]\n",
            "if d ~= '' and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(d) then\n",
            "  return {t[1], t[2], -1}\n",
            "end\n",
            $body
        )
    };
}

/// Claim: `SET NX GET PX` → `{secs, micros, previous value or nil}`.
const CREATE: &str = guarded!(
    "3",
    r"
local prev = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
return {t[1], t[2], prev}
"
);

/// `{secs, micros, value or nil}`.
const READ: &str = r"
local t = redis.call('TIME')
return {t[1], t[2], redis.call('GET', KEYS[1])}
";

/// Compare-and-swap on the whole value → `{secs, micros, 1}` or `{secs, micros, 0, current or nil}`.
const SWAP: &str = guarded!(
    "4",
    r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {t[1], t[2], 1}
end
return {t[1], t[2], 0, cur}
"
);

/// Roll-back of a write whose outcome is unknown or that too few replicas confirmed: only
/// while the record still carries the write's claim_id (ARGV[1]), delete it, or put back
/// another record (ARGV[2], non-empty).
/// A value that is not a JSON object is never ours and is left alone → `{secs, micros, 1 or 0}`.
const RELEASE: &str = guarded!(
    "4",
    r"
local cur = redis.call('GET', KEYS[1])
if not cur then return {t[1], t[2], 0} end
local ok, rec = pcall(cjson.decode, cur)
if not ok or type(rec) ~= 'table' or rec['claim_id'] ~= ARGV[1] then return {t[1], t[2], 0} end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return {t[1], t[2], 1}
"
);

pub(crate) struct Scripts {
    pub(crate) create: Script,
    pub(crate) read: Script,
    pub(crate) swap: Script,
    pub(crate) release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            create: Script::new(CREATE),
            read: Script::new(READ),
            swap: Script::new(SWAP),
            release: Script::new(RELEASE),
        }
    }

    /// A claim without a deadline, or the read, as `TIME` followed by plain commands, for a
    /// single node (the same effect, one round trip, no script); `None` for the others. `TIME`
    /// comes first so that the time a read reports is never later than the read itself.
    pub(crate) fn plain(&self, which: &Script, key: &str, args: &[&[u8]]) -> Option<redis::Pipeline> {
        // Decided before anything is allocated: a claim with a deadline (the usual one) is not plain.
        let (create, read) = (which.get_hash() == self.create.get_hash(), which.get_hash() == self.read.get_hash());
        let mut pipe = redis::pipe();
        match (create, read, args) {
            (true, _, [value, ttl, b""]) => {
                pipe.cmd("TIME").cmd("SET").arg(key).arg(*value).arg("NX").arg("GET").arg("PX").arg(*ttl)
            }
            (_, true, []) => pipe.cmd("TIME").cmd("GET").arg(key),
            _ => return None,
        };
        Some(pipe)
    }

    /// `EVALSHA` of `which` on `key`, built as one command sized up front (the crate's
    /// `ScriptInvocation` copies each argument into a vector of its own first, then into the
    /// command); a node that does not know the script (`NOSCRIPT`) is sent it, and the call
    /// tried again, as the crate does.
    pub(crate) async fn invoke(
        &self,
        link: &mut Link,
        which: &Script,
        key: &str,
        args: &[&[u8]],
    ) -> RedisResult<Vec<Value>> {
        let hash = which.get_hash();
        let data = "EVALSHA".len() + hash.len() + 1 + key.len() + args.iter().map(|a| a.len()).sum::<usize>();
        let mut eval = Cmd::with_capacity(4 + args.len(), data);
        eval.arg("EVALSHA").arg(hash).arg(1).arg(key);
        for a in args {
            eval.arg(*a);
        }
        match eval.query_async(link).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                which.load_async(link).await?;
                eval.query_async(link).await
            }
            reply => reply,
        }
    }

    /// Runs a [`Scripts::plain`] pipeline; any error reply fails the whole call.
    pub(crate) async fn run_plain(
        &self,
        link: &mut Link,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> RedisResult<Vec<Value>> {
        link.on_key_owner(key, pipe).await?.into_iter().map(Value::extract_error).collect()
    }

    fn source(&self, which: &Script) -> &'static str {
        match which.get_hash() {
            h if h == self.create.get_hash() => CREATE,
            h if h == self.swap.get_hash() => SWAP,
            h if h == self.release.get_hash() => RELEASE,
            _ => READ,
        }
    }

    /// The script and `WAIT min_replicas timeout` in one pipeline on the key owner's
    /// connection → the script's reply and the number of replicas that acknowledged it.
    pub(crate) async fn with_wait(
        &self,
        link: &mut Link,
        which: &Script,
        key: &str,
        args: &[&[u8]],
        min_replicas: u32,
        wait_ms: u64,
    ) -> RedisResult<(Vec<Value>, i64)> {
        let mut pipe = redis::pipe();
        let eval = pipe.cmd("EVAL").arg(self.source(which)).arg(1).arg(key);
        for a in args {
            eval.arg(*a);
        }
        pipe.cmd("WAIT").arg(min_replicas).arg(wait_ms);
        let mut attempt = 0;
        loop {
            let mut replies = link.on_key_owner(key, &pipe).await?.into_iter();
            let (Some(reply), Some(acks)) = (replies.next(), replies.next()) else {
                return Err((redis::ErrorKind::Parse, "a pipeline reply is missing").into());
            };
            match reply.extract_error() {
                // The slot moved (resharding, failover): a keyed command through the cluster
                // client follows the redirect and refreshes its slot map; then try again.
                Err(e) if attempt < 2 && e.is_cluster_error() => {
                    attempt += 1;
                    let _: Value = link.req_packed_command(redis::cmd("EXISTS").arg(key)).await?;
                }
                Err(e) => return Err(e),
                Ok(reply) => {
                    let acks = redis::from_redis_value::<i64>(acks.extract_error()?)?;
                    return Ok((redis::from_redis_value(reply)?, acks));
                }
            }
        }
    }
}
