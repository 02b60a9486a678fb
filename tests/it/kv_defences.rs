//! Defences of the KV container and of the plugin's handling of secrets: every wrong bearer
//! token is refused whatever its length or how much of the real one it shares (the check
//! compares fixed-size SHA-256 digests with `subtle`'s constant-time equality: nothing
//! about the real token, not even its length, shapes the comparison); oversize bodies are
//! refused without being buffered; oversize headers are refused; the default bind address
//! is loopback; and with debug logging on, neither a `kv_token` nor a Redis password ever
//! appears in a log or in an answer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::kv::{raw_http, KvServer};
use crate::support::plugin::Plugin;
use crate::support::redis::RedisServer;
use serde_json::json;

const TOKEN: &str = "Zq8-real-token-4d1e9b7c";

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().unwrap()
}

fn get_with(server: &KvServer, authorization: Option<&str>) -> u16 {
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let req = format!("GET /state/k HTTP/1.1\r\nHost: kv\r\n{auth}Connection: close\r\n\r\n");
    raw_http(server.addr(), req.as_bytes()).status
}

#[test]
fn wrong_tokens_of_every_length_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &["--token", TOKEN]);
    let real = TOKEN.as_bytes();
    let mut wrong: Vec<String> = vec![];
    for len in 0..=2 * real.len() + 2 {
        // Unrelated tokens of every length, the real token's prefixes, and extensions of it.
        wrong.push("x".repeat(len));
        if len < real.len() {
            wrong.push(TOKEN[..len].to_owned());
        } else if len > real.len() {
            wrong.push(format!("{TOKEN}{}", "z".repeat(len - real.len())));
        }
    }
    // Same length, one byte off, at every position; and other casing.
    for i in 0..real.len() {
        let mut t = real.to_vec();
        t[i] = if t[i] == b'a' { b'b' } else { b'a' };
        wrong.push(String::from_utf8(t).unwrap());
    }
    wrong.push(TOKEN.to_uppercase());
    wrong.push(format!(" {TOKEN}x"));
    for t in &wrong {
        assert_ne!(t.trim(), TOKEN);
        assert_eq!(get_with(&server, Some(&format!("Bearer {t}"))), 401, "token {t:?}");
    }
    for scheme in [format!("Basic {TOKEN}"), TOKEN.to_owned(), format!("Bearer{TOKEN}"), String::new()] {
        assert_eq!(get_with(&server, Some(&scheme)), 401, "{scheme:?}");
    }
    assert_eq!(get_with(&server, None), 401);
    // The real one (404: the key does not exist, but the request got past auth).
    assert_eq!(get_with(&server, Some(&format!("Bearer {TOKEN}"))), 404);
}

/// Sends `head`, then streams `body_len` bytes from another thread, and reads the answer.
fn stream_request(server: &KvServer, head: &str, body_len: usize, chunked: bool) -> u16 {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'7'; 64 * 1024];
        let mut sent = 0;
        if chunked {
            let _ = w.write_all(format!("{:x}\r\n", body_len).as_bytes());
        }
        while sent < body_len {
            if w.write_all(&chunk).is_err() {
                break; // the server answered and closed: expected
            }
            sent += chunk.len();
        }
        sent
    });
    let mut raw = vec![];
    let _ = s.read_to_end(&mut raw);
    let sent = writer.join().unwrap();
    assert!(sent < body_len, "the server stopped reading long before the end ({sent} of {body_len} bytes)");
    let text = String::from_utf8_lossy(&raw);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no HTTP answer: {text:?}"))
}

#[test]
fn oversize_bodies_are_refused_without_being_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let before = status_kib(server.pid(), "VmHWM:");
    // Declared: refused from the headers.
    let head = "PUT /state/big HTTP/1.1\r\nHost: kv\r\nContent-Length: 1073741824\r\nConnection: close\r\n\r\n";
    assert_eq!(stream_request(&server, head, 256 << 20, false), 413);
    // Undeclared (chunked): cut off once it passes 1 MiB.
    let head = "PUT /state/big HTTP/1.1\r\nHost: kv\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    assert_eq!(stream_request(&server, head, 256 << 20, true), 413);
    let after = status_kib(server.pid(), "VmHWM:");
    eprintln!("kv VmHWM {before} KiB before, {after} KiB after two 256 MiB bodies");
    assert!(after < before + 32 * 1024, "the server buffered the bodies: {before} → {after} KiB");
    assert_eq!(get_with(&server, None), 404, "still serving");
}

#[test]
fn oversize_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let huge_value =
        format!("GET /state/k HTTP/1.1\r\nHost: kv\r\nX-Big: {}\r\nConnection: close\r\n\r\n", "v".repeat(1 << 20));
    let mut many = String::from("GET /state/k HTTP/1.1\r\nHost: kv\r\nConnection: close\r\n");
    for i in 0..500 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    for (what, req) in [("a 1 MiB header", huge_value), ("500 headers", many)] {
        let status = raw_http(server.addr(), req.as_bytes()).status;
        assert!([431, 400].contains(&status), "{what}: HTTP {status}");
    }
    assert_eq!(get_with(&server, None), 404, "still serving");
}

#[test]
fn binds_loopback_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    // No --listen: either it comes up on the default (127.0.0.1:8123), or that port is taken
    // and the error names the address it tried. Both show the default is loopback.
    let mut child = Command::new(env!("CARGO_BIN_EXE_stateful-tool"))
        .args(["kv", "serve", "--data"])
        .arg(dir.path())
        .env_remove("KV_TOKEN")
        .env("STATEFUL_TOOL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut first = [0u8; 64];
        let n = stdout.read(&mut first).unwrap_or(0);
        String::from_utf8_lossy(&first[..n]).into_owned()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !reader.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let announced = reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        announced.starts_with("listening on http://127.0.0.1:8123")
            || stderr.contains("cannot listen on 127.0.0.1:8123"),
        "stdout {announced:?}, stderr {stderr:?}"
    );
}

