//! What a benchmark run measured: the rows of each table, start-up, stages and the burst.

use serde::Serialize;

use super::burst::Burst;
use super::instructions::Count;
use super::measure::Measure;
use super::plugin::Footprint;
use super::scale_rows::Scale;
use super::stages::Stages;

/// One line of a result table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// `kv` / `redis` (plugin and raw rows) or `immediate` / `none` (KV container rows).
    pub store: &'static str,
    pub op: &'static str,
    pub c: usize,
    #[serde(flatten)]
    pub m: Measure,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_kib: Option<u64>,
    /// The plugin's private memory (`RssAnon`) at the end of its runs: what VmHWM holds
    /// besides the mapped binary and libraries, which are clean pages shared with the page cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_rss_kib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_heartbeat_ms: Option<f64>,
}

impl Row {
    /// A row of a run without a plugin (the raw store, the KV container alone).
    pub(crate) fn store_only(store: &'static str, op: &'static str, c: usize, m: Measure) -> Row {
        Row { store, op, c, m, peak_rss_kib: None, private_rss_kib: None, first_heartbeat_ms: None }
    }

    /// A row of a plugin run, with what the plugin held at the end of its runs.
    pub(crate) fn plugin(store: &'static str, op: &'static str, c: usize, m: Measure, f: Footprint) -> Row {
        Row {
            store,
            op,
            c,
            m,
            peak_rss_kib: Some(f.peak_rss_kib),
            private_rss_kib: Some(f.private_rss_kib),
            first_heartbeat_ms: Some(f.first_heartbeat_ms),
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Startup {
    /// Spawn → first heartbeat line, one entry per spawn.
    pub first_heartbeat_ms: Vec<f64>,
    /// VmHWM of an idle plugin right after its first heartbeat.
    pub idle_peak_rss_kib: u64,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Results {
    pub startup: Startup,
    pub plugin: Vec<Row>,
    pub raw: Vec<Row>,
    pub kv: Vec<Row>,
    /// Plugin CPU per ingest by stage, one entry per backend.
    pub stages: Vec<Stages>,
    /// The burst section (10,000 sessions at once).
    pub burst: Option<Burst>,
    /// Instructions per ingest under callgrind, per backend and caller kind (section `instructions`).
    pub instructions: Vec<Count>,
    /// The KV container filled to each size (section `scale`).
    pub scale: Option<Scale>,
}
