//! Per-connection bookkeeping of the KV container: when bytes last moved, whether a request
//! head is half-read, whether a request is in service, and a scan of each HTTP/1 head for
//! ambiguous framing (hyper silently drops one of `Content-Length` / `Transfer-Encoding`).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Milliseconds on a clock shared by every connection of one server.
#[derive(Clone, Copy)]
pub(crate) struct Epoch(Instant);

impl Epoch {
    pub(crate) fn new() -> Self {
        Epoch(Instant::now())
    }

    /// Never 0, so 0 can mean "not set".
    pub(crate) fn now_ms(self) -> u64 {
        self.0.elapsed().as_millis() as u64 + 1
    }
}

/// What the accept loop, the sweeper and the request service know about one connection.
pub(crate) struct ConnState {
    pub(crate) epoch: Epoch,
    pub(crate) opened_ms: u64,
    /// Last time a byte was read or written.
    pub(crate) last_io_ms: AtomicU64,
    /// When the first byte of a request head arrived that has not been answered yet (0: none).
    pub(crate) head_started_ms: AtomicU64,
    /// Requests in service (HTTP/2 serves several at once).
    pub(crate) in_flight: AtomicU32,
    /// Requests whose service has finished.
    pub(crate) completed: AtomicU64,
    pub(crate) started: AtomicU64,
    pub(crate) h2: AtomicBool,
    /// The last HTTP/1 head carried both `Content-Length` and `Transfer-Encoding`.
    pub(crate) bad_framing: AtomicBool,
    /// Set once the connection was told to close; it is then never picked again.
    pub(crate) closing: AtomicBool,
    pub(crate) close: Notify,
}

impl ConnState {
    pub(crate) fn new(epoch: Epoch) -> Self {
        let now = epoch.now_ms();
        ConnState {
            epoch,
            opened_ms: now,
            last_io_ms: AtomicU64::new(now),
            head_started_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            completed: AtomicU64::new(0),
            started: AtomicU64::new(0),
            h2: AtomicBool::new(false),
            bad_framing: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    /// Closes the connection; false if it was already told to.
    pub(crate) fn request_close(&self) -> bool {
        if self.closing.swap(true, Relaxed) {
            return false;
        }
        self.close.notify_one();
        true
    }

    /// Marks a request as in service until the guard is dropped.
    pub(crate) fn begin_request(self: &std::sync::Arc<Self>) -> InService {
        self.in_flight.fetch_add(1, Relaxed);
        self.started.fetch_add(1, Relaxed);
        self.head_started_ms.store(0, Relaxed);
        InService(self.clone())
    }
}

/// Held while a request is in service.
pub(crate) struct InService(std::sync::Arc<ConnState>);

impl InService {
    pub(crate) fn take_bad_framing(&self) -> bool {
        self.0.bad_framing.swap(false, Relaxed)
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        self.0.completed.fetch_add(1, Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
        self.0.last_io_ms.store(self.0.epoch.now_ms(), Relaxed);
    }
}

/// A socket that reports its traffic to a [`ConnState`].
pub(crate) struct Tracked<T> {
    io: T,
    state: std::sync::Arc<ConnState>,
    scan: HeadScan,
    first_read: bool,
}

impl<T> Tracked<T> {
    pub(crate) fn new(io: T, state: std::sync::Arc<ConnState>) -> Self {
        Tracked { io, state, scan: HeadScan::default(), first_read: true }
    }

    fn on_read(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let s = &self.state;
        let now = s.epoch.now_ms();
        s.last_io_ms.store(now, Relaxed);
        if std::mem::take(&mut self.first_read) && bytes.starts_with(b"PRI * HTTP/2") {
            s.h2.store(true, Relaxed);
        }
        if s.h2.load(Relaxed) {
            return;
        }
        if s.in_flight.load(Relaxed) == 0 && s.head_started_ms.load(Relaxed) == 0 {
            s.head_started_ms.store(now, Relaxed);
        }
        if self.scan.feed(bytes, s.completed.load(Relaxed)) {
            s.bad_framing.store(true, Relaxed);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let this = &mut *self;
            this.on_read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.state.last_io_ms.store(self.state.epoch.now_ms(), Relaxed);
            }
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.state.last_io_ms.store(self.state.epoch.now_ms(), Relaxed);
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Finds the header names of each HTTP/1 request head. It scans from the start of a head to
/// its blank line, then skips (the body) until that request has been answered. A head that
/// arrives in the same read as the previous body is not scanned: a miss, never a false alarm.
#[derive(Default)]
struct HeadScan {
    skipping: bool,
    /// Completed-request count at which the skipped request is answered.
    resume_at: u64,
    /// The current line's first bytes, lower-cased.
    line: [u8; 20],
    line_len: usize,
    line_any: bool,
    content_length: bool,
    transfer_encoding: bool,
}

impl HeadScan {
    /// Feeds bytes just read; true when a head with both framing headers just ended.
    fn feed(&mut self, bytes: &[u8], completed: u64) -> bool {
        if self.skipping {
            if completed < self.resume_at {
                return false;
            }
            self.skipping = false;
        }
        let mut ambiguous = false;
        for &b in bytes {
            match b {
                b'\n' => {
                    if !self.line_any {
                        // Blank line: end of the head.
                        ambiguous = self.content_length && self.transfer_encoding;
                        self.content_length = false;
                        self.transfer_encoding = false;
                        self.skipping = true;
                        self.resume_at = completed + 1;
                        self.line_len = 0;
                        break;
                    }
                    let line = &self.line[..self.line_len];
                    self.content_length |= line.starts_with(b"content-length:");
                    self.transfer_encoding |= line.starts_with(b"transfer-encoding:");
                    self.line_len = 0;
                    self.line_any = false;
                }
                b'\r' => {}
                _ => {
                    self.line_any = true;
                    if self.line_len < self.line.len() {
                        self.line[self.line_len] = b.to_ascii_lowercase();
                        self.line_len += 1;
                    }
                }
            }
        }
        ambiguous
    }
}

#[cfg(test)]
mod tests {
    use super::HeadScan;

    #[test]
    fn finds_both_framing_headers_across_reads() {
        let mut scan = HeadScan::default();
        assert!(!scan.feed(b"POST /state/k HTTP/1.1\r\nContent-Le", 0));
        assert!(scan.feed(b"ngth: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0));
        // The body is skipped until the request is answered.
        assert!(!scan.feed(b"\r\ncontent-length: 1\r\ntransfer-encoding: x\r\n\r\n", 0));
        assert!(!scan.feed(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1));
        assert!(scan.feed(b"GET / HTTP/1.1\r\nTRANSFER-ENCODING: chunked\r\ncontent-length: 2\r\n\r\n", 2));
    }
}
