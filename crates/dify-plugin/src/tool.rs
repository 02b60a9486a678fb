//! Typed tools: a [`Tool`] reads its parameters into its own type, and a [`ToolProvider`] routes a tool provider's requests to them.
//!
//! ```
//! use dify_plugin::provider::{Credentials, ValidateCredentials};
//! use dify_plugin::tool::{Tool, ToolContext, ToolProvider};
//! use dify_plugin::ErrorMessage;
//!
//! struct Greet;
//!
//! #[derive(serde::Deserialize)]
//! struct Who {
//!     name: String,
//! }
//!
//! impl Tool for Greet {
//!     type Params = Who;
//!
//!     fn name(&self) -> &str {
//!         "greet"
//!     }
//!
//!     async fn invoke(&self, who: Who, cx: &ToolContext) -> Result<(), ErrorMessage> {
//!         cx.text(&format!("hello, {}", who.name)).await;
//!         Ok(())
//!     }
//! }
//!
//! struct Keys;
//!
//! impl ValidateCredentials for Keys {
//!     async fn validate_credentials(&self, _: &Credentials) -> Result<(), ErrorMessage> {
//!         Ok(())
//!     }
//! }
//!
//! // `dify_plugin::run(Arc::new(provider))` serves it.
//! let provider = ToolProvider::new(Keys).with_tool(Greet);
//! # drop(provider);
//! ```

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::handler::{ErrorMessage, Handler};
use crate::protocol::{Caller, RequestData, Session};
use crate::provider::{answer_unrouted, answer_validation, Credentials, ValidateCredentials};

/// One tool of a provider: its name, its parameters' type, and what it does with them.
pub trait Tool: Send + Sync + 'static {
    /// The request's `tool_parameters` object, read into this type; one that does not read
    /// is answered with a `ValueError` naming the tool, and `invoke` is not called.
    type Params: DeserializeOwned + Send;

    /// The tool's name, as its declaration (`identity.name`) and the request's `tool` say.
    fn name(&self) -> &str;

    /// Runs the tool: its messages go out through `cx` as they are written; an `Err` ends
    /// the session with that error after them (as a Python tool raising mid-stream does).
    fn invoke(&self, params: Self::Params, cx: &ToolContext) -> impl Future<Output = Result<(), ErrorMessage>> + Send;
}

/// What a tool call carries besides its parameters, and where its messages go.
pub struct ToolContext {
    session: Session,
    /// The provider's credentials, as the request carried them.
    pub credentials: Credentials,
    /// The Dify user the call is made for, when the request names one.
    pub user_id: Option<String>,
}

impl ToolContext {
    /// Who called: a workflow node, an agent, another plugin.
    pub fn caller(&self) -> Caller {
        self.session.caller
    }

    /// The call's session: backwards invocation ([`Session::invoke`]) and the plugin's
    /// persistent storage ([`Session::storage`]) go through it.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Sends a `text` message.
    pub async fn text(&self, text: &str) {
        self.message("text", json!({ "text": text })).await;
    }

    /// Sends a `json` message (`json_object`, which Dify expects to be an object).
    pub async fn json(&self, object: Value) {
        self.message("json", json!({ "json_object": object })).await;
    }

    /// Sends a `variable` message: a workflow tool node's output `name` set to `value`.
    pub async fn variable(&self, name: &str, value: Value) {
        self.message("variable", json!({ "variable_name": name, "variable_value": value, "stream": false })).await;
    }

    /// Sends a message of any other kind (`link`, `image`, `log`, …) with its `message`
    /// object as the protocol spells it.
    pub async fn message(&self, kind: &str, message: Value) {
        self.session.stream(&json!({ "type": kind, "message": message, "meta": null })).await;
    }
}

