//! `POST /invoke?action=…`: one daemon request in, that session's event lines streamed out.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, DuplexStream};

use super::About;
use crate::handler::{serve_session, ErrorMessage, Handler};
use crate::protocol::{Caller, Inbound, Outbox, RequestData};

/// What the HTTP handlers need: the plugin, the runtime's name (serverless / aws_lambda) and
/// what `GET /` says about the plugin.
pub(crate) struct HttpState<H> {
    pub(crate) app: Arc<H>,
    pub(crate) method: &'static str,
    pub(crate) about: Arc<About>,
}

impl<H> Clone for HttpState<H> {
    fn clone(&self) -> Self {
        HttpState { app: self.app.clone(), method: self.method, about: self.about.clone() }
    }
}

/// The daemon's cap on a serverless request body.
pub(crate) const MAX_SERVERLESS_REQUEST_BYTES: usize = 5 * 1024 * 1024;
/// An oversize body is read (and discarded) up to this size before the 413 goes out, so the
/// client finishes sending and reads our answer instead of a connection reset.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
/// A client that trickles its body this long is cut off.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);
const SESSION_HEADER: &str = "dify-plugin-session-id";
/// Bytes of answer buffered between the session and the HTTP body.
const PIPE_BYTES: usize = 64 * 1024;
const NDJSON: &str = "application/x-ndjson";

#[derive(Deserialize)]
pub(crate) struct InvokeQuery {
    action: Option<String>,
}

pub(crate) async fn invoke<H: Handler>(
    State(state): State<HttpState<H>>,
    query: Result<Query<InvokeQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let header_sid = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(str::to_owned);
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let bytes = match declared {
        Some(n) if n > DRAIN_LIMIT => Err(BodyError::TooLarge(n)),
        _ => tokio::time::timeout(BODY_TIMEOUT, read_limited(body)).await.unwrap_or(Err(BodyError::Slow)),
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(BodyError::TooLarge(n)) => {
            let msg = format!("request body of {n} bytes exceeds the {MAX_SERVERLESS_REQUEST_BYTES} byte limit");
            return error_line(StatusCode::PAYLOAD_TOO_LARGE, header_sid, msg);
        }
        Err(BodyError::Slow) => {
            let msg = format!("request body not received within {BODY_TIMEOUT:?}");
            return error_line(StatusCode::REQUEST_TIMEOUT, header_sid, msg);
        }
        Err(BodyError::Read(e)) => {
            return error_line(StatusCode::BAD_REQUEST, header_sid, format!("reading the body: {e}"))
        }
    };
    let (sid, caller, data) = match parse_request(&bytes, header_sid) {
        Ok(ok) => ok,
        Err((Some(sid), msg)) => {
            let refusal = state.app.malformed(&msg);
            return stream_session(&state, sid, Caller::Unknown, Err(refusal));
        }
        Err((None, msg)) => return error_line(StatusCode::BAD_REQUEST, None, format!("malformed input: {msg}")),
    };
    let wanted = query.ok().and_then(|q| q.0.action);
    let action = request_action(&data);
    if wanted != action {
        let msg = format!("the action query {wanted:?} does not match the request's data.action {action:?}");
        return error_line(StatusCode::BAD_REQUEST, Some(sid), msg);
    }
    stream_session(&state, sid, caller, Ok(data))
}

enum BodyError {
    TooLarge(usize),
    Slow,
    Read(axum::Error),
}

async fn read_limited(body: Body) -> Result<Bytes, BodyError> {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        total = total.saturating_add(chunk.len());
        if total <= MAX_SERVERLESS_REQUEST_BYTES {
            buf.extend_from_slice(&chunk);
        } else {
            buf = BytesMut::new();
            if total > DRAIN_LIMIT {
                break;
            }
        }
    }
    if total > MAX_SERVERLESS_REQUEST_BYTES {
        return Err(BodyError::TooLarge(total));
    }
    Ok(buf.freeze())
}

