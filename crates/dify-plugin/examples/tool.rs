//! A tool plugin: the Python SDK's `echo` provider (the plugin the protocol captures were made with), in Rust.
//!
//! Tools `echo` (a text and a JSON message) and `fail` (a text, then an error), each a typed
//! [`Tool`] with its parameters in its own type; credentials are valid when `api_key` is
//! `good`. A [`ToolProvider`] routes the daemon's requests to them, and `dify_plugin::run`
//! serves it on the runtime `INSTALL_METHOD` names: stdin/stdout as the daemon starts an
//! installed plugin, or HTTP (remote debugging would also need a `RunOptions::registration`).

use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::provider::{Credentials, ValidateCredentials};
use dify_plugin::tool::{Tool, ToolContext, ToolProvider};
use dify_plugin::ErrorMessage;
use serde::Deserialize;
use serde_json::json;

/// Both tools' parameters: the text to work on.
#[derive(Deserialize)]
struct Text {
    #[serde(default)]
    text: String,
}

struct Echo;

impl Tool for Echo {
    type Params = Text;

    fn name(&self) -> &str {
        "echo"
    }

    async fn invoke(&self, Text { text }: Text, cx: &ToolContext) -> Result<(), ErrorMessage> {
        cx.text(&format!("echo: {text}")).await;
        cx.json(json!({"echo": text, "length": text.chars().count()})).await;
        Ok(())
    }
}

struct Fail;

impl Tool for Fail {
    type Params = Text;

    fn name(&self) -> &str {
        "fail"
    }

    async fn invoke(&self, Text { text }: Text, cx: &ToolContext) -> Result<(), ErrorMessage> {
        cx.text("about to fail").await;
        Err(ErrorMessage::new("ValueError", format!("boom: {text}")))
    }
}

/// The provider's credential form has one field, `api_key`.
struct ApiKey;

impl ValidateCredentials for ApiKey {
    async fn validate_credentials(&self, credentials: &Credentials) -> Result<(), ErrorMessage> {
        match credentials.get("api_key") {
            Some(key) if key == "good" => Ok(()),
            _ => Err(ErrorMessage::new("ToolProviderCredentialValidationError", "invalid api_key")),
        }
    }
}

fn main() -> ExitCode {
    dify_plugin::logging::init(None);
    let provider = ToolProvider::new(ApiKey).with_tool(Echo).with_tool(Fail);
    match dify_plugin::run(Arc::new(provider)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tool: {e}");
            ExitCode::FAILURE
        }
    }
}
