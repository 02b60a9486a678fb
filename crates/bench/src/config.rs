//! What a benchmark run is asked to do (from the command line).

use std::path::PathBuf;
use std::time::Duration;

use super::raw::Store;

/// Everything a run needs to know.
pub(crate) struct Config {
    pub plugin: PathBuf,
    pub wrapper: Vec<String>,
    pub redis: String,
    pub n: usize,
    pub warmup: usize,
    pub spawns: usize,
    pub concurrency: Vec<usize>,
    pub cap: Duration,
    pub backends: Vec<Store>,
    pub sections: Vec<String>,
    /// Calls per stage in the per-stage section, and store creates timed there.
    pub stage_calls: usize,
    pub stage_creates: usize,
    /// Sessions in the burst section.
    pub burst_sessions: usize,
    /// Where the instructions section leaves its callgrind files (for callgrind_annotate).
    pub callgrind_dir: PathBuf,
    /// The scale section: the sizes it fills the store to, its `--cache-mb`, and the seconds
    /// of new claims at 500/s it measures at each size and on the empty store.
    pub scale_records: Vec<u64>,
    pub scale_cache_mb: u64,
    pub scale_claim_secs: f64,
    /// `--scale-data`: the scale section's store is kept there and resumed.
    pub scale_data: Option<PathBuf>,
    /// `--backends` names postgres: the scale section fills a PostgreSQL too (the plugin and
    /// raw rows on PostgreSQL are the `postgres` section's).
    pub scale_postgres: bool,
}

impl Config {
    pub(crate) fn wants(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}
