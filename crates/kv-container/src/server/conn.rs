//! The KV container's accept loop: hyper (HTTP/1.1 and h2c) over sockets we track, so every
//! connection has a header deadline, an idle deadline, a bounded read buffer and a place
//! under the connection cap. At the cap the oldest connection that is not serving a request
//! is closed to make room: idle sockets cannot lock a health check or a client out. No
//! accepted connection is ever dropped unanswered: while the evicted ones are still closing
//! (the hard ceiling), new connections wait in the kernel's listen queue. With TLS the
//! handshake comes first, bounded by the header timeout; the peer address rides along in
//! every request's extensions for the auth log.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use super::auth::Peer;
use super::limits::Limits;
use super::metrics::Metrics;
use super::tls::{handshake_failure, Tls};
use super::tracked::{ConnState, Epoch, Tracked};

/// How long, at shutdown, a connection may finish the request it is serving.
const SHUTDOWN_CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How often the connection counters are logged (when anything happened).
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Counters {
    evicted: AtomicU64,
    /// Times the accept loop waited at the hard ceiling for a connection to finish closing.
    paused: AtomicU64,
    header_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
    accept_errors: AtomicU64,
}

struct Conns {
    limits: Limits,
    epoch: Epoch,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    /// Signalled each time a connection is gone, for an accept loop waiting at the ceiling.
    gone: Notify,
    counters: Counters,
    metrics: Arc<Metrics>,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for the connection just accepted: at the cap, the quietest connection not
    /// serving a request is told to close.
    fn make_room(&self) {
        let open = self.lock();
        if open.len() < self.limits.max_connections {
            return;
        }
        let victim = open
            .values()
            .filter(|c| !c.closing.load(Relaxed) && c.in_flight.load(Relaxed) == 0)
            .min_by_key(|c| c.last_io_ms.load(Relaxed));
        if victim.is_some_and(|v| v.request_close()) {
            self.counters.evicted.fetch_add(1, Relaxed);
            self.metrics.connection_evicted();
        }
    }

    /// Waits until fewer than the hard ceiling are open. Closing takes a moment; accepting
    /// meanwhile and dropping the socket would turn a health probe away unanswered, so the
    /// next connections wait in the kernel's listen queue instead (bounded fds either way).
    async fn wait_below_ceiling(&self) {
        let mut paused = false;
        loop {
            let gone = self.gone.notified();
            tokio::pin!(gone);
            // Registered before the check: a close between the check and the wait still wakes us.
            gone.as_mut().enable();
            if self.lock().len() < self.limits.hard_ceiling() {
                return;
            }
            if !paused {
                paused = true;
                self.counters.paused.fetch_add(1, Relaxed);
            }
            // Every connection may be serving a request: try again as they finish.
            self.make_room();
            let _ = tokio::time::timeout(Duration::from_millis(100), gone).await;
        }
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
        self.gone.notify_waiters();
    }

    fn sweep(&self) {
        let now = self.epoch.now_ms();
        let header = self.limits.header_timeout.as_millis() as u64;
        let idle = self.limits.idle_timeout.as_millis() as u64;
        for c in self.lock().values() {
            if c.closing.load(Relaxed) {
                continue;
            }
            let quiet = now.saturating_sub(c.last_io_ms.load(Relaxed));
            let serving = c.in_flight.load(Relaxed) > 0;
            let head = c.head_started_ms.load(Relaxed);
            let slow_head = !serving && head != 0 && now.saturating_sub(head) >= header;
            // The first request (and for h2c the preface) is due within the header timeout.
            let no_request = c.started.load(Relaxed) == 0 && now.saturating_sub(c.opened_ms) >= header;
            if quiet >= idle {
                if c.request_close() {
                    self.counters.idle_timeouts.fetch_add(1, Relaxed);
                }
            } else if (slow_head || no_request) && c.request_close() {
                self.counters.header_timeouts.fetch_add(1, Relaxed);
            }
        }
    }

    fn log_counters(&self) {
        let take = |c: &AtomicU64| c.swap(0, Relaxed);
        let c = &self.counters;
        let (evicted, paused, accept_errors) = (take(&c.evicted), take(&c.paused), take(&c.accept_errors));
        let (header, idle) = (take(&c.header_timeouts), take(&c.idle_timeouts));
        let open = self.lock().len();
        if evicted + paused + accept_errors > 0 {
            tracing::warn!(
                "kv: connection limit {} reached: {evicted} quiet connections closed to make room, accepting paused \
                 {paused} times until closing ones were gone, {accept_errors} accept errors in the last {}s ({open} open)",
                self.limits.max_connections,
                LOG_EVERY.as_secs()
            );
        }
        if header + idle > 0 {
            tracing::info!(
                "kv: closed {header} connections that sent no complete request head within {:?} and {idle} idle \
                 for {:?} in the last {}s ({open} open)",
                self.limits.header_timeout,
                self.limits.idle_timeout,
                LOG_EVERY.as_secs()
            );
        }
    }
}

