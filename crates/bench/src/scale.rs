//! Section `scale`: the KV container filled to N records (release binary, real socket, the
//! plugin's record shape), one row per size: file size, restart, memory, status counts, first
//! `/metrics`, online backup, new-claim latency at 500/s against the empty store, and the disk
//! after a tenth is deleted and `kv compact` runs: the file's length and the blocks it holds
//! (redb grows the file with `set_len`, so its unwritten tail is a hole that costs no disk).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::measure::kib_to_mb;
use super::procs::{start_kv_with, vm_kib, FamilyRss, Proc};
use super::scale_keep;
use super::scale_load::{claims_from, delete_tenth, fill, paced_claims, CLAIM_RATE, FILL_CONNECTIONS, FILL_PREFIX};
use super::scale_postgres;
use super::scale_redis;
use super::scale_rows::{check_time, Scale, ScaleRow, CHECK_WAIT};
use super::wire::Http;

/// What the section is asked for.
pub(crate) struct ScaleConfig {
    pub exe: PathBuf,
    pub sizes: Vec<u64>,
    pub cache_mb: u64,
    /// Seconds of claims at [`CLAIM_RATE`] per measurement.
    pub claim_secs: f64,
    /// The redis-server binary, when Redis is measured beside the container at each size.
    pub redis: Option<String>,
    /// Whether a PostgreSQL (the bench's own) is measured beside it too.
    pub postgres: bool,
    /// `--scale-data`: the store's directory, kept after the run and resumed by the next.
    pub keep: Option<PathBuf>,
}