/// A [`Handler`] for a tool provider: `invoke_tool` goes to the tool the request names,
/// `validate_tool_credentials` to the provider's [`ValidateCredentials`]. Errors are the
/// Python SDK's: an unknown tool is a `ValueError` "Tool `x` not found for provider `p`";
/// any other action ends the session without a message.
pub struct ToolProvider<V> {
    credentials: V,
    tools: Vec<Box<dyn AnyTool>>,
}

impl<V: ValidateCredentials> ToolProvider<V> {
    /// A provider without tools whose credentials `credentials` checks.
    pub fn new(credentials: V) -> Self {
        ToolProvider { credentials, tools: Vec::new() }
    }

    /// With `tool` (a later tool of the same name is never reached).
    pub fn with_tool<T: Tool>(mut self, tool: T) -> Self {
        self.tools.push(Box::new(tool));
        self
    }
}

/// What a [`ToolProvider`] reads of a request's `data`, borrowing from the request line.
#[derive(Deserialize)]
pub struct ToolRequest<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    provider: Cow<'a, str>,
    #[serde(borrow, default)]
    tool: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_parameters: Option<&'a RawValue>,
    #[serde(default)]
    credentials: Option<Credentials>,
    #[serde(default)]
    user_id: Option<String>,
}

impl<V: ValidateCredentials> Handler for ToolProvider<V> {
    type Data<'a> = ToolRequest<'a>;

    async fn handle<'a>(&'a self, session: Session, request: ToolRequest<'a>, _: &'a RequestData) {
        match &*request.action {
            "invoke_tool" => self.invoke(session, request).await,
            "validate_tool_credentials" => {
                answer_validation(&self.credentials, session, request.credentials.as_ref()).await
            }
            other => answer_unrouted(session, other).await,
        }
    }
}

impl<V> ToolProvider<V> {
    async fn invoke(&self, session: Session, request: ToolRequest<'_>) {
        let name = request.tool.as_deref().unwrap_or_default();
        let Some(tool) = self.tools.iter().find(|t| t.name() == name) else {
            let message = format!("Tool `{name}` not found for provider `{}`", request.provider);
            return session.finish(Some(ErrorMessage::new("ValueError", message).to_wire())).await;
        };
        let params = request.tool_parameters.map_or("{}", |raw| if raw.get() == "null" { "{}" } else { raw.get() });
        let cx = ToolContext {
            session,
            credentials: request.credentials.unwrap_or_default(),
            user_id: request.user_id.filter(|id| !id.is_empty()),
        };
        let outcome = tool.invoke(params, &cx).await;
        cx.session.finish(outcome.err().map(|e| e.to_wire())).await;
    }
}

type Running<'a> = Pin<Box<dyn Future<Output = Result<(), ErrorMessage>> + Send + 'a>>;

/// A [`Tool`] whose parameters are still text, so tools of different types share one list.
trait AnyTool: Send + Sync {
    fn name(&self) -> &str;
    fn invoke<'a>(&'a self, params: &'a str, cx: &'a ToolContext) -> Running<'a>;
}

impl<T: Tool> AnyTool for T {
    fn name(&self) -> &str {
        Tool::name(self)
    }

