//! The service files in `deploy/`: the systemd unit passes `systemd-analyze verify` (and its
//! offline security review), and the commands both files run are ones the binary accepts.

use std::path::Path;
use std::process::Command;

use crate::support::kv::KvServer;
use crate::support::plugin::BIN;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
const INSTALLED: &str = "/usr/local/bin/stateful-tool";

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn unit_text() -> String {
    std::fs::read_to_string(Path::new(DEPLOY).join("stateful-tool-kv.service")).unwrap()
}

#[test]
fn systemd_unit_verifies_and_is_hardened() {
    let unit = unit_text();
    for line in [
        "DynamicUser=yes",
        "User=stateful-tool",
        "StateDirectory=stateful-tool",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "EnvironmentFile=/etc/stateful-tool/kv.env",
        "Restart=on-failure",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} in the unit");
    }
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).unwrap();
    assert!(!exec.contains("--token"), "the token comes from the environment file, never argv");
    assert!(exec.contains("--data /var/lib/stateful-tool"), "data in the StateDirectory");
    if !have("systemd-analyze") {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian: apt-get install systemd)");
        return;
    }
    // verify checks that ExecStart's program exists: point it at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stateful-tool-kv.service");
    std::fs::write(&path, unit.replace(INSTALLED, BIN)).unwrap();
    let out = Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.trim().is_empty(), "systemd-analyze verify: {text}");
    let out = Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for stateful-tool-kv.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in {text}"));
    assert!(level <= 2.0, "exposure {level} (0 = locked down, 10 = exposed):\n{text}");
}

/// Runs `argv` (the files' own command line, pointed at the binary under test, a loopback
/// ephemeral port and a temporary directory) and checks that it serves.
fn serves(argv: &[String], data_flag_value: &str) {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(argv[0], INSTALLED);
    assert_eq!(&argv[1..3], ["kv", "serve"]);
    let mut args: Vec<String> = argv[3..].to_vec();
    let listen = args.iter().position(|a| a == "--listen").expect("--listen given") + 1;
    args[listen] = "127.0.0.1:0".into();
    let data = args.iter().position(|a| a == "--data").expect("--data given") + 1;
    assert_eq!(args[data], data_flag_value);
    args.drain(listen - 1..=listen);
    let data = args.iter().position(|a| a == "--data").unwrap();
    args.drain(data..=data + 1);
    let extra: Vec<&str> = args.iter().map(String::as_str).collect();
    let kv = KvServer::start(dir.path(), &extra);
    assert!(kv.url().starts_with("http://127.0.0.1:"));
}

#[test]
fn the_units_command_line_is_one_the_binary_accepts() {
    let unit = unit_text();
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).unwrap().replace("${KV_LISTEN}", "x");
    let argv: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
    serves(&argv, "/var/lib/stateful-tool");
}

#[test]
fn compose_snippet_runs_the_container_with_a_healthcheck_that_works() {
    let text = std::fs::read_to_string(Path::new(DEPLOY).join("docker-compose.kv.yaml")).unwrap();
    let doc: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let svc = &doc["services"]["stateful-kv"];
    assert!(svc["image"].as_str().is_some_and(|i| i.starts_with("debian:")), "glibc ≥ 2.34 base image");
    assert!(svc["environment"]["KV_TOKEN"].as_str().is_some_and(|v| v.contains("STATEFUL_KV_TOKEN")));
    let volumes: Vec<&str> = svc["volumes"].as_sequence().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(volumes.iter().any(|v| v.ends_with(":/data")), "data on a volume: {volumes:?}");
    assert!(svc["networks"].as_sequence().unwrap().iter().any(|n| n == "default"), "Dify's default network");
    let argv: Vec<String> =
        svc["command"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    serves(&argv, "/data");

    // The healthcheck, run as written against a real container (port swapped).
    let test: Vec<&str> =
        svc["healthcheck"]["test"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(&test[..3], ["CMD", "bash", "-c"]);
    assert!(test[3].contains("GET /healthz"));
    // A start after a crash repairs the file first (up to 159 s at 10 M records, operations.md).
    let start_period = svc["healthcheck"]["start_period"].as_str().and_then(|p| p.strip_suffix('s'));
    assert!(start_period.and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s >= 160), "{start_period:?}");
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &["--token", "t"]);
    let script = test[3].replace("/8123", &format!("/{}", kv.addr().port()));
    let ok = Command::new("bash").args(["-c", &script]).status().unwrap();
    assert!(ok.success(), "healthcheck against a healthy container");
    drop(kv);
    let down = Command::new("bash").args(["-c", &script]).stderr(std::process::Stdio::null()).status().unwrap();
    assert!(!down.success(), "healthcheck against a stopped container");
}
