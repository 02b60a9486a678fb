//! Backwards invocation: a session's calls into Dify through the daemon (`invoke` out, `backwards_response` lines back, matched by `backwards_request_id`).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

/// How long a call waits for the daemon's next line before giving up: the Python SDK's
/// `MAX_INVOCATION_TIMEOUT`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(250);

/// Knobs of backwards calls: the silence after which a call fails, and where its ids come from.
#[derive(Debug, Clone)]
pub struct BackwardsOptions {
    /// Longest wait for the daemon's next line of an answer (250 s by default).
    pub timeout: Duration,
    /// The `backwards_request_id` of each call.
    pub ids: RequestIds,
}

impl Default for BackwardsOptions {
    fn default() -> Self {
        BackwardsOptions { timeout: DEFAULT_TIMEOUT, ids: RequestIds::random() }
    }
}

/// Makes each call's `backwards_request_id`. The daemon only echoes it back, so it must be
/// unique among the calls in flight on one connection; tests inject a fixed sequence.
#[derive(Clone)]
pub struct RequestIds(Arc<dyn Fn() -> String + Send + Sync>);

impl RequestIds {
    /// 32 hex digits, as the SDK's `uuid4().hex`: 64 random bits drawn once per process
    /// (from std's hash seed, which comes from the OS), then a counter.
    pub fn random() -> Self {
        let prefix = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let counter = AtomicU64::new(0);
        RequestIds::from_fn(move || format!("{prefix:016x}{:016x}", counter.fetch_add(1, Ordering::Relaxed)))
    }

    /// Ids from `next`, called once per call.
    pub fn from_fn(next: impl Fn() -> String + Send + Sync + 'static) -> Self {
        RequestIds(Arc::new(next))
    }

    fn next(&self) -> String {
        (self.0)()
    }
}

impl fmt::Debug for RequestIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestIds(..)")
    }
}

/// Why a backwards call did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackwardsError {
    /// The daemon answered with an `error` line (Dify refused or failed the call).
    #[error("the backwards call failed: {0}")]
    Daemon(String),
    /// No line of the answer came within the timeout.
    #[error("no answer to the backwards call within {0:?}")]
    Timeout(Duration),
    /// The runtime cannot call back into Dify (say, serverless: no duplex connection).
    #[error("this runtime cannot call back into Dify: {0}")]
    Unsupported(&'static str),
    /// The connection to the daemon ended before the answer did.
    #[error("the connection to the daemon closed before the backwards call was answered")]
    Closed,
    /// The answer is not what the call expects (say, storage data that is not hex).
    #[error("unexpected answer to a backwards call: {0}")]
    Unexpected(String),
}

/// One line of the daemon's answer to a call.
#[derive(Debug)]
enum Reply {
    Response(Value),
    Error(String),
    End,
}

/// The `data` of a `backwards_response` line.
#[derive(Deserialize)]
struct ReplyLine {
    backwards_request_id: String,
    event: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    data: Option<Value>,
}

/// The calls in flight on one connection, by id: the reader delivers each `backwards_response`
/// to its call without waiting (the channel is unbounded: a call reads its own answer, and the
/// reader must never stall behind one slow caller).
/// One `Arc`: every session's outbox holds a clone.
#[derive(Clone, Debug)]
pub(crate) struct Calls(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    /// How many calls wait for an answer (the map's length, kept beside it): the reader looks
    /// at this before it looks at a line, so a plugin that makes no backwards calls pays one
    /// atomic load per request line.
    waiting: AtomicUsize,
    options: BackwardsOptions,
}

/// The marker of a `backwards_response` line, searched for before anything is parsed.
static MARKER: LazyLock<memchr::memmem::Finder<'static>> =
    LazyLock::new(|| memchr::memmem::Finder::new(b"\"backwards_response\""));

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<String, mpsc::UnboundedSender<Reply>>,
    closed: bool,
}

