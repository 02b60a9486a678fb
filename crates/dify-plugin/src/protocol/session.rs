//! The outbound side: one writer owns the output stream; sessions send whole lines to it.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::backwards::{BackwardsCall, BackwardsError, Calls};
use super::caller::Caller;
use super::outbound::{session_line, write_answer_end_lines, ToolAnswer};

/// Cloneable sender of complete lines to the single protocol writer. Bounded, so a daemon
/// that stops reading slows the plugin down instead of growing its memory. On a duplex
/// connection (stdio, remote) it also holds the connection's backwards calls in flight,
/// whose answers come back on the same connection.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Vec<u8>>,
    spare: Spare,
    calls: Option<Calls>,
}

/// Line buffers the writer is done with, handed out again: an answer's buffer is a few KiB,
/// and allocating one per request made the allocator consolidate its free lists each time.
type Spare = Arc<Mutex<Vec<Vec<u8>>>>;

/// At most this many spare buffers, each at most `SPARE_CAPACITY` bytes, are kept.
const SPARE_BUFFERS: usize = 256;
const SPARE_CAPACITY: usize = 64 * 1024;

impl Outbox {
    /// Creates the outbox and the writer future that drains it into `out`. The writer ends
    /// when every `Outbox` is dropped (after flushing) or when a write fails (e.g. EPIPE).
    pub(crate) fn new<W>(out: W, depth: usize) -> (Outbox, impl std::future::Future<Output = std::io::Result<()>>)
    where
        W: AsyncWrite + Unpin,
    {
        let (tx, rx) = mpsc::channel(depth);
        let spare = Spare::default();
        (Outbox { tx, spare: spare.clone(), calls: None }, write_lines(out, rx, spare))
    }

    /// The outbox of a duplex connection, whose sessions can call back into Dify.
    pub(crate) fn with_calls(mut self, calls: Calls) -> Self {
        self.calls = Some(calls);
        self
    }

    /// An empty buffer to build a line in (a recycled one when there is one).
    pub(crate) fn buffer(&self) -> Vec<u8> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }

    /// Gives back a buffer that was not sent.
    pub(crate) fn recycle(&self, buf: Vec<u8>) {
        recycle(&self.spare, buf);
    }

    /// Queues one line. Returns false when the writer is gone (output closed).
    pub(crate) async fn send(&self, line: Vec<u8>) -> bool {
        self.tx.send(line).await.is_ok()
    }

    /// A port for `log` events that does not keep the writer alive (the writer ends when
    /// the last `Outbox` is dropped, and a logger lives longer than any session loop).
    #[cfg(feature = "logging")]
    pub(crate) fn log_port(&self) -> LogPort {
        LogPort(self.tx.downgrade())
    }
}

/// Queues `log` events without waiting: a logging call must never block (the writer may be
/// on the same thread), so a full queue or a finished writer refuses the line instead.
#[cfg(feature = "logging")]
#[derive(Clone)]
pub(crate) struct LogPort(mpsc::WeakSender<Vec<u8>>);

#[cfg(feature = "logging")]
impl LogPort {
    /// True when the line was queued.
    pub(crate) fn try_log(&self, level: &str, message: &str) -> bool {
        self.0.upgrade().is_some_and(|tx| tx.try_send(super::outbound::log_line(level, message)).is_ok())
    }
}

fn recycle(spare: &Spare, mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > SPARE_CAPACITY {
        return;
    }
    let mut spare = spare.lock().unwrap_or_else(|p| p.into_inner());
    if spare.len() < SPARE_BUFFERS {
        buf.clear();
        spare.push(buf);
    }
}

/// Most bytes gathered into one write.
const BATCH_BYTES: usize = 64 * 1024;

async fn write_lines<W: AsyncWrite + Unpin>(
    mut out: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
    spare: Spare,
) -> std::io::Result<()> {
    let mut batch = Vec::with_capacity(BATCH_BYTES);
    while let Some(line) = rx.recv().await {
        // Gather whatever else is already queued and write it at once: one syscall per
        // burst, not per line.
        batch.extend_from_slice(&line);
        recycle(&spare, line);
        while batch.len() < BATCH_BYTES {
            let Ok(more) = rx.try_recv() else { break };
            batch.extend_from_slice(&more);
            recycle(&spare, more);
        }
        out.write_all(&batch).await?;
        out.flush().await?;
        batch.clear();
        if batch.capacity() > 4 * BATCH_BYTES {
            // A huge answer passed through: don't keep its buffer around.
            batch = Vec::with_capacity(BATCH_BYTES);
        }
    }
    out.flush().await
}

