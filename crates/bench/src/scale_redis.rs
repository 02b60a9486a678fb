//! Section `scale`, Redis beside the KV container: the same records (the plugin's shape and
//! keys) claimed the way the plugin claims them (`TIME` + `SET … NX GET PX`), in a Redis
//! persisted as the guarantees assume (`appendonly yes`, `appendfsync always`), measured at
//! the same sizes: memory, restart → PING, new-claim latency at 500/s, `BGSAVE`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use event_store::key::storage_key;

use super::measure::{kib_to_mb, micros_since};
use super::procs::{start_redis_on, vm_kib, Proc, REDIS_ANSWER_WAIT};
use super::scale_load::{event_id, record, wall_ms, Claims, Pace, CLAIM_RATE, FILL_CONNECTIONS};
use super::scale_rows::{RedisRow, RedisScale};
use super::workload::TTL_MS;

/// Persistence as docs/guarantees.md assumes it; no RDB snapshots on a schedule.
const CONFIG: [&str; 6] = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""];
/// Commands per pipeline in the fill (64 connections × this many in flight).
const FILL_PIPELINE: u64 = 64;
/// How long a restart may read its data back.
const LOAD_WAIT: Duration = Duration::from_secs(1800);

/// Fills one Redis through every size in `sizes` (ascending), measuring at each.
pub(crate) async fn run(bin: &str, sizes: &[u64], claim_secs: f64, dir: &Path) -> anyhow::Result<RedisScale> {
    let data = dir.join("scale-redis");
    std::fs::create_dir_all(&data)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = start_redis_on(bin, &data, port, &CONFIG, LOAD_WAIT)?;
    let empty_claims = claims(&server, "redis-empty-", claim_secs).await?;
    let (mut filled, mut rows) = (0u64, Vec::new());
    for &size in sizes {
        let more = size.saturating_sub(filled);
        let started = Instant::now();
        fill(&server, filled, filled + more).await?;
        let fill_per_s = more as f64 / started.elapsed().as_secs_f64();
        filled += more;
        let mut conn = connect(&server).await?;
        let info: String = redis::cmd("INFO").arg("memory").query_async(&mut conn).await?;
        let used_memory_mb = info_field(&info, "used_memory").context("INFO memory has no used_memory")? / 1e6;
        let rss_mb = kib_to_mb(vm_kib(server.pid(), "VmRSS"));
        ensure!(server.terminate(Duration::from_secs(300))?.success(), "redis-server did not stop cleanly");
        let aof_mb = dir_bytes(&data.join("appendonlydir"))? as f64 / 1e6;
        let started = Instant::now();
        server = start_redis_on(bin, &data, port, &CONFIG, LOAD_WAIT)?;
        let restart_to_ping_s = started.elapsed().as_secs_f64();
        let at_size = claims(&server, &format!("redis-claims-{size}-"), claim_secs).await?;
        let (bgsave_s, rdb_mb) = bgsave(&server, &data).await?;
        rows.push(RedisRow {
            records: filled,
            fill_per_s,
            used_memory_mb,
            rss_mb,
            aof_mb,
            restart_to_ping_s,
            claims: at_size,
            bgsave_s,
            rdb_mb,
        });
    }
    Ok(RedisScale { empty_claims, rows })
}

/// A connection that waits for its answers as long as the fill may take (see
/// `REDIS_ANSWER_WAIT`).
async fn connect(server: &Proc) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{}/0", server.addr))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(REDIS_ANSWER_WAIT))
        .set_response_timeout(Some(REDIS_ANSWER_WAIT));
    Ok(client.get_multiplexed_async_connection_with_config(&config).await?)
}

/// The plugin's claim: `TIME` and `SET key record NX GET PX ttl` in one round trip; a new
/// id gets nil back.
fn claim(id: &str, i: u64, now_ms: i64) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME").ignore();
    pipe.cmd("SET").arg(storage_key(None, id)).arg(record(id, i, now_ms)).arg("NX").arg("GET").arg("PX").arg(TTL_MS);
    pipe
}

