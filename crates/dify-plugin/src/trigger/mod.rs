//! Typed triggers: a [`Trigger`] takes a webhook delivery as a decoded HTTP request and answers with typed values; a [`TriggerProvider`] speaks the protocol for it.
//!
//! A delivery reaches a trigger twice. `dispatch_trigger_event` (while the sender waits)
//! asks [`Trigger::dispatch`] which events it starts and what the sender hears
//! ([`Dispatch`]); `invoke_trigger_event` (once per subscribed workflow) asks
//! [`Trigger::invoke`] for the workflow's variables ([`Variables`]).
//!
//! ```
//! use dify_plugin::trigger::{Delivery, Dispatch, Event, HttpResponse, Trigger, TriggerProvider, Variables};
//! use dify_plugin::ErrorMessage;
//!
//! struct Ping;
//!
//! impl Trigger for Ping {
//!     async fn dispatch(&self, _: &Delivery) -> Result<Dispatch, ErrorMessage> {
//!         Ok(Dispatch::new(["ping"], HttpResponse::new(204)))
//!     }
//!
//!     async fn invoke(&self, event: &Event) -> Result<Variables, ErrorMessage> {
//!         let body = event.delivery.request.json().map_err(|e| ErrorMessage::new("ValueError", e.to_string()))?;
//!         Ok(Variables::new(body))
//!     }
//! }
//!
//! // `dify_plugin::run(Arc::new(provider))` serves it.
//! let provider = TriggerProvider::new(Ping);
//! # drop(provider);
//! ```

mod http;

use std::borrow::Cow;
use std::future::Future;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::handler::{ErrorMessage, Handler};
use crate::protocol::{RequestData, Session};
use crate::provider::{answer_unrouted, answer_validation, Credentials, NoCredentials, ValidateCredentials};

pub use http::{HttpRequest, HttpResponse};

/// A trigger: what a webhook delivery starts, and what each started workflow gets.
pub trait Trigger: Send + Sync + 'static {
    /// At the door, while the sender waits: the events `delivery` starts (none to ignore it)
    /// and the sender's response. An `Err` ends the session with that error, and Dify
    /// answers the sender `400` with the error's text.
    fn dispatch(&self, delivery: &Delivery) -> impl Future<Output = Result<Dispatch, ErrorMessage>> + Send;

    /// For one subscribed workflow: the variables `event` gives it, or
    /// [`Variables::cancelled`] to skip that workflow.
    fn invoke(&self, event: &Event) -> impl Future<Output = Result<Variables, ErrorMessage>> + Send;
}

/// One webhook delivery and the subscription it arrived on.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The sender's HTTP request.
    pub request: HttpRequest,
    /// The subscription whose endpoint the sender called.
    pub subscription: Subscription,
    /// The subscription's credentials (none for a manual subscription).
    pub credentials: Credentials,
    /// The Dify user: empty at dispatch (Dify sends none), at invoke the one the dispatch named.
    pub user_id: String,
}

/// One event a dispatch started, for one workflow.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event's name, one the dispatch listed.
    pub name: String,
    /// The delivery that started it.
    pub delivery: Delivery,
    /// The workflow's settings for the event (the event declaration's `parameters`).
    pub parameters: Map<String, Value>,
    /// What the dispatch put in [`Dispatch::payload`].
    pub payload: Map<String, Value>,
}

/// A subscription as a request carries it.
#[derive(Debug, Clone, Default, Deserialize)]
#[non_exhaustive]
pub struct Subscription {
    /// The public webhook URL.
    #[serde(default)]
    pub endpoint: String,
    /// The values of the provider's `subscription_schema` (secrets decrypted).
    #[serde(default)]
    pub properties: Map<String, Value>,
    /// The subscription's parameters.
    #[serde(default)]
    pub parameters: Map<String, Value>,
}

/// A dispatch's answer: the events to start and the sender's response.
#[derive(Debug, Clone)]
pub struct Dispatch {
    /// The Dify user the events run as (empty: Dify's default).
    pub user_id: String,
    /// The names of the events to start, each declared by the provider; none ignores the delivery.
    pub events: Vec<String>,
    /// What the sender hears.
    pub response: HttpResponse,
    /// Handed back to each [`Trigger::invoke`] as [`Event::payload`].
    pub payload: Map<String, Value>,
}

