//! Directory fsyncs seen with strace: every file the KV container and its backup/restore
//! commands create or rename into a directory is followed by an fsync of that directory.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::kv::{raw_http, KvServer};

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");
const TRACED: &str = "trace=openat,mkdir,mkdirat,fsync,fdatasync,rename,renameat,renameat2";

/// strace is a test requirement (CI installs the Debian package through scripts/ensure-redis.sh).
fn strace() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("strace"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("strace is not installed: these tests need it (`apt-get install strace`; scripts/ensure-redis.sh installs it)")
    })
}

fn traced(log: &Path) -> Command {
    let mut cmd = Command::new(strace());
    cmd.args(["-f", "-qq", "-e", TRACED, "-o"]).arg(log).arg("--").arg(BIN);
    cmd.env_remove("KV_TOKEN").env("STATEFUL_TOOL_LOG", "warn").stdin(Stdio::null());
    cmd
}

/// One traced call that matters here.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    /// `openat` of a path; `created` when O_CREAT was given; the returned fd.
    Open {
        path: String,
        created: bool,
        fd: i64,
    },
    Fsync {
        fd: i64,
        ok: bool,
    },
    /// A rename or mkdir that succeeded, with the path it made.
    Made(String),
}

fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Parses an `strace -f -o` log, joining calls split by `<unfinished ...>` / `resumed>`.
fn parse_trace(log: &Path) -> Vec<Call> {
    let text = std::fs::read_to_string(log).expect("read the strace log");
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut out = vec![];
    for line in text.lines() {
        let (pid, rest) = line.split_once(' ').unwrap_or(("", line));
        let rest = rest.trim_start();
        if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), head.to_owned());
            continue;
        }
        let whole = match rest.strip_prefix("<... ") {
            Some(tail) => {
                let tail = tail.split_once("resumed>").map_or("", |(_, t)| t);
                pending.remove(pid).unwrap_or_default() + tail
            }
            None => rest.to_owned(),
        };
        let Some((call, result)) = whole.rsplit_once(" = ") else { continue };
        let call = call.trim_end();
        let ret: i64 = result.split_whitespace().next().and_then(|r| r.parse().ok()).unwrap_or(-1);
        let name = call.split('(').next().unwrap_or_default();
        let paths = quoted(call);
        match name {
            "openat" if ret >= 0 => {
                out.push(Call::Open { path: paths[0].clone(), created: call.contains("O_CREAT"), fd: ret })
            }
            "fsync" | "fdatasync" => {
                let fd = call.trim_start_matches(name).trim_matches(|c| c == '(' || c == ')').parse().unwrap_or(-1);
                out.push(Call::Fsync { fd, ok: ret == 0 });
            }
            "rename" | "renameat" | "renameat2" | "mkdir" | "mkdirat" if ret == 0 => {
                out.push(Call::Made(paths.last().cloned().unwrap_or_default()))
            }
            _ => {}
        }
    }
    out
}

/// Index of the first call at or after `from` satisfying `f`.
fn find(calls: &[Call], from: usize, f: impl Fn(&Call) -> bool) -> Option<usize> {
    calls.iter().skip(from).position(f).map(|i| i + from)
}

/// Asserts that after `made` (the call that created or renamed a file in `dir`, or made `dir`
/// itself in its parent), `dir` was opened and that very descriptor fsync'd successfully.
fn assert_dir_synced_after(calls: &[Call], made: usize, dir: &Path, what: &str) {
    let dir = dir.to_str().unwrap();
    let mut from = made + 1;
    while let Some(open) = find(calls, from, |c| matches!(c, Call::Open { path, .. } if path == dir)) {
        let Call::Open { fd, .. } = calls[open] else { unreachable!() };
        // The fd counts until it is handed out again by a later open.
        let reused =
            find(calls, open + 1, |c| matches!(c, Call::Open { fd: f, .. } if *f == fd)).unwrap_or(calls.len());
        if find(calls, open + 1, |c| *c == Call::Fsync { fd, ok: true }).is_some_and(|s| s < reused) {
            return;
        }
        from = open + 1;
    }
    panic!("{what}: {dir} was not opened and fsync'd after call #{made} ({:?}); calls: {calls:#?}", calls[made]);
}

