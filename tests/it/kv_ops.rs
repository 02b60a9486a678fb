//! Operator commands through the real binary: `kv ls` / `kv get` against the KV container
//! and Redis, `kv backup` under concurrent claims and `kv restore` into a fresh directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::kv::KvServer;
use crate::support::plugin::{Plugin, BIN};
use crate::support::redis::RedisServer;

const TOKEN: &str = "ops-test-token";

/// Runs `stateful-tool <args>`; returns (exit code, stdout, stderr).
async fn run(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(BIN).args(args).env_remove("KV_TOKEN").output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Three events: one processing with a lease, one completed, one with an id that maps to `evt~…`.
async fn make_events(creds: &Value) {
    let p = Plugin::spawn(&[]).await;
    let ingest = |id: &str, lease: u32| json!({"event_id": id, "event_type": "created", "payload": "{\"n\":1}", "lease_seconds": lease});
    assert_eq!(p.invoke("event_ingest", creds, ingest("EVT-1", 300)).await.outcome(), "accepted");
    assert_eq!(p.invoke("event_ingest", creds, ingest("EVT-2", 0)).await.outcome(), "accepted");
    assert_eq!(p.invoke("event_ingest", creds, ingest("order #7/é", 0)).await.outcome(), "accepted");
    let done = json!({"event_id": "EVT-2", "attempt": 1, "result": "shipped"});
    assert_eq!(p.invoke("event_complete", creds, done).await.outcome(), "completed");
}

async fn check_inspection(url: &str, token: &[&str]) {
    let mut args = vec!["kv", "ls", "--url", url, "--prefix", "evt"];
    args.extend_from_slice(token);
    let (code, out, err) = run(&args).await;
    assert_eq!(code, 0, "{err}");
    let row = |id: &str| {
        out.lines().find(|l| l.split_whitespace().nth(1) == Some(id)).unwrap_or_else(|| panic!("{id}:\n{out}"))
    };
    let one: Vec<&str> = row("EVT-1").split_whitespace().collect();
    assert_eq!(&one[..5], ["evt_EVT-1", "EVT-1", "created", "processing", "1"], "{out}");
    assert!(row("EVT-1").contains(" left") && row("EVT-1").contains("6d23h"), "lease and TTL left: {out}");
    assert!(row("EVT-2").contains("completed"), "{out}");
    assert!(out.contains("order #7/é"), "decoded id of an evt~ key: {out}");
    assert!(out.contains("3 keys"), "{out}");

    let mut args = vec!["kv", "get", "evt_EVT-2", "--url", url];
    args.extend_from_slice(token);
    let (code, out, err) = run(&args).await;
    assert_eq!(code, 0, "{err}");
    for line in [
        "event_id      EVT-2",
        "status        completed",
        "attempt       1",
        "result        shipped",
        "payload       {\"n\":1}",
    ] {
        assert!(out.contains(line), "{line:?} in\n{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("ttl") && l.contains("6d23h")), "{out}");
    assert!(out.contains("lease         none"), "{out}");

    let mut args = vec!["kv", "get", "evt_nope", "--url", url];
    args.extend_from_slice(token);
    let (code, _, err) = run(&args).await;
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");
}

#[tokio::test]
async fn ls_and_get_decode_event_records_in_the_kv_container() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", TOKEN]);
    make_events(&json!({"kv_url": kv.url(), "kv_token": TOKEN})).await;
    check_inspection(&kv.url(), &["--token", TOKEN]).await;
    let (code, _, err) = run(&["kv", "ls", "--url", &kv.url()]).await;
    assert_ne!(code, 0);
    assert!(err.contains("401"), "{err}");
}

#[tokio::test]
async fn ls_and_get_decode_event_records_in_redis() {
    let redis = RedisServer::start(&[]);
    make_events(&json!({"kv_url": redis.url()})).await;
    check_inspection(&redis.url(), &[]).await;
}

/// The value written under `key`: anything restored must be exactly this (nothing torn).
fn body_for(key: &str) -> String {
    json!({"key": key, "pad": "x".repeat(200)}).to_string()
}

/// Every key of a running container, through the list endpoint's pages.
async fn all_keys(http: &reqwest::Client, url: &str) -> Vec<String> {
    let (mut keys, mut after) = (vec![], None::<String>);
    loop {
        let mut req = http.get(format!("{url}/state")).bearer_auth(TOKEN).query(&[("limit", "1000")]);
        if let Some(a) = &after {
            req = req.query(&[("after", a)]);
        }
        let page: Value = serde_json::from_slice(&req.send().await.unwrap().bytes().await.unwrap()).unwrap();
        keys.extend(page["keys"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => return keys,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_concurrent_claims_restores_every_acknowledged_key() {
    backup_under_concurrent_claims("jsonl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_backup_under_concurrent_claims_restores_every_acknowledged_key() {
    backup_under_concurrent_claims("image").await;
}

/// Claims go on while `kv backup --format <format>` runs; what it wrote restores every
/// claim acknowledged before it began, each whole, and a damaged copy restores nothing.
async fn backup_under_concurrent_claims(format: &str) {
    let data = tempfile::tempdir().unwrap();
    let mut kv = KvServer::start(data.path(), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    // key -> KV-Expires-Ms of its acknowledged claim.
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = vec![];
    for w in 0..4 {
        let (http, url, acked, stop) = (http.clone(), kv.url(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("evt_w{w}-{i}");
                let resp = http
                    .put(format!("{url}/state/{key}"))
                    .bearer_auth(TOKEN)
                    .header("If-None-Match", "*")
                    .header("KV-TTL-Ms", "3600000")
                    .body(body_for(&key))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 201);
                let expires = resp.headers()["kv-expires-ms"].to_str().unwrap().to_owned();
                acked.lock().unwrap().insert(key, expires);
                i += 1;
            }
        }));
    }
    let wait_for = |n: usize| {
        let acked = acked.clone();
        async move {
            for _ in 0..6000 {
                if acked.lock().unwrap().len() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("writers did not reach {n} claims");
        }
    };
    wait_for(300).await;
    // Everything acknowledged up to here must be in the backup that starts next.
    let before = acked.lock().unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.backup");
    let (code, out, err) = run(&[
        "kv",
        "backup",
        "--url",
        &kv.url(),
        "--token",
        TOKEN,
        "--format",
        format,
        "--out",
        file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("backup written"), "{out}");
    wait_for(before.len() + 100).await;
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }

    // A damaged copy is refused, and nothing is left in the data directory.
    for (name, damaged, why) in damaged_copies(&std::fs::read(&file).unwrap(), format) {
        let copy = dir.path().join(name);
        std::fs::write(&copy, damaged).unwrap();
        let refused = dir.path().join(format!("refused-{name}"));
        let (code, _, err) = run(&["kv", "restore", copy.to_str().unwrap(), "--data", refused.to_str().unwrap()]).await;
        assert_ne!(code, 0, "{name} was restored");
        assert!(err.contains(why), "{name}: {err}");
        assert!(!refused.join("kv.redb").exists() && !refused.join("kv.redb.partial").exists(), "{name}");
    }

    let fresh = dir.path().join("restored");
    let (code, out, err) = run(&["kv", "restore", file.to_str().unwrap(), "--data", fresh.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored"), "{out}");
    let restored = KvServer::start(&fresh, &["--token", TOKEN]);
    for (key, expires) in &before {
        let resp = http.get(format!("{}/state/{key}", restored.url())).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{key} was acknowledged before the backup began");
        assert_eq!(resp.headers()["kv-expires-ms"].to_str().unwrap(), expires, "{key}: TTL kept");
        assert_eq!(resp.text().await.unwrap(), body_for(key));
    }
    let keys = all_keys(&http, &restored.url()).await;
    let attempted: BTreeSet<String> = acked.lock().unwrap().keys().cloned().collect();
    for key in &keys {
        // Claims in flight when the snapshot began may be in it; each one whole.
        let body = http.get(format!("{}/state/{key}", restored.url())).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(body.text().await.unwrap(), body_for(key), "{key} is whole");
        assert!(attempted.contains(key) || key.starts_with("evt_w"), "{key} was never written");
    }
    assert!(keys.len() >= before.len() && keys.len() < attempted.len(), "{} restored", keys.len());

    // Offline: the stopped server's directory gives the same data, in either format.
    kv.terminate();
    drop(restored);
    let offline = dir.path().join("offline.backup");
    let (code, out, err) = run(&[
        "kv",
        "backup",
        "--data",
        &data.path().display().to_string(),
        "--format",
        format,
        "--out",
        offline.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("({} keys,", attempted.len())), "every acknowledged claim: {out}");
    if format == "jsonl" {
        check_lines(&offline);
        return;
    }
    // An image restores exactly the records the stopped store holds.
    let again = dir.path().join("again");
    let (code, _, err) = run(&["kv", "restore", offline.to_str().unwrap(), "--data", again.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(record_lines(data.path(), dir.path()).await, record_lines(&again, dir.path()).await);
}

/// Copies of a backup that a restore must refuse, with what it says: cut short, one byte
/// changed inside.
fn damaged_copies(bytes: &[u8], format: &str) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let cut = match format {
        // Without its trailer line.
        "jsonl" => bytes[..bytes[..bytes.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1].to_vec(),
        _ => bytes[..bytes.len() * 2 / 3].to_vec(),
    };
    // One letter of a value's padding, near the middle: the lines stay valid JSON. The
    // image holds the values compressed, so there it is one byte of the copied file, near
    // the middle: its pages stay where they were.
    let mut flipped = bytes.to_vec();
    let at = match format {
        "jsonl" => bytes.len() / 2 + bytes[bytes.len() / 2..].windows(8).position(|w| w == b"xxxxxxxx").unwrap(),
        _ => bytes.len() / 2,
    };
    flipped[at] = if flipped[at] == b'y' { b'z' } else { b'y' };
    vec![("cut", cut, "truncated"), ("flipped", flipped, "checksum does not match")]
}

/// The record lines of an offline JSON-lines backup of the store in `data` (its header, which
/// carries the time it was taken, left out).
async fn record_lines(data: &Path, scratch: &Path) -> Vec<String> {
    let out = scratch.join("lines.backup");
    let _ = std::fs::remove_file(&out);
    let (code, _, err) =
        run(&["kv", "backup", "--data", &data.display().to_string(), "--out", out.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    std::fs::read_to_string(&out).unwrap().lines().skip(1).map(str::to_owned).collect()
}

/// Each record line of a backup file is JSON with the documented fields.
fn check_lines(file: &Path) {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["format"], "stateful-tool-kv-backup");
    assert_eq!(lines.last().unwrap()["end"], true);
    for rec in &lines[1..lines.len() - 1] {
        for field in ["key", "rev", "modified_ms", "expires_ms", "value"] {
            assert!(rec.get(field).is_some(), "{field} in {rec}");
        }
    }
}
