//! The statements, one per operation, each one round trip. Every one reads the store's own
//! clock (`clock_timestamp()`) once, judges expiry against it, and reports it back; the
//! conditional writes also refuse, in the statement itself, to apply after a deadline on
//! that clock (`$deadline`, NULL = none).
//
// A statement that passed its deadline check may become visible much later: its commit waits
// for a synchronous standby (or a slow WAL flush) while other sessions do not see it. So a
// claim takes the key's advisory lock *before* it reads the clock and holds it until its
// commit is visible (locks are released after the standby's confirmation), and the settling
// read and the roll-back take the same lock in a statement of their own before they run: they
// either wait for a claim in flight and see it, or the claim reads the clock after them and is
// refused as late.

/// `t` (a timestamptz) as unix milliseconds.
const MS: &str = "(extract(epoch FROM n.t) * 1000)::bigint";

pub struct Sql {
    /// $1 key, $2 lock_timeout (text, e.g. '250ms') → takes the key's advisory lock for the
    /// rest of the transaction, waiting at most $2.
    pub(crate) lock: String,
    /// $1 key, $2 value, $3 claim_id, $4 ttl ms, $5 deadline ms
    /// → created int, now_ms, late bool, value, version.
    pub create: String,
    /// $1 key → now_ms, value, version. The settling read runs it after `lock`.
    pub read: String,
    /// $1 key, $2 value, $3 claim_id, $4 ttl ms, $5 deadline ms, $6 expected version
    /// → swapped int, now_ms, late bool, value, version.
    pub(crate) swap: String,
    /// $1 key, $2 claim_id, $3 restore (NULL = delete), $4 ttl ms, $5 deadline ms,
    /// $6 restore's claim_id → released int, now_ms, late bool. Runs after `lock`.
    pub(crate) release: String,
    /// Deletes one small batch of expired rows → deleted count.
    pub(crate) purge: String,
}

/// The advisory lock of key $1 (one 64-bit lock space per database; a collision with another
/// key or application only makes one wait for the other).
const LOCK_ID: &str = "hashtextextended($1::text, 0)";

/// Rows per purge statement: small, so a purge never holds many row locks at once.
pub(crate) const PURGE_BATCH: i64 = 500;

impl Sql {
    pub fn new(s: &str) -> Sql {
        // The key's lock, then the clock: `n` reads the clock only once `l` holds the lock.
        let lock_then_clock = format!(
            "l AS MATERIALIZED (SELECT pg_advisory_xact_lock({LOCK_ID})),
             n AS MATERIALIZED (SELECT clock_timestamp() AS t FROM l)"
        );
        let late = format!("($5::bigint IS NOT NULL AND {MS} > $5::bigint)");
        // The row as the statement's snapshot saw it, when it is live.
        let current = format!("FROM n LEFT JOIN {s}.events c ON c.key = $1 AND c.expires_at > n.t");
        Sql {
            // A live row wins; an expired one is replaced as if absent (the row lock of
            // ON CONFLICT makes this atomic against concurrent claims).
            lock: format!(
                "WITH s AS MATERIALIZED (SELECT set_config('lock_timeout', $2::text, true))
                 SELECT pg_advisory_xact_lock({LOCK_ID}) FROM s"
            ),
            create: format!(
                "WITH {lock_then_clock},
                 ins AS (
                   INSERT INTO {s}.events AS e (key, value, version, claim_id, expires_at)
                   SELECT $1, $2, nextval('{s}.versions'), $3, n.t + $4::bigint * interval '1 millisecond'
                   FROM n WHERE NOT {late}
                   ON CONFLICT (key) DO UPDATE
                     SET value = excluded.value, version = excluded.version, claim_id = excluded.claim_id,
                         expires_at = excluded.expires_at
                     WHERE e.expires_at <= clock_timestamp()
                   RETURNING 1)
                 SELECT (SELECT count(*) FROM ins)::int, {MS}, {late}, c.value, c.version {current}"
            ),
            read: format!("WITH n AS (SELECT clock_timestamp() AS t) SELECT {MS}, c.value, c.version {current}"),
            swap: format!(
                "WITH {lock_then_clock},
                 upd AS (
                   UPDATE {s}.events e
                   SET value = $2, version = nextval('{s}.versions'), claim_id = $3,
                       expires_at = n.t + $4::bigint * interval '1 millisecond'
                   FROM n
                   WHERE e.key = $1 AND e.version = $6::bigint AND e.expires_at > n.t AND NOT {late}
                   RETURNING 1)
                 SELECT (SELECT count(*) FROM upd)::int, {MS}, {late}, c.value, c.version {current}"
            ),
            release: format!(
                "WITH n AS (SELECT clock_timestamp() AS t),
                 del AS (
                   DELETE FROM {s}.events e USING n
                   WHERE $3::bytea IS NULL AND e.key = $1 AND e.claim_id = $2 AND e.expires_at > n.t AND NOT {late}
                   RETURNING 1),
                 upd AS (
                   UPDATE {s}.events e
                   SET value = $3::bytea, version = nextval('{s}.versions'), claim_id = $6,
                       expires_at = n.t + $4::bigint * interval '1 millisecond'
                   FROM n
                   WHERE $3::bytea IS NOT NULL AND e.key = $1 AND e.claim_id = $2 AND e.expires_at > n.t AND NOT {late}
                   RETURNING 1)
                 SELECT ((SELECT count(*) FROM del) + (SELECT count(*) FROM upd))::int, {MS}, {late} FROM n"
            ),
            // The outer condition is checked again on the row's newest version: a row a claim
            // revived meanwhile is not deleted.
            purge: format!(
                "DELETE FROM {s}.events e
                 WHERE e.key IN (SELECT key FROM {s}.events WHERE expires_at < clock_timestamp()
                                 ORDER BY expires_at LIMIT {PURGE_BATCH} FOR UPDATE SKIP LOCKED)
                   AND e.expires_at < clock_timestamp()"
            ),
        }
    }
}
