//! The scale section's tables (Markdown): the KV container's row per size, its disk verdict,
//! and Redis's and PostgreSQL's rows beside it.

use super::scale_load::{Claims, CLAIM_RATE};
use super::scale_redis;
use super::scale_rows::{check_time, PostgresScale, Scale, ScaleRow};

/// The section's table (Markdown).
pub(crate) fn table(s: &Scale) -> String {
    let mut out = format!(
        "\nKV container at size (--cache-mb {}; new claims at {CLAIM_RATE:.0}/s on the empty store: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms)\n\n",
        s.cache_mb, s.empty_claims.p50_ms, s.empty_claims.p99_ms, s.empty_claims.max_ms
    );
    out.push_str(
        "| records | data file: length (on disk) | bytes/record: length (on disk; record) | restart → /healthz | RSS steady / peak / settled (private); with the check's process | status counts (age) | first /metrics | backup: lines / image | new claim p50 / p99 / max (after the check) | integrity check | after −10 %: length (on disk) → kv compact | bytes/record after compact: length (on disk) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &s.rows {
        let live = r.records - r.deleted;
        out.push_str(&format!(
            "| {} | {:.0} ({:.0}) MB | {} ({}; {}) | {:.2} s | {:.0} / {:.0} / {:.0} ({:.0}); {:.0} MB | {:.1} ms ({:.1} s) | {:.1} ms | {:.1} s, {:.0} MB/s / {:.1} s, {:.0} MB/s | {:.2} / {:.2} / {:.1} ms ({:.2} / {:.2} / {:.1}) | {} | {:.0} ({:.0}) → {:.0} ({:.0}) MB in {:.1} s | {} ({}) |\n",
            r.records,
            r.file_bytes as f64 / 1e6,
            r.file_disk_bytes as f64 / 1e6,
            r.file_bytes / r.records.max(1),
            r.file_disk_bytes / r.records.max(1),
            r.record_bytes,
            r.restart_to_healthz_s,
            r.rss_steady_mb,
            r.rss_peak_mb,
            r.rss_settled_mb,
            r.rss_settled_anon_mb,
            r.rss_with_check_mb,
            r.status_ms,
            r.status_age_s,
            r.first_metrics_ms,
            r.backup_s,
            r.backup_mb / r.backup_s.max(1e-9),
            r.image_backup_s,
            r.image_backup_mb / r.image_backup_s.max(1e-9),
            r.claims.p50_ms,
            r.claims.p99_ms,
            r.claims.max_ms,
            r.claims_after_check.p50_ms,
            r.claims_after_check.p99_ms,
            r.claims_after_check.max_ms,
            check_time(r.integrity_check_s),
            r.before_compact_file_bytes as f64 / 1e6,
            r.before_compact_disk_bytes as f64 / 1e6,
            r.compacted_file_bytes as f64 / 1e6,
            r.compacted_disk_bytes as f64 / 1e6,
            r.compact_s,
            r.compacted_file_bytes / live.max(1),
            r.compacted_disk_bytes / live.max(1),
        ));
    }
    for r in &s.rows {
        // The target: disk ≤ 2× the records' bytes after a purge and compaction;
        // judged on the blocks the file holds, with its length beside it.
        let live = (r.records - r.deleted).max(1);
        let (on_disk, length, target) =
            (r.compacted_disk_bytes / live, r.compacted_file_bytes / live, 2 * r.record_bytes);
        let verdict = if on_disk <= target { "met" } else { "not met" };
        out.push_str(&format!(
            "\nDisk after −10 % and kv compact at {} records: {on_disk} B/record on disk ({length} of file length) against ≤ 2 × {} = {target}: {verdict}.",
            r.records, r.record_bytes
        ));
    }
    for r in &s.rows {
        out.push_str(&claims_verdict(r, &s.empty_claims));
    }
    out.push('\n');
    if let Some(redis) = &s.redis {
        out.push_str(&scale_redis::table(redis));
    }
    if let Some(postgres) = &s.postgres {
        out.push_str(&postgres_table(postgres));
    }
    out
}

/// The target for new claims: p99 at the size ≤ 2× the empty store's, each judged
/// against an empty store measured in the same seconds (taking turns with it), right after
/// the restart and once the check has passed.
fn claims_verdict(r: &ScaleRow, first_empty: &Claims) -> String {
    let now = r.claims.p99_ms / r.empty_beside.p99_ms.max(1e-9);
    let after = r.claims_after_check.p99_ms / r.empty_after_check.p99_ms.max(1e-9);
    let verdict = if now.max(after) <= 2.0 { "met" } else { "not met" };
    format!(
        "\nNew-claim p99 at {} records against an empty store's in the same seconds: {:.2} ms against {:.2} ms right after \
         the restart ({now:.2}×), {:.2} against {:.2} ms after the check ({after:.2}×); the empty store alone at the \
         start {:.2} ms; ≤ 2×: {verdict}.",
        r.records,
        r.claims.p99_ms,
        r.empty_beside.p99_ms,
        r.claims_after_check.p99_ms,
        r.empty_after_check.p99_ms,
        first_empty.p99_ms
    )
}

/// The PostgreSQL table (Markdown).
fn postgres_table(s: &PostgresScale) -> String {
    let mut out = format!(
        "\nPostgreSQL at size (version {}, shared_buffers {}, fsync and synchronous_commit on; new claims through the plugin's claim statement at {CLAIM_RATE:.0}/s on the empty store: p50 {:.2} ms, p99 {:.2} ms)\n\n\
         | records | fill | table incl. indexes (per row) | data directory (WAL) | memory (PSS, all processes) | restart → SELECT 1 | new claim p50 / p99 | pg_dump -Fc (file) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
        s.version.split_whitespace().next().unwrap_or("?"),
        s.shared_buffers,
        s.empty_claims.p50_ms,
        s.empty_claims.p99_ms
    );
    for r in &s.rows {
        let dump = match (r.dump_s, r.dump_mb) {
            (Some(secs), Some(mb)) => format!("{secs:.1} s ({mb:.0} MB)"),
            _ => "no pg_dump".into(),
        };
        out.push_str(&format!(
            "| {} | {:.0}/s | {:.0} MB ({} B) | {:.0} MB ({:.0} MB) | {:.0} MB | {:.2} s | {:.2} / {:.2} ms | {dump} |\n",
            r.records,
            r.fill_per_s,
            r.table_mb,
            (r.table_mb * 1e6 / r.rows.max(1) as f64) as u64,
            r.data_dir_mb,
            r.wal_mb,
            r.pss_mb,
            r.restart_to_select_s,
            r.claims.p50_ms,
            r.claims.p99_ms,
        ));
    }
    out
}