/// Serves `router` on `listener` until `shutdown` turns true, then lets the open requests
/// finish for up to `grace`. With `tls`, every connection is HTTPS.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    metrics: Arc<Metrics>,
    tls: Option<Tls>,
) {
    let conns = Arc::new(Conns {
        limits,
        epoch: Epoch::new(),
        next_id: AtomicU64::new(0),
        open: Mutex::new(HashMap::new()),
        gone: Notify::new(),
        counters: Counters::default(),
        metrics: metrics.clone(),
    });
    let builder = Arc::new(builder(&conns.limits));
    let housekeeping = tokio::spawn(housekeeping(conns.clone()));
    loop {
        tokio::select! {
            () = conns.wait_below_ceiling() => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (tcp, peer): (TcpStream, SocketAddr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors or memory: the backlog waits; try again shortly.
                conns.counters.accept_errors.fetch_add(1, Relaxed);
                tracing::debug!("kv: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        conns.make_room();
        let _ = tcp.set_nodelay(true);
        let id = conns.next_id.fetch_add(1, Relaxed);
        let state = Arc::new(ConnState::new(conns.epoch));
        conns.lock().insert(id, state.clone());
        metrics.connection_opened();
        let (conns, builder, router, shutdown) = (conns.clone(), builder.clone(), router.clone(), shutdown.clone());
        let (metrics, tls, handshake_timeout) = (metrics.clone(), tls.clone(), conns.limits.header_timeout);
        tokio::spawn(async move {
            match tls {
                None => serve_one(tcp, peer, state, &builder, router, shutdown).await,
                Some(tls) => match tokio::time::timeout(handshake_timeout, tls.acceptor.accept(tcp).into_fallible())
                    .await
                {
                    Ok(Ok(stream)) => serve_one(stream, peer, state, &builder, router, shutdown).await,
                    Ok(Err((e, tcp))) => {
                        let (reason, detail) = handshake_failure(&e);
                        tls.refusals.refused(Some(peer), reason, &detail);
                        close_after_alert(tcp).await;
                    }
                    Err(_) => {
                        tls.refusals.refused(Some(peer), "tls_handshake", "no TLS handshake within the header timeout")
                    }
                },
            }
            conns.remove(id);
            metrics.connection_closed();
        });
    }
    // Stop accepting, ask every connection to finish, wait for them (bounded).
    let deadline = tokio::time::Instant::now() + grace;
    while !conns.lock().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    housekeeping.abort();
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // hyper's read buffer holds the request head; its cap is the per-connection head memory.
    b.http1().max_buf_size(limits.max_header_bytes).max_headers(100);
    b.http2()
        .max_concurrent_streams(limits.h2_max_streams)
        .max_header_list_size(limits.max_header_bytes as u32)
        .max_send_buf_size(256 * 1024);
    b
}

async fn serve_one<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: T,
    peer: SocketAddr,
    state: Arc<ConnState>,
    builder: &auto::Builder<TokioExecutor>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Tracked::new(io, state.clone()));
    let svc_state = state.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        let guard = svc_state.begin_request();
        let mut router = router.clone();
        async move {
            if guard.take_bad_framing() {
                let mut resp = super::error::ApiError::ambiguous_framing().into_close_response();
                resp.headers_mut().insert(event_store::kv_wire::TIME_MS, super::record::system_now_ms().into());
                return Ok::<_, Infallible>(resp);
            }
            let resp = tower_service::Service::call(&mut router, req).await;
            drop(guard);
            resp
        }
    });
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        // Told to close by the sweeper or to make room: nothing is in service (or the
        // client stalled past the idle timeout), so the socket is simply dropped; hyper's
        // graceful path would wait for a half-sent head to complete.
        () = state.close.notified() => return,
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    state.closing.store(true, Relaxed);
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_CLOSE_GRACE, conn).await;
}

/// After a refused handshake the alert saying why is on its way; closing a socket with
/// unread bytes (the client's first request, under TLS 1.3) would reset the connection and
/// the client would lose it. So: end our side, and drain briefly until the client closes.
async fn close_after_alert(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

async fn housekeeping(conns: Arc<Conns>) {
    let tick = (conns.limits.header_timeout.min(conns.limits.idle_timeout) / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut sweep = tokio::time::interval(tick);
    let mut log = tokio::time::interval(LOG_EVERY);
    loop {
        tokio::select! {
            _ = sweep.tick() => conns.sweep(),
            _ = log.tick() => conns.log_counters(),
        }
    }
}
