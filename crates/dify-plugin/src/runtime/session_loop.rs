//! The session loop over any line transport: stdin/stdout locally, the daemon's TCP socket
//! in remote mode, byte slices in tests.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::ServeOptions;
use crate::handler::{answer_panic, log_panic, serve_session, ErrorMessage, Handler, Oversize, OversizeLine};
use crate::protocol::backwards::Calls;
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
    let calls = Calls::new(opts.backwards.clone());
    let (outbox, writer) = Outbox::new(output, OUTBOX_DEPTH);
    let outbox = outbox.with_calls(calls.clone());
    // Until this loop ends, log records become `log` events on this stream (per `opts.logs`).
    #[cfg(feature = "logging")]
    let _logs = crate::logging::attach(outbox.log_port(), opts.logs);
    let work = drive(input, outbox, calls, app, opts);
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
    calls: Calls,
    app: Arc<H>,
    opts: ServeOptions,
) -> io::Result<()> {
    // Ready as soon as the daemon sees this line: before any set-up work.
    outbox.send(HEARTBEAT.to_vec()).await;
    let heartbeat = tokio::spawn(beat(outbox.clone(), opts.heartbeat));
    let limit = Arc::new(Semaphore::new(opts.max_in_flight));
    // Requests read ahead of a free slot. Such a request waits for its slot on its session's
    // task, not here: sessions holding every slot may be waiting for backwards answers that
    // are still to be read. Only this many requests wait before the reader stops reading (the
    // daemon's back-pressure); past that, such sessions' calls end by timeout.
    let waiting = Arc::new(Semaphore::new(opts.max_in_flight.max(1)));
    let mut sessions = JoinSet::new();
    let mut lines = LineReader::new(input);
    let result = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // An answer to a backwards call goes to its waiting session here, in order and
        // before any wait for a session slot: sessions that hold every slot may be waiting
        // for exactly these lines.
        if let Line::Complete(bytes) = line {
            if calls.route_line(bytes) {
                continue;
            }
        }
        while sessions.try_join_next().is_some() {}
        // Every line is taken on its session's own task, where a panic of the handler's (in
        // its `Data`, its hooks or its answer) answers that session alone: a complete line is
        // read in one pass; one too long to hold is answered from its start.
        let work = match line {
            Line::Complete(bytes) => Work::Line(bytes.to_vec()),
            Line::Oversize { prefix, len } => Work::Oversize(prefix.to_vec(), len),
        };
        // A free slot is taken here (the common case: one step, no second semaphore);
        // otherwise the request joins those waiting.
        let slot = match limit.clone().try_acquire_owned() {
            Ok(permit) => Slot::Held(permit),
            Err(_) => {
                Slot::Waiting(waiting.clone().acquire_owned().await.expect("semaphore is never closed"), limit.clone())
            }
        };
        let (app, outbox) = (app.clone(), outbox.clone());
        // Boxed: a session's future holds its handler's state (a few KB; the plugin keeps its
        // rare, large paths behind boxes of their own, since this box is filled by copying the
        // whole future once), and tokio moves a task's future by value several times (into the
        // task cell, out as its output); behind a box each of those moves copies a pointer.
        sessions.spawn(Box::pin(async move {
            // Inline rather than an `async fn` of Slot's: one state machine less per request.
            let _permit = match slot {
                Slot::Held(permit) => permit,
                // The place among those waiting is given up once the slot is held.
                Slot::Waiting(_place, limit) => limit.acquire_owned().await.expect("semaphore is never closed"),
            };
            match work {
                Work::Line(line) => serve_line(&*app, line, outbox).await,
                Work::Oversize(prefix, len) => {
                    accept_and_serve(&*app, Line::Oversize { prefix: &prefix, len }, outbox).await
                }
            }
        }));
    };
    // End of input: no answer to a backwards call can come any more; let every in-flight
    // session answer before the writer is released.
    calls.close();
    while sessions.join_next().await.is_some() {}
    heartbeat.abort();
    let _ = heartbeat.await;
    result
}

/// A request's session slot: taken by the reader, or still to be waited for by the session
/// (holding its place among those read ahead).
enum Slot {
    Held(OwnedSemaphorePermit),
    Waiting(OwnedSemaphorePermit, Arc<Semaphore>),
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
        Err(e) => return accept_and_serve(handler, Line::Complete(e.as_bytes()), outbox).await,
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
        Ok(None) => accept_and_serve(handler, Line::Complete(text.as_bytes()), outbox).await,
        Err(panic) => match session_id_from_prefix(text.as_bytes()) {
            Some(sid) => answer_panic(handler, sid, Caller::Unknown, outbox, panic).await,
            None => log_panic("?", &*panic),
        },
    }
}

/// One accepted line: the session, who called, and the request's data or the error it was
/// refused with.
type Accepted = (String, Caller, Result<RequestData, ErrorMessage>);

/// What a session's task is given: a whole line, or the start and length of an oversize one.
enum Work {
    Line(Vec<u8>),
    Oversize(Vec<u8>, usize),
}

