//! The real binary over real pipes: concurrency, heartbeats, EOF, EPIPE, abuse.

use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::fake::silent_store;
use crate::support::kv::ScratchKv;
use crate::support::plugin::{creds, request_line, Plugin, BIN};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Longer than anything here takes on a loaded machine: a bound that only catches a hang.
const HANG: Duration = Duration::from_secs(120);

/// A store that takes connections and answers nothing until released, then closes them and
/// every later one at once: a store slower than the test, whose slowness ends on cue.
struct HeldStore {
    port: u16,
    received: Arc<AtomicUsize>,
    /// The held connections; `None` once released.
    held: Arc<Mutex<Option<Vec<TcpStream>>>>,
}

impl HeldStore {
    fn start() -> HeldStore {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (received, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Some(vec![]))));
        let (r, h) = (received.clone(), held.clone());
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                match h.lock().unwrap().as_mut() {
                    Some(held) => held.push(c.try_clone().unwrap()),
                    None => continue, // released: closed at once
                }
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = c.read(&mut buf) {
                        r.fetch_add(n, Ordering::SeqCst);
                    }
                });
            }
        });
        HeldStore { port, received, held }
    }

    /// Bytes of requests received so far.
    fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    fn release(&self) {
        for c in self.held.lock().unwrap().take().unwrap() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_store_never_blocks_other_sessions() {
    let kv = ScratchKv::start();
    // The store timeout is a hang bound: the slow call ends when the test releases its store.
    let p = Arc::new(Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "120000")]).await);
    let store = HeldStore::start();
    let slow_url = format!("http://127.0.0.1:{}", store.port);
    let p2 = p.clone();
    let slow = tokio::spawn(async move {
        p2.invoke("event_ingest", &creds(&slow_url), json!({"event_id": "S", "event_type": "created"})).await
    });
    // The slow session's request is at its store, unanswered, before the fast one is sent.
    let start = Instant::now();
    while store.received() == 0 {
        assert!(start.elapsed() < HANG, "the slow session never reached its store");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A plugin that served sessions one at a time would never answer this one (the slow
    // store only answers once it has).
    let fast = p.invoke("event_ingest", &creds(&kv.url()), json!({"event_id": "F", "event_type": "created"})).await;
    assert_eq!(fast.outcome(), "accepted");
    assert!(!slow.is_finished(), "the slow session was still waiting when the fast one finished");
    store.release();
    let slow = slow.await.unwrap();
    assert_eq!(slow.error_type(), Some("upstream_error"), "{slow:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_repeat_while_idle() {
    let p = Plugin::spawn(&[("STATEFUL_TOOL_HEARTBEAT_MS", "50")]).await;
    let deadline = Instant::now() + HANG;
    while p.heartbeats.load(Ordering::SeqCst) < 4 {
        assert!(Instant::now() < deadline, "heartbeats stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stdin_eof_finishes_in_flight_sessions_then_exits_zero() {
    let kv = ScratchKv::start();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .env("INSTALL_METHOD", "local") // a developer's `.env` may say remote
        .env("STATEFUL_TOOL_STORE_TIMEOUT_MS", "700")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let slow = format!("http://127.0.0.1:{}", silent_store());
    let data = |url: &str, id: &str| {
        json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest", "user_id": "u",
               "credentials": {"kv_url": url}, "tool_parameters": {"event_id": id, "event_type": "created"}})
    };
    stdin.write_all(request_line("slow", &data(&slow, "A")).as_bytes()).await.unwrap();
    stdin.write_all(request_line("fast", &data(&kv.url(), "B")).as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "exit status {:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    for sid in ["slow", "fast"] {
        let ends = text
            .lines()
            .filter(|l| l.contains(&format!("\"session_id\":\"{sid}\"")) && l.contains("\"type\":\"end\""))
            .count();
        assert_eq!(ends, 1, "session {sid} ends exactly once:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stdout_closed_makes_the_plugin_exit() {
    let kv = ScratchKv::start();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .env("INSTALL_METHOD", "local") // a developer's `.env` may say remote
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Its "stdout closed; exiting" warning is the expected outcome, not news for a passing run.
        .stderr(crate::support::child_log::captured("plugin"))
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).await.unwrap();
    assert!(first.contains("heartbeat"));
    drop(stdout);
    let mut stdin = child.stdin.take().unwrap();
    let line = request_line(
        "x",
        &json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_status", "user_id": "u",
                "credentials": {"kv_url": kv.url()}, "tool_parameters": {"event_id": "A"}}),
    );
    // The plugin may exit before it has read everything: write errors are expected.
    for _ in 0..50 {
        if stdin.write_all(line.as_bytes()).await.is_err() {
            break;
        }
    }
    let status = tokio::time::timeout(HANG, child.wait()).await.expect("plugin exits").unwrap();
    assert!(!status.success(), "a broken stdout is not a clean exit: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abuse_huge_lines_garbage_and_ten_thousand_sessions() {
    let kv = ScratchKv::start();
    let p = Plugin::spawn(&[]).await;
    // 6 MiB line with a readable session id, then non-UTF-8, deep nesting, and partial writes.
    let big_rx = p.open("big");
    let mut big = b"{\"session_id\":\"big\",\"event\":\"request\",\"data\":{\"pad\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 6 * 1024 * 1024));
    big.extend_from_slice(b"\"}}\n");
    p.write_raw(&big).await;
    let big_reply = Plugin::collect(big_rx).await;
    assert!(big_reply.error.is_some(), "{big_reply:?}");
    p.write_raw(b"\xc3\x28\xff garbage\n").await;
    p.write_raw(&[b'{'; 200_000]).await;
    p.write_raw(b"\n").await;
    let split_rx = p.open("split");
    let line = request_line(
        "split",
        &json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest",
        "user_id": "u", "credentials": {"kv_url": kv.url()}, "tool_parameters": {"event_id": "P", "event_type": "created"}}),
    );
    for chunk in line.as_bytes().chunks(7) {
        p.write_raw(chunk).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(Plugin::collect(split_rx).await.outcome(), "accepted");
    // 10k sessions opened at once, all answered.
    let mut rxs = vec![];
    let mut blob = String::new();
    for i in 0..10_000 {
        let sid = format!("many-{i}");
        rxs.push(p.open(&sid));
        blob += &request_line(
            &sid,
            &json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest",
            "user_id": "u", "credentials": {"kv_url": kv.url()}, "tool_parameters": {"event_id": format!("M{}", i % 100), "event_type": "created"}}),
        );
    }
    p.write_raw(blob.as_bytes()).await;
    let mut accepted = 0;
    for rx in rxs {
        if Plugin::collect(rx).await.outcome() == "accepted" {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 100, "one winner per id among 10k sessions");
}

