//! PostgreSQL backend (`postgres://`, `postgresql://`): one row per key in `<schema>.events`,
//! every operation one statement on the store's own clock, through a bounded pool.

mod errors;
mod probe;
mod schema;
pub mod sql;
pub(crate) mod url;

use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use self::sql::{Sql, PURGE_BATCH};
use crate::clock::{HostClock, StoreClock};
use crate::contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
use crate::error::StoreError;

/// Connections one plugin process keeps to one database at most. Sessions beyond it wait
/// for a free one: a busy plugin never exhausts the server's `max_connections`.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// How often expired rows are purged (in batches of [`PURGE_BATCH`]); they are invisible
/// from the moment they expire, so this only bounds the table's size.
const PURGE_EVERY: Duration = Duration::from_secs(5);

pub struct PostgresStore {
    pool: Pool,
    sql: Sql,
    clock: StoreClock,
    /// `host:port,…/database`, for messages.
    display: String,
    user: String,
    schema: String,
    /// Standbys that must confirm each commit; the server's synchronous replication settings
    /// provide it, and [`EventStore::probe`] checks they do.
    min_replicas: u32,
    timeout: Duration,
    purger: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.purger.abort();
    }
}

/// A write that reached the store after its deadline (on the store's clock) is refused by
/// the statement itself: nothing was written, and nothing will be.
fn too_late(until: Option<i64>, store_now_ms: i64) -> StoreError {
    StoreError::TooLate { deadline_ms: until.unwrap_or_default(), store_now_ms }
}

/// The claim_id inside a record (empty for anything else), kept in its own column so that a
/// release finds the claim without parsing JSON in SQL.
fn claim_of(value: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Claim {
        #[serde(default)]
        claim_id: String,
    }
    serde_json::from_slice::<Claim>(value).map(|c| c.claim_id).unwrap_or_default()
}

fn ttl_ms(ttl: Duration) -> i64 {
    (ttl.as_millis() as i64).max(1)
}