    fn invoke<'a>(&'a self, params: &'a str, cx: &'a ToolContext) -> Running<'a> {
        Box::pin(async move {
            let params = serde_json::from_str::<T::Params>(params).map_err(|e| {
                ErrorMessage::new("ValueError", format!("invalid parameters for tool `{}`: {e}", Tool::name(self)))
            })?;
            Tool::invoke(self, params, cx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::drive::answer;

    struct Double;

    #[derive(Deserialize)]
    struct Number {
        n: i64,
    }

    impl Tool for Double {
        type Params = Number;

        fn name(&self) -> &str {
            "double"
        }

        async fn invoke(&self, params: Number, cx: &ToolContext) -> Result<(), ErrorMessage> {
            if params.n < 0 {
                cx.text("negative").await;
                return Err(ErrorMessage::new("ValueError", "no negatives"));
            }
            cx.json(json!({ "double": params.n * 2 })).await;
            cx.variable("double", json!(params.n * 2)).await;
            Ok(())
        }
    }

    struct Key;

    impl ValidateCredentials for Key {
        async fn validate_credentials(&self, credentials: &Credentials) -> Result<(), ErrorMessage> {
            match credentials.get("key") {
                Some(key) if key == "k" => Ok(()),
                _ => Err(ErrorMessage::new("ToolProviderCredentialValidationError", "bad key")),
            }
        }
    }

    fn provider() -> ToolProvider<Key> {
        ToolProvider::new(Key).with_tool(Double)
    }

    fn invoke(tool: &str, params: Value) -> Value {
        json!({"type": "tool", "action": "invoke_tool", "provider": "p", "tool": tool, "tool_parameters": params})
    }

    fn end() -> Value {
        json!({"type": "end", "data": {}})
    }

    fn error(kind: &str, message: &str) -> Value {
        json!({"type": "error", "data": {"error_type": kind, "message": message, "args": {}}})
    }

    #[tokio::test]
    async fn a_tool_gets_its_typed_parameters_and_streams_its_messages() {
        let out = answer(provider(), invoke("double", json!({"n": 21}))).await;
        let json = json!({"type": "json", "message": {"json_object": {"double": 42}}, "meta": null});
        let variable = json!({"type": "variable", "message": {"variable_name": "double", "variable_value": 42, "stream": false}, "meta": null});
        assert_eq!(out, [json!({"type": "stream", "data": json}), json!({"type": "stream", "data": variable}), end()]);
    }

    #[tokio::test]
    async fn a_tools_error_follows_what_it_streamed() {
        let out = answer(provider(), invoke("double", json!({"n": -1}))).await;
        let text = json!({"type": "text", "message": {"text": "negative"}, "meta": null});
        assert_eq!(out, [json!({"type": "stream", "data": text}), error("ValueError", "no negatives"), end()]);
    }

    #[tokio::test]
    async fn an_unknown_tool_is_the_python_sdks_value_error() {
        let out = answer(provider(), invoke("nope", json!({}))).await;
        assert_eq!(out, [error("ValueError", "Tool `nope` not found for provider `p`"), end()]);
    }

    #[tokio::test]
    async fn parameters_that_do_not_read_never_reach_the_tool() {
        for params in [json!({"n": "two"}), json!({}), json!(null)] {
            let out = answer(provider(), invoke("double", params.clone())).await;
            assert_eq!(out.len(), 2, "{params}: {out:?}");
            assert_eq!(out[0]["data"]["error_type"], "ValueError", "{params}");
            let message = out[0]["data"]["message"].as_str().unwrap();
            assert!(message.starts_with("invalid parameters for tool `double`: "), "{message}");
            assert_eq!(out[1], end());
        }
    }

    #[tokio::test]
    async fn credentials_are_checked_by_the_provider() {
        let validate = |credentials: Value| json!({"type": "tool", "action": "validate_tool_credentials", "provider": "p", "credentials": credentials});
        let ok = answer(provider(), validate(json!({"key": "k"}))).await;
        assert_eq!(ok, [json!({"type": "stream", "data": {"result": true}}), end()]);
        let bad = answer(provider(), validate(json!({"key": "x"}))).await;
        assert_eq!(bad, [error("ToolProviderCredentialValidationError", "bad key"), end()]);
        let none = answer(provider(), validate(Value::Null)).await;
        assert_eq!(none, [error("ToolProviderCredentialValidationError", "bad key"), end()]);
    }

    #[tokio::test]
    async fn an_action_without_a_route_ends_empty_as_the_python_sdk_does() {
        let data = json!({"type": "tool", "action": "get_tool_runtime_parameters", "provider": "p", "tool": "double"});
        assert_eq!(answer(provider(), data).await, [end()]);
    }
}
