//! Bearer-token auth over real sockets: 401 paths, env configuration, open health probe.

use std::process::{Command, Stdio};

use crate::support::kv::{raw_http, server_time, KvServer};
use reqwest::{Client, StatusCode};

const TOKEN: &str = "correct horse battery staple";

async fn assert_401(req: reqwest::RequestBuilder) {
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    server_time(resp.headers());
    let v: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(v["error"], "unauthorized");
    assert!(v["message"].is_string());
    assert!(!v.to_string().contains(TOKEN), "the token is never echoed");
}

async fn check_token_enforced(server: &KvServer) {
    let http = Client::new();
    let url = format!("{}/state/k", server.url());
    for auth in [None, Some("Bearer wrong"), Some("Bearer correct horse"), Some(TOKEN)] {
        let with = |req: reqwest::RequestBuilder| match auth {
            Some(a) => req.header("authorization", a),
            None => req,
        };
        assert_401(with(http.get(&url))).await;
        assert_401(with(http.put(&url).body("1"))).await;
        assert_401(with(http.post(&url).body("1"))).await;
        assert_401(with(http.delete(&url))).await;
    }
    let bearer = format!("Bearer {TOKEN}");
    let resp = http.put(&url).header("authorization", &bearer).body("1").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let resp = http.get(&url).header("authorization", &bearer).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // Probes need no token.
    let resp = http.get(format!("{}/healthz", server.url())).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn token_from_flag_is_required_on_state_routes() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &["--token", TOKEN]);
    check_token_enforced(&server).await;
}

#[tokio::test]
async fn token_from_env_is_required_on_state_routes() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start_with_env(dir.path(), &[], &[("KV_TOKEN", TOKEN)]);
    check_token_enforced(&server).await;
}

#[tokio::test]
async fn token_from_a_file_is_required_and_stays_off_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let data = dir.path().join("data");
    let server = KvServer::start(&data, &["--token-file", file.to_str().unwrap()]);
    check_token_enforced(&server).await;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(TOKEN), "the token is not in the process arguments");
}

#[tokio::test]
async fn unauthenticated_request_is_refused_before_its_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &["--token", TOKEN]);
    // The body is announced but never sent: only an answer that does not wait for it returns.
    let req = "PUT /state/k HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n";
    let resp = raw_http(server.addr(), req.as_bytes());
    assert_eq!(resp.status, 401);
    assert!(resp.header("kv-time-ms").is_some());
}

#[test]
fn empty_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stateful-tool"))
        .args(["kv", "serve", "--listen", "127.0.0.1:0", "--token", "", "--data"])
        .arg(dir.path())
        .env_remove("KV_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "never announced a listening address");
    assert!(String::from_utf8_lossy(&out.stderr).contains("token"));
}
