//! The KV container's background integrity check runs in a process of its own
//! (`kv check-pinned`, started by `kv serve`): the store serves while it reads, and the
//! process never outlives the server, whether the server stops cleanly or is killed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::kv::KvServer;

async fn status(req: reqwest::RequestBuilder) -> (u16, String) {
    let resp = req.send().await.expect("the server answers");
    let code = resp.status().as_u16();
    (code, resp.text().await.unwrap_or_default())
}

async fn integrity_state(http: &reqwest::Client, url: &str) -> String {
    let (_, text) = status(http.get(format!("{url}/healthz"))).await;
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    body["integrity"]["state"].as_str().unwrap_or("").to_owned()
}

/// The pids the log names as check processes, oldest first.
fn check_pids(log: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let pids = text.lines().filter_map(|l| l.split("integrity check reading in process ").nth(1));
    pids.filter_map(|rest| rest.split_whitespace().next()?.parse().ok()).collect()
}

fn logged(log: &Path, text: &str) -> bool {
    std::fs::read_to_string(log).unwrap_or_default().contains(text)
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success()
}

/// The state letter of `pid` in `/proc` (`R`, `S`, `D`, `T` stopped, `Z` zombie); `None`
/// once it is gone.
fn state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()).map(str::to_owned)
}

/// Whether `pid` is a live process (a zombie has ended: its parent has yet to collect it).
fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != "Z")
}

async fn gone_within(pid: u32, limit: Duration) -> bool {
    let started = Instant::now();
    while alive(pid) {
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// `ioprio_get`'s class of the idle I/O class (libc has the call, not its constants).
const IOPRIO_CLASS_IDLE: i64 = 3;

/// The I/O class of `pid` (`ioprio_get(IOPRIO_WHO_PROCESS, pid) >> IOPRIO_CLASS_SHIFT`).
fn io_class(pid: u32) -> i64 {
    // SAFETY: a query of another process's I/O priority; it writes nothing.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1 as libc::c_long, pid as libc::c_long) };
    assert!(prio >= 0, "ioprio_get({pid}) failed");
    prio >> 13
}

fn sched_policy(pid: u32) -> i32 {
    // SAFETY: a query of another process's scheduling policy.
    unsafe { libc::sched_getscheduler(pid as libc::pid_t) }
}

/// A check process held still by the test; killed on drop, so a failing test leaves no
/// stopped process behind.
struct Held(u32);

impl Drop for Held {
    fn drop(&mut self) {
        if alive(self.0) {
            signal(self.0, "-KILL");
        }
    }
}

/// Starts a check on demand and stops its process (SIGSTOP) while it still runs, so the
/// check stays running for as long as the test needs.
async fn catch_a_running_check(http: &reqwest::Client, server: &KvServer, log: &Path) -> Held {
    for _ in 0..100 {
        while integrity_state(http, &server.url()).await == "running" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before = check_pids(log).len();
        let (code, text) = status(http.post(format!("{}/admin/check", server.url()))).await;
        assert_eq!(code, 202, "{text}");
        let started = Instant::now();
        // Once it says it reads: it has then tied its life to the server's.
        let pid = loop {
            let pid = check_pids(log).get(before).copied();
            if let Some(pid) = pid.filter(|pid| logged(log, &format!("integrity check process {pid} reading"))) {
                break pid;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "no check process logged");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Caught only if it had not ended (a zombie ignores SIGSTOP: the check then passes).
        if signal(pid, "-STOP") {
            // Stopped once the kernel says so; a process that ended first is a zombie or gone.
            let held = loop {
                match state(pid).as_deref() {
                    Some("T") => break true,
                    Some("Z") | None => break false,
                    Some(_) => {
                        assert!(started.elapsed() < Duration::from_secs(20), "SIGSTOP did not stop {pid}");
                        tokio::time::sleep(Duration::from_millis(1)).await
                    }
                }
            };
            if held && integrity_state(http, &server.url()).await == "running" {
                return Held(pid);
            }
        }
    }
    panic!("every check ended before it could be stopped");
}

async fn fill(http: &reqwest::Client, url: &str) {
    for i in 0..2000 {
        let body = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(400));
        let (code, text) = status(http.put(format!("{url}/state/k{i}")).body(body)).await;
        assert_eq!(code, 201, "{text}");
    }
}

#[tokio::test]
async fn the_check_process_lets_the_store_serve_and_ends_with_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("kv.log");
    let http = reqwest::Client::new();

    let mut server = KvServer::start_logged(&data, &[], &[("STATEFUL_TOOL_LOG", "info")], &log);
    fill(&http, &server.url()).await;
    let held = catch_a_running_check(&http, &server, &log).await;
    assert_ne!(held.0, server.pid(), "the check runs in a process of its own");
    // It yields the cores and the disk: SCHED_IDLE, and the idle I/O class.
    assert_eq!(sched_policy(held.0), libc::SCHED_IDLE, "the check process's scheduling policy");
    assert_eq!(io_class(held.0), IOPRIO_CLASS_IDLE, "the check process's I/O class");
    // The store serves while its check process reads (here: is held still).
    let (code, text) = status(http.put(format!("{}/state/during", server.url())).body("{}")).await;
    assert_eq!(code, 201, "{text}");
    let (code, text) = status(http.get(format!("{}/state/k7", server.url()))).await;
    assert_eq!(code, 200, "{text}");
    // A clean stop ends the check process and waits for it.
    let exit = server.terminate();
    assert!(exit.success(), "{exit:?}");
    assert!(!alive(held.0), "the check process outlived a clean stop");

    // Killed outright, the server takes no step: the check process ends by itself.
    // (With a limit on the check's reads from the disk, which the process is given.)
    let log = tmp.path().join("kv2.log");
    let limit = ["--check-disk-reads", "7"];
    let mut server = KvServer::start_logged(&data, &limit, &[("STATEFUL_TOOL_LOG", "info")], &log);
    let held = catch_a_running_check(&http, &server, &log).await;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", held.0)).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline)
            .split('\0')
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w == ["--disk-reads", "7"]),
        "the check process was not given the limit: {}",
        String::from_utf8_lossy(&cmdline)
    );
    server.kill9();
    assert!(gone_within(held.0, Duration::from_secs(10)).await, "the check process outlived a killed server");
}
