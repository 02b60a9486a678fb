//! What the typed tool and trigger providers share: the credentials a request carries and their check.

use std::future::Future;

use serde_json::{Map, Value};

use crate::handler::ErrorMessage;
use crate::protocol::Session;

/// A provider's (decrypted) credentials as a request carries them: the values of the
/// provider's credential form, by name. A request with `"credentials": null` has none.
pub type Credentials = Map<String, Value>;

/// A provider's credential check: `validate_tool_credentials` for a
/// [`ToolProvider`](crate::tool::ToolProvider), `validate_trigger_credentials` for a
/// [`TriggerProvider`](crate::trigger::TriggerProvider).
pub trait ValidateCredentials: Send + Sync + 'static {
    /// `Ok` when `credentials` are good (the daemon then hears `{"result": true}`); the
    /// error otherwise, as the caller sees it (the Python SDK's providers raise
    /// `ToolProviderCredentialValidationError` here).
    fn validate_credentials(&self, credentials: &Credentials) -> impl Future<Output = Result<(), ErrorMessage>> + Send;
}

/// A provider whose requests carry no credentials: every check fails, as a provider without
/// a credential form is never asked (Dify only validates what a user typed into one).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCredentials;

impl ValidateCredentials for NoCredentials {
    async fn validate_credentials(&self, _: &Credentials) -> Result<(), ErrorMessage> {
        Err(ErrorMessage::new("ValueError", "this provider takes no credentials"))
    }
}

/// Answers a credential check on `session`: `{"result": true}`, or the check's error.
pub(crate) async fn answer_validation<V: ValidateCredentials>(
    validator: &V,
    session: Session,
    credentials: Option<&Credentials>,
) {
    let empty = Credentials::new();
    match validator.validate_credentials(credentials.unwrap_or(&empty)).await {
        Ok(()) => {
            session.stream(&serde_json::json!({"result": true})).await;
            session.finish(None).await;
        }
        Err(e) => session.finish(Some(e.to_wire())).await,
    }
}

/// Ends a session whose action the provider has no route for with just `end`, as the Python
/// SDK does (its capture `08-get-tool-runtime-parameters-sdk-unrouted`): Dify reads an empty
/// answer to an optional action (say, `get_tool_runtime_parameters`) as "nothing to add".
pub(crate) async fn answer_unrouted(session: Session, action: &str) {
    tracing::debug!(session_id = %session.id, action, "no route for this action: ending the session empty");
    session.finish(None).await;
}

/// Drives a handler over request lines as the daemon would, for the adapters' tests.
#[cfg(test)]
pub(crate) mod drive {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use crate::runtime::{session_loop::serve, ServeOptions};
    use crate::Handler;

    /// The `data` of each session message answering one request whose `data` is `data`.
    pub(crate) async fn answer<H: Handler>(handler: H, data: Value) -> Vec<Value> {
        let line = json!({"session_id": "s1", "event": "request", "data": data}).to_string() + "\n";
        let mut output = Vec::new();
        serve(line.as_bytes(), &mut output, Arc::new(handler), ServeOptions::default()).await.unwrap();
        String::from_utf8(output)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["event"] == "session")
            .map(|l| l["data"].clone())
            .collect()
    }
}
