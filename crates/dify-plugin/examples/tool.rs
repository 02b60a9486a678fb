//! A tool plugin: the Python SDK's `echo` provider (the plugin the protocol captures were made with), in Rust.
//!
//! Tools `echo` (a text and a JSON message) and `fail` (a text, then an error); credentials
//! are valid when `api_key` is `good`. `dify_plugin::run` serves it on the runtime
//! `INSTALL_METHOD` names: stdin/stdout as the daemon starts an installed plugin, or HTTP
//! (remote debugging would also need a `RunOptions::registration`).

use std::borrow::Cow;
use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::{ErrorMessage, Handler, RequestData, Session};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// What this plugin reads of a request's data, in the same pass as the request line; its
/// strings borrow from the line.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    tool: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_parameters: Map<String, Value>,
    #[serde(default)]
    credentials: Map<String, Value>,
}

struct Echo;

impl Handler for Echo {
    type Data<'a> = Request<'a>;

    async fn handle<'a>(&'a self, session: Session, request: Request<'a>, _: &'a RequestData) {
        let text = request.tool_parameters.get("text").and_then(Value::as_str).unwrap_or_default();
        let error = match (&*request.action, request.tool.as_deref()) {
            ("invoke_tool", Some("echo")) => {
                session.stream(&text_message(&format!("echo: {text}"))).await;
                let json = json!({"echo": text, "length": text.chars().count()});
                session.stream(&json!({"type": "json", "message": {"json_object": json}, "meta": null})).await;
                None
            }
            ("invoke_tool", Some("fail")) => {
                session.stream(&text_message("about to fail")).await;
                Some(ErrorMessage::new("ValueError", format!("boom: {text}")))
            }
            ("invoke_tool", tool) => {
                let tool = tool.unwrap_or_default();
                Some(ErrorMessage::new("ValueError", format!("Tool `{tool}` not found for provider `echo`")))
            }
            ("validate_tool_credentials", _) => match request.credentials.get("api_key") {
                Some(key) if key == "good" => {
                    session.stream(&json!({"result": true})).await;
                    None
                }
                _ => Some(ErrorMessage::new("ToolProviderCredentialValidationError", "invalid api_key")),
            },
            (action, _) => Some(ErrorMessage::new("ValueError", format!("unsupported action {action:?}"))),
        };
        session.finish(error.map(|e| e.to_wire())).await;
    }
}

/// A tool's `text` message.
fn text_message(text: &str) -> Value {
    json!({"type": "text", "message": {"text": text}, "meta": null})
}

fn main() -> ExitCode {
    dify_plugin::logging::init(None);
    match dify_plugin::run(Arc::new(Echo)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tool: {e}");
            ExitCode::FAILURE
        }
    }
}