impl PostgresStore {
    /// Builds the pool and, on the first connection, makes sure our tables exist.
    pub async fn connect(url: &str, min_replicas: u32, host: HostClock, timeout: Duration) -> Result<Self, StoreError> {
        let parsed = url::Parsed::parse(url, timeout)?;
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = if parsed.tls_off {
            Manager::from_config(parsed.config.clone(), tokio_postgres::NoTls, manager_config)
        } else {
            Manager::from_config(parsed.config.clone(), errors::tls(parsed.tls_ca.as_deref())?, manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(MAX_CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(timeout))
            .build()
            .map_err(|e| StoreError::config(format!("cannot build a PostgreSQL pool: {e}")).caused_by(e))?;
        let sql = Sql::new(&parsed.schema);
        let purger = tokio::spawn(purge(pool.clone(), sql.purge.clone()));
        let store = PostgresStore {
            pool,
            sql,
            clock: StoreClock::new(host),
            display: parsed.display(),
            user: parsed.config.get_user().unwrap_or_default().to_owned(),
            schema: parsed.schema,
            min_replicas,
            timeout,
            purger,
        };
        let mut conn = store.conn(timeout).await?;
        tokio::time::timeout(timeout, schema::ensure(&mut conn, &store.schema, &store.user))
            .await
            .map_err(|_| StoreError::Timeout(timeout.as_millis() as u64))??;
        Ok(store)
    }

    /// A pooled connection; nothing has been sent yet, so a failure here is never ambiguous.
    async fn conn(&self, timeout: Duration) -> Result<Object, StoreError> {
        match tokio::time::timeout(timeout, self.pool.get()).await {
            Err(_) => Err(StoreError::unreachable(
                self.display.clone(),
                format!("no connection within {} ms (all {MAX_CONNECTIONS} busy, or the server is slow to accept); the request was not sent", timeout.as_millis()),
            )),
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(deadpool_postgres::PoolError::Backend(e))) => Err(errors::connecting(&self.display, &self.user, e)),
            Ok(Err(e)) => Err(StoreError::unreachable(self.display.clone(), e.to_string()).caused_by(e)),
        }
    }

    /// Runs one statement (prepared once per connection) and returns its one row.
    async fn one(&self, sql: &str, params: &[&(dyn ToSql + Sync)], timeout: Duration) -> Result<Row, StoreError> {
        let started = Instant::now();
        let conn = self.conn(timeout).await?;
        let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let run = async {
            let statement = conn.prepare_cached(sql).await?;
            conn.query_one(&statement, params).await
        };
        let answer = tokio::time::timeout(left, run).await;
        finish(conn, answer, timeout)
    }

    /// Runs one statement in a transaction that first takes `key`'s advisory lock (waiting
    /// at most the timeout), so its snapshot and clock come after every claim on `key` still
    /// committing (see [`sql`]). Four round trips: only for settling and rolling back.
    async fn locked(
        &self,
        key: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        timeout: Duration,
    ) -> Result<Row, StoreError> {
        let started = Instant::now();
        let mut conn = self.conn(timeout).await?;
        let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let lock_timeout = format!("{}ms", left.as_millis());
        let run = async {
            let tx = conn.transaction().await?;
            let lock = tx.prepare_cached(&self.sql.lock).await?;
            tx.execute(&lock, &[&key, &lock_timeout]).await?;
            let statement = tx.prepare_cached(sql).await?;
            let row = tx.query_one(&statement, params).await?;
            tx.commit().await?;
            Ok(row)
        };
        let answer = tokio::time::timeout(left, run).await;
        finish(conn, answer, timeout)
    }

    fn current(&self, row: &Row, at: usize, now_ms: i64) -> Option<Current> {
        let value: Option<Vec<u8>> = row.get(at);
        let version: Option<i64> = row.get(at + 1);
        Some(Current { value: value?, version: Version::Rev(version? as u64), store_now_ms: now_ms })
    }

    fn observe(&self, row: &Row, at: usize) -> i64 {
        let now: i64 = row.get(at);
        self.clock.observe(now);
        now
    }
}

/// A statement's answer; a connection whose answer is still owed, or broken, is never handed
/// to another session.
fn finish(
    conn: Object,
    answer: Result<Result<Row, tokio_postgres::Error>, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> Result<Row, StoreError> {
    match answer {
        Ok(Ok(row)) => Ok(row),
        Ok(Err(e)) => {
            let err = errors::running(timeout, e);
            if err.is_ambiguous() {
                drop(Object::take(conn));
            }
            Err(err)
        }
        Err(_) => {
            drop(Object::take(conn));
            Err(StoreError::Timeout(timeout.as_millis() as u64))
        }
    }
}

/// Deletes expired rows in small batches, every [`PURGE_EVERY`], for as long as the store lives.
async fn purge(pool: Pool, statement: String) {
    loop {
        tokio::time::sleep(PURGE_EVERY).await;
        let Ok(Ok(conn)) = tokio::time::timeout(PURGE_EVERY, pool.get()).await else { continue };
        for _ in 0..20 {
            match tokio::time::timeout(PURGE_EVERY, conn.execute(statement.as_str(), &[])).await {
                Ok(Ok(n)) if n as i64 == PURGE_BATCH => continue,
                Ok(Err(e)) => tracing::debug!("postgres: purging expired rows failed: {}", errors::db_text(&e)),
                _ => {}
            }
            break;
        }
    }
}

impl EventStore for PostgresStore {
    /// Create-if-absent, refused by the statement when the store's clock is past `until`
    /// (unix ms on the store's clock; None = no deadline).
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        let Write { value, ttl, until } = write;
        let (claim, ttl, until) = (claim_of(value), ttl_ms(ttl), until.map(|d| d.0));
        for _ in 0..3 {
            let row = self.one(&self.sql.create, &[&key, &value, &claim, &ttl, &until], timeout).await?;
            let now = self.observe(&row, 1);
            if row.get::<_, bool>(2) {
                return Err(too_late(until, now));
            }
            if row.get::<_, i32>(0) == 1 {
                return Ok(Created::Created);
            }
            if let Some(cur) = self.current(&row, 3, now) {
                return Ok(Created::Exists(cur));
            }
            // Another claim committed after this statement's snapshot was taken: read it
            // with a fresh one (if it is gone again, claim again).
            if let Some(cur) = self.read(key, timeout).await? {
                return Ok(Created::Exists(cur));
            }
        }
        Err(StoreError::unexpected(format!("the record under {key} kept appearing and vanishing; try again")))
    }

    /// The settling read and the store's time T it was served at. It first takes the key's
    /// lock, so it waits for a claim whose commit is not yet visible (a synchronous standby
    /// has not confirmed it) and then sees it; a claim after it reads a clock past T.
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        let row = self.locked(key, &self.sql.read, &[&key], timeout).await?;
        let now = self.observe(&row, 0);
        Ok((self.current(&row, 1, now), now))
    }

