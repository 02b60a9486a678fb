//! The benchmark run: start-up, then per backend raw store and plugin side by side, then the KV alone.

use std::sync::Arc;
use std::time::Duration;

use super::config::Config;
use super::measure::Measure;
use super::plugin::Plugin;
use super::procs::{start_kv, start_redis, Proc, TempDir};
use super::raw::{self, Op, Store};
use super::results::{Results, Row};
use super::stages;
use super::workload::{event_ids, ingest_lines, keys, record_value, status_lines};

fn store_name(s: Store) -> &'static str {
    match s {
        Store::Kv => "kv",
        Store::Redis => "redis",
    }
}

pub(crate) async fn run(cfg: &Config, tmp: &TempDir, progress: impl Fn(&str, &Row)) -> anyhow::Result<Results> {
    let mut res = Results::default();
    let mut run_id = 0u32;
    if cfg.wants("startup") {
        for k in 0..cfg.spawns {
            let p = Plugin::spawn(&cfg.plugin, &cfg.wrapper, &tmp.path().join(format!("startup-{k}.log"))).await?;
            res.startup.first_heartbeat_ms.push(p.first_heartbeat.as_secs_f64() * 1000.0);
            res.startup.idle_peak_rss_kib = res.startup.idle_peak_rss_kib.max(p.peak_rss_kib());
            p.shutdown().await?;
        }
    }
    for &store in &cfg.backends {
        if !["plugin", "raw", "stages", "instructions"].iter().any(|s| cfg.wants(s)) {
            break;
        }
        let name = store_name(store);
        let server = start_store(cfg, tmp, store, "immediate")?;
        if cfg.wants("stages") {
            let url = store_url(store, &server);
            let ids = event_ids(&format!("stages-{name}"), cfg.n.min(2000));
            let store_keys = keys(&event_ids(&format!("stages-store-{name}"), cfg.stage_creates * 11 / 10));
            let lines = ingest_lines(0, &url, &ids);
            let s = stages::measure(name, &url, &lines, &store_keys, cfg.stage_calls).await?;
            eprintln!("  stages {name:<9} {:.2} µs CPU per ingest in the library stages", s.sum_us());
            res.stages.push(s);
        }
        if cfg.wants("instructions") {
            instructions(cfg, tmp, &mut res, name, &store_url(store, &server), server.pid(), &mut run_id).await?;
        }
        for &c in &cfg.concurrency {
            if cfg.wants("raw") {
                let row = |op, m| Row::store_only(name, op, c, m);
                let warm = keys(&event_ids(&format!("raw-warm-c{c}"), cfg.warmup));
                raw_run(&server, store, Op::Claim, warm, c, cfg.cap, "created").await?;
                let ids = event_ids(&format!("raw-c{c}"), cfg.n);
                let new = raw_run(&server, store, Op::Claim, keys(&ids), c, cfg.cap, "created").await?;
                let claimed = keys(&ids[..new.ops]);
                let dup = raw_run(&server, store, Op::Claim, claimed.clone(), c, cfg.cap, "exists").await?;
                let read = raw_run(&server, store, Op::Read, claimed, c, cfg.cap, "found").await?;
                for r in [row("claim_new", new), row("claim_dup", dup), row("read", read)] {
                    progress("raw", &r);
                    res.raw.push(r);
                }
            }
            if cfg.wants("plugin") {
                for r in plugin_rows(cfg, tmp, store, &server, c, &mut run_id).await? {
                    progress("plugin", &r);
                    res.plugin.push(r);
                }
            }
        }
    }
    if cfg.wants("cluster") {
        super::cluster::run(cfg, tmp, &mut res, &progress).await?;
    }
    if cfg.wants("postgres") {
        super::postgres::run(cfg, tmp, &mut res, &progress).await?;
    }
    if cfg.wants("kv") {
        for durability in ["immediate", "none"] {
            let server = start_store(cfg, tmp, Store::Kv, durability)?;
            for &c in &cfg.concurrency {
                let row = |op, m| Row::store_only(durability, op, c, m);
                let warm = keys(&event_ids(&format!("kv-warm-c{c}"), cfg.warmup));
                raw_run(&server, Store::Kv, Op::Claim, warm, c, cfg.cap, "created").await?;
                let ids = event_ids(&format!("kv-c{c}"), cfg.n);
                let put = raw_run(&server, Store::Kv, Op::Claim, keys(&ids), c, cfg.cap, "created").await?;
                let written = keys(&ids[..put.ops]);
                let get = raw_run(&server, Store::Kv, Op::Read, written, c, cfg.cap, "found").await?;
                for r in [row("put_if_absent", put), row("get", get)] {
                    progress("kv", &r);
                    res.kv.push(r);
                }
            }
        }
    }
    if cfg.wants("scale") {
        let scale_cfg = super::scale::ScaleConfig {
            exe: cfg.plugin.clone(),
            sizes: cfg.scale_records.clone(),
            cache_mb: cfg.scale_cache_mb,
            claim_secs: cfg.scale_claim_secs,
            redis: cfg.backends.contains(&Store::Redis).then(|| cfg.redis.clone()),
            postgres: cfg.scale_postgres,
            keep: cfg.scale_data.clone(),
        };
        let scale = super::scale::run(&scale_cfg, tmp.path(), |r| {
            eprintln!(
                "  scale  {:>9} records: file {:.0} MB, restart {:.2} s, RSS {:.0}/{:.0} MB, claim p99 {:.2} ms, compacted {:.0} MB",
                r.records,
                r.file_bytes as f64 / 1e6,
                r.restart_to_healthz_s,
                r.rss_steady_mb,
                r.rss_peak_mb,
                r.claims.p99_ms,
                r.compacted_file_bytes as f64 / 1e6
            )
        })
        .await?;
        res.scale = Some(scale);
    }
    if cfg.wants("burst") {
        let b = super::burst::run(cfg, tmp, cfg.burst_sessions).await?;
        eprintln!("  {}", b.summary());
        res.burst = Some(b);
    }
    Ok(res)
}