/// Fills one store through every size in `cfg.sizes` (ascending), measuring at each.
pub(crate) async fn run(cfg: &ScaleConfig, dir: &Path, progress: impl Fn(&ScaleRow)) -> anyhow::Result<Scale> {
    let (data, mut at) = scale_keep::open(cfg.keep.as_deref(), dir)?;
    let log = dir.join("scale-kv.log");
    let empty = {
        std::fs::create_dir_all(dir.join("scale-empty"))?;
        let mut server = start(cfg, &dir.join("scale-empty"), &dir.join("scale-empty.log"))?;
        let [claims] = paced_claims([(server.addr, claims_from(0))], cfg.claim_secs).await?;
        ensure!(server.terminate(Duration::from_secs(30))?.success(), "the empty kv serve did not stop cleanly");
        claims
    };
    let mut server = start(cfg, &data, &log)?;
    let mut rows = Vec::new();
    for &size in &cfg.sizes {
        // The claims are records too, among the fill's (see `claims_from`).
        let more = size.saturating_sub(at.live);
        let f = fill(server.addr, FILL_PREFIX, at.filled, at.filled + more, FILL_CONNECTIONS).await?;
        if f.records > 0 {
            eprintln!("  scale: {} more records in {:.0} s ({:.0}/s)", f.records, f.secs, f.records as f64 / f.secs);
            at.record_bytes = f.bytes / f.records;
        }
        at.filled += more;
        at.live += more;
        ensure!(server.terminate(Duration::from_secs(120))?.success(), "kv serve did not stop cleanly");
        let file = data.join("kv.redb");
        let (file_bytes, file_disk_bytes) = sizes(&file)?;

        // The reference for this size's claims: an empty store beside it, started with it,
        // taking turns with it a second at a time (see `paced_claims`).
        let empty_dir = dir.join(format!("scale-empty-{size}"));
        std::fs::create_dir_all(&empty_dir)?;
        let mut empty_server = start(cfg, &empty_dir, &dir.join("scale-empty.log"))?;
        let started = Instant::now();
        server = start(cfg, &data, &log)?;
        let family = FamilyRss::start(server.pid());
        let mut http = Http::connect(server.addr).await?;
        while http.get_path("/healthz").await?.0 != 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let restart_to_healthz_s = started.elapsed().as_secs_f64();
        let (first_metrics_ms, _) = timed(&mut http, "/metrics").await?;
        let (status_ms, now) = timed(&mut http, "/ui/api/now").await?;
        let now: serde_json::Value = serde_json::from_slice(&now).context("/ui/api/now is not JSON")?;
        let age_ms =
            now["now_ms"].as_u64().unwrap_or(0).saturating_sub(now["census"]["as_of_ms"].as_u64().unwrap_or(0));
        at.round += 1;
        let beside = [(server.addr, claims_from(at.round)), (empty_server.addr, claims_from(at.round))];
        let [at_size, empty_beside] = paced_claims(beside, cfg.claim_secs).await?;
        at.live += (CLAIM_RATE * cfg.claim_secs) as u64;
        let rss_steady_mb = kib_to_mb(vm_kib(server.pid(), "VmRSS"));
        // What the check does not change, printed before the wait for it (which can be long).
        eprintln!(
            "  scale: {} records, right after the restart: restart {restart_to_healthz_s:.2} s, RSS {rss_steady_mb:.0} MB, \
             counts {status_ms:.1} ms ({:.1} s old), first /metrics {first_metrics_ms:.1} ms, new claims {at_size} \
             (an empty store beside it {empty_beside})",
            at.live,
            age_ms as f64 / 1000.0,
        );
        // A connection of its own: `http` sat idle through the claims, longer than the
        // container's idle timeout (30 s) at 10 M records, and was closed.
        let integrity_check_s = integrity(&mut Http::connect(server.addr).await?).await?;
        let check = check_time(integrity_check_s);
        let rss_with_check_mb = kib_to_mb(family.most_kib());
        // Once the check has passed (or the wait for it ended): beside it, both read the whole
        // file from the same disk.
        let (backup_s, backup_bytes) = backup(server.addr, "/backup").await?;
        let (image_backup_s, image_backup_bytes) = backup(server.addr, "/backup?format=image").await?;
        at.round += 1;
        let beside = [(server.addr, claims_from(at.round)), (empty_server.addr, claims_from(at.round))];
        let [claims_after_check, empty_after_check] = paced_claims(beside, cfg.claim_secs).await?;
        ensure!(empty_server.terminate(Duration::from_secs(30))?.success(), "the empty kv serve did not stop cleanly");
        std::fs::remove_dir_all(&empty_dir)?;
        at.live += (CLAIM_RATE * cfg.claim_secs) as u64;
        let rss_settled_mb = kib_to_mb(vm_kib(server.pid(), "VmRSS"));
        let rss_settled_anon_mb = kib_to_mb(vm_kib(server.pid(), "RssAnon"));
        let rss_peak_mb = kib_to_mb(vm_kib(server.pid(), "VmHWM"));
        // The compaction that follows takes long at 10 M (38 min): what was measured so far
        // is printed first.
        eprintln!(
            "  scale: {} records: restart {restart_to_healthz_s:.2} s, RSS {rss_steady_mb:.0} / {rss_peak_mb:.0} / \
             {rss_settled_mb:.0} MB ({rss_with_check_mb:.0} MB with the check's process), counts {status_ms:.1} ms ({:.1} s old), first /metrics {first_metrics_ms:.1} ms, \
             backup {backup_s:.1} s ({:.0} MB/s) / image {image_backup_s:.1} s ({:.0} MB/s), new claims \
             {at_size} (after the check {claims_after_check}; an empty store beside it {empty_beside}, {empty_after_check}), check {check}",
            at.live,
            age_ms as f64 / 1000.0,
            backup_bytes as f64 / 1e6 / backup_s.max(1e-9),
            image_backup_bytes as f64 / 1e6 / image_backup_s.max(1e-9),
        );

        let records = at.live;
        let deleted = delete_tenth(server.addr, FILL_PREFIX, at.deleted_upto, at.filled, FILL_CONNECTIONS).await?;
        at.deleted_upto = at.filled;
        at.live -= deleted;
        ensure!(server.terminate(Duration::from_secs(120))?.success(), "kv serve did not stop cleanly");
        let (before_compact_file_bytes, before_compact_disk_bytes) = sizes(&file)?;
        let started = Instant::now();
        kv(&cfg.exe, "compact", &data)?;
        let compact_s = started.elapsed().as_secs_f64();
        let (compacted_file_bytes, compacted_disk_bytes) = sizes(&file)?;
        let usage_after_compact = kv(&cfg.exe, "usage", &data)?;
        eprintln!("  scale: kv usage after kv compact at {records} records:\n{usage_after_compact}");
        let row = ScaleRow {
            records,
            record_bytes: at.record_bytes,
            // None: the kept store already held this size.
            fill_per_s: (f.records > 0).then(|| f.records as f64 / f.secs),
            file_bytes,
            file_disk_bytes,
            restart_to_healthz_s,
            first_metrics_ms,
            status_ms,
            status_age_s: age_ms as f64 / 1000.0,
            claims: at_size,
            claims_after_check,
            empty_beside,
            empty_after_check,
            rss_steady_mb,
            rss_settled_mb,
            rss_settled_anon_mb,
            backup_s,
            backup_mb: backup_bytes as f64 / 1e6,
            image_backup_s,
            image_backup_mb: image_backup_bytes as f64 / 1e6,
            integrity_check_s,
            rss_peak_mb,
            rss_with_check_mb,
            deleted,
            before_compact_file_bytes,
            before_compact_disk_bytes,
            compact_s,
            compacted_file_bytes,
            compacted_disk_bytes,
            usage_after_compact,
        };
        scale_keep::save(&data, &at)?;
        progress(&row);
        rows.push(row);
        server = start(cfg, &data, &log)?;
    }
    drop(server);
    let redis = match &cfg.redis {
        Some(bin) => Some(scale_redis::run(bin, &cfg.sizes, cfg.claim_secs, dir).await?),
        None => None,
    };
    let postgres = if cfg.postgres { scale_postgres::run(&cfg.sizes, cfg.claim_secs, dir).await? } else { None };
    Ok(Scale { cache_mb: cfg.cache_mb, empty_claims: empty, rows, redis, postgres })
}