    /// A plain read (one statement): what is committed and visible now.
    async fn read(&self, key: &str, timeout: Duration) -> Result<Option<Current>, StoreError> {
        let row = self.one(&self.sql.read, &[&key], timeout).await?;
        let now = self.observe(&row, 0);
        Ok(self.current(&row, 1, now))
    }

    /// Compare-and-swap, refused by the statement when the store's clock is past `until`.
    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        let Version::Rev(expected) = expected else {
            return Err(StoreError::unexpected("a version from another backend"));
        };
        let Write { value, ttl, until } = write;
        let (claim, ttl, expected, until) = (claim_of(value), ttl_ms(ttl), *expected as i64, until.map(|d| d.0));
        let params: [&(dyn ToSql + Sync); 6] = [&key, &value, &claim, &ttl, &until, &expected];
        let row = self.one(&self.sql.swap, &params, timeout).await?;
        let now = self.observe(&row, 1);
        if row.get::<_, bool>(2) {
            return Err(too_late(until, now));
        }
        if row.get::<_, i32>(0) == 1 {
            return Ok(Swapped::Swapped);
        }
        match self.current(&row, 3, now) {
            // The snapshot predates the write that beat us: read what it wrote.
            Some(cur) if cur.version != Version::Rev(expected as u64) => Ok(Swapped::Changed(Some(cur))),
            _ => Ok(Swapped::Changed(self.read(key, timeout).await?)),
        }
    }

    /// Rolls back a claim by its claim_id, refused by the statement when the store's clock
    /// is past `until`.
    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        let Rollback { claim_id, restore, ttl, until } = rollback;
        let (ttl, until) = (ttl_ms(ttl), until.map(|d| d.0));
        let restored_claim = restore.map(claim_of).unwrap_or_default();
        let params: [&(dyn ToSql + Sync); 6] = [&key, &claim_id, &restore, &ttl, &until, &restored_claim];
        let row = self.locked(key, &self.sql.release, &params, timeout).await?;
        let now = self.observe(&row, 1);
        if row.get::<_, bool>(2) {
            return Err(too_late(until, now));
        }
        Ok(row.get::<_, i32>(0) == 1)
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        let conn = self.conn(self.timeout).await?;
        let found = tokio::time::timeout(
            self.timeout,
            probe::inspect(&conn, &self.schema, &self.user, &self.display, self.min_replicas),
        )
        .await
        .map_err(|_| StoreError::Timeout(self.timeout.as_millis() as u64))??;
        drop(conn);
        // Learn the store's clock, through the very statement reads use.
        self.read("stateful-tool-credential-probe", self.timeout).await?;
        Ok(Probe { backend: "postgres", server: found.summary, warnings: found.warnings })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_are_read_from_records_only() {
        assert_eq!(claim_of(br#"{"v":1,"payload":"{\"claim_id\":\"x\"}","claim_id":"abc"}"#), "abc");
        assert_eq!(claim_of(b"not json"), "");
        assert_eq!(claim_of(br#"{"v":1}"#), "");
    }
}
