//! The session loop over any line transport: stdin/stdout locally, the daemon's TCP socket
//! in remote mode, byte slices in tests.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::ServeOptions;
use crate::handler::{answer_panic, log_panic, serve_session, Handler};
use crate::protocol::message::{request_in_one_pass, session_id_from_prefix, HEARTBEAT};
use crate::protocol::{Caller, Inbound, Line, LineReader, Outbox, RequestData, Session};

/// Depth of the outbound line queue: enough for bursts, small enough to bound memory when
/// the daemon stops reading.
const OUTBOX_DEPTH: usize = 1024;

/// Serves until `input` ends and every in-flight session has answered, then flushes.
/// Returns an error when `output` fails (e.g. EPIPE): nobody is listening any more.
pub async fn serve<R, W, H>(input: R, output: W, app: Arc<H>, opts: ServeOptions) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
    H: Handler,
{
    let (outbox, writer) = Outbox::new(output, OUTBOX_DEPTH);
    // Until this loop ends, log records become `log` events on this stream (per `opts.logs`).
    let _logs = crate::logging::attach(outbox.log_port(), opts.logs);
    let work = drive(input, outbox, app, opts);
    tokio::pin!(writer, work);
    tokio::select! {
        biased;
        r = &mut writer => {
            r?;
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "protocol output closed"))
        }
        r = &mut work => {
            r?;
            writer.await
        }
    }
}

async fn drive<R: AsyncBufRead + Unpin, H: Handler>(
    input: R,
    outbox: Outbox,
    app: Arc<H>,
    opts: ServeOptions,
) -> io::Result<()> {
    // Ready as soon as the daemon sees this line: before any set-up work.
    outbox.send(HEARTBEAT.to_vec()).await;
    let heartbeat = tokio::spawn(beat(outbox.clone(), opts.heartbeat));
    let limit = Arc::new(Semaphore::new(opts.max_in_flight));
    let mut sessions = JoinSet::new();
    let mut lines = LineReader::new(input);
    let result = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        while sessions.try_join_next().is_some() {}
        // A complete line is read on its session's task, in one pass; one too long to hold is
        // answered from its start.
        let work = match line {
            Line::Complete(bytes) => Work::Line(bytes.to_vec()),
            oversize => match accept_line(oversize) {
                Some(accepted) => Work::Accepted(accepted),
                None => continue,
            },
        };
        let permit = limit.clone().acquire_owned().await.expect("semaphore is never closed");
        let (app, outbox) = (app.clone(), outbox.clone());
        // Boxed: a session's future holds its handler's state (a few KB; the plugin keeps its
        // rare, large paths behind boxes of their own, since this box is filled by copying the
        // whole future once), and tokio moves a task's future by value several times (into the
        // task cell, out as its output); behind a box each of those moves copies a pointer.
        sessions.spawn(Box::pin(async move {
            let _permit = permit;
            match work {
                Work::Line(line) => serve_line(&*app, line, outbox).await,
                Work::Accepted((session_id, caller, data)) => {
                    serve_session(&*app, session_id, caller, outbox, data).await
                }
            }
        }));
    };
    // End of input: let every in-flight session answer before the writer is released.
    while sessions.join_next().await.is_some() {}
    heartbeat.abort();
    let _ = heartbeat.await;
    result
}

async fn beat(outbox: Outbox, every: std::time::Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        if !outbox.send(HEARTBEAT.to_vec()).await {
            return;
        }
    }
}

/// Serves one complete line: a plain request read in one pass (its data straight into
/// [`Handler::Data`]); any other line as [`accept_line`] takes it (an error for a session it
/// names, nothing for a line that names none).
async fn serve_line<H: Handler>(handler: &H, line: Vec<u8>, outbox: Outbox) {
    let request = match String::from_utf8(line) {
        Ok(text) => RequestData::from_line(text.into_boxed_str()),
        Err(e) => {
            if let Some((sid, caller, request)) = accept_line(Line::Complete(e.as_bytes())) {
                serve_session(handler, sid, caller, outbox, request).await;
            }
            return;
        }
    };
    let text = request.source();
    // A panic while reading (in the handler's own `Data`) is answered on the session the line
    // names, as a panic in the handler is.
    let read = std::panic::catch_unwind(AssertUnwindSafe(|| request_in_one_pass::<H::Data<'_>>(text)));
    match read {
        Ok(Some((sid, caller, data))) => {
            let session = Session::new(sid.clone(), outbox.clone()).with_caller(caller);
            if let Err(panic) = AssertUnwindSafe(handler.handle(session, data, &request)).catch_unwind().await {
                answer_panic(handler, sid, caller, outbox, panic).await;
            }
        }
        Ok(None) => {
            if let Some((sid, caller, request)) = accept_line(Line::Complete(text.as_bytes())) {
                serve_session(handler, sid, caller, outbox, request).await;
            }
        }
        Err(panic) => match session_id_from_prefix(text.as_bytes()) {
            Some(sid) => answer_panic(handler, sid, Caller::Unknown, outbox, panic).await,
            None => log_panic("?", &*panic),
        },
    }
}

/// One accepted line: the session, who called, and the request's data or why it was refused.
type Accepted = (String, Caller, Result<RequestData, String>);

/// What a session's task is given: a whole line, or what was accepted of an oversize one.
enum Work {
    Line(Vec<u8>),
    Accepted(Accepted),
}

/// Where a `dispatch_trigger_event` line too big to hold reaches the handler: its `data` is
/// only `type`, `action` and this key, with the line's length in bytes, so the trigger can
/// answer the sender a clean 413.
pub const OVERSIZE_KEY: &str = "oversize_line_bytes";

/// Turns one input line into work: a request's (session id, caller, data), or an error
/// answer for an identifiable session. Lines that name no session are logged (never echoed: they may
/// carry credentials) and dropped.
fn accept_line(line: Line<&[u8]>) -> Option<Accepted> {
    let (bytes, oversize) = match line {
        Line::Complete(b) => (b, None),
        Line::Oversize { prefix, len } => (prefix, Some(len)),
    };
    if let Some(len) = oversize {
        // A webhook too big to hold: the sender gets a clean 413 instead of our error text.
        if memchr::memmem::find(bytes, br#""data":{"action":"dispatch_trigger_event""#).is_some() {
            if let Some(sid) = session_id_from_prefix(bytes) {
                let data =
                    serde_json::json!({"type": "trigger", "action": "dispatch_trigger_event", (OVERSIZE_KEY): len});
                let data = RequestData::from_value(&data).expect("an object");
                return Some((sid, Caller::Unknown, Ok(data)));
            }
        }
        let message =
            format!("request line of {len} bytes exceeds the {} byte limit", crate::protocol::wire::MAX_INPUT_LINE);
        return report(session_id_from_prefix(bytes), message);
    }
    match Inbound::parse(bytes).and_then(|msg| msg.into_request(None)) {
        Ok(Some((sid, caller, data))) => Some((sid, caller, Ok(data))),
        Ok(None) => {
            tracing::debug!("ignoring a backwards_response: this plugin never calls back into Dify");
            None
        }
        Err(e) => report(e.session_id, e.message),
    }
}

fn report(session_id: Option<String>, message: String) -> Option<Accepted> {
    match session_id {
        Some(sid) => Some((sid, Caller::Unknown, Err(message))),
        None => {
            // Under the daemon this record reaches it as a `log` event (see `logging`).
            tracing::warn!("dropped an input line that names no session: {message}");
            None
        }
    }
}