/// Records `from..to` over [`FILL_CONNECTIONS`] connections, [`FILL_PIPELINE`] claims each
/// round trip.
async fn fill(server: &Proc, from: u64, to: u64) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(from));
    let now_ms = wall_ms();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..FILL_CONNECTIONS {
        let (mut conn, next) = (connect(server).await?, next.clone());
        workers.spawn(async move {
            loop {
                let first = next.fetch_add(FILL_PIPELINE, Ordering::Relaxed);
                if first >= to {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut pipe = redis::pipe();
                for i in first..(first + FILL_PIPELINE).min(to) {
                    let id = event_id("scale-", i);
                    pipe.cmd("SET")
                        .arg(storage_key(None, &id))
                        .arg(record(&id, i, now_ms))
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL_MS);
                }
                let answers: Vec<Option<String>> = pipe.query_async(&mut conn).await?;
                ensure!(answers.iter().all(Option::is_some), "a fill record already existed");
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a fill worker panicked")??;
    }
    Ok(())
}

/// New claims (each must find no record) paced as [`Pace`] says for `secs`.
async fn claims(server: &Proc, prefix: &str, secs: f64) -> anyhow::Result<Claims> {
    let pace = Pace::new(secs);
    let now_ms = wall_ms();
    let mut workers = tokio::task::JoinSet::new();
    for w in pace.connections() {
        let (mut conn, prefix) = (connect(server).await?, prefix.to_owned());
        workers.spawn(async move {
            let mut lat = Vec::new();
            for i in pace.claims_of(w) {
                pace.until(i).await;
                let id = event_id(&prefix, i);
                let t = Instant::now();
                let (previous,): (Option<String>,) = claim(&id, i, now_ms).query_async(&mut conn).await?;
                lat.push(micros_since(t));
                ensure!(previous.is_none(), "claiming {id} found a record");
            }
            Ok::<_, anyhow::Error>(lat)
        });
    }
    pace.gather(workers).await
}

/// `BGSAVE` until `INFO persistence` says it is done: its seconds and the RDB file's MB.
async fn bgsave(server: &Proc, data: &Path) -> anyhow::Result<(f64, f64)> {
    let mut conn = connect(server).await?;
    // Redis forks one child at a time: an AOF rewrite it started by itself (the file grew
    // past `auto-aof-rewrite-percentage`) ends first.
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query_async(&mut conn).await?;
        if info_field(&info, "aof_rewrite_in_progress") == Some(0.0)
            && info_field(&info, "aof_rewrite_scheduled") == Some(0.0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    let _: String = redis::cmd("BGSAVE").query_async(&mut conn).await?;
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query_async(&mut conn).await?;
        if info_field(&info, "rdb_bgsave_in_progress") == Some(0.0) {
            ensure!(info.contains("rdb_last_bgsave_status:ok"), "BGSAVE failed: {info}");
            break;
        }
        ensure!(started.elapsed() < LOAD_WAIT, "BGSAVE did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok((secs, std::fs::metadata(data.join("dump.rdb"))?.len() as f64 / 1e6))
}

fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        total += entry?.metadata()?.len();
    }
    Ok(total)
}

/// The Redis table (Markdown).
pub(crate) fn table(s: &RedisScale) -> String {
    let mut out = format!(
        "\nRedis at size (appendonly yes, appendfsync always; new claims at {CLAIM_RATE:.0}/s on the empty store: p50 {:.2} ms, p99 {:.2} ms)\n\n\
         | records | fill | used_memory (per record) | RSS | AOF on disk | restart → PING | new claim p50 / p99 | BGSAVE (RDB) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
        s.empty_claims.p50_ms, s.empty_claims.p99_ms
    );
    for r in &s.rows {
        out.push_str(&format!(
            "| {} | {:.0}/s | {:.0} MB ({} B) | {:.0} MB | {:.0} MB | {:.2} s | {:.2} / {:.2} ms | {:.1} s ({:.0} MB) |\n",
            r.records,
            r.fill_per_s,
            r.used_memory_mb,
            (r.used_memory_mb * 1e6 / r.records.max(1) as f64) as u64,
            r.rss_mb,
            r.aof_mb,
            r.restart_to_ping_s,
            r.claims.p50_ms,
            r.claims.p99_ms,
            r.bgsave_s,
            r.rdb_mb,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_their_whole_name() {
        let info = "# Memory\r\nused_memory_human:1.5M\r\nused_memory:1572864\r\nrdb_bgsave_in_progress:0\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1_572_864.0));
        assert_eq!(info_field(info, "rdb_bgsave_in_progress"), Some(0.0));
        assert_eq!(info_field(info, "used_memory_rss"), None);
    }
}
