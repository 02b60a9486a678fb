//! Section `scale`, PostgreSQL beside the KV container: the plugin's table at the same sizes.
//
// The server is the one postgres.rs starts (fsync and synchronous_commit on, no standby). The
// tables are created by the plugin's own first use (`PostgresStore::connect`), the fill writes
// the rows the plugin's claim writes (many per statement), and the new claims at 500/s are the
// plugin's claim statement itself (`Sql::create`: the key's advisory lock, then `INSERT … ON
// CONFLICT`), one per claim. At each size: fill rate, the table's size and the data
// directory's, the server's memory, clean stop and restart → `SELECT 1`, claims, `pg_dump -Fc`.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context};
use event_store::key::storage_key;
use event_store::postgres::sql::Sql;
use event_store::postgres::PostgresStore;
use event_store::record::Record;
use event_store::HostClock;
use tokio::task::JoinSet;
use tokio_postgres::{Client, NoTls};

use super::measure::{kib_to_mb, micros_since};
use super::postgres::{self, Server, SCHEMA};
use super::scale_load::{claims_from, event_id, record, wall_ms, Claims, Pace, FILL_PREFIX};
use super::scale_rows::{PostgresRow, PostgresScale};
use super::workload::TTL_MS;

/// Connections the fill keeps busy. Each is a backend process: beyond a few per core they
/// only queue for the same cores, and their commits share WAL flushes already.
const FILL_CONNECTIONS: usize = 8;
/// Rows per fill statement (one commit, one WAL flush, for all of them).
const FILL_BATCH: u64 = 500;
/// How long a clean stop (its shutdown checkpoint) or a start may take.
const STOP_WAIT: Duration = Duration::from_secs(600);
const START_WAIT: Duration = Duration::from_secs(600);

/// Fills one PostgreSQL through every size in `sizes` (ascending), measuring at each; None
/// when PostgreSQL is not installed.
pub(crate) async fn run(sizes: &[u64], claim_secs: f64, dir: &Path) -> anyhow::Result<Option<PostgresScale>> {
    let Some(mut server) = postgres::start(&dir.join("scale-postgres"))? else { return Ok(None) };
    let url = server.url();
    let client = ready(&url).await?;
    // The plugin's first use creates the tables, as it does on a real server.
    PostgresStore::connect(&url, 0, HostClock::system(), Duration::from_secs(5))
        .await
        .map_err(|e| anyhow!("the plugin's store cannot connect: {e}"))?;
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let shared_buffers: String = client.query_one("SHOW shared_buffers", &[]).await?.get(0);
    drop(client);
    let sql = Sql::new(SCHEMA);
    let empty_claims = claims(&url, &sql, claims_from(0), claim_secs).await?;
    let (mut filled, mut rows, mut rounds) = (0u64, Vec::new(), 0);
    for &size in sizes {
        let more = size.saturating_sub(filled);
        let started = Instant::now();
        fill(&url, filled, filled + more).await?;
        let fill_per_s = more as f64 / started.elapsed().as_secs_f64();
        filled += more;
        let client = connect(&url).await?;
        let sizes = format!("SELECT count(*), pg_total_relation_size('{SCHEMA}.events') FROM {SCHEMA}.events");
        let row = client.query_one(&sizes, &[]).await?;
        let (table_rows, table_bytes): (i64, i64) = (row.get(0), row.get(1));
        let pss_mb = kib_to_mb(server.pss_kib());
        drop(client);
        ensure!(server.stop(STOP_WAIT)?.success(), "postgres did not stop cleanly");
        let data_dir_mb = tree_bytes(server.data())? as f64 / 1e6;
        let wal_mb = tree_bytes(&server.data().join("pg_wal"))? as f64 / 1e6;
        let started = Instant::now();
        server.restart()?;
        drop(ready(&url).await?);
        let restart_to_select_s = started.elapsed().as_secs_f64();
        rounds += 1;
        let at_size = claims(&url, &sql, claims_from(rounds), claim_secs).await?;
        let dump = dump(&server, &url, dir)?;
        eprintln!(
            "  scale: postgres at {filled} records: fill {fill_per_s:.0}/s, table {:.0} MB, restart {restart_to_select_s:.2} s, claim p99 {:.2} ms",
            table_bytes as f64 / 1e6,
            at_size.p99_ms
        );
        rows.push(PostgresRow {
            records: filled,
            rows: table_rows as u64,
            fill_per_s,
            table_mb: table_bytes as f64 / 1e6,
            data_dir_mb,
            wal_mb,
            pss_mb,
            restart_to_select_s,
            claims: at_size,
            dump_s: dump.map(|d| d.0),
            dump_mb: dump.map(|d| d.1),
        });
    }
    // A clean stop rather than the drop's SIGKILL: the postmaster then reaps its backends.
    ensure!(server.stop(STOP_WAIT)?.success(), "postgres did not stop cleanly");
    Ok(Some(PostgresScale { version, shared_buffers, empty_claims, rows }))
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.context("connecting to postgres")?;
    tokio::spawn(conn);
    Ok(client)
}