/// Peak resident memory of a process (`VmHWM`), in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().unwrap()
}

fn ingest_data(url: &str, id: &str) -> serde_json::Value {
    json!({"action": "invoke_tool", "type": "tool", "provider": "stateful_tool", "tool": "event_ingest", "user_id": "u",
           "credentials": {"kv_url": url}, "tool_parameters": {"event_id": id, "event_type": "created"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backwards_response_for_a_session_never_opened_is_ignored() {
    let kv = ScratchKv::start();
    let p = Plugin::spawn(&[]).await;
    let ghost = p.open("ghost");
    let lines: [&[u8]; 4] = [
        b"{\"session_id\":\"ghost\",\"event\":\"backwards_response\",\"data\":{\"type\":\"stream\",\"data\":{\"x\":1}}}\n",
        b"{\"session_id\":\"ghost\",\"event\":\"backwards_response\",\"data\":null}\n",
        b"{\"session_id\":null,\"event\":\"backwards_response\",\"data\":{}}\n",
        b"{\"event\":\"backwards_response\"}\n",
    ];
    for line in lines {
        p.write_raw(line).await;
    }
    // The plugin keeps serving, and the never-opened session gets nothing.
    let r = p.request(ingest_data(&kv.url(), "after-ghost")).await;
    assert_eq!(r.outcome(), "accepted");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ghost = ghost;
    assert!(ghost.try_recv().is_err(), "a backwards_response is never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversize_lines_do_not_grow_memory_past_the_line_cap() {
    let kv = ScratchKv::start();
    let p = Plugin::spawn(&[]).await;
    let pid = p.child.id().unwrap();
    assert_eq!(p.request(ingest_data(&kv.url(), "warm")).await.outcome(), "accepted");
    let before = vm_hwm_kib(pid);
    // 3 × 48 MiB lines: each is skipped once it passes the 8 MiB cap, so the peak is bounded
    // by the cap (one line buffer), not by the 144 MiB sent.
    for i in 0..3 {
        let sid = format!("huge-{i}");
        let rx = p.open(&sid);
        let mut line = format!("{{\"session_id\":\"{sid}\",\"event\":\"request\",\"data\":{{\"pad\":\"").into_bytes();
        line.resize(48 << 20, b'x');
        line.extend_from_slice(b"\"}}\n");
        p.write_raw(&line).await;
        let r = Plugin::collect(rx).await;
        assert_eq!(r.error_type(), Some("param_invalid"), "{r:?}");
    }
    assert_eq!(p.request(ingest_data(&kv.url(), "after-huge")).await.outcome(), "accepted");
    let after = vm_hwm_kib(pid);
    eprintln!("plugin VmHWM: {before} KiB before, {after} KiB after 144 MiB of oversize lines");
    assert!(after < before + 40 * 1024, "peak grew from {before} KiB to {after} KiB");
}

/// A daemon that stops reading: the plugin stops reading too (bounded outbox, bounded
/// sessions in flight) instead of buffering everything; once the daemon reads again, every
/// session is answered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_that_stops_reading_gets_backpressure_not_memory_growth() {
    let kv = ScratchKv::start();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).await.unwrap();
    let before = vm_hwm_kib(pid);
    const N: usize = 12_000;
    let mut blob = String::new();
    for i in 0..N {
        blob += &request_line(&format!("bp-{i}"), &ingest_data(&kv.url(), &format!("id-{}", i % 500)));
    }
    let writer = tokio::spawn(async move {
        stdin.write_all(blob.as_bytes()).await.unwrap();
        stdin
    });
    // Nobody reads stdout for a while: the plugin must block, not buffer 12k answers. A real
    // child over real pipes, so time cannot be paused; the window only bounds how long the
    // test looks for progress that must not happen, so a slow machine can make it pass
    // without proving much, never fail.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!writer.is_finished(), "the plugin stopped reading its input once its output backed up");
    let stalled = vm_hwm_kib(pid);
    let mut ends = std::collections::HashMap::new();
    let mut line = String::new();
    while ends.len() < N {
        line.clear();
        let n = tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line)).await.unwrap().unwrap();
        assert!(n > 0, "output ended early");
        if line.contains("\"type\":\"end\"") {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            *ends.entry(v["session_id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    drop(writer.await.unwrap());
    assert!(ends.values().all(|&n| n == 1) && ends.len() == N);
    eprintln!("plugin VmHWM: {before} KiB idle, {stalled} KiB with its output blocked");
    // Bounded by the sessions allowed in flight (1024, each ≤ 32 KiB even in a debug build),
    // not by the ~5 MB of requests queued behind them: buffering those as parsed requests
    // and answers would take several hundred MiB.
    assert!(stalled < before + 128 * 1024, "peak grew from {before} KiB to {stalled} KiB while blocked");
}
