//! The smallest plugin: answers every request with one `stream` message echoing its action
//! and the tool's parameters, over stdin/stdout as the Dify daemon starts an installed
//! plugin (`INSTALL_METHOD=local`). Logs go to the daemon as `log` events.

use std::process::ExitCode;
use std::sync::Arc;

use dify_plugin::logging::LogRoute;
use dify_plugin::runtime::{stdio::run_stdio, ServeOptions};
use dify_plugin::{ErrorMessage, Handler, Session};
use serde_json::{json, Value};

struct Echo;

impl Handler for Echo {
    async fn handle(&self, session: Session, data: Value) {
        match data["action"].as_str() {
            Some("invoke_tool") => {
                let text = data["tool_parameters"]["text"].as_str().unwrap_or_default();
                tracing::info!("echoing {} bytes", text.len());
                session.stream(&json!({"type": "text", "message": {"text": text}})).await;
                session.finish(None).await;
            }
            other => {
                let error =
                    ErrorMessage::new("param_invalid", format!("this plugin only invokes tools, not {other:?}"));
                session.finish(Some(error.to_wire())).await;
            }
        }
    }
}

fn main() -> anyhow::Result<ExitCode> {
    dify_plugin::logging::init(None);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(run_stdio(Arc::new(Echo), ServeOptions { logs: LogRoute::Protocol, ..ServeOptions::default() }))
}
