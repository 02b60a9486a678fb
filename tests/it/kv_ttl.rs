//! TTL over real sockets: expiry judged by the server's clock, re-create after expiry, purge.

use std::time::{Duration, Instant};

use crate::support::kv::{header_u64, server_time, KvServer};
use reqwest::{Client, StatusCode};

/// Upper bound on any wait in this file; waits end as soon as the condition holds.
const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `/healthz` until the server's own clock reads at least `t` (ms).
async fn wait_server_time(http: &Client, server: &KvServer, t: u64) {
    let start = Instant::now();
    loop {
        let resp = http.get(format!("{}/healthz", server.url())).send().await.unwrap();
        if server_time(resp.headers()) >= t {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "server clock never reached {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn ttl_ms_expires_and_the_key_can_be_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let url = format!("{}/state/lease", server.url());
    let create = |v: &'static str| http.put(&url).header("if-none-match", "*").header("kv-ttl-ms", "300").body(v);

    let resp = create("1").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let modified = header_u64(resp.headers(), "kv-modified-ms").unwrap();
    let expires = header_u64(resp.headers(), "kv-expires-ms").expect("KV-Expires-Ms on a TTL write");
    assert_eq!(expires, modified + 300);

    // Before expiry (by the server's clock, which every answer reports) it is readable and
    // blocks a second create; a slow machine may already be past it, which is also checked.
    let resp = http.get(&url).send().await.unwrap();
    let now = server_time(resp.headers());
    if now < expires {
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header_u64(resp.headers(), "kv-expires-ms"), Some(expires));
        assert_eq!(&resp.bytes().await.unwrap()[..], b"1");
    } else {
        // Stamped at or after expiry: decided just before (200) or after it (404).
        assert!([StatusCode::OK, StatusCode::NOT_FOUND].contains(&resp.status()), "{}", resp.status());
    }
    let resp = create("2").send().await.unwrap();
    let expected = if server_time(resp.headers()) < expires {
        StatusCode::PRECONDITION_FAILED
    } else {
        assert!([StatusCode::PRECONDITION_FAILED, StatusCode::CREATED].contains(&resp.status()));
        resp.status()
    };
    assert_eq!(resp.status(), expected);

    if expected == StatusCode::PRECONDITION_FAILED {
        let start = Instant::now();
        // The clock an answer carries is read after the answer was decided: a 404 stamped
        // T was decided at or before T, a value stamped T at or after the previous stamp.
        let mut sent_after = server_time(resp.headers());
        loop {
            let resp = http.get(&url).send().await.unwrap();
            let now = server_time(resp.headers());
            if resp.status() == StatusCode::NOT_FOUND {
                assert!(now >= expires, "404 only once the server clock passed the expiry");
                break;
            }
            assert!(sent_after < expires, "still served after the server clock read {sent_after} (expiry {expires})");
            sent_after = now;
            assert!(start.elapsed() < DEADLINE, "key never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Expired reads as absent for preconditions too, whether or not the purge ran yet.
        let resp = create("3").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let if_match = http.put(&url).header("if-match", "*").body("4").send().await.unwrap();
    assert_eq!(if_match.status(), StatusCode::OK, "the re-created key exists again");
}

#[tokio::test]
async fn ttl_seconds_header_and_a_write_without_ttl_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let url = format!("{}/state/s", server.url());
    let resp = http.put(&url).header("kv-ttl-seconds", "60").body("1").send().await.unwrap();
    let h = resp.headers();
    assert_eq!(header_u64(h, "kv-expires-ms"), header_u64(h, "kv-modified-ms").map(|m| m + 60_000));

    let resp = http.put(&url).header("kv-ttl-ms", "200").body("2").send().await.unwrap();
    let short = header_u64(resp.headers(), "kv-expires-ms").unwrap();
    let resp = http.put(&url).body("3").send().await.unwrap();
    assert!(resp.headers().get("kv-expires-ms").is_none(), "each write sets its own TTL");
    wait_server_time(&http, &server, short + 50).await;
    let resp = http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "the later write without TTL never expires");
    assert!(resp.headers().get("kv-expires-ms").is_none());
}

#[tokio::test]
async fn malformed_ttl_is_400() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let url = format!("{}/state/t", server.url());
    let cases = [("kv-ttl-ms", "0"), ("kv-ttl-ms", "-5"), ("kv-ttl-ms", "1.5"), ("kv-ttl-seconds", "x")];
    for (name, value) in cases {
        let resp = http.put(&url).header(name, value).body("1").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{name}: {value}");
        let v: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(v["error"], "bad_ttl");
    }
    let both = http.put(&url).header("kv-ttl-ms", "1").header("kv-ttl-seconds", "1").body("1");
    assert_eq!(both.send().await.unwrap().status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn purge_deletes_expired_keys_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = KvServer::start(dir.path(), &["--purge-interval-ms", "50"]);
    let http = Client::new();
    let mut latest_expiry = 0;
    for i in 0..20 {
        let url = format!("{}/state/tmp{i}", server.url());
        let resp = http.put(&url).header("kv-ttl-ms", "100").body("1").send().await.unwrap();
        latest_expiry = latest_expiry.max(header_u64(resp.headers(), "kv-expires-ms").unwrap());
    }
    let keep = format!("{}/state/keep", server.url());
    assert_eq!(http.put(&keep).body("1").send().await.unwrap().status(), StatusCode::CREATED);
    // Ten purge intervals past the last expiry, by the server's clock.
    wait_server_time(&http, &server, latest_expiry + 500).await;
    for i in 0..20 {
        let resp = http.get(format!("{}/state/tmp{i}", server.url())).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    }
    assert!(server.terminate().success());

    let inv = kv_container::inventory(dir.path()).unwrap();
    assert_eq!(inv.records, 1, "only the key without TTL is left on disk");
    assert_eq!(inv.expiry_entries, 0);

    let server = KvServer::start(dir.path(), &[]);
    let resp = http.get(format!("{}/state/keep", server.url())).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}
