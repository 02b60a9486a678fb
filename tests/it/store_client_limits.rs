//! The plugin's KV client under bursts and hostile stores: memory stays bounded.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::kv::KvServer;
use crate::support::plugin::{creds, request_line, Plugin};

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line["VmHWM:".len()..].trim().trim_end_matches("kB").trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_sessions_at_once_against_the_kv_container_stay_under_64_mb() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    // Debug builds on a loaded machine drain the burst slowly; this test is about memory, so
    // the per-call timeout (which includes waiting for a free connection) is generous.
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "300000")]).await;
    let creds = creds(&kv.url());
    let mut rxs = vec![];
    let mut blob = String::new();
    for i in 0..10_000 {
        let sid = format!("burst-{i}");
        rxs.push(p.open(&sid));
        let data = json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool",
            "tool": "event_ingest", "user_id": "u", "credentials": creds,
            "tool_parameters": {"event_id": format!("B{i}"), "event_type": "created",
                                "payload": format!("{{\"order\":{i},\"pad\":\"{}\"}}", "x".repeat(200))}});
        blob += &request_line(&sid, &data);
    }
    p.write_raw(blob.as_bytes()).await;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    let mut first_error = None;
    for rx in rxs {
        let reply = Plugin::collect(rx).await;
        if reply.error.is_some() && first_error.is_none() {
            first_error = Some(reply.message().to_owned());
        }
        *outcomes.entry(reply.outcome()).or_default() += 1;
    }
    let peak = vm_hwm_kib(p.child.id().unwrap());
    eprintln!("10,000 sessions at once: {outcomes:?}; plugin peak RSS {} MB", peak * 1024 / 1_000_000);
    assert_eq!(outcomes.get("accepted"), Some(&10_000), "{outcomes:?}, first error: {first_error:?}");
    assert!(peak < 64_000, "plugin peak RSS {peak} KiB");
}

/// A "store" that answers every request with a body announced as (or streaming) 100 GB.
async fn endless_store(chunked: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                let head = if chunked {
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"1\"\r\n\r\n".to_owned()
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\nETag: \"1\"\r\n\r\n".to_owned()
                };
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 65536];
                let framed = [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk.clone(), b"\r\n".to_vec()].concat();
                loop {
                    let piece = if chunked { &framed } else { &chunk };
                    if sock.write_all(piece).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_store_answers_are_cut_off_as_upstream_errors() {
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "60000")]).await;
    for chunked in [false, true] {
        let c = creds(&endless_store(chunked).await);
        let calls = (0..4).map(|i| p.invoke("event_status", &c, json!({"event_id": format!("E{i}")})));
        for reply in futures_util::future::join_all(calls).await {
            assert_eq!(reply.error_type(), Some("upstream_error"), "{reply:?}");
            assert!(reply.message().contains("MiB"), "{}", reply.message());
        }
    }
    let peak = vm_hwm_kib(p.child.id().unwrap());
    eprintln!("plugin peak RSS after 8 endless answers: {} MB", peak * 1024 / 1_000_000);
    assert!(peak < 64_000, "plugin peak RSS {peak} KiB");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test]
async fn stores_outside_the_allowed_hosts_are_never_dialed() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let port = kv.addr().port();
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_HOSTS", &format!("localhost,127.0.0.1:{port}"))]).await;
    let params = json!({"event_id": "ALLOW-1", "event_type": "created"});
    assert_eq!(p.invoke("event_ingest", &creds(&kv.url()), params.clone()).await.outcome(), "accepted");
    // Same server, another name for it; and a metadata address: refused before any dial.
    for url in [format!("http://127.0.0.2:{port}"), "http://169.254.169.254".to_owned()] {
        let reply = p.invoke("event_ingest", &creds(&url), params.clone()).await;
        assert!(reply.error.is_some(), "{url}: {reply:?}");
        assert!(reply.message().contains("STATEFUL_TOOL_STORE_HOSTS"), "{url}: {}", reply.message());
    }
}
