//! deploy/prometheus/alerts.yaml under Prometheus's own `promtool` (rule check and the unit
//! tests in alerts.test.yaml, which must also catch a weakened rule), and every `kv_` metric
//! the alerts and deploy/grafana/ name, checked against what a real container's `/metrics` serves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::kv::KvServer;

const TOKEN: &str = "alerts-test-token";

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel)
}

fn promtool(args: &[&str]) -> Output {
    Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool is missing: run scripts/ensure-ui-tools.sh (as root) to install Debian's prometheus package")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let rules = deploy("prometheus/alerts.yaml");
    let out = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("SUCCESS: 7 rules found"), "{}", text(&out));
    let out = promtool(&["test", "rules", deploy("prometheus/alerts.test.yaml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));

    // The unit tests hold the rules to their thresholds: stuck records that fire after one
    // minute instead of ten fail them.
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(&rules).unwrap();
    let stuck = "expr: kv_stuck_records > 0\n        for: 10m";
    assert!(original.contains(stuck));
    std::fs::write(
        dir.path().join("alerts.yaml"),
        original.replace(stuck, "expr: kv_stuck_records > 0\n        for: 1m"),
    )
    .unwrap();
    std::fs::copy(deploy("prometheus/alerts.test.yaml"), dir.path().join("alerts.test.yaml")).unwrap();
    let out = promtool(&["test", "rules", dir.path().join("alerts.test.yaml").to_str().unwrap()]);
    assert!(!out.status.success() && text(&out).contains("KvStuckRecords"), "{}", text(&out));
}

/// Every `kv_…` name in `exprs`.
fn metric_names(exprs: &[String]) -> BTreeSet<String> {
    let name = regex::Regex::new(r"\bkv_[a-z0-9_]+").unwrap();
    exprs.iter().flat_map(|e| name.find_iter(e).map(|m| m.as_str().to_owned()).collect::<Vec<_>>()).collect()
}

/// The strings under `expr` / `query` keys anywhere in `v`.
fn queries(v: &Value, into: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "query", Value::String(s)) => into.push(s.clone()),
                    _ => queries(v, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| queries(i, into)),
        _ => {}
    }
}

#[tokio::test]
async fn the_alerts_and_the_dashboard_name_metrics_the_container_serves() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    let url = kv.url();
    // A create, a refused create and a backup, so every family has samples.
    for _ in 0..2 {
        let put = http.put(format!("{url}/state/evt_a")).bearer_auth(TOKEN).header("if-none-match", "*").body("{}");
        put.send().await.unwrap();
    }
    http.get(format!("{url}/backup")).bearer_auth(TOKEN).send().await.unwrap().bytes().await.unwrap();
    let scrape = http.get(format!("{url}/metrics")).bearer_auth(TOKEN).send().await.unwrap().text().await.unwrap();
    let served: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect();

    let rules: Value =
        yaml_serde::from_str(&std::fs::read_to_string(deploy("prometheus/alerts.yaml")).unwrap()).unwrap();
    let mut alert_exprs = Vec::new();
    queries(&rules, &mut alert_exprs);
    assert_eq!(alert_exprs.len(), 7);
    let mut board_exprs = Vec::new();
    for entry in std::fs::read_dir(deploy("grafana")).unwrap() {
        let path = entry.unwrap().path();
        let board: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        queries(&board, &mut board_exprs);
    }
    assert!(board_exprs.len() >= 12, "{board_exprs:?}");
    for (what, exprs) in [("alerts.yaml", &alert_exprs), ("the dashboard", &board_exprs)] {
        let named = metric_names(exprs);
        let missing: Vec<&String> = named.difference(&served).collect();
        assert!(missing.is_empty(), "{what} names metrics /metrics does not serve: {missing:?}\nserved: {served:?}");
    }
    // The figures the alerts exist for are all on the dashboard.
    let on_board = metric_names(&board_exprs);
    for m in metric_names(&alert_exprs) {
        assert!(on_board.contains(&m), "{m} is alerted on but not on the dashboard");
    }
}