/// Serves a line [`accept_line`] takes; a panic in the handler's hooks is answered on the
/// session the line names, as one in the handler is.
async fn accept_and_serve<H: Handler>(handler: &H, line: Line<&[u8]>, outbox: Outbox) {
    let bytes = match line {
        Line::Complete(bytes) | Line::Oversize { prefix: bytes, .. } => bytes,
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| accept_line(handler, line))) {
        Ok(Some((sid, caller, request))) => serve_session(handler, sid, caller, outbox, request).await,
        Ok(None) => {}
        Err(panic) => match session_id_from_prefix(bytes) {
            Some(sid) => answer_panic(handler, sid, Caller::Unknown, outbox, panic).await,
            None => log_panic("?", &*panic),
        },
    }
}

/// Turns one input line into work: a request's (session id, caller, data), or an error
/// answer for an identifiable session (the handler's words). Lines that name no session are
/// logged (never echoed: they may carry credentials) and dropped; so is a
/// `backwards_response` the reader did not route (the runtime routes them before this).
fn accept_line<H: Handler>(handler: &H, line: Line<&[u8]>) -> Option<Accepted> {
    let bytes = match line {
        Line::Complete(bytes) => bytes,
        Line::Oversize { prefix, len } => {
            let line = OversizeLine { prefix, len };
            let Some(sid) = line.session_id() else {
                tracing::warn!("dropped an input line that names no session: {}", line.describe());
                return None;
            };
            let answer = match handler.oversize(&line) {
                Oversize::Handle(data) => Ok(data),
                Oversize::Refuse(error) => Err(error),
            };
            return Some((sid, Caller::Unknown, answer));
        }
    };
    match Inbound::parse(bytes).and_then(|msg| msg.into_request(None)) {
        Ok(Some((sid, caller, data))) => Some((sid, caller, Ok(data))),
        Ok(None) => {
            tracing::warn!("dropped a backwards_response that reached no backwards call");
            None
        }
        Err(e) => match e.session_id {
            Some(sid) => Some((sid, Caller::Unknown, Err(handler.malformed(&e.message)))),
            None => {
                // Under the daemon this record reaches it as a `log` event (see `logging`).
                tracing::warn!("dropped an input line that names no session: {}", e.message);
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::protocol::wire::MAX_INPUT_LINE;

    /// Panics on action "panic"; answers an oversize line naming action "big" itself.
    struct Plugin;

    impl Handler for Plugin {
        type Data<'a> = Value;

        async fn handle<'a>(&'a self, session: Session, data: Value, _: &'a RequestData) {
            if data["action"] == "panic" {
                panic!("injected");
            }
            session.stream(&data).await;
            session.finish(None).await;
        }

        fn oversize(&self, line: &OversizeLine<'_>) -> Oversize {
            match memchr::memmem::find(line.prefix, br#""action":"big""#) {
                Some(_) => Oversize::Handle(RequestData::from_value(&json!({"stand_in": line.len})).unwrap()),
                None => Oversize::Refuse(self.malformed(&line.describe())),
            }
        }
    }

    async fn answers(input: &[u8]) -> Vec<Value> {
        let mut out = Vec::new();
        serve(input, &mut out, Arc::new(Plugin), ServeOptions::default()).await.unwrap();
        let lines = String::from_utf8(out).unwrap();
        lines.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|l| l["event"] == "session").collect()
    }

    fn of(out: &[Value], sid: &str) -> Vec<Value> {
        out.iter().filter(|l| l["session_id"] == sid).map(|l| l["data"].clone()).collect()
    }

    #[tokio::test]
    async fn the_default_answers_are_neutral_and_a_panic_ends_only_its_session() {
        let input = concat!(
            r#"{"session_id":"p","event":"request","data":{"action":"panic"}}"#,
            "\n",
            r#"{"session_id":"m","event":"request","data":[1]}"#,
            "\n",
            r#"{"session_id":"ok","event":"request","data":{"action":"x"}}"#,
            "\n",
        );
        let out = answers(input.as_bytes()).await;
        let panicked = of(&out, "p");
        assert_eq!(panicked[0]["data"]["error_type"], "internal_error", "{panicked:?}");
        assert_eq!(panicked[1], json!({"type": "end", "data": {}}));
        let malformed = of(&out, "m");
        assert_eq!(malformed[0]["data"]["error_type"], "malformed_request", "{malformed:?}");
        assert!(malformed[0]["data"]["message"].as_str().unwrap().starts_with("malformed request: "));
        assert_eq!(of(&out, "ok")[0]["data"], json!({"action": "x"}));
    }

    #[tokio::test]
    async fn an_oversize_line_goes_to_the_handlers_hook() {
        let mut input = Vec::new();
        for (sid, action) in [("big", "big"), ("huge", "other")] {
            let start = format!(r#"{{"session_id":"{sid}","event":"request","data":{{"action":"{action}","x":""#);
            input.extend_from_slice(start.as_bytes());
            input.extend(std::iter::repeat_n(b'a', MAX_INPUT_LINE));
            input.extend_from_slice(b"\"}}\n");
        }
        let out = answers(&input).await;
        let big = of(&out, "big");
        assert!(big[0]["data"]["stand_in"].as_u64().unwrap() > MAX_INPUT_LINE as u64, "{big:?}");
        let huge = of(&out, "huge");
        assert_eq!(huge[0]["data"]["error_type"], "malformed_request");
        assert!(huge[0]["data"]["message"].as_str().unwrap().contains("byte limit"), "{huge:?}");
        assert_eq!(huge[1]["type"], "end");
    }
}
