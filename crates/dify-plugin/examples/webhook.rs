//! A trigger plugin: a webhook (RSSHub-style feed updates) checked at the door and turned into workflow variables.
//!
//! The daemon hands a trigger each delivery as the raw HTTP request; a [`TriggerProvider`]
//! decodes it for the [`Trigger`]. [`Trigger::dispatch`] checks the sender's `X-Api-Key`
//! against the subscription's `api_key` and its body for JSON, and answers with the event to
//! start and the HTTP response the sender gets; [`Trigger::invoke`] (once per subscribed
//! workflow) turns the body into the workflow's variables. This is the shape of the captures
//! in `tests/captures/trigger-*`, made with the Python SDK's `rsshub_trigger`.

use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::trigger::{Delivery, Dispatch, Event, HttpResponse, Trigger, TriggerProvider, Variables};
use dify_plugin::ErrorMessage;
use serde_json::{Map, Value};

/// The one event this trigger declares.
const EVENT: &str = "feed_update";

struct Webhook;

impl Trigger for Webhook {
    /// The door: the right key and a JSON body start the event; the sender hears `200`.
    async fn dispatch(&self, delivery: &Delivery) -> Result<Dispatch, ErrorMessage> {
        let expected = delivery.subscription.properties.get("api_key").and_then(Value::as_str);
        if expected.is_none() || delivery.request.header("x-api-key") != expected {
            return Err(ErrorMessage::new("TriggerValidationError", "Invalid or missing API key"));
        }
        feed_update(delivery)?;
        let response = HttpResponse::new(200).with_body("application/json", r#"{"status": "ok"}"#);
        Ok(Dispatch::new([EVENT], response))
    }

    async fn invoke(&self, event: &Event) -> Result<Variables, ErrorMessage> {
        feed_update(&event.delivery).map(Variables::new)
    }
}

/// The delivery's body: a JSON object, the feed update.
fn feed_update(delivery: &Delivery) -> Result<Map<String, Value>, ErrorMessage> {
    delivery
        .request
        .json()
        .map_err(|e| ErrorMessage::new("TriggerDispatchError", format!("Failed to parse payload: {e}")))
}

fn main() -> ExitCode {
    dify_plugin::logging::init(None);
    match dify_plugin::run(Arc::new(TriggerProvider::new(Webhook))) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("webhook: {e}");
            ExitCode::FAILURE
        }
    }
}
