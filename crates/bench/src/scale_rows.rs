//! The scale section's results: the KV container's row per size, and Redis's and PostgreSQL's
//! beside it, as the summary JSON and the tables read them (a module of their own, below the
//! sections that measure them and the results that carry them).

use serde::Serialize;

use super::scale_load::Claims;

/// How long the bench waits for the integrity check that follows a restart; the row then goes
/// on beside it. Paced (`--check-disk-reads`, 1,000 pages a second by default), a check of a
/// 10 M store the host cannot cache takes longer than this.
pub(crate) const CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(1800);

/// The KV container at one size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScaleRow {
    pub records: u64,
    /// Keys and values as written, per record.
    pub record_bytes: u64,
    /// None when a kept store (`--scale-data`) already held the size.
    pub fill_per_s: Option<f64>,
    pub file_bytes: u64,
    /// What the file holds on disk (`st_blocks` × 512, as `du` counts it).
    pub file_disk_bytes: u64,
    pub restart_to_healthz_s: f64,
    pub first_metrics_ms: f64,
    /// `/ui/api/now` right after the restart, and how old its counts were.
    pub status_ms: f64,
    pub status_age_s: f64,
    pub claims: Claims,
    /// The same once the integrity check has passed (the page cache warmer, no check reading).
    pub claims_after_check: Claims,
    /// The reference for each: new claims on an empty store started beside this size's
    /// restart, taking turns with it a second at a time, so both saw the machine in the same
    /// state.
    pub empty_beside: Claims,
    pub empty_after_check: Claims,
    pub rss_steady_mb: f64,
    /// After the check, the backup and the second claims: all of it, and its private part
    /// (`RssAnon`: the page cache and heap, without the mapped binary).
    pub rss_settled_mb: f64,
    pub rss_settled_anon_mb: f64,
    pub backup_s: f64,
    pub backup_mb: f64,
    /// The same as an image (`?format=image`: the data file in page order).
    pub image_backup_s: f64,
    pub image_backup_mb: f64,
    /// The background check of every page after the restart; `None`: still running when the
    /// bench stopped waiting for it.
    pub integrity_check_s: Option<f64>,
    pub rss_peak_mb: f64,
    /// The container and its integrity check's process together, from the restart until the
    /// check passed: the most, summed at the same instant (sampled every 100 ms).
    pub rss_with_check_mb: f64,
    pub deleted: u64,
    /// The file as `kv compact` found it (after the row's claims and deletes), and after it.
    pub before_compact_file_bytes: u64,
    pub before_compact_disk_bytes: u64,
    pub compact_s: f64,
    pub compacted_file_bytes: u64,
    pub compacted_disk_bytes: u64,
    /// `kv usage` of the compacted store: where its bytes go, table by table.
    pub usage_after_compact: String,
}

/// The section's result: the KV container's rows, and Redis's and PostgreSQL's beside them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scale {
    pub cache_mb: u64,
    /// An empty store's claims before anything else ran.
    pub empty_claims: Claims,
    pub rows: Vec<ScaleRow>,
    pub redis: Option<RedisScale>,
    /// None when not asked for, or PostgreSQL is not installed.
    pub postgres: Option<PostgresScale>,
}

/// Redis at one size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RedisRow {
    pub records: u64,
    pub fill_per_s: f64,
    /// `INFO memory` `used_memory`, and the process's resident set, after the fill.
    pub used_memory_mb: f64,
    pub rss_mb: f64,
    /// The append-only files on disk.
    pub aof_mb: f64,
    pub restart_to_ping_s: f64,
    pub claims: Claims,
    /// `BGSAVE` to its end, and the RDB file it wrote.
    pub bgsave_s: f64,
    pub rdb_mb: f64,
}

/// The Redis rows and the empty store's claims.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RedisScale {
    pub empty_claims: Claims,
    pub rows: Vec<RedisRow>,
}

/// PostgreSQL at one size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PostgresRow {
    pub records: u64,
    /// Rows in the table when it was measured: the records and the claims measured before.
    pub rows: u64,
    pub fill_per_s: f64,
    /// `pg_total_relation_size` of the events table: heap, TOAST, the key and expiry indexes.
    pub table_mb: f64,
    /// The data directory after the clean stop, and its WAL (`pg_wal`) alone.
    pub data_dir_mb: f64,
    pub wal_mb: f64,
    /// The server's processes after the fill: the sum of their proportional sets (the shared
    /// buffers counted once).
    pub pss_mb: f64,
    pub restart_to_select_s: f64,
    pub claims: Claims,
    /// `pg_dump -Fc` of the database and the file it wrote; None without pg_dump.
    pub dump_s: Option<f64>,
    pub dump_mb: Option<f64>,
}

/// The PostgreSQL rows, the server they ran on, and the empty store's claims.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PostgresScale {
    pub version: String,
    /// The server's cache: most of its memory, whatever the table's size.
    pub shared_buffers: String,
    pub empty_claims: Claims,
    pub rows: Vec<PostgresRow>,
}

/// How the bench names a row's integrity check: its time, or that it stopped waiting for it.
pub(crate) fn check_time(secs: Option<f64>) -> String {
    let wait = CHECK_WAIT.as_secs();
    secs.map_or(format!("still running after {wait} s (the row went on beside it)"), |s| format!("{s:.1} s"))
}