/// Debug logging everywhere; the plugin talks to a KV container with a token and to Redis
/// with a password, right and wrong, reachable and not: neither secret may appear in the
/// plugin's log, the container's log, or any answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_credential_reaches_a_log_or_an_answer() {
    const KV_SECRET: &str = "kvtok-SECRET-5b9e31";
    const REDIS_SECRET: &str = "redispw-SECRET-77d0a2";
    let logs = tempfile::tempdir().unwrap();
    let (plugin_log, kv_log) = (logs.path().join("plugin.log"), logs.path().join("kv.log"));
    let data = tempfile::tempdir().unwrap();
    let debug = [("STATEFUL_TOOL_LOG", "debug"), ("STATEFUL_TOOL_STORE_TIMEOUT_MS", "1000")];
    let kv = KvServer::start_logged(data.path(), &["--token", KV_SECRET], &debug, &kv_log);
    let redis = RedisServer::start(&["--requirepass", REDIS_SECRET]);
    let mut p = Plugin::spawn_logged(&debug, &plugin_log).await;
    let closed = crate::support::fake::closed_port();
    let kv_good = json!({"kv_url": kv.url(), "kv_token": KV_SECRET});
    let kv_wrong = json!({"kv_url": kv.url(), "kv_token": format!("{KV_SECRET}x")});
    let kv_down = json!({"kv_url": format!("http://127.0.0.1:{closed}"), "kv_token": KV_SECRET});
    let kv_userinfo = json!({"kv_url": format!("http://user:{KV_SECRET}@127.0.0.1:{closed}")});
    let redis_good = json!({"kv_url": format!("redis://:{REDIS_SECRET}@127.0.0.1:{}/0", redis.port)});
    let redis_wrong = json!({"kv_url": format!("redis://:{REDIS_SECRET}x@127.0.0.1:{}/0", redis.port)});
    let redis_user = json!({"kv_url": format!("redis://default:{REDIS_SECRET}@127.0.0.1:{}/0", redis.port)});
    let redis_down = json!({"kv_url": format!("redis://:{REDIS_SECRET}@127.0.0.1:{closed}/0")});
    let redis_bad = json!({"kv_url": format!("redis://:{REDIS_SECRET}@127.0.0.1:notaport/0")});
    let mut answers = vec![];
    for c in
        [&kv_good, &kv_wrong, &kv_down, &kv_userinfo, &redis_good, &redis_wrong, &redis_user, &redis_down, &redis_bad]
    {
        answers.push(p.validate(c).await);
        let ev = json!({"event_id": "secret-test", "event_type": "created", "lease_seconds": 30});
        answers.push(p.invoke("event_ingest", c, ev).await);
        answers.push(p.invoke("event_status", c, json!({"event_id": "secret-test"})).await);
        answers.push(p.invoke("event_complete", c, json!({"event_id": "secret-test", "attempt": 1})).await);
    }
    assert_eq!(answers[1].outcome(), "accepted", "the good KV credentials work: {:?}", answers[1]);
    assert_eq!(answers[17].outcome(), "accepted", "the good Redis credentials work: {:?}", answers[17]);
    // Lines the plugin cannot take as requests, carrying credentials.
    p.write_raw(format!("{{\"data\":{{\"credentials\":{{\"kv_token\":\"{KV_SECRET}\"}}}}\n").as_bytes()).await;
    p.write_raw(format!("{{\"event\":7,\"data\":{{\"kv_token\":\"{KV_SECRET}\"}}}}\n").as_bytes()).await;
    p.write_raw(format!("{{\"session_id\":{{\"k\":\"{REDIS_SECRET}\"}},\"event\":\"request\"}}\n").as_bytes()).await;
    p.write_raw(format!("{{\"event\":\"{KV_SECRET}\",\"data\":{{}}}}\n").as_bytes()).await;
    // Let the plugin process those before it is stopped.
    assert_eq!(p.request(json!({"type": "tool", "action": "nope"})).await.error_type(), Some("param_invalid"));
    // Under the daemon the plugin logs as protocol `log` events; stderr has the rest.
    let events = p.logs.lock().unwrap().join("\n");
    // The plugin ends at the end of its input, its log written whole; the container is
    // killed and reaped.
    p.close_stdin().await;
    tokio::time::timeout(Duration::from_secs(120), p.child.wait()).await.expect("the plugin exits").unwrap();
    drop(kv);
    let plugin_text = std::fs::read_to_string(&plugin_log).unwrap() + &events;
    let kv_text = std::fs::read_to_string(&kv_log).unwrap();
    assert!(plugin_text.contains("DEBUG"), "debug logging was on in the plugin:\n{plugin_text}");
    assert!(kv_text.contains("DEBUG") || kv_text.contains("INFO"), "logging was on in the container:\n{kv_text}");
    for secret in [KV_SECRET, REDIS_SECRET] {
        assert!(!plugin_text.contains(secret), "the plugin log carries a secret:\n{plugin_text}");
        assert!(!kv_text.contains(secret), "the container log carries a secret:\n{kv_text}");
        for a in &answers {
            let text = format!("{:?} {:?}", a.chunks, a.error);
            assert!(!text.contains(secret), "an answer carries a secret: {text}");
        }
    }
}
