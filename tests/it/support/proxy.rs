//! A loopback TCP proxy between the plugin and a real store that injects faults: answers
//! held back or swallowed (the write landed, the caller cannot know), and requests held back
//! (the write lands later than the caller waited, after the writes queued behind it).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the proxy does to the first `times` requests that contain `trigger`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// Forward both ways.
    Pass,
    /// Hold the store's answers on that connection (the request itself is forwarded). With
    /// `release = Some(p)`, everything held is forwarded in order as soon as the client sends
    /// bytes containing `p` on that connection: the answer arrives, but only after the
    /// client gave up waiting and asked again. With `None` the answers never arrive (a
    /// connection that went silent).
    Hold { trigger: &'static [u8], times: usize, release: Option<&'static [u8]> },
    /// Wait for the store's answer, drop it, and close the connection both ways: the request
    /// was applied, its answer is lost.
    Cut { trigger: &'static [u8], times: usize },
    /// Hold the request itself for `hold` before forwarding it (to the store, even if the
    /// client has gone by then). With `cut_after`, the client's connection is closed after
    /// that long, as a load balancer gives up on a slow upstream. With `queue`, later requests
    /// containing `trigger`, on any connection, wait behind the held one until it was
    /// forwarded: a store that applies writes in the order they arrive.
    HoldRequest { trigger: &'static [u8], times: usize, hold: Duration, cut_after: Option<Duration>, queue: bool },
}

#[derive(Default)]
enum Mode {
    #[default]
    Normal,
    Holding {
        held: Vec<u8>,
        release: Option<&'static [u8]>,
        released: bool,
    },
    CutPending,
    /// A request is held until then; answers pass.
    RequestHeld {
        until: Instant,
    },
}

struct Shared {
    fault: Fault,
    /// Until when requests containing the trigger wait behind a held one.
    gate: Mutex<Option<Instant>>,
    remaining: AtomicUsize,
    fired: AtomicUsize,
    /// Held requests (held, or queued behind a held one) forwarded to the store so far.
    released: AtomicUsize,
    /// Of those, the requests the fault itself held (not the ones queued behind them).
    held_forwarded: AtomicUsize,
    connections: AtomicUsize,
    /// Connections the store has closed (its answers ended).
    store_closed: AtomicUsize,
    stop: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
}

pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards every connection to `upstream`.
    pub(crate) fn start(upstream: SocketAddr, fault: Fault) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let times = match fault {
            Fault::Pass => 0,
            Fault::Hold { times, .. } | Fault::Cut { times, .. } | Fault::HoldRequest { times, .. } => times,
        };
        let shared = Arc::new(Shared {
            fault,
            gate: Mutex::new(None),
            remaining: AtomicUsize::new(times),
            fired: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
            held_forwarded: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            store_closed: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(vec![]),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(store) = TcpStream::connect(upstream) else { continue };
                s.connections.fetch_add(1, Ordering::SeqCst);
                let _ = client.set_nodelay(true);
                let _ = store.set_nodelay(true);
                {
                    let mut socks = s.sockets.lock().unwrap();
                    socks.push(client.try_clone().unwrap());
                    socks.push(store.try_clone().unwrap());
                }
                let mode = Arc::new(Mutex::new(Mode::Normal));
                let (c2, s2, m2, sh2) =
                    (client.try_clone().unwrap(), store.try_clone().unwrap(), mode.clone(), s.clone());
                std::thread::spawn(move || requests(c2, s2, m2, sh2));
                let sh3 = s.clone();
                std::thread::spawn(move || {
                    answers(store, client, mode);
                    sh3.store_closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Proxy { addr, shared }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub(crate) fn redis_url(&self) -> String {
        format!("redis://{}/0", self.addr)
    }

    /// How many requests the fault has been applied to so far.
    pub(crate) fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// How many held requests (held, or queued behind a held one) were forwarded so far.
    pub(crate) fn released(&self) -> usize {
        self.shared.released.load(Ordering::SeqCst)
    }

    /// How many requests the fault itself held (`HoldRequest`; not those queued behind them)
    /// were forwarded to the store so far.
    pub(crate) fn held_forwarded(&self) -> usize {
        self.shared.held_forwarded.load(Ordering::SeqCst)
    }

    /// Waits until `n` held requests were forwarded to the store (at most `within`).
    pub(crate) async fn until_released(&self, n: usize, within: Duration) {
        let end = Instant::now() + within;
        while self.released() < n {
            assert!(Instant::now() < end, "only {} of {n} held requests were forwarded", self.released());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Returns once every connection made to the proxy before this call has been accepted and
    /// counted in [`Proxy::connections`]: a client may connect and write its request, then die,
    /// while the proxy (busy on a loaded machine) has not yet accepted it, and that request
    /// still reaches the store later. The listener accepts in the order connections arrived,
    /// so once a connection made now is accepted, all earlier ones were. That connection is
    /// closed again (and so counted in `store_closed` once the store closes its side).
    pub(crate) async fn settle_accepts(&self, stall: Duration) {
        let probe = tokio::net::TcpStream::connect(self.addr).await.expect("connect to the proxy");
        let me = probe.local_addr().unwrap();
        let started = Instant::now();
        loop {
            let accepted = self.shared.sockets.lock().unwrap().iter().any(|s| s.peer_addr().ok() == Some(me));
            if accepted {
                return;
            }
            assert!(started.elapsed() < stall, "the proxy did not accept a connection within {stall:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Connections whose answers have ended so far: the store closed them (or a `Cut` did), so
    /// it is done with every request they carried.
    pub(crate) fn store_closed(&self) -> usize {
        self.shared.store_closed.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        for s in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// Client → store: always forwarded at once; arms the fault (before forwarding, so the
/// answer-side thread cannot miss it) and notices the release pattern.
fn requests(mut client: TcpStream, mut store: TcpStream, mode: Arc<Mutex<Mode>>, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 64 * 1024];
    // The tail of earlier reads, so a pattern split across two reads is still seen.
    let mut window: Vec<u8> = Vec::new();
    let mut held_any = false;
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        window.extend_from_slice(&buf[..n]);
        let wait;
        let held_here;
        {
            let mut m = mode.lock().unwrap();
            let mut matched = false;
            match &mut *m {
                Mode::Holding { release: Some(p), released, .. } if !*released && contains(&window, p) => {
                    *released = true;
                    matched = true;
                }
                Mode::Normal => {
                    let trigger = match shared.fault {
                        Fault::Pass => None,
                        Fault::Hold { trigger, .. }
                        | Fault::Cut { trigger, .. }
                        | Fault::HoldRequest { trigger, .. } => Some(trigger),
                    };
                    if trigger.is_some_and(|t| contains(&window, t))
                        && shared
                            .remaining
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
                            .is_ok()
                    {
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        matched = true;
                        *m = match shared.fault {
                            Fault::Hold { release, .. } => Mode::Holding { held: vec![], release, released: false },
                            Fault::HoldRequest { hold, cut_after, queue, .. } => {
                                let until = Instant::now() + hold;
                                if queue {
                                    *shared.gate.lock().unwrap() = Some(until);
                                }
                                if let Some(after) = cut_after {
                                    let c = client.try_clone().unwrap();
                                    std::thread::spawn(move || {
                                        std::thread::sleep(after);
                                        let _ = c.shutdown(Shutdown::Both);
                                    });
                                }
                                Mode::RequestHeld { until }
                            }
                            _ => Mode::CutPending,
                        };
                    }
                }
                _ => {}
            }
            held_here = matched && matches!(*m, Mode::RequestHeld { .. });
            wait = match &mut *m {
                Mode::RequestHeld { until } if matched => Some(*until),
                // Queued behind a held write: forwarded just after it.
                Mode::Normal if !matched => shared
                    .gate
                    .lock()
                    .unwrap()
                    .filter(|g| {
                        *g > Instant::now() && queued_trigger(&shared.fault).is_some_and(|t| contains(&window, t))
                    })
                    .map(|g| g + Duration::from_millis(50)),
                _ => None,
            };
            if matched {
                window.clear();
            } else if window.len() > 128 {
                window.drain(..window.len() - 128);
            }
        }
        if let Some(until) = wait {
            held_any = true;
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        if store.write_all(&buf[..n]).is_err() {
            break;
        }
        if wait.is_some() {
            shared.released.fetch_add(1, Ordering::SeqCst);
        }
        if held_here {
            shared.held_forwarded.fetch_add(1, Ordering::SeqCst);
        }
    }
    if held_any {
        // The client may be gone, but the held request still gets its answer from the store
        // (a half-closed connection could make the server drop it unanswered).
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = store.shutdown(Shutdown::Write);
}

fn queued_trigger(fault: &Fault) -> Option<&'static [u8]> {
    match fault {
        Fault::HoldRequest { trigger, .. } => Some(trigger),
        _ => None,
    }
}

/// Store → client: forwards, holds or swallows according to the connection's mode.
fn answers(mut store: TcpStream, mut client: TcpStream, mode: Arc<Mutex<Mode>>) {
    let mut buf = vec![0u8; 64 * 1024];
    // Once the client is gone, the store's answers are read and dropped until it closes, so
    // the end of this function is the store being done with the connection.
    let mut client_gone = false;
    loop {
        let n = match store.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let out = {
            let mut m = mode.lock().unwrap();
            match &mut *m {
                Mode::Normal | Mode::RequestHeld { .. } => buf[..n].to_vec(),
                Mode::Holding { held, released, .. } => {
                    held.extend_from_slice(&buf[..n]);
                    if !*released {
                        continue;
                    }
                    let out = std::mem::take(held);
                    *m = Mode::Normal;
                    out
                }
                Mode::CutPending => {
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = store.shutdown(Shutdown::Both);
                    return;
                }
            }
        };
        client_gone = client_gone || client.write_all(&out).is_err();
    }
    let _ = client.shutdown(Shutdown::Write);
}
