//! The smallest plugin: answers every request with one `stream` message echoing its action
//! and the tool's parameters, over stdin/stdout as the Dify daemon starts an installed
//! plugin (`INSTALL_METHOD=local`). Logs go to the daemon as `log` events.

use std::borrow::Cow;
use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::{ErrorMessage, Handler, RequestData, Session};
use serde::Deserialize;
use serde_json::json;

struct Echo;

/// What this plugin reads of a request's data; its strings borrow from the request's text.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    tool_parameters: Option<Parameters<'a>>,
}

#[derive(Deserialize)]
struct Parameters<'a> {
    #[serde(borrow, default)]
    text: Cow<'a, str>,
}

impl Handler for Echo {
    // Read in the same pass as the request line; a request whose data does not read as this
    // is answered with the runtime's `malformed_request` ("malformed request: …").
    type Data<'a> = Request<'a>;

    async fn handle<'a>(&'a self, session: Session, data: Request<'a>, _: &'a RequestData) {
        let Request { action, tool_parameters } = data;
        if action != "invoke_tool" {
            let error = format!("this plugin only invokes tools, not {action:?}");
            return session.finish(Some(ErrorMessage::new("param_invalid", error).to_wire())).await;
        }
        let text = tool_parameters.map(|p| p.text).unwrap_or_default();
        tracing::info!("echoing {} bytes", text.len());
        session.stream(&json!({"type": "text", "message": {"text": text}})).await;
        session.finish(None).await;
    }
}

fn main() -> ExitCode {
    dify_plugin::logging::init(None);
    // INSTALL_METHOD chooses the runtime (stdio when unset, as the daemon starts a plugin).
    match dify_plugin::run(Arc::new(Echo)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo: {e}");
            ExitCode::FAILURE
        }
    }
}
