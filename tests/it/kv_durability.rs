//! Durability: SIGKILL the server in the middle of a concurrent write load, restart it on the
//! same data directory, and find every write that was acknowledged (2xx) before the kill.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::kv::{etag_rev, KvServer};
use reqwest::{Client, StatusCode};

const WRITERS: usize = 16;

/// key, value, ETag of an acknowledged write.
type Acked = (String, String, u64);

#[derive(Default)]
struct Log {
    acked: Mutex<Vec<Acked>>,
    /// Sent but unanswered (in flight at the kill): may or may not be stored.
    in_doubt: Mutex<Vec<(String, String)>>,
    /// Answers other than 201 before the kill; there must be none.
    unexpected: Mutex<Vec<String>>,
    count: AtomicUsize,
}

async fn writer(http: Client, base: String, w: usize, log: Arc<Log>, stop: Arc<AtomicBool>) {
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let key = format!("dur-{w}-{n}");
        let value = format!(r#"{{"writer":{w},"n":{n},"pad":"{}"}}"#, "x".repeat(64 + n % 200));
        let sent =
            http.put(format!("{base}/state/{key}")).header("if-none-match", "*").body(value.clone()).send().await;
        match sent {
            Ok(resp) if resp.status() == StatusCode::CREATED => {
                let etag = etag_rev(resp.headers()).expect("ETag on 201");
                log.acked.lock().unwrap().push((key, value, etag));
                log.count.fetch_add(1, Ordering::SeqCst);
            }
            Ok(resp) => {
                let msg = format!("{key}: {}", resp.status());
                log.unexpected.lock().unwrap().push(msg);
            }
            Err(_) => {
                // The server is gone; this write's fate is unknown.
                log.in_doubt.lock().unwrap().push((key, value));
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = KvServer::start(dir.path(), &[]);
    let http = Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let log = Arc::new(Log::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> =
        (0..WRITERS).map(|w| tokio::spawn(writer(http.clone(), server.url(), w, log.clone(), stop.clone()))).collect();

    // A few seconds of load at most; kill as soon as it has run a while with real traffic.
    let start = Instant::now();
    while !(start.elapsed() > Duration::from_millis(1500) && log.count.load(Ordering::SeqCst) >= 200)
        && start.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill9();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let acked = std::mem::take(&mut *log.acked.lock().unwrap());
    assert!(log.unexpected.lock().unwrap().is_empty(), "{:?}", log.unexpected.lock().unwrap());
    assert!(!acked.is_empty(), "no write was acknowledged before the kill");

    let logs = tempfile::tempdir().unwrap();
    let restart_log = logs.path().join("restart.log");
    let server = KvServer::start_logged(dir.path(), &[], &[("STATEFUL_TOOL_LOG", "info")], &restart_log);
    // redb repaired the file before serving, with the file read ahead of its walk.
    let said = std::fs::read_to_string(&restart_log).unwrap();
    assert!(said.contains("not closed cleanly, repairing"), "{said}");
    assert!(said.contains("of the data file ahead of the repair in"), "{said}");
    let base = server.url();
    let acked = Arc::new(acked);
    let checkers: Vec<_> = (0..8)
        .map(|c| {
            let (http, base, acked) = (http.clone(), base.clone(), acked.clone());
            tokio::spawn(async move {
                for (key, value, etag) in acked.iter().skip(c).step_by(8) {
                    let resp = http.get(format!("{base}/state/{key}")).send().await.unwrap();
                    assert_eq!(resp.status(), StatusCode::OK, "acknowledged {key} lost");
                    assert_eq!(etag_rev(resp.headers()), Some(*etag), "{key}");
                    assert_eq!(resp.bytes().await.unwrap(), value.as_bytes(), "{key}");
                }
            })
        })
        .collect();
    for c in checkers {
        c.await.unwrap();
    }
    // Writes in flight at the kill are all-or-nothing: absent, or exactly what was sent.
    let in_doubt = std::mem::take(&mut *log.in_doubt.lock().unwrap());
    for (key, value) in &in_doubt {
        let resp = http.get(format!("{base}/state/{key}")).send().await.unwrap();
        match resp.status() {
            StatusCode::NOT_FOUND => {}
            StatusCode::OK => assert_eq!(resp.bytes().await.unwrap(), value.as_bytes()),
            other => panic!("{key}: {other}"),
        }
    }
    // Revisions are never reused after a crash.
    let max_acked = acked.iter().map(|a| a.2).max().unwrap();
    let resp = http.put(format!("{base}/state/after-restart")).body("1").send().await.unwrap();
    assert!(etag_rev(resp.headers()).unwrap() > max_acked);
    eprintln!("kill -9 test: {} acknowledged writes all survived", acked.len());
}
