//! The burst section: 10,000 `event_ingest` sessions written at once to one plugin process
//! backed by the real KV container; every session answered, the plugin's peak RSS.

use serde::Serialize;

use super::config::Config;
use super::measure::{kib_to_mb, Measure};
use super::plugin::Plugin;
use super::procs::{start_kv, TempDir};
use super::workload::{event_ids, ingest_lines};

/// Sessions in the burst (issue 14's figure); `--quick` (debug builds in CI) writes fewer.
pub(crate) const SESSIONS: usize = 10_000;
pub(crate) const QUICK_SESSIONS: usize = 1_000;
/// The plugin's peak RSS through the burst must stay under this.
pub(crate) const PEAK_RSS_LIMIT_MB: f64 = 64.0;

#[derive(Debug, Serialize)]
pub(crate) struct Burst {
    pub sessions: usize,
    /// Sessions that ended (answered, whatever the outcome).
    pub answered: usize,
    /// First line written → last session ended.
    pub wall_s: f64,
    /// The plugin's VmHWM after the burst.
    pub peak_rss_kib: u64,
    pub m: Measure,
}

impl Burst {
    pub(crate) fn peak_rss_mb(&self) -> f64 {
        kib_to_mb(self.peak_rss_kib)
    }

    /// The report's sentence.
    pub(crate) fn summary(&self) -> String {
        let outcomes: Vec<String> = self.m.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!(
            "Burst: {} event_ingest sessions written at once to one plugin backed by the KV container: {} answered \
             ({}) in {:.2} s (p50 {:.0} ms, p99 {:.0} ms after the first line); plugin peak RSS {:.1} MB (limit {} MB).",
            self.sessions,
            self.answered,
            outcomes.join(", "),
            self.wall_s,
            self.m.p50_ms,
            self.m.p99_ms,
            self.peak_rss_mb(),
            PEAK_RSS_LIMIT_MB
        )
    }
}

/// A fresh KV container and a fresh plugin, so the peak RSS is the burst's alone.
pub(crate) async fn run(cfg: &Config, tmp: &TempDir, sessions: usize) -> anyhow::Result<Burst> {
    let dir = tmp.path().join("burst-kv");
    std::fs::create_dir_all(&dir)?;
    let kv = start_kv(&cfg.plugin, &dir, "immediate", &dir.with_extension("log"))?;
    let url = format!("http://{}", kv.addr);
    let mut plugin = Plugin::spawn(&cfg.plugin, &cfg.wrapper, &tmp.path().join("plugin-burst.log")).await?;
    let lines = ingest_lines(1, &url, &event_ids("burst", sessions));
    let m = plugin.burst(1, lines, kv.pid(), "accepted").await?;
    let peak_rss_kib = plugin.peak_rss_kib();
    plugin.shutdown().await?;
    Ok(Burst { sessions, answered: m.ops, wall_s: m.secs, peak_rss_kib, m })
}