impl Calls {
    pub(crate) fn new(options: BackwardsOptions) -> Self {
        Calls(Arc::new(Shared { pending: Mutex::default(), waiting: AtomicUsize::new(0), options }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes the number of waiting calls after a change of `pending` (under its lock).
    fn count(&self, pending: &Pending) {
        self.0.waiting.store(pending.waiters.len(), Ordering::Release);
    }

    /// Registers a new call (before its `invoke` line goes out, so no answer can miss it).
    pub(crate) fn register(&self) -> Result<BackwardsCall, BackwardsError> {
        let id = self.0.options.ids.next();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut pending = self.lock();
        if pending.closed {
            return Err(BackwardsError::Closed);
        }
        pending.waiters.insert(id.clone(), tx);
        self.count(&pending);
        drop(pending);
        Ok(BackwardsCall { id, rx, calls: self.clone(), timeout: self.0.options.timeout, state: CallState::Open })
    }

    pub(crate) fn forget(&self, id: &str) {
        let mut pending = self.lock();
        pending.waiters.remove(id);
        self.count(&pending);
    }

    /// Takes `line` when it is a `backwards_response` while a call waits (true), delivering it
    /// to its call, or logging and dropping it when it names none of them. Any other line is
    /// left (false); so is every line while no call waits (a registered call is counted before
    /// its `invoke` goes out, so its answer cannot come earlier), and the request path drops a
    /// `backwards_response` it is left.
    pub(crate) fn route_line(&self, line: &[u8]) -> bool {
        // Cheap looks first: request lines, the hot path, are not parsed twice.
        if self.0.waiting.load(Ordering::Acquire) == 0 || MARKER.find(line).is_none() {
            return false;
        }
        match super::Inbound::parse(line) {
            Ok(message) if message.event == "backwards_response" => {
                match message.data.as_deref() {
                    Some(data) => self.route(data),
                    None => tracing::warn!("dropped a backwards_response without data"),
                }
                true
            }
            _ => false,
        }
    }

    fn route(&self, data: &RawValue) {
        let reply: ReplyLine = match serde_json::from_str(data.get()) {
            Ok(reply) => reply,
            Err(e) => return tracing::warn!("dropped a malformed backwards_response: {e}"),
        };
        let (id, end) = (reply.backwards_request_id, reply.event == "end");
        let reply = match reply.event.as_str() {
            "response" => Reply::Response(reply.data.unwrap_or(Value::Null)),
            "error" => Reply::Error(reply.message.unwrap_or_default()),
            "end" => Reply::End,
            other => {
                return tracing::warn!(backwards_request_id = id, "dropped a backwards_response of event {other:?}")
            }
        };
        let mut pending = self.lock();
        // The `end` closes the call here, so a call that stopped reading after an `error`
        // still leaves no entry behind.
        let waiter = if end { pending.waiters.remove(&id) } else { pending.waiters.get(&id).cloned() };
        self.count(&pending);
        drop(pending);
        match waiter {
            Some(tx) => {
                if tx.send(reply).is_err() {
                    tracing::debug!(
                        backwards_request_id = id,
                        "a backwards_response came after its call stopped reading"
                    );
                }
            }
            None => tracing::warn!(backwards_request_id = id, "dropped a backwards_response for no call in flight"),
        }
    }

    /// The connection ended: every waiting call fails with [`BackwardsError::Closed`], and so
    /// does every later one.
    pub(crate) fn close(&self) {
        let mut pending = self.lock();
        pending.closed = true;
        pending.waiters.clear();
        self.count(&pending);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    Open,
    /// An `error` came; the daemon's `end` follows and removes the entry.
    Failed,
    Done,
}

/// One backwards call in flight: the daemon's answer, line by line. Dropping it stops
/// listening; lines that still come for it are dropped.
#[derive(Debug)]
pub struct BackwardsCall {
    id: String,
    rx: mpsc::UnboundedReceiver<Reply>,
    calls: Calls,
    timeout: Duration,
    state: CallState,
}

impl BackwardsCall {
    /// The call's `backwards_request_id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next `response`'s `data`; `None` after the daemon's `end`. An `error` line, a
    /// silence longer than the timeout or a closed connection is the last item.
    pub async fn next(&mut self) -> Option<Result<Value, BackwardsError>> {
        if self.state != CallState::Open {
            return None;
        }
        let (state, item) = match tokio::time::timeout(self.timeout, self.rx.recv()).await {
            Ok(Some(Reply::Response(data))) => return Some(Ok(data)),
            Ok(Some(Reply::End)) => (CallState::Done, None),
            Ok(Some(Reply::Error(message))) => (CallState::Failed, Some(Err(BackwardsError::Daemon(message)))),
            Ok(None) => (CallState::Done, Some(Err(BackwardsError::Closed))),
            Err(_) => (CallState::Done, Some(Err(BackwardsError::Timeout(self.timeout)))),
        };
        self.state = state;
        item
    }

    /// Every `response`'s `data` until the daemon's `end`.
    pub async fn collect(mut self) -> Result<Vec<Value>, BackwardsError> {
        let mut all = Vec::new();
        while let Some(item) = self.next().await {
            all.push(item?);
        }
        Ok(all)
    }
}

impl Drop for BackwardsCall {
    fn drop(&mut self) {
        if self.state != CallState::Failed {
            self.calls.forget(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(timeout: Duration) -> Calls {
        let n = AtomicU64::new(0);
        Calls::new(BackwardsOptions {
            timeout,
            ids: RequestIds::from_fn(move || format!("id{}", n.fetch_add(1, Ordering::Relaxed))),
        })
    }

    fn line(id: &str, event: &str, data: Value) -> Vec<u8> {
        let data = json!({"backwards_request_id": id, "event": event, "message": "stream", "data": data});
        json!({"session_id": "s", "event": "backwards_response", "data": data}).to_string().into_bytes()
    }

    fn in_flight(calls: &Calls) -> usize {
        let n = calls.lock().waiters.len();
        assert_eq!(calls.0.waiting.load(Ordering::Acquire), n, "the count follows the map");
        n
    }

    /// The timeout is a silence, not a deadline: a streamed answer may take longer in all.
    #[tokio::test(start_paused = true)]
    async fn the_timeout_counts_silence_only() {
        let calls = calls(Duration::from_secs(250));
        let mut call = calls.register().unwrap();
        let feeder = calls.clone();
        tokio::spawn(async move {
            for i in 0..3 {
                tokio::time::sleep(Duration::from_secs(200)).await;
                assert!(feeder.route_line(&line("id0", "response", json!(i))));
            }
            assert!(feeder.route_line(&line("id0", "end", Value::Null)));
        });
        let start = tokio::time::Instant::now();
        let mut got = Vec::new();
        while let Some(item) = call.next().await {
            got.push(item.unwrap());
        }
        assert_eq!(got, [json!(0), json!(1), json!(2)]);
        assert_eq!(start.elapsed(), Duration::from_secs(600));
        assert_eq!(in_flight(&calls), 0, "the end closed the call");
    }

    #[tokio::test]
    async fn only_backwards_responses_are_taken_and_odd_ones_are_dropped() {
        let calls = calls(Duration::from_secs(1));
        let request = br#"{"session_id":"s","event":"request","data":{"text":"\"backwards_response\""}}"#;
        assert!(!calls.route_line(request), "no call waits");
        let mut call = calls.register().unwrap();
        assert!(!calls.route_line(request), "a request mentioning the word is still a request");
        assert!(!calls.route_line(br#"{"session_id":"s","event":"request","data":{}}"#));
        assert!(calls.route_line(br#"{"session_id":"s","event":"backwards_response","data":{"event":"end"}}"#));
        assert!(calls.route_line(br#"{"session_id":"s","event":"backwards_response"}"#));
        assert!(calls.route_line(&line("id0", "progress", json!(1))), "an unknown event is dropped");
        assert!(calls.route_line(&line("id0", "response", json!("x"))));
        assert_eq!(call.next().await, Some(Ok(json!("x"))), "the odd lines reached nobody");
        drop(call);
        assert_eq!(in_flight(&calls), 0, "a call dropped before its end stops listening");
        assert!(!calls.route_line(&line("id0", "end", Value::Null)), "with no call waiting, the request path drops it");
        let _other = calls.register().unwrap();
        assert!(calls.route_line(&line("id0", "end", Value::Null)), "while another waits, it is taken and dropped");
    }

    #[tokio::test]
    async fn a_failed_call_is_forgotten_at_its_end_and_a_closed_connection_fails_the_rest() {
        let calls = calls(Duration::from_secs(1));
        let mut failed = calls.register().unwrap();
        let mut waiting = calls.register().unwrap();
        assert!(calls.route_line(&line("id0", "error", Value::Null)));
        assert!(matches!(failed.next().await, Some(Err(BackwardsError::Daemon(_)))));
        assert_eq!(failed.next().await, None);
        drop(failed);
        assert_eq!(in_flight(&calls), 2, "the daemon's end is still to come");
        assert!(calls.route_line(&line("id0", "end", Value::Null)));
        assert_eq!(in_flight(&calls), 1);
        calls.close();
        assert_eq!(waiting.next().await, Some(Err(BackwardsError::Closed)));
        assert_eq!(calls.register().unwrap_err(), BackwardsError::Closed);
    }
}
