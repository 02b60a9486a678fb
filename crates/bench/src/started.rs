//! The plugin's rows against a store a section started itself (a Redis Cluster, PostgreSQL):
//! new ingests, duplicates of the ids that got through, and status reads of them, with the
//! store's CPU counted over all of its processes.

use super::config::Config;
use super::measure::Measure;
use super::plugin::Plugin;
use super::procs::{TempDir, TICKS_PER_SEC};
use super::results::{Results, Row};
use super::workload::{event_ids, ingest_lines, status_lines};

/// A store a section started, as the plugin rows need it.
pub(crate) struct StartedStore<'a> {
    /// The rows' store name (`redis-cluster`, `postgres`).
    pub name: &'static str,
    /// Event ids start with this (`cluster`, `pg`), so no two runs share one.
    pub prefix: &'static str,
    pub url: &'a str,
    /// The process the meter watches.
    pub pid: u32,
    /// CPU ticks of all the store's processes so far.
    pub cpu_ticks: &'a dyn Fn() -> u64,
}

/// `m` with the store CPU of all the store's processes (`ticks` during the run; the meter saw
/// one of them): the others' share is taken out of what the run counted as foreign.
pub(crate) fn with_store_cpu(mut m: Measure, ticks: u64) -> Measure {
    let per_op = ticks as f64 / TICKS_PER_SEC * 1000.0 / m.ops.max(1) as f64;
    let others = (per_op - m.store_cpu_ms_per_op).max(0.0) * m.ops as f64 / 1000.0;
    m.store_cpu_ms_per_op = per_op;
    m.foreign_cpu_cores = (m.foreign_cpu_cores - others / m.secs.max(1e-9)).max(0.0);
    m
}

/// The plugin's three rows at concurrency `c`, after a warm-up run.
pub(crate) async fn plugin_rows(
    cfg: &Config,
    tmp: &TempDir,
    store: &StartedStore<'_>,
    c: usize,
    run_id: &mut u32,
    res: &mut Results,
    progress: &impl Fn(&str, &Row),
) -> anyhow::Result<()> {
    let (name, prefix, url) = (store.name, store.prefix, store.url);
    let log = tmp.path().join(format!("plugin-{name}-c{c}.log"));
    let mut p = Plugin::spawn(&cfg.plugin, &cfg.wrapper, &log).await?;
    *run_id += 1;
    let warm = event_ids(&format!("{prefix}-plugin-warm-c{c}"), cfg.warmup);
    p.run(*run_id, &ingest_lines(*run_id, url, &warm), c, cfg.cap, store.pid, "accepted").await?;
    let ids = event_ids(&format!("{prefix}-plugin-c{c}"), cfg.n);
    let mut measured: Vec<Measure> = vec![];
    for (op, expected) in [("ingest_new", "accepted"), ("ingest_dup", "duplicate"), ("status", "found")] {
        // Duplicates and reads of the ids the new-ingest run got through.
        let ids = &ids[..measured.first().map_or(ids.len(), |m| m.ops)];
        *run_id += 1;
        let lines = if op == "status" { status_lines(*run_id, url, ids) } else { ingest_lines(*run_id, url, ids) };
        let t0 = (store.cpu_ticks)();
        let m = p.run(*run_id, &lines, c, cfg.cap, store.pid, expected).await?;
        measured.push(with_store_cpu(m, (store.cpu_ticks)().saturating_sub(t0)));
    }
    let footprint = p.footprint();
    p.shutdown().await?;
    for (op, m) in ["ingest_new", "ingest_dup", "status"].into_iter().zip(measured) {
        let r = Row::plugin(name, op, c, m, footprint);
        progress("plugin", &r);
        res.plugin.push(r);
    }
    Ok(())
}