/// The `action` a request's data names (a string), as the query must repeat it.
fn request_action(data: &RequestData) -> Option<String> {
    data.to_value().ok()?.get("action")?.as_str().map(str::to_owned)
}

/// The request's session id, caller and `data`, or what is wrong with it and whose session it
/// was (from the body, else the `Dify-Plugin-Session-ID` header) when that can be told.
fn parse_request(
    bytes: &[u8],
    header_sid: Option<String>,
) -> Result<(String, Caller, RequestData), (Option<String>, String)> {
    let msg = Inbound::parse(bytes).map_err(|e| (e.session_id.or(header_sid.clone()), e.message))?;
    let sid = msg.session_id.clone().or(header_sid.clone());
    match msg.into_request(header_sid) {
        Ok(Some(request)) => Ok(request),
        // Every POST is answered: a backwards_response sent here is a mistake of the caller's.
        Ok(None) => {
            Err((sid, "a backwards_response is not a request, and no backwards call is waiting for one".into()))
        }
        Err(e) if e.session_id.is_none() => {
            Err((None, format!("{}: no session_id in the body or the Dify-Plugin-Session-ID header", e.message)))
        }
        Err(e) => Err((e.session_id, e.message)),
    }
}

/// Runs the session on its own task and streams its lines (stream…, optional error, end) as the
/// response body, which ends after `end`. If the client goes away the session still completes
/// (its store effects must not be cut in half); only its answer is lost.
fn stream_session<H: Handler>(
    state: &HttpState<H>,
    sid: String,
    caller: Caller,
    data: Result<RequestData, ErrorMessage>,
) -> Response {
    let (reader, writer) = tokio::io::duplex(PIPE_BYTES);
    let (outbox, write) = Outbox::new(writer, 64);
    let app = state.app.clone();
    tokio::spawn(async move {
        let work = async move { serve_session(&*app, sid, caller, outbox, data).await };
        let (written, ()) = tokio::join!(write, work);
        if let Err(e) = written {
            tracing::debug!("the HTTP client left before reading the whole answer: {e}");
        }
    });
    let mut response = Body::from_stream(body_chunks(reader)).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, NDJSON.parse().expect("static header value"));
    response.headers_mut().insert(header::CACHE_CONTROL, "no-cache".parse().expect("static header value"));
    response
}

fn body_chunks(reader: DuplexStream) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> {
    futures_util::stream::unfold(Some(reader), |state| async move {
        let mut reader = state?;
        let mut buf = BytesMut::with_capacity(16 * 1024);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(reader))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

/// A non-2xx answer whose body is one top-level `error` event line, as the SDK writes them.
fn error_line(status: StatusCode, sid: Option<String>, message: String) -> Response {
    tracing::warn!(status = status.as_u16(), "rejected an invoke request: {message}");
    let mut line = json!({"event": "error", "session_id": sid, "data": {"error": message}}).to_string();
    line.push('\n');
    (status, [(header::CONTENT_TYPE, NDJSON)], line).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_come_from_the_body_then_the_header() {
        let h = Some("hdr".to_owned());
        let ok = parse_request(br#"{"session_id":"b","event":"request","data":{"a":1}}"#, h.clone()).unwrap();
        assert_eq!(ok.0, "b");
        assert_eq!(parse_request(br#"{"event":"request","data":{}}"#, h.clone()).unwrap().0, "hdr");
        assert_eq!(parse_request(b"garbage", h.clone()).unwrap_err().0.as_deref(), Some("hdr"));
        assert_eq!(parse_request(br#"{"session_id":"b","event":"request""#, None).unwrap_err().0.as_deref(), Some("b"));
        assert_eq!(parse_request(b"garbage", None).unwrap_err().0, None);
        let e = parse_request(br#"{"session_id":"b","event":"backwards_response","data":{}}"#, None).unwrap_err();
        assert!(e.1.contains("backwards_response"));
        assert!(parse_request(br#"{"session_id":"b","event":"request","data":[1]}"#, None).is_err());
    }
}
