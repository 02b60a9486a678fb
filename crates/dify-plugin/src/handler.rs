//! The one interface between the runtimes and a plugin: a [`Handler`] answers each request on
//! its session, and the runtimes make sure every session is answered whatever happens.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::protocol::message::session_id_from_prefix;
use crate::protocol::wire::MAX_INPUT_LINE;
use crate::protocol::{Caller, Outbox, RequestData, Session};

/// What answers one request: the plugin. Every runtime takes any `Handler`, so a test can
/// inject one that misbehaves (panics, say) without a test branch in the plugin itself.
pub trait Handler: Send + Sync + 'static {
    /// What a request's `data` object (`type`, `action`, and the action's fields) is read
    /// into. A request line is read in one pass, its `data` straight into this type (from the
    /// object's members), which may borrow strings and raw members from the line.
    type Data<'a>: Deserialize<'a> + Send;

    /// Answers `data` on `session` and ends it (exactly one `end`). `request` is the same data
    /// as text, for reading it again another way (say, as a tree).
    fn handle<'a>(
        &'a self,
        session: Session,
        data: Self::Data<'a>,
        request: &'a RequestData,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// The error answering a line that names a session but is not a request this protocol
    /// can take, or whose data does not read as [`Handler::Data`] (`why` says what is wrong).
    /// By default `malformed_request`, "malformed request: {why}".
    fn malformed(&self, why: &str) -> ErrorMessage {
        ErrorMessage::new("malformed_request", format!("malformed request: {why}"))
    }

    /// The error answering a session whose handler panicked (the panic itself is logged).
    /// By default `internal_error`, saying the plugin failed and where to look.
    fn panicked(&self) -> ErrorMessage {
        ErrorMessage::new("internal_error", "the plugin failed while handling this request (see the plugin log)")
    }

    /// How to answer a line too long to hold that names a session: by default
    /// [`Oversize::Refuse`] with [`Handler::malformed`] of [`OversizeLine::describe`]. A
    /// handler that can still answer such a request usefully from what the line's start says
    /// (say, a trigger turning an oversize webhook into a 413 for its sender) hands a request
    /// of its own making to [`Handler::handle`] with [`Oversize::Handle`].
    fn oversize(&self, line: &OversizeLine<'_>) -> Oversize {
        Oversize::Refuse(self.malformed(&line.describe()))
    }
}

/// A request line longer than the runtime holds in memory: its first bytes and its length.
#[derive(Debug, Clone, Copy)]
pub struct OversizeLine<'a> {
    /// The line's first bytes (a few KiB; the daemon writes `session_id` first).
    pub prefix: &'a [u8],
    /// The whole line's length in bytes.
    pub len: usize,
}

impl OversizeLine<'_> {
    /// What is wrong with the line, for an error message: its length and the limit.
    pub fn describe(&self) -> String {
        format!("request line of {} bytes exceeds the {MAX_INPUT_LINE} byte limit", self.len)
    }

    /// The session the line names, when its start says.
    pub fn session_id(&self) -> Option<String> {
        session_id_from_prefix(self.prefix)
    }
}

/// A handler's answer to an oversize line ([`Handler::oversize`]).
#[derive(Debug)]
pub enum Oversize {
    /// Answer the session with this error.
    Refuse(ErrorMessage),
    /// Handle this request (made by the handler from what the line's start says) as if the
    /// line had carried it.
    Handle(RequestData),
}

/// A session's `error` message as the daemon reads it: `error_type`, `message` and `args`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorMessage {
    /// The error's class, as the caller sees it (the Python SDK puts the exception's name here).
    pub error_type: String,
    /// What went wrong, for people.
    pub message: String,
    /// Machine-readable details; the daemon keeps at most 10 keys.
    pub args: Map<String, Value>,
}

impl ErrorMessage {
    /// An error of class `error_type` saying `message`, without details.
    pub fn new(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorMessage { error_type: error_type.into(), message: message.into(), args: Map::new() }
    }

    /// With `details` as `args` (an object's first 10 keys; anything else as `{"details": …}`).
    pub fn with_details(mut self, details: Option<Value>) -> Self {
        self.args = match details {
            Some(Value::Object(map)) => map.into_iter().take(10).collect(),
            Some(other) => [("details".to_owned(), other)].into_iter().collect(),
            None => Map::new(),
        };
        self
    }

    /// The `data` of the session `error` message: the one place an error becomes protocol JSON.
    pub fn to_wire(&self) -> Value {
        json!({ "error_type": self.error_type, "message": self.message, "args": self.args })
    }
}

/// Answers one session whatever happens: `handler`'s answer to the request, the error a line
/// that could not be taken as a request was refused with (`Err`), [`Handler::malformed`] for
/// data `handler` cannot read, or, should the handler panic, its [`Handler::panicked`] error.
/// The daemon waits for every session's `end`, so a bug in one handler must not leave its
/// session open.
pub(crate) async fn serve_session<H: Handler>(
    handler: &H,
    session_id: String,
    caller: Caller,
    outbox: Outbox,
    request: Result<RequestData, ErrorMessage>,
) {
    let session = Session::new(session_id.clone(), outbox.clone()).with_caller(caller);
    // The handler's future is awaited where it is made (not passed on by value): a future
    // passed as an argument is stored again in its callee's state, and the session's task,
    // which holds them all, is moved into its box whole.
    let work = async {
        match &request {
            Ok(request) => match request.parse::<H::Data<'_>>() {
                Ok(data) => handler.handle(session, data, request).await,
                Err(e) => session.finish(Some(handler.malformed(&e.to_string()).to_wire())).await,
            },
            Err(refusal) => session.finish(Some(refusal.to_wire())).await,
        }
    };
    if let Err(panic) = AssertUnwindSafe(work).catch_unwind().await {
        answer_panic(handler, session_id, caller, outbox, panic).await;
    }
}

/// Answers a session whose handler panicked with [`Handler::panicked`].
pub(crate) async fn answer_panic<H: Handler>(
    handler: &H,
    session_id: String,
    caller: Caller,
    outbox: Outbox,
    panic: Box<dyn std::any::Any + Send>,
) {
    log_panic(&session_id, &*panic);
    let session = Session::new(session_id, outbox).with_caller(caller);
    session.finish(Some(handler.panicked().to_wire())).await;
}

pub(crate) fn log_panic(session_id: &str, panic: &(dyn std::any::Any + Send)) {
    let what = panic.downcast_ref::<&str>().copied().or(panic.downcast_ref::<String>().map(String::as_str));
    tracing::error!(session_id, "a request handler panicked: {}", what.unwrap_or("(no message)"));
}
