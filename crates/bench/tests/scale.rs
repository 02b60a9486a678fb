//! The scale section at a tiny size on debug builds: every figure of every row is measured
//! and the table printed (no timings checked: a bench, not a timed test).
//!
//! Needs `stateful-tool` beside the bench, as `quick.rs` says.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn the_scale_section_fills_measures_deletes_and_compacts_each_size() {
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("kept");
    let (printed, summary) = run_scale(dir.path(), &kept, "3000,1500");
    assert!(printed.contains("KV container at size (--cache-mb 16;"), "{printed}");
    assert!(printed.contains("Disk after −10 % and kv compact at 2500 records:"), "{printed}");
    assert!(
        printed.contains("New-claim p99 at 2500 records against an empty store's in the same seconds:"),
        "{printed}"
    );
    let scale = &summary["scale"];
    assert_eq!(scale["cache_mb"], 16);
    assert!(scale["empty_claims"]["p99_ms"].as_f64().unwrap() > 0.0, "{scale}");
    let rows = scale["rows"].as_array().unwrap();
    // Sizes in ascending order; each row counts the claims measured at its size (twice 500;
    // the empty stores' are in stores of their own).
    let records: Vec<u64> = rows.iter().map(|r| r["records"].as_u64().unwrap()).collect();
    assert_eq!(records, [2500, 4000], "{scale}");
    for r in rows {
        for figure in
            ["file_bytes", "file_disk_bytes", "compacted_file_bytes", "compacted_disk_bytes", "record_bytes", "deleted"]
        {
            assert!(r[figure].as_u64().unwrap() > 0, "{figure}: {r}");
        }
        for figure in
            ["restart_to_healthz_s", "first_metrics_ms", "status_ms", "backup_s", "backup_mb", "rss_steady_mb"]
        {
            assert!(r[figure].as_f64().unwrap() > 0.0, "{figure}: {r}");
        }
        assert!(r["rss_peak_mb"].as_f64().unwrap() >= r["rss_steady_mb"].as_f64().unwrap(), "{r}");
        for claims in ["claims", "claims_after_check", "empty_beside", "empty_after_check"] {
            assert!(r[claims]["p50_ms"].as_f64().unwrap() <= r[claims]["p99_ms"].as_f64().unwrap(), "{r}");
        }
        assert!(r["record_bytes"].as_u64().unwrap() > 400, "records of the plugin's shape: {r}");
        // A copy that is longer or holds no fewer blocks is not kept.
        assert!(r["compacted_file_bytes"].as_u64() <= r["before_compact_file_bytes"].as_u64(), "{r}");
        assert!(r["compacted_disk_bytes"].as_u64() <= r["before_compact_disk_bytes"].as_u64(), "{r}");
        assert!(r["usage_after_compact"].as_str().unwrap().contains("kv_data_v1"), "{r}");
    }
    // A tenth of the records filled for each size: 1,500, then 650 more to reach 3,000 live
    // (2,350 left after the first).
    assert_eq!((&rows[0]["deleted"], &rows[1]["deleted"]), (&150.into(), &65.into()));

    // The kept store is measured again: 3,935 live after the last row hold a size of 2,000,
    // so nothing is filled or deleted (the fill's records were all deleted from), and the
    // claims' ids are new ones.
    let (printed, again) = run_scale(dir.path(), &kept, "2000");
    let row = &again["scale"]["rows"][0];
    assert_eq!(
        (&row["records"], &row["deleted"], &row["fill_per_s"]),
        (&4935.into(), &0.into(), &Value::Null),
        "{printed}"
    );
    assert_eq!(row["record_bytes"], rows[1]["record_bytes"]);
}

/// One run of the scale section with its store kept in `kept`: what it printed, its summary.
fn run_scale(dir: &Path, kept: &Path, sizes: &str) -> (String, Value) {
    let out = dir.join("summary.json");
    let bench = Path::new(env!("CARGO_BIN_EXE_stateful-tool-bench"));
    assert!(bench.with_file_name("stateful-tool").is_file(), "`cargo build --bin stateful-tool` first");
    let run = Command::new(bench)
        .args(["--quick", "--sections", "scale", "--scale-records", sizes, "--scale-cache-mb", "16", "--scale-data"])
        .arg(kept)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("spawn stateful-tool-bench");
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{printed}\n{}", String::from_utf8_lossy(&run.stderr));
    (printed, serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap())
}
