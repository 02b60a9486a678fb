//! Tokens bound to namespaces (`--tokens-file`), through the real plugin and raw HTTP: one
//! workspace's token cannot read, claim, complete, list or back up another's events; `*` can.
//! A malformed file refuses to start; `kv reload` keeps the old tokens when the new file is bad.

use std::process::{Command, Stdio};

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

use crate::support::kv::{serve_refused, KvServer};
use crate::support::plugin::Plugin;

const TOKENS: &str = "# operator\n* root-token\nacme acme-token\nbeta beta-token\n";

fn creds(url: &str, token: &str, namespace: &str) -> Value {
    json!({"kv_url": url, "kv_token": token, "namespace": namespace})
}

fn ev(id: &str) -> Value {
    json!({"event_id": id, "event_type": "created", "payload": "{}"})
}

fn start(dir: &std::path::Path, tokens: &str) -> (KvServer, std::path::PathBuf) {
    let file = dir.join("tokens");
    std::fs::write(&file, tokens).unwrap();
    let server = KvServer::start(&dir.join("data"), &["--tokens-file", file.to_str().unwrap()]);
    (server, file)
}

async fn status_of(req: reqwest::RequestBuilder, token: &str) -> (StatusCode, String) {
    let resp = req.bearer_auth(token).send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_token_reaches_only_its_own_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = start(dir.path(), TOKENS);
    let url = server.url();
    let p = Plugin::spawn(&[]).await;
    let acme = creds(&url, "acme-token", "acme");
    let beta = creds(&url, "beta-token", "beta");
    for (c, id) in [(&acme, "A-1"), (&beta, "B-1")] {
        assert_eq!(p.invoke("event_ingest", c, ev(id)).await.outcome(), "accepted");
        assert_eq!(p.validate(c).await.chunks, vec![json!({"result": true})]);
    }
    // acme's token with beta's namespace: every tool, and the credential check, say why.
    let intruder = creds(&url, "acme-token", "beta");
    for (tool, params) in [
        ("event_status", json!({"event_id": "B-1"})),
        ("event_ingest", ev("B-1")),
        ("event_complete", json!({"event_id": "B-1", "result": "stolen"})),
    ] {
        let r = p.invoke(tool, &intruder, params).await;
        assert_eq!(r.error_type(), Some("param_invalid"), "{tool}: {r:?}");
        assert!(r.message().contains("does not cover namespace \"beta\""), "{tool}: {}", r.message());
        assert!(!r.message().contains("acme-token"), "{}", r.message());
    }
    let check = p.validate(&intruder).await;
    assert_eq!(check.error_type(), Some("ToolProviderCredentialValidationError"), "{check:?}");
    assert!(check.message().contains("does not cover namespace \"beta\""), "{}", check.message());
    let no_namespace = p.validate(&json!({"kv_url": url, "kv_token": "acme-token"})).await;
    assert!(no_namespace.message().contains("without a namespace"), "{no_namespace:?}");
    // beta's event is untouched: still processing, attempt 1.
    let b = p.invoke("event_status", &beta, json!({"event_id": "B-1"})).await;
    assert_eq!((b.json()["status"].as_str(), b.json()["attempt"].as_u64()), (Some("processing"), Some(1)), "{b:?}");

    // Raw HTTP: 403 on the other namespace's keys, listings clamped, operator routes closed.
    let http = Client::new();
    let b_key = event_store::key::storage_key(Some("beta"), "B-1");
    let a_key = event_store::key::storage_key(Some("acme"), "A-1");
    let key_url = |k: &str| format!("{url}/state/{k}");
    for req in [http.get(key_url(&b_key)), http.put(key_url(&b_key)).body("1"), http.delete(key_url(&b_key))] {
        let (status, body) = status_of(req, "acme-token").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("does not cover"), "{body}");
    }
    for other in ["evt_B-1", "evt_acmex~A-1", "evt_acme", "unrelated"] {
        let (status, _) = status_of(http.get(key_url(other)), "acme-token").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{other}");
    }
    assert_eq!(status_of(http.get(key_url(&a_key)), "acme-token").await.0, StatusCode::OK);
    let list = |prefix: &str, token: &'static str| {
        let req = http.get(format!("{url}/state")).query(&[("prefix", prefix)]);
        async move {
            let (status, body) = status_of(req, token).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            v["keys"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    assert_eq!(list("", "acme-token").await, vec![a_key.clone()]);
    assert_eq!(list("evt_", "acme-token").await, vec![a_key.clone()]);
    assert_eq!(list("evt_beta~", "acme-token").await, Vec::<String>::new());
    assert_eq!(list("", "root-token").await, vec![a_key.clone(), b_key.clone()]);
    for path in ["/backup", "/metrics", "/admin/reload"] {
        let req =
            if path == "/admin/reload" { http.post(format!("{url}{path}")) } else { http.get(format!("{url}{path}")) };
        assert_eq!(status_of(req, "acme-token").await.0, StatusCode::FORBIDDEN, "{path}");
    }
    // The `*` token reads every namespace and backs the whole store up.
    assert_eq!(status_of(http.get(key_url(&b_key)), "root-token").await.0, StatusCode::OK);
    let (status, backup) = status_of(http.get(format!("{url}/backup")), "root-token").await;
    assert_eq!(status, StatusCode::OK);
    assert!(backup.contains(&a_key) && backup.contains(&b_key));
    let root = creds(&url, "root-token", "beta");
    assert_eq!(p.invoke("event_status", &root, json!({"event_id": "B-1"})).await.outcome(), "found");
    assert_eq!(status_of(http.get(key_url(&a_key)), "nobody").await.0, StatusCode::UNAUTHORIZED);

    // Refusals are counted by reason; no token appears in the metrics.
    let (_, metrics) = status_of(http.get(format!("{url}/metrics")), "root-token").await;
    for reason in ["other_namespace", "operator_only", "unknown_token"] {
        assert!(metrics.contains(&format!("kv_auth_failures_total{{reason=\"{reason}\"}}")), "{reason}");
    }
    assert!(!metrics.contains("-token"), "a token in the metrics");
}

fn kv(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stateful-tool"))
        .arg("kv")
        .args(args)
        .env_remove("KV_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_takes_new_tokens_and_a_bad_file_keeps_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    // A malformed file refuses to start, naming the line and never the token.
    let bad = dir.path().join("bad-tokens");
    std::fs::write(&bad, "* root-token\nacme acme-token extra-secret\n").unwrap();
    let err = serve_refused(&dir.path().join("d0"), &["--tokens-file", bad.to_str().unwrap()]);
    assert!(err.contains("line 2") && !err.contains("extra-secret") && !err.contains("acme-token"), "{err}");

    let file = dir.path().join("tokens");
    std::fs::write(&file, TOKENS).unwrap();
    let log = dir.path().join("kv.log");
    let args = ["--tokens-file", file.to_str().unwrap()];
    let server = KvServer::start_logged(&dir.path().join("data"), &args, &[("STATEFUL_TOOL_LOG", "info")], &log);
    let http = Client::new();
    let probe = format!("{}/state/evt_acme~R-1", server.url());
    let get = |token: &'static str| {
        let req = http.get(&probe).bearer_auth(token);
        async move { req.send().await.unwrap().status() }
    };
    assert_eq!(get("acme-token").await, StatusCode::NOT_FOUND);
    // The new file drops acme-token and adds acme-token-2; `kv reload` applies it at once.
    std::fs::write(&file, "* root-token\nacme sha256:".to_owned() + &hex_sha256("acme-token-2") + "\n").unwrap();
    let out = kv(&["reload", "--url", &server.url(), "--token", "root-token"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 tokens"));
    assert_eq!(get("acme-token").await, StatusCode::UNAUTHORIZED);
    assert_eq!(get("acme-token-2").await, StatusCode::NOT_FOUND);
    // A broken file is refused by `kv reload` and by SIGHUP; the tokens in force stay.
    std::fs::write(&file, "* root-token\nacme\n").unwrap();
    let out = kv(&["reload", "--url", &server.url(), "--token", "root-token"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("line 2") && err.contains("tokens in force stay"), "{err}");
    server.hangup();
    let refusals = || std::fs::read_to_string(&log).unwrap().matches("reload refused").count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while refusals() < 2 {
        assert!(std::time::Instant::now() < deadline, "SIGHUP with a bad file was not logged");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(get("acme-token-2").await, StatusCode::NOT_FOUND);
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("line 2") && !log_text.contains("acme-token"), "{log_text}");
    // A namespace token may not reload.
    let out = kv(&["reload", "--url", &server.url(), "--token", "acme-token-2"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("403"));
}

fn hex_sha256(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

#[test]
fn tokens_file_and_a_single_token_are_not_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, TOKENS).unwrap();
    let err = serve_refused(&dir.path().join("d"), &["--tokens-file", file.to_str().unwrap(), "--token", "x"]);
    assert!(err.contains("--tokens-file replaces"), "{err}");
}
