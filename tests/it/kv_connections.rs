//! Hostile connections against the real KV container: idle and slowloris sockets, the
//! connection cap, partial heads, ambiguous framing, h2c.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::kv::{raw_http, KvServer};

/// Far above what the server needs with the short timeouts the tests pass: a loaded machine
/// must not fail them, a server that never closes must.
const CLOSE_DEADLINE: Duration = Duration::from_secs(90);

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// The test holds over a thousand sockets: make sure the process may.
fn ensure_fd_limit(needed: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < needed as libc::rlim_t {
            lim.rlim_cur = (needed as libc::rlim_t).min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    assert!(lim.rlim_cur >= needed, "this test needs `ulimit -n` >= {needed}, have {}", lim.rlim_cur);
}

/// Sockets that send nothing, and sockets that send a request head one line at a time and
/// never finish it.
struct Attack {
    idle: Vec<TcpStream>,
    slow: Arc<Vec<TcpStream>>,
    stop: Arc<AtomicBool>,
    dripper: Option<std::thread::JoinHandle<()>>,
}

impl Attack {
    fn open(addr: SocketAddr, idle: usize, slow: usize) -> Attack {
        let idle: Vec<TcpStream> = (0..idle).map(|_| TcpStream::connect(addr).expect("connect idle")).collect();
        let slow: Vec<TcpStream> = (0..slow)
            .map(|_| {
                let mut s = TcpStream::connect(addr).expect("connect slow");
                let _ = s.write_all(b"PUT /state/slow HTTP/1.1\r\nHost: kv\r\n");
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let slow = Arc::new(slow);
        let stop = Arc::new(AtomicBool::new(false));
        let (drip_slow, drip_stop) = (slow.clone(), stop.clone());
        let dripper = std::thread::spawn(move || {
            // One more header line every 200 ms on every slow socket, as long as it is open.
            while !drip_stop.load(Ordering::Relaxed) {
                for mut s in drip_slow.iter() {
                    let _ = s.write(b"X-Drip: 1\r\n");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Attack { idle, slow, stop, dripper: Some(dripper) }
    }

    /// How many of the held sockets the server has not closed yet.
    fn still_open(&self) -> usize {
        self.idle.iter().chain(self.slow.iter()).filter(|s| is_open(s)).count()
    }

    fn total(&self) -> usize {
        self.idle.len() + self.slow.len()
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.dripper.take() {
            let _ = t.join();
        }
    }
}

/// Open = the server has neither closed nor reset it (a read would block).
fn is_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return false,
            // An answer (e.g. 431) is followed by a close; keep reading.
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

async fn healthz(client: &reqwest::Client, server: &KvServer) -> u16 {
    let resp = client.get(format!("{}/healthz", server.url())).send().await.expect("fresh /healthz answered");
    resp.status().as_u16()
}

async fn wait_until_all_closed(attack: &Attack) {
    let start = Instant::now();
    loop {
        let open = attack.still_open();
        if open == 0 {
            return;
        }
        assert!(start.elapsed() < CLOSE_DEADLINE, "{open} of {} held connections still open", attack.total());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_idle_and_slow_connections_do_not_lock_out_a_fresh_client() {
    ensure_fd_limit(4096);
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(
        dir.path(),
        &["--max-connections", "200", "--header-timeout-ms", "2000", "--idle-timeout-ms", "4000"],
    );
    let attack = Attack::open(server.addr(), 550, 550);
    // A fresh client (new connection each time) is served while 1,100 sockets are held.
    for _ in 0..5 {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        assert_eq!(healthz(&client, &server).await, 200);
        let put = client.put(format!("{}/state/fresh", server.url())).body("1").send().await.unwrap();
        assert!(put.status().is_success(), "PUT {}", put.status());
    }
    wait_until_all_closed(&attack).await;
    let client = reqwest::Client::new();
    assert_eq!(healthz(&client, &server).await, 200, "still serving after the attack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_and_partial_heads_are_closed_by_the_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    // The default cap (1024) is not reached here: only the timeouts close these.
    let server = KvServer::start(dir.path(), &["--header-timeout-ms", "1500", "--idle-timeout-ms", "3000"]);
    let mut attack = Attack::open(server.addr(), 40, 40);
    // Keep-alive connections that finished one request and then went quiet.
    for _ in 0..40 {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: kv\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut first = [0u8; 12];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        attack.idle.push(s);
    }
    wait_until_all_closed(&attack).await;
    let client = reqwest::Client::new();
    assert_eq!(healthz(&client, &server).await, 200);
}

/// Waits until the server has read every byte sent to it on at least `n` established
/// connections: none has unread bytes in its receive queue (`/proc/net/tcp`). Fails only when
/// that stops changing for [`CLOSE_DEADLINE`].
fn wait_until_read(server: SocketAddr, n: usize) {
    let table = if server.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let port = format!(":{:04X}", server.port());
    let (mut seen, mut changed) = ((0, 0), Instant::now());
    loop {
        let (mut conns, mut unread) = (0usize, 0u64);
        for line in std::fs::read_to_string(table).unwrap().lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue …; st 01 is ESTABLISHED.
            let f: Vec<&str> = line.split_whitespace().collect();
            if f[1].ends_with(&port) && f[3] == "01" {
                conns += 1;
                unread += u64::from_str_radix(f[4].split_once(':').unwrap().1, 16).unwrap();
            }
        }
        if conns >= n && unread == 0 {
            return;
        }
        if (conns, unread) != seen {
            (seen, changed) = ((conns, unread), Instant::now());
        }
        assert!(changed.elapsed() < CLOSE_DEADLINE, "{conns} connections, {unread} bytes unread");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn partial_heads_do_not_pin_memory() {
    ensure_fd_limit(2048);
    let dir = tempfile::tempdir().unwrap();
    // The header timeout far past the test: the heads stay held until measured.
    let server = KvServer::start(dir.path(), &["--header-timeout-ms", "600000"]);
    let before = status_kib(server.pid(), "VmHWM:");
    // 600 heads of ~15 KiB each (just under the 16 KiB head limit), never finished.
    let line = format!("X-Pad: {}\r\n", "p".repeat(1000));
    let head: String = std::iter::once("GET /state/k HTTP/1.1\r\nHost: kv\r\n".to_owned())
        .chain(std::iter::repeat_n(line, 15))
        .collect();
    let held: Vec<TcpStream> = (0..600)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr()).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    // The peak is read once the server holds every head, however long a loaded machine takes.
    wait_until_read(server.addr(), held.len());
    let after = status_kib(server.pid(), "VmHWM:");
    eprintln!("kv VmHWM {before} KiB before, {after} KiB with 600 partial 15 KiB heads held");
    // Unbounded, this was ~250 KiB per connection (150 MB); bounded it is the head buffer.
    assert!(after < before + 48 * 1024, "partial heads pinned {} KiB", after - before);
    drop(held);
}

#[test]
fn content_length_with_transfer_encoding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    for head in [
        "PUT /state/k HTTP/1.1\r\nHost: kv\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n\"a\"\r\n0\r\n\r\n",
        "PUT /state/k HTTP/1.1\r\nHost: kv\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n3\r\n\"a\"\r\n0\r\n\r\n",
    ] {
        let resp = raw_http(server.addr(), head.as_bytes());
        assert_eq!(resp.status, 400, "{head:?}");
        assert_eq!(resp.header("connection"), Some("close"));
        let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(body["error"], "bad_framing");
    }
    let get = raw_http(server.addr(), b"GET /state/k HTTP/1.1\r\nHost: kv\r\nConnection: close\r\n\r\n");
    assert_eq!(get.status, 404, "nothing was stored");
    // Either framing alone is fine.
    let chunked = "PUT /state/k HTTP/1.1\r\nHost: kv\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\n\"a\"\r\n0\r\n\r\n";
    assert_eq!(raw_http(server.addr(), chunked.as_bytes()).status, 201);
}

#[tokio::test]
async fn non_utf8_or_non_json_bodies_are_refused_and_h2c_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let url = format!("{}/state/k", server.url());
    for bad in [&b"\"\xff\xfe\""[..], b"{\"a\":\"\xc3\x28\"}", b"not json", b""] {
        let resp = h2.put(&url).body(bad.to_vec()).send().await.unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        assert_eq!(resp.status(), 400, "{bad:?}");
        let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(body["error"], "invalid_json");
    }
    let resp = h2.put(&url).body("{\"ok\":\"é\"}").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(h2.get(&url).send().await.unwrap().text().await.unwrap(), "{\"ok\":\"é\"}");
}