/// A connection once the server answers `SELECT 1` (while it starts up it refuses
/// connections, or says it is starting up).
async fn ready(url: &str) -> anyhow::Result<Client> {
    let deadline = Instant::now() + START_WAIT;
    loop {
        let attempt = async {
            let client = connect(url).await?;
            client.simple_query("SELECT 1").await?;
            Ok::<_, anyhow::Error>(client)
        };
        match attempt.await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() > deadline => return Err(e.context("postgres does not accept queries")),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The claim id a record carries: the plugin keeps it in a column of its own, for roll-backs
/// (event-store's `claim_of`, which it does not export); empty for anything else.
fn claim_id(value: &[u8]) -> String {
    Record::from_bytes(value).map(|r| r.claim_id).unwrap_or_default()
}

/// Records `from..to` over [`FILL_CONNECTIONS`] connections, [`FILL_BATCH`] rows a
/// statement: the row the plugin's claim writes (its key, record, claim id, a version from
/// the sequence, expiry on the server's clock), without the advisory lock no one else needs.
async fn fill(url: &str, from: u64, to: u64) -> anyhow::Result<()> {
    let insert = format!(
        "INSERT INTO {SCHEMA}.events (key, value, version, claim_id, expires_at)
         SELECT k, v, nextval('{SCHEMA}.versions'), c, clock_timestamp() + $4::bigint * interval '1 millisecond'
         FROM unnest($1::text[], $2::bytea[], $3::text[]) AS r(k, v, c)
         ON CONFLICT (key) DO NOTHING"
    );
    let next = Arc::new(AtomicU64::new(from));
    let (now_ms, ttl) = (wall_ms(), TTL_MS as i64);
    let mut workers = JoinSet::new();
    for _ in 0..FILL_CONNECTIONS {
        let client = connect(url).await?;
        let statement = client.prepare(&insert).await.context("preparing the fill")?;
        let next = next.clone();
        workers.spawn(async move {
            loop {
                let first = next.fetch_add(FILL_BATCH, Ordering::Relaxed);
                if first >= to {
                    return Ok::<_, anyhow::Error>(());
                }
                let (mut keys, mut values, mut claim_ids) = (Vec::new(), Vec::new(), Vec::new());
                for i in first..(first + FILL_BATCH).min(to) {
                    let id = event_id(FILL_PREFIX, i);
                    let value = record(&id, i, now_ms);
                    claim_ids.push(claim_id(&value));
                    keys.push(storage_key(None, &id));
                    values.push(value);
                }
                let inserted = client.execute(&statement, &[&keys, &values, &claim_ids, &ttl]).await?;
                ensure!(inserted == keys.len() as u64, "a fill record already existed");
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a fill worker panicked")??;
    }
    Ok(())
}

/// New claims through the plugin's claim statement (each must be created, finding no record)
/// paced as [`Pace`] says for `secs`, ids as `scale_load::claims_from` says.
async fn claims(url: &str, sql: &Sql, first: u64, secs: f64) -> anyhow::Result<Claims> {
    let mut clients = Vec::new();
    for _ in Pace::new(secs).connections() {
        let client = connect(url).await?;
        // Prepared once per connection, as the plugin's pool does (`prepare_cached`).
        let statement = client.prepare(&sql.create).await.context("preparing the claim")?;
        clients.push((client, statement));
    }
    // Paced from here: a backend's start (a fork per connection) is not a claim's latency.
    let pace = Pace::new(secs);
    let now_ms = wall_ms();
    let mut workers = JoinSet::new();
    for (w, (client, statement)) in pace.connections().zip(clients) {
        workers.spawn(async move {
            let (mut lat, ttl, until) = (Vec::new(), TTL_MS as i64, None::<i64>);
            for i in pace.claims_of(w) {
                pace.until(i).await;
                let id = event_id(FILL_PREFIX, first + i);
                let (key, value) = (storage_key(None, &id), record(&id, first + i, now_ms));
                let claim = claim_id(&value);
                let t = Instant::now();
                let row = client.query_one(&statement, &[&key, &value, &claim, &ttl, &until]).await?;
                lat.push(micros_since(t));
                // → created, now_ms, late, the live row's value (none for a new id), version.
                ensure!(row.get::<_, i32>(0) == 1, "claiming {id} was not created");
                ensure!(row.get::<_, Option<Vec<u8>>>(3).is_none(), "claiming {id} found a record");
            }
            Ok::<_, anyhow::Error>(lat)
        });
    }
    pace.gather(workers).await
}

/// `pg_dump -Fc` (compressed, custom format) of the bench's database: seconds and MB; None
/// when pg_dump is not beside postgres.
fn dump(server: &Server, url: &str, dir: &Path) -> anyhow::Result<Option<(f64, f64)>> {
    let pg_dump = server.bin().join("pg_dump");
    if !pg_dump.is_file() {
        return Ok(None);
    }
    let file = dir.join("scale-postgres.dump");
    let started = Instant::now();
    let out = Command::new(&pg_dump).args(["-Fc", "-f"]).arg(&file).arg("--dbname").arg(url).output()?;
    ensure!(out.status.success(), "pg_dump failed: {}", String::from_utf8_lossy(&out.stderr));
    let secs = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&file)?.len();
    std::fs::remove_file(&file)?;
    Ok(Some((secs, bytes as f64 / 1e6)))
}

/// The lengths of every file under `dir`, recursively (symbolic links not followed).
fn tree_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { tree_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_id_column_is_the_records_own() {
        let value = record(&event_id("s-", 7), 7, 1_780_000_000_000);
        let id = claim_id(&value);
        assert!(!id.is_empty());
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&value).unwrap()["claim_id"], id.as_str());
        assert_eq!(claim_id(b"not a record"), "");
    }

    #[test]
    fn tree_bytes_counts_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 10]).unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::write(dir.path().join("b/c/d"), [0u8; 32]).unwrap();
        assert_eq!(tree_bytes(dir.path()).unwrap(), 42);
    }
}
