//! A trigger plugin: a webhook (RSSHub-style feed updates) checked at the door and turned into workflow variables.
//!
//! The daemon hands a trigger each delivery as the raw HTTP request, hex-encoded.
//! `dispatch_trigger_event` checks the sender's `X-Api-Key` against the subscription's
//! `api_key` and its body for JSON, and answers with the events to start and the HTTP
//! response the sender gets (hex again); `invoke_trigger_event` (once per subscribed
//! workflow) turns the body into the workflow's variables. This is the shape of the
//! captures in `tests/captures/trigger-*`, made with the Python SDK's `rsshub_trigger`.

use std::borrow::Cow;
use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::{ErrorMessage, Handler, RequestData, Session};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The one event this trigger declares.
const EVENT: &str = "feed_update";

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    raw_http_request: Cow<'a, str>,
    #[serde(default)]
    subscription: Subscription,
}

#[derive(Deserialize, Default)]
struct Subscription {
    #[serde(default)]
    properties: Map<String, Value>,
}

struct Webhook;

impl Handler for Webhook {
    type Data<'a> = Request<'a>;

    async fn handle<'a>(&'a self, session: Session, request: Request<'a>, _: &'a RequestData) {
        let answer = match &*request.action {
            "dispatch_trigger_event" => dispatch(&request),
            "invoke_trigger_event" => {
                delivery(&request).and_then(|d| d.json()).map(|body| json!({"variables": body, "cancelled": false}))
            }
            other => Err(ErrorMessage::new("ValueError", format!("unsupported trigger action {other:?}"))),
        };
        match answer {
            Ok(chunk) => {
                session.stream(&chunk).await;
                session.finish(None).await;
            }
            Err(e) => session.finish(Some(e.to_wire())).await,
        }
    }
}

/// The door: the right key and a JSON body start the event; the sender hears `200`.
fn dispatch(request: &Request<'_>) -> Result<Value, ErrorMessage> {
    let delivery = delivery(request)?;
    let expected = request.subscription.properties.get("api_key").and_then(Value::as_str);
    if expected.is_none() || delivery.header("x-api-key") != expected {
        return Err(ErrorMessage::new("TriggerValidationError", "Invalid or missing API key"));
    }
    delivery.json()?;
    let body = r#"{"status": "ok"}"#;
    let response =
        format!("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    Ok(json!({"user_id": "", "events": [EVENT], "response": hex(response.as_bytes()), "payload": {}}))
}

/// A delivery's headers and body, from the request's hex-encoded raw HTTP request.
struct Delivery {
    head: String,
    body: Vec<u8>,
}

fn delivery(request: &Request<'_>) -> Result<Delivery, ErrorMessage> {
    let bad = || ErrorMessage::new("TriggerDispatchError", "raw_http_request is not a hex-encoded HTTP request");
    let raw = unhex(&request.raw_http_request).ok_or_else(bad)?;
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(bad)?;
    Ok(Delivery { head: String::from_utf8_lossy(&raw[..end]).into_owned(), body: raw[end + 4..].to_vec() })
}

impl Delivery {
    /// The first value of header `name` (any case).
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    fn json(&self) -> Result<Value, ErrorMessage> {
        serde_json::from_slice(&self.body)
            .map_err(|e| ErrorMessage::new("TriggerDispatchError", format!("Failed to parse payload: {e}")))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    let digit = |d: u8| (d as char).to_digit(16);
    digits.chunks(2).map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)).collect()
}

fn main() -> ExitCode {
    dify_plugin::logging::init(None);
    match dify_plugin::run(Arc::new(Webhook)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("webhook: {e}");
            ExitCode::FAILURE
        }
    }
}
