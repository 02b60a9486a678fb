//! Token rotation under load: 16 writers keep writing while the tokens file gains a new token
//! and then loses the old one, each change applied by SIGHUP. No request made with a token
//! valid at that moment fails, and once removed, the old token is refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};

use crate::support::kv::KvServer;

const WRITERS: usize = 16;
/// How long the load runs at least before, between and after the two changes.
const PHASE: Duration = Duration::from_secs(2);

/// Polls `f` until it returns true, failing after 30 s.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lets the load run for a phase: `PHASE`, and then until the writers have made `WRITERS` more
/// requests (on a loaded machine the phase lasts longer instead of the test failing).
async fn phase(made: &AtomicU64) {
    let target = made.load(SeqCst) + WRITERS as u64;
    tokio::time::sleep(PHASE).await;
    until("the writers made requests in this phase", || async move { made.load(SeqCst) >= target }).await;
}

async fn status(http: &Client, url: &str, token: &str) -> StatusCode {
    http.get(format!("{url}/state/evt_acme~probe")).bearer_auth(token).send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_under_load_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "* root\nacme old-token\n").unwrap();
    let server = KvServer::start(&dir.path().join("data"), &["--tokens-file", file.to_str().unwrap()]);
    let url = server.url();
    // The token writers use now, with its generation; each writer's last generation answered.
    let current: Arc<Mutex<(u64, &'static str)>> = Arc::new(Mutex::new((0, "old-token")));
    let answered: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    // Requests answered by all writers: each phase waits for some, rather than assume a pace.
    let made = Arc::new(AtomicU64::new(0));
    let mut writers = vec![];
    for w in 0..WRITERS {
        let (url, current, answered, stop) = (url.clone(), current.clone(), answered.clone(), stop.clone());
        let made = made.clone();
        writers.push(tokio::spawn(async move {
            let http = Client::new();
            let mut failures = vec![];
            let mut n = 0u64;
            while !stop.load(SeqCst) {
                let (generation, token) = *current.lock().unwrap();
                let resp = http
                    .put(format!("{url}/state/evt_acme~w{w}-{n}"))
                    .bearer_auth(token)
                    .header("if-none-match", "*")
                    .body("{}")
                    .send()
                    .await;
                match resp.map(|r| r.status()) {
                    Ok(StatusCode::CREATED) => {}
                    other => failures.push(format!("writer {w} request {n} with {token}: {other:?}")),
                }
                answered[w].store(generation, SeqCst);
                made.fetch_add(1, SeqCst);
                n += 1;
            }
            (n, failures)
        }));
    }
    let probe = Client::new();
    phase(&made).await;
    // Change 1: the new token joins the old one.
    std::fs::write(&file, "* root\nacme old-token\nacme new-token\n").unwrap();
    server.hangup();
    until("the new token is accepted", || async { status(&probe, &url, "new-token").await == StatusCode::NOT_FOUND })
        .await;
    *current.lock().unwrap() = (1, "new-token");
    // Every writer has moved on: no request with the old token is still to come.
    until("every writer uses the new token", || async { answered.iter().all(|a| a.load(SeqCst) == 1) }).await;
    phase(&made).await;
    // Change 2: the old token leaves.
    std::fs::write(&file, "* root\nacme new-token\n").unwrap();
    server.hangup();
    until("the old token is refused", || async { status(&probe, &url, "old-token").await == StatusCode::UNAUTHORIZED })
        .await;
    phase(&made).await;
    stop.store(true, SeqCst);
    let mut total = 0;
    for w in writers {
        let (n, failures) = w.await.unwrap();
        assert!(failures.is_empty(), "requests with a valid token failed: {failures:#?}");
        total += n;
    }
    assert!(total >= WRITERS as u64 * 3, "the writers made only {total} requests");
    assert_eq!(status(&probe, &url, "old-token").await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&probe, &url, "new-token").await, StatusCode::NOT_FOUND);
    println!("rotation under load: {total} writes by {WRITERS} writers, none failed");
}
