//! Runs the real `stateful-tool kv serve` binary on an ephemeral loopback port for tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a (debug, possibly repairing) server may take to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running KV container child process. Dropping it kills the process.
pub(crate) struct KvServer {
    child: Child,
    addr: SocketAddr,
    /// `http` or `https` (with `--tls-cert`), as announced.
    scheme: &'static str,
    data_dir: PathBuf,
    extra_args: Vec<String>,
}

struct Launch<'a> {
    listen: &'a str,
    data_dir: &'a Path,
    extra_args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    stderr: Option<&'a Path>,
}

impl KvServer {
    /// Starts `kv serve --listen 127.0.0.1:0 --data <data_dir> <extra_args…>` and waits for
    /// the `listening on http://ip:port` line on its stdout.
    pub(crate) fn start(data_dir: &Path, extra_args: &[&str]) -> KvServer {
        Self::start_with_env(data_dir, extra_args, &[])
    }

    /// Like [`KvServer::start`], with extra environment variables for the child.
    pub(crate) fn start_with_env(data_dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> KvServer {
        Self::launch(Launch { listen: "127.0.0.1:0", data_dir, extra_args, env, stderr: None })
    }

    /// Starts on a fixed `listen` address (e.g. the address of an earlier run, so clients
    /// that know it keep working across a restart).
    pub(crate) fn start_at(listen: &str, data_dir: &Path, extra_args: &[&str]) -> KvServer {
        Self::launch(Launch { listen, data_dir, extra_args, env: &[], stderr: None })
    }

    /// Like [`KvServer::start_with_env`], with the server's stderr (its log) written to `log`.
    pub(crate) fn start_logged(data_dir: &Path, extra_args: &[&str], env: &[(&str, &str)], log: &Path) -> KvServer {
        Self::launch(Launch { listen: "127.0.0.1:0", data_dir, extra_args, env, stderr: Some(log) })
    }

    fn launch(l: Launch<'_>) -> KvServer {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stateful-tool"));
        cmd.args(["kv", "serve", "--listen", l.listen, "--data"])
            .arg(l.data_dir)
            .args(l.extra_args)
            // An ambient token must not leak into tests that expect an open store.
            .env_remove("KV_TOKEN")
            // Quiet by default; KV_TEST_LOG=debug logs more (shown for a failing test, or live
            // with --nocapture).
            .env("STATEFUL_TOOL_LOG", std::env::var("KV_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        match l.stderr {
            Some(path) => cmd.stderr(std::fs::File::create(path).expect("create the server log file")),
            // Through the harness's capture: a passing test's provoked errors stay quiet.
            None => cmd.stderr(super::child_log::captured("kv serve")),
        };
        for (k, v) in l.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn stateful-tool kv serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep draining so the server never blocks or fails on a full stdout pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!("kv server printed no 'listening on' line (exit: {status:?})");
            }
        };
        let (scheme, addr) = [("http", "listening on http://"), ("https", "listening on https://")]
            .into_iter()
            .find_map(|(scheme, prefix)| Some((scheme, line.strip_prefix(prefix)?.trim().parse().ok()?)))
            .unwrap_or_else(|| panic!("unexpected first stdout line {line:?}"));
        let extra_args = l.extra_args.iter().map(|s| s.to_string()).collect();
        KvServer { child, addr, scheme, data_dir: l.data_dir.to_path_buf(), extra_args }
    }

    /// `kill -9`, then a new server on the same address and data directory (crash recovery).
    pub(crate) fn restart(&mut self) {
        self.kill9();
        let args: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        *self = Self::start_at(&self.addr.to_string(), &self.data_dir.clone(), &args);
    }

    /// `http://127.0.0.1:<port>` (`https://` with TLS; no trailing slash).
    pub(crate) fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// SIGKILL: no shutdown code runs, exactly like a crash.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGHUP: the server re-reads its tokens file.
    pub(crate) fn hangup(&self) {
        let status = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -HUP");
    }

    /// SIGTERM and wait (bounded) for a clean exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                self.kill9();
                panic!("kv server did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Runs `kv serve` with arguments it must refuse: asserts it exits non-zero without ever
/// announcing an address, and returns its stderr.
pub(crate) fn serve_refused(data_dir: &Path, extra_args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stateful-tool"))
        .args(["kv", "serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data_dir)
        .args(extra_args)
        .env_remove("KV_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run stateful-tool kv serve");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && out.stdout.is_empty(), "{extra_args:?} was not refused: {err}");
    err
}

/// A response read off a raw socket, for requests an HTTP client library would "fix"
/// (normalising `..`, refusing spaces) before sending.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Writes `request` verbatim, then reads until the server closes the connection (send
/// `Connection: close`). Write errors are ignored: the server may answer before reading all.
pub(crate) fn raw_http(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> RawResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete response: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    RawResponse { status, headers, body: raw[split + 4..].to_vec() }
}

/// The revision in an `ETag: "<n>"` header, if there is one.
pub(crate) fn etag_rev(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let tag = headers.get("etag")?.to_str().ok()?;
    tag.strip_prefix('"')?.strip_suffix('"')?.parse().ok()
}

/// A numeric header such as `KV-Modified-Ms`.
pub(crate) fn header_u64(headers: &reqwest::header::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// Asserts the `KV-Time-Ms` header every response must carry, and returns it.
pub(crate) fn server_time(headers: &reqwest::header::HeaderMap) -> u64 {
    let t = header_u64(headers, "kv-time-ms").expect("KV-Time-Ms on every response");
    assert!(t > 1_577_836_800_000, "KV-Time-Ms {t} is not a unix time in ms");
    t
}

/// The raw value stored for event `id` (no namespace) in the KV container at `url`, read
/// straight over HTTP, bypassing the plugin; `None` when the key is absent.
pub(crate) async fn raw_event(http: &reqwest::Client, url: &str, id: &str) -> Option<Vec<u8>> {
    let key = event_store::key::storage_key(None, id);
    let resp = http.get(format!("{url}/state/{key}")).send().await.unwrap();
    match resp.status().as_u16() {
        200 => Some(resp.bytes().await.unwrap().to_vec()),
        404 => None,
        other => panic!("GET {id}: HTTP {other}"),
    }
}

/// A KV container of one test's own, on a fresh data directory without fsync: the real store
/// for tests about the plugin (its protocol, transports, memory), not about the store's disk.
pub(crate) struct ScratchKv {
    pub server: KvServer,
    _dir: tempfile::TempDir,
}

impl ScratchKv {
    pub(crate) fn start() -> ScratchKv {
        let dir = tempfile::tempdir().unwrap();
        let server = KvServer::start(dir.path(), &["--durability", "none"]);
        ScratchKv { server, _dir: dir }
    }

    pub(crate) fn url(&self) -> String {
        self.server.url()
    }
}