fn index_of(calls: &[Call], what: &str, f: impl Fn(&Call) -> bool) -> usize {
    find(calls, 0, f).unwrap_or_else(|| panic!("no {what} in the trace: {calls:#?}"))
}

fn made(calls: &[Call], path: &Path) -> usize {
    let p = path.to_str().unwrap().to_owned();
    index_of(calls, &format!("rename/mkdir of {p}"), |c| *c == Call::Made(p.clone()))
}

fn ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_new_store_fsyncs_its_directory_after_creating_the_data_file() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("fresh");
    let data = parent.join("data");
    let log = tmp.path().join("serve.strace");
    let mut child = traced(&log)
        .args(["kv", "serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(crate::support::child_log::captured("kv serve"))
        .spawn()
        .expect("spawn strace");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let addr = first.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{first:?}"));
    let put = raw_http(
        addr.parse().unwrap(),
        b"PUT /state/k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(put.status, 201);
    // Stop the traced server (strace's child) cleanly; strace exits with it.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap();
    let pid: i32 = children.split_whitespace().next().expect("the traced server").parse().unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the traced server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }

    let calls = parse_trace(&log);
    // The directory itself is new: its entry in the parent is made durable too.
    assert_dir_synced_after(&calls, made(&calls, &data), &parent, "mkdir of the data directory");
    let file = data.join("kv.redb").to_str().unwrap().to_owned();
    let created = index_of(
        &calls,
        "the data file's creation",
        |c| matches!(c, Call::Open { path, created: true, .. } if *path == file),
    );
    assert_dir_synced_after(&calls, created, &data, "creation of kv.redb");
}

#[test]
fn backup_and_restore_fsync_the_directory_they_rename_into() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = KvServer::start(&data, &[]);
    let put = raw_http(
        server.addr(),
        b"PUT /state/k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(put.status, 201);

    // Online backup (`--url`) into a directory of its own.
    let online = tmp.path().join("online");
    std::fs::create_dir(&online).unwrap();
    let log = tmp.path().join("online.strace");
    let out = traced(&log).args(["kv", "backup", "--url", &server.url(), "--out"]).arg(online.join("b.jsonl")).output();
    ok(&out.unwrap(), "kv backup --url");
    let calls = parse_trace(&log);
    assert_dir_synced_after(&calls, made(&calls, &online.join("b.jsonl")), &online, "online backup");
    assert!(server.terminate().success());

    // Offline backup (`--data`).
    let offline = tmp.path().join("offline");
    std::fs::create_dir(&offline).unwrap();
    let backup = offline.join("b.jsonl");
    let log = tmp.path().join("offline.strace");
    ok(&traced(&log).args(["kv", "backup", "--data"]).arg(&data).arg("--out").arg(&backup).output().unwrap(), "backup");
    let calls = parse_trace(&log);
    assert_dir_synced_after(&calls, made(&calls, &backup), &offline, "offline backup");

    // Restore into a directory that does not exist yet.
    let restored = tmp.path().join("new").join("restored");
    std::fs::create_dir(tmp.path().join("new")).unwrap();
    let log = tmp.path().join("restore.strace");
    ok(&traced(&log).args(["kv", "restore"]).arg(&backup).arg("--data").arg(&restored).output().unwrap(), "restore");
    let calls = parse_trace(&log);
    assert_dir_synced_after(&calls, made(&calls, &restored), &tmp.path().join("new"), "mkdir by restore");
    assert_dir_synced_after(&calls, made(&calls, &restored.join("kv.redb")), &restored, "restore's rename");
}