/// One invocation's reply channel. Its terminal message is sent by `finish`, which consumes
/// the handle, so a session cannot end twice.
pub struct Session {
    /// The session's id, as the request line named it.
    pub id: String,
    /// Who called; decides which messages an answer carries.
    pub caller: Caller,
    out: Outbox,
}

impl Session {
    /// A session of an unclassified caller (answers carry every message).
    pub(crate) fn new(id: String, out: Outbox) -> Self {
        Session { id, caller: Caller::Unknown, out }
    }

    pub(crate) fn with_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// Sends one `stream` message: `chunk` is what the daemon passes on (a tool's message,
    /// a trigger's answer, …).
    pub async fn stream(&self, chunk: &Value) {
        self.out.send(session_line(&self.id, "stream", chunk)).await;
    }

    /// Answers with a tool's result (its `text` and `json` messages, and its `variable`
    /// messages when the caller reads them) and ends the session, as one write to the
    /// output queue.
    pub async fn finish_with_answer<T: ToolAnswer + ?Sized>(self, answer: &T) {
        let (mut lines, mut scratch) = (self.out.buffer(), self.out.buffer());
        write_answer_end_lines(&mut lines, &mut scratch, &self.id, answer, self.caller.wants_variables());
        self.out.recycle(scratch);
        self.out.send(lines).await;
    }

    /// Calls back into Dify (`kind` is the daemon's invocation type: `storage`, `tool`,
    /// `llm`, `app`, …; the plugin's manifest must grant it): sends the `invoke` message and
    /// returns the call, whose answer comes line by line ([`BackwardsCall::next`]).
    pub async fn call(&self, kind: &str, request: &Value) -> Result<BackwardsCall, BackwardsError> {
        let calls = self.out.calls.as_ref().ok_or(BackwardsError::Unsupported(
            "backwards invocation needs a duplex connection (stdio or remote debugging); serverless is not supported yet",
        ))?;
        let call = calls.register()?;
        let data = serde_json::json!({"type": kind, "backwards_request_id": call.id(), "request": request});
        if !self.out.send(session_line(&self.id, "invoke", &data)).await {
            return Err(BackwardsError::Closed);
        }
        Ok(call)
    }

    /// [`Session::call`], waiting for the whole answer: every `response`'s `data`.
    pub async fn invoke(&self, kind: &str, request: &Value) -> Result<Vec<Value>, BackwardsError> {
        self.call(kind, request).await?.collect().await
    }

    /// Ends the session: an optional `error`, then exactly one `end`.
    pub async fn finish(self, error: Option<Value>) {
        if let Some(e) = error {
            self.out.send(session_line(&self.id, "error", &e)).await;
        }
        self.out.send(session_line(&self.id, "end", &serde_json::json!({}))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn session_writes_stream_error_end_in_order() {
        let mut buf = Vec::new();
        {
            let (outbox, writer) = Outbox::new(&mut buf, 4);
            let s = Session::new("s1".into(), outbox);
            let w = async move {
                s.stream(&json!({"result": true})).await;
                s.finish(Some(json!({"error_type":"x","message":"m","args":{}}))).await;
            };
            let (r, ()) = tokio::join!(writer, w);
            r.unwrap();
        }
        let lines: Vec<Value> =
            buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
        let kinds: Vec<&str> = lines.iter().map(|l| l["data"]["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["stream", "error", "end"]);
        assert!(lines.iter().all(|l| l["session_id"] == "s1"));
    }

    #[tokio::test]
    async fn a_session_without_a_duplex_connection_cannot_call_back() {
        let (outbox, _writer) = Outbox::new(Vec::new(), 4);
        let s = Session::new("s1".into(), outbox);
        let e = s.storage().get("k").await.unwrap_err();
        assert!(matches!(e, BackwardsError::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("serverless"), "{e}");
    }
}