impl Dispatch {
    /// Starts `events` and answers the sender `response`, without a user or payload.
    pub fn new<S: Into<String>>(events: impl IntoIterator<Item = S>, response: HttpResponse) -> Dispatch {
        let events = events.into_iter().map(Into::into).collect();
        Dispatch { user_id: String::new(), events, response, payload: Map::new() }
    }

    fn to_wire(&self) -> Value {
        json!({"user_id": self.user_id, "events": self.events, "response": self.response.to_hex(), "payload": self.payload})
    }
}

/// An invoke's answer: a workflow's variables, or that the workflow is skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Variables {
    /// The workflow's variables, by name.
    pub variables: Map<String, Value>,
    /// True to skip this workflow (the Python SDK's `EventIgnoreError`).
    pub cancelled: bool,
}

impl Variables {
    /// Runs the workflow with `variables`.
    pub fn new(variables: Map<String, Value>) -> Variables {
        Variables { variables, cancelled: false }
    }

    /// Skips the workflow.
    pub fn cancelled() -> Variables {
        Variables { variables: Map::new(), cancelled: true }
    }

    fn to_wire(&self) -> Value {
        json!({"variables": self.variables, "cancelled": self.cancelled})
    }
}

/// A [`Handler`] for a trigger provider: `dispatch_trigger_event` and `invoke_trigger_event`
/// go to its [`Trigger`], `validate_trigger_credentials` to its [`ValidateCredentials`]
/// (by default [`NoCredentials`]); any other action ends the session without a message, as
/// the Python SDK ends an action it has no route for.
pub struct TriggerProvider<T, V = NoCredentials> {
    trigger: T,
    credentials: V,
}

impl<T: Trigger> TriggerProvider<T> {
    /// A provider of `trigger` without credentials (manual subscriptions only).
    pub fn new(trigger: T) -> Self {
        TriggerProvider { trigger, credentials: NoCredentials }
    }
}

impl<T: Trigger, V: ValidateCredentials> TriggerProvider<T, V> {
    /// With subscription credentials that `credentials` checks.
    pub fn with_credentials<W: ValidateCredentials>(self, credentials: W) -> TriggerProvider<T, W> {
        TriggerProvider { trigger: self.trigger, credentials }
    }
}

/// What a [`TriggerProvider`] reads of a request's `data`, borrowing from the request line.
#[derive(Deserialize)]
pub struct TriggerRequest<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    raw_http_request: Cow<'a, str>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    subscription: Option<Subscription>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    payload: Option<Map<String, Value>>,
    #[serde(default)]
    credentials: Option<Credentials>,
    #[serde(default)]
    user_id: Option<String>,
}

impl<T: Trigger, V: ValidateCredentials> Handler for TriggerProvider<T, V> {
    type Data<'a> = TriggerRequest<'a>;

    async fn handle<'a>(&'a self, session: Session, request: TriggerRequest<'a>, _: &'a RequestData) {
        let answer = match &*request.action {
            "dispatch_trigger_event" => match delivery(&request) {
                Ok(delivery) => self.trigger.dispatch(&delivery).await.map(|d| d.to_wire()),
                Err(e) => Err(e),
            },
            "invoke_trigger_event" => match delivery(&request) {
                Ok(delivery) => {
                    let event = Event {
                        name: request.event.unwrap_or_default(),
                        delivery,
                        parameters: request.parameters.unwrap_or_default(),
                        payload: request.payload.unwrap_or_default(),
                    };
                    self.trigger.invoke(&event).await.map(|v| v.to_wire())
                }
                Err(e) => Err(e),
            },
            "validate_trigger_credentials" => {
                return answer_validation(&self.credentials, session, request.credentials.as_ref()).await
            }
            other => return answer_unrouted(session, other).await,
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

/// The delivery a dispatch or invoke request carries; a `ValueError` when its
/// `raw_http_request` is not a hex-encoded HTTP request.
fn delivery(request: &TriggerRequest<'_>) -> Result<Delivery, ErrorMessage> {
    let http = HttpRequest::from_hex(&request.raw_http_request)
        .ok_or_else(|| ErrorMessage::new("ValueError", "raw_http_request is not a hex-encoded HTTP request"))?;
    Ok(Delivery {
        request: http,
        subscription: request.subscription.clone().unwrap_or_default(),
        credentials: request.credentials.clone().unwrap_or_default(),
        user_id: request.user_id.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;
