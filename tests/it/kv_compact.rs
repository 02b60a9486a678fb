//! `kv compact` through the binary: refused while a server holds the store, and a kill in the
//! middle of the copy leaves the store byte for byte as it was, the next run cleaning up.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::kv::KvServer;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");

fn kv(args: &[&str], data: &Path) -> Output {
    Command::new(BIN)
        .arg("kv")
        .args(args)
        .arg("--data")
        .arg(data)
        .env_remove("KV_TOKEN")
        .env("STATEFUL_TOOL_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run stateful-tool kv")
}

/// `n` records of ~500 bytes, then every third deleted; the server is left running.
async fn store(dir: &Path, n: usize) -> KvServer {
    let server = KvServer::start(dir, &["--durability", "none"]);
    let http = reqwest::Client::new();
    for i in 0..n {
        let body = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(500));
        let resp = http.put(format!("{}/state/k{i:05}", server.url())).body(body).send().await.unwrap();
        assert!(resp.status().is_success());
    }
    for i in (0..n).step_by(3) {
        let resp = http.delete(format!("{}/state/k{i:05}", server.url())).send().await.unwrap();
        assert_eq!(resp.status(), 204);
    }
    server
}

#[tokio::test]
async fn compact_is_refused_while_served_and_a_kill_mid_copy_leaves_the_store_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = store(&data, 6000).await;
    let refused = kv(&["compact"], &data);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("already open in another process"), "{refused:?}");
    assert!(!data.join("kv.redb.compact").exists());
    assert!(server.terminate().success());

    let file = data.join("kv.redb");
    let original = std::fs::read(&file).unwrap();
    let mut child = Command::new(BIN)
        .args(["kv", "compact", "--data"])
        .arg(&data)
        .env("STATEFUL_TOOL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The copy exists from its first batch to the rename: killed while it is there, the
    // process is mid-copy.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !data.join("kv.redb.compact").exists() {
        assert!(child.try_wait().unwrap().is_none(), "kv compact finished before its copy was seen");
        assert!(Instant::now() < deadline, "kv compact wrote no copy");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(data.join("kv.redb.compact").exists(), "the copy was renamed before the kill");
    assert!(std::fs::read(&file).unwrap() == original, "the kill left the store changed");

    let again = kv(&["compact"], &data);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{again:?}");
    assert!(said.contains("removed kv.redb.compact") && said.contains("4000 records"), "{said}");
    assert!(!data.join("kv.redb.compact").exists());
    assert!(std::fs::metadata(&file).unwrap().len() < original.len() as u64, "{said}");
    let check = kv(&["check"], &data);
    assert!(String::from_utf8_lossy(&check.stdout).contains("4000 records"), "{check:?}");

    let server = KvServer::start(&data, &[]);
    let http = reqwest::Client::new();
    let kept = http.get(format!("{}/state/k00001", server.url())).send().await.unwrap();
    assert_eq!(kept.status(), 200);
    assert!(kept.text().await.unwrap().starts_with("{\"n\":1,"));
    let deleted = http.get(format!("{}/state/k00003", server.url())).send().await.unwrap();
    assert_eq!(deleted.status(), 404);
}