/// Instructions per ingest of each caller kind under callgrind (skipped, with a note, without valgrind).
async fn instructions(
    cfg: &Config,
    tmp: &TempDir,
    res: &mut Results,
    name: &'static str,
    url: &str,
    store_pid: u32,
    run_id: &mut u32,
) -> anyhow::Result<()> {
    if !super::instructions::available() {
        eprintln!("  instructions: skipped (valgrind is not on the PATH)");
        return Ok(());
    }
    std::fs::create_dir_all(&cfg.callgrind_dir)?;
    for call in super::instructions::Call::ALL {
        let keep = &cfg.callgrind_dir;
        let count = super::instructions::measure(&cfg.plugin, tmp, keep, name, url, store_pid, call, run_id).await?;
        eprintln!(
            "  instr  {name:<9} {:<16} {:>9.0} instructions per call (layouts {:?})",
            count.caller, count.per_ingest, count.per_layout
        );
        res.instructions.push(count);
    }
    Ok(())
}

/// One plugin process at concurrency `c`: warm-up, then N new ingests, the same N again
/// (duplicates), and N status reads.
async fn plugin_rows(
    cfg: &Config,
    tmp: &TempDir,
    store: Store,
    server: &Proc,
    c: usize,
    run_id: &mut u32,
) -> anyhow::Result<Vec<Row>> {
    let name = store_name(store);
    let url = store_url(store, server);
    let mut p = Plugin::spawn(&cfg.plugin, &cfg.wrapper, &tmp.path().join(format!("plugin-{name}-c{c}.log"))).await?;
    let mut phase = |make: &dyn Fn(u32) -> Vec<Vec<u8>>| {
        *run_id += 1;
        (*run_id, make(*run_id))
    };
    let pid = server.pid();
    let warm = event_ids(&format!("plugin-warm-c{c}"), cfg.warmup);
    let (r, lines) = phase(&|r| ingest_lines(r, &url, &warm));
    p.run(r, &lines, c, cfg.cap, pid, "accepted").await?;
    let ids = event_ids(&format!("plugin-c{c}"), cfg.n);
    let (r, lines) = phase(&|r| ingest_lines(r, &url, &ids));
    let new = p.run(r, &lines, c, cfg.cap, pid, "accepted").await?;
    let ids = &ids[..new.ops];
    let (r, lines) = phase(&|r| ingest_lines(r, &url, ids));
    let dup = p.run(r, &lines, c, cfg.cap, pid, "duplicate").await?;
    let (r, lines) = phase(&|r| status_lines(r, &url, ids));
    let status = p.run(r, &lines, c, cfg.cap, pid, "found").await?;
    let footprint = p.footprint();
    p.shutdown().await?;
    Ok([("ingest_new", new), ("ingest_dup", dup), ("status", status)]
        .into_iter()
        .map(|(op, m)| Row::plugin(name, op, c, m, footprint))
        .collect())
}

fn store_url(store: Store, server: &Proc) -> String {
    match store {
        Store::Kv => format!("http://{}", server.addr),
        Store::Redis => format!("redis://{}/0", server.addr),
    }
}

fn start_store(cfg: &Config, tmp: &TempDir, store: Store, durability: &str) -> anyhow::Result<Proc> {
    let dir = tmp.path().join(format!("{}-{durability}-{:08x}", store_name(store), super::procs::rand_u32()));
    std::fs::create_dir_all(&dir)?;
    match store {
        Store::Kv => start_kv(&cfg.plugin, &dir, durability, &dir.with_extension("log")),
        Store::Redis => start_redis(&cfg.redis, &dir),
    }
}

async fn raw_run(
    server: &Proc,
    store: Store,
    op: Op,
    keys: Vec<String>,
    c: usize,
    cap: Duration,
    expected: &str,
) -> anyhow::Result<Measure> {
    // One record-sized value for every key: the bytes a plugin claim moves.
    let value = Arc::new(record_value(keys.first().map_or("x", |k| k.trim_start_matches("evt_"))));
    raw::run(store, server.addr, server.pid(), op, Arc::new(keys), value, c, cap, expected).await
}
