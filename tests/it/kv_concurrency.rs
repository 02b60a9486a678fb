//! Atomic create under contention: many concurrent `If-None-Match: *` PUTs of one key, from
//! this process and from a second client process, yield exactly one 201.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::support::kv::{etag_rev, KvServer};
use reqwest::{Client, StatusCode};
use tokio::sync::Barrier;

const IN_PROCESS: usize = 200;
const IN_CHILD: usize = 100;
/// Set by the parent test: tells [`child_client_process`] to act as the second client.
const CHILD_URL_ENV: &str = "KV_RACE_CHILD_URL";

/// One claim attempt: (status, etag, body, the value this writer tried to store).
type Attempt = (StatusCode, Option<u64>, Vec<u8>, String);

/// Fires `n` creates of `url` at once (all released by one barrier), tagged with `who`.
async fn race(url: String, n: usize, who: &str) -> Vec<Attempt> {
    // One connection per request, so the creates really are in flight together.
    let http = Client::builder().pool_max_idle_per_host(n).build().unwrap();
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (http, url, barrier) = (http.clone(), url.clone(), barrier.clone());
            let value = format!(r#"{{"writer":"{who}-{i}"}}"#);
            tokio::spawn(async move {
                barrier.wait().await;
                let resp =
                    http.put(&url).header("if-none-match", "*").body(value.clone()).send().await.expect("request");
                let (status, etag) = (resp.status(), etag_rev(resp.headers()));
                (status, etag, resp.bytes().await.unwrap().to_vec(), value)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_of_many_concurrent_creates_wins() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let url = format!("{}/state/evt_race", server.url());

    // Second client: this test binary re-run as a child, acting only as a client.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kv_concurrency::child_client_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL_ENV, &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait until the child is ready, then release both sides together.
    loop {
        let line = child_out.next().expect("child output").unwrap();
        // libtest may print "test child_client_process ... " on the same line first.
        if line.contains("RACE-READY") {
            break;
        }
    }
    let mut go = child.stdin.take().unwrap();
    writeln!(go, "go").unwrap();
    drop(go);
    let ours = race(url.clone(), IN_PROCESS, "parent").await;

    let mut child_created = None;
    for line in child_out {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("RACE-RESULT ") {
            let nums: Vec<usize> = rest.split(' ').map(|n| n.parse().unwrap()).collect();
            child_created = Some((nums[0], nums[1]));
        }
    }
    assert!(child.wait().unwrap().success(), "child client failed");
    let (child_201, child_412) = child_created.expect("child reported its results");
    assert_eq!(child_201 + child_412, IN_CHILD, "every child request got 201 or 412");

    let winners: Vec<&Attempt> = ours.iter().filter(|a| a.0 == StatusCode::CREATED).collect();
    assert_eq!(winners.len() + child_201, 1, "exactly one create wins across both processes");
    // Every loser sees the same, winning value and its ETag.
    let resp = reqwest::get(&url).await.unwrap();
    let win_etag = etag_rev(resp.headers());
    let stored = resp.bytes().await.unwrap().to_vec();
    if let Some(w) = winners.first() {
        assert_eq!(stored, w.3.as_bytes(), "the winner's value is stored");
        assert_eq!(w.1, win_etag);
    }
    for (status, etag, body, _) in ours.iter().filter(|a| a.0 != StatusCode::CREATED) {
        assert_eq!(*status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(body, &stored, "412 carries the stored value");
        assert_eq!(*etag, win_etag);
    }
}

/// Not a test on its own: when started by the test above (with the URL in the
/// environment) it is the second client process; otherwise it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_client_process() {
    let Ok(url) = std::env::var(CHILD_URL_ENV) else {
        return;
    };
    println!("RACE-READY");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let results = race(url, IN_CHILD, "child").await;
    let created = results.iter().filter(|a| a.0 == StatusCode::CREATED).count();
    let refused = results.iter().filter(|a| a.0 == StatusCode::PRECONDITION_FAILED).count();
    println!("RACE-RESULT {created} {refused}");
}