/// The file's length and the bytes it holds on disk (its blocks; less than the length where
/// redb grew the file and has not written the new space yet).
fn sizes(file: &Path) -> anyhow::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file)?;
    Ok((meta.len(), meta.blocks() * 512))
}

fn start(cfg: &ScaleConfig, data: &Path, log: &Path) -> anyhow::Result<Proc> {
    start_kv_with(&cfg.exe, data, "immediate", &["--cache-mb".into(), cfg.cache_mb.to_string()], log)
}

/// One `GET`: its time in ms and its body (it must answer 200).
async fn timed(http: &mut Http, path: &str) -> anyhow::Result<(f64, Vec<u8>)> {
    let t = Instant::now();
    let (status, body) = http.get_path(path).await?;
    ensure!(status == 200, "{path} answered {status}");
    Ok((t.elapsed().as_secs_f64() * 1000.0, body))
}

/// `GET <path>` (a backup) read to its end: seconds and bytes; it must end with its trailer.
async fn backup(addr: SocketAddr, path: &str) -> anyhow::Result<(f64, u64)> {
    let t = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: kv\r\nconnection: close\r\n\r\n").as_bytes()).await?;
    let (mut bytes, mut buf, mut tail) = (0u64, vec![0u8; 1 << 20], Vec::new());
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        tail.extend_from_slice(&buf[..n]);
        tail.drain(..tail.len().saturating_sub(512));
    }
    ensure!(String::from_utf8_lossy(&tail).contains("\"end\":true"), "the backup stream has no trailer");
    Ok((t.elapsed().as_secs_f64(), bytes))
}

/// Waits for the background check of every page to pass: its own duration in seconds, or
/// `None` when it was still running after [`CHECK_WAIT`]; an error when it did not pass.
async fn integrity(http: &mut Http) -> anyhow::Result<Option<f64>> {
    let deadline = Instant::now() + CHECK_WAIT;
    loop {
        let (_, body) = http.get_path("/healthz").await?;
        let health: serde_json::Value = serde_json::from_slice(&body).context("/healthz is not JSON")?;
        let check = &health["integrity"];
        match check["state"].as_str() {
            Some("passed") => {
                let ms = check["finished_ms"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_sub(check["started_ms"].as_u64().unwrap_or(0));
                return Ok(Some(ms as f64 / 1000.0));
            }
            Some("running" | "not_run") if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some("running") => return Ok(None),
            _ => anyhow::bail!("the integrity check did not pass: {check}"),
        }
    }
}

/// `stateful-tool kv <command> --data` on the stopped store: what it printed.
fn kv(exe: &Path, command: &str, data: &Path) -> anyhow::Result<String> {
    let out = Command::new(exe).args(["kv", command, "--data"]).arg(data).env("STATEFUL_TOOL_LOG", "warn").output()?;
    ensure!(out.status.success(), "kv {command} failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
