//! `stateful-tool-bench --quick` on debug builds completes and writes every section (no timings checked).
//!
//! The bench finds the plugin next to itself, as under `make bench`. `stateful-tool` is the
//! root package's binary: `cargo test --workspace` (what `make test` runs) builds it in the
//! same run; with `-p stateful-tool-bench` alone, build it first (`cargo build --bin stateful-tool`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

#[test]
fn quick_bench_completes_and_writes_every_section() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("summary.json");
    let log = dir.path().join("bench.log");
    let bench = Path::new(env!("CARGO_BIN_EXE_stateful-tool-bench"));
    let plugin = bench.with_file_name("stateful-tool");
    assert!(
        plugin.is_file(),
        "no {} beside the bench: `cargo build --bin stateful-tool` first, or run `cargo test --workspace`",
        plugin.display()
    );
    let mut child = Command::new(bench)
        .args(["--quick", "--out"])
        .arg(&out)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("bench.err")).unwrap())
        .spawn()
        .expect("spawn stateful-tool-bench");
    // The bench bounds itself; this only keeps a hung run from hanging the test suite.
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stateful-tool-bench --quick did not finish within 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    assert!(
        status.success(),
        "stateful-tool-bench --quick failed: {status:?}\n{}{}",
        output("bench.log"),
        output("bench.err")
    );
    let summary: Value = serde_json::from_slice(&std::fs::read(&out).expect("summary written")).unwrap();
    assert_eq!(summary["all_outcomes_as_expected"], true);
    assert!(!summary["startup"]["first_heartbeat_ms"].as_array().unwrap().is_empty());
    for (section, ops) in [
        ("plugin", &["ingest_new", "ingest_dup", "status"][..]),
        ("raw", &["claim_new", "claim_dup", "read"][..]),
        ("kv", &["put_if_absent", "get"][..]),
    ] {
        let rows = summary[section].as_array().unwrap_or_else(|| panic!("no {section} section"));
        let stores: &[&str] = if section == "kv" { &["immediate", "none"] } else { &["kv", "redis", "redis-cluster"] };
        for store in stores {
            for op in ops {
                for c in [1, 16, 64] {
                    let row = rows.iter().find(|r| r["store"] == *store && r["op"] == *op && r["c"] == c);
                    let row = row.unwrap_or_else(|| panic!("{section}: no row for {store} {op} C={c}"));
                    assert!(row["ops"].as_u64().unwrap() > 0, "{section} {store} {op} C={c} did nothing");
                }
            }
        }
    }
    let stages = summary["stages"].as_array().expect("a stages section");
    for store in ["kv", "redis"] {
        let s = stages.iter().find(|s| s["store"] == store).unwrap_or_else(|| panic!("no stages for {store}"));
        for stage in ["parse_us", "params_us", "canon_hash_us", "encode_us", "store_client_us", "answer_us"] {
            assert!(s[stage].as_f64().is_some_and(|v| v >= 0.0), "stages {store}: {stage} = {}", s[stage]);
        }
    }
    let targets = summary["targets"].as_array().unwrap();
    let burst = &summary["burst"];
    assert_eq!(burst["answered"], burst["sessions"], "{burst}");
    assert!(burst["sessions"].as_u64().unwrap() > 0 && burst["peak_rss_kib"].as_u64().unwrap() > 0, "{burst}");
    assert_eq!(targets.len(), 12);
    assert!(targets.iter().all(|t| t["pass"].is_boolean()), "every target was measured: {targets:?}");
    assert!(summary["machine"]["nproc"].as_u64().unwrap() > 0);
}
