//! Routes each request to its handler and turns every outcome into session messages.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{session_error, ToolError};
use crate::protocol::Session;
use crate::store::{Clock, EventStore, StoreCache};
use crate::tools::{self, Settings, Tool};

pub const PROVIDER: &str = "stateful_tool";

/// State shared by all sessions: the store clients (pools reused across sessions).
pub struct App {
    pub stores: StoreCache,
}

impl App {
    pub fn new(host: Clock) -> Arc<App> {
        Arc::new(App { stores: StoreCache::new(host) })
    }

    /// Like [`App::new`], dialing only the stores whose host is in `allowed` (see
    /// [`crate::store::cache::AllowedHosts`]).
    pub fn with_allowed_store_hosts(host: Clock, allowed: crate::store::cache::AllowedHosts) -> Arc<App> {
        Arc::new(App { stores: StoreCache::new(host).allowing(allowed) })
    }
}

/// Handles one `request` and ends its session (exactly one `end`, after an optional `error`).
pub async fn handle_request(app: &App, session: Session, data: Value) {
    let kind = data.get("type").and_then(Value::as_str).unwrap_or("");
    let action = data.get("action").and_then(Value::as_str).unwrap_or("");
    let outcome = match (kind, action) {
        ("tool", "invoke_tool") => {
            return match invoke_tool(app, &data).await {
                // The messages of `tool_messages(answer)` and the `end`, written without
                // building them.
                Ok(answer) => session.finish_with_answer(&answer).await,
                Err(e) => session.finish(Some(e.to_session_error())).await,
            };
        }
        ("tool", "validate_tool_credentials") => validate_credentials(app, &data).await,
        ("tool", "get_tool_runtime_parameters") => runtime_parameters(&data).map_err(|e| e.to_session_error()),
        _ => Err(ToolError::param(format!(
            "unsupported request type {kind:?} / action {action:?}: this plugin handles tool actions invoke_tool, \
             validate_tool_credentials and get_tool_runtime_parameters"
        ))
        .to_session_error()),
    };
    match outcome {
        Ok(chunks) => {
            for chunk in &chunks {
                session.stream(chunk).await;
            }
            session.finish(None).await;
        }
        Err(error) => session.finish(Some(error)).await,
    }
}

fn check_provider(data: &Value) -> Result<(), ToolError> {
    match data.get("provider").and_then(Value::as_str) {
        Some(PROVIDER) => Ok(()),
        // The daemon sends the short name; accept the long `author/plugin/provider` form too.
        Some(p) if p.rsplit('/').next() == Some(PROVIDER) => Ok(()),
        other => Err(ToolError::param(format!("unknown provider {other:?}; this plugin provides {PROVIDER:?}"))),
    }
}

/// The request's credentials, borrowed (an absent field reads like an empty object: every
/// credential look-up on it finds nothing).
fn credentials(data: &Value) -> &Value {
    data.get("credentials").unwrap_or(&Value::Null)
}

async fn invoke_tool(app: &App, data: &Value) -> Result<tools::Answer, ToolError> {
    check_provider(data)?;
    let tool = Tool::from_name(data.get("tool").and_then(Value::as_str).unwrap_or(""))?;
    let no_params = Map::new();
    let params = match data.get("tool_parameters") {
        None | Some(Value::Null) => &no_params,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ToolError::param("tool_parameters must be an object")),
    };
    let settings = Settings::from_credentials(credentials(data))?;
    let store = app.stores.get(&settings.store).await?;
    tool.invoke(&*store, &settings, params).await
}

/// The `text` message (for agents) and the `json` message (for workflow nodes) of one answer.
pub fn tool_messages(answer: Value) -> Vec<Value> {
    vec![
        json!({"type": "text", "message": {"text": answer.to_string()}, "meta": null}),
        json!({"type": "json", "message": {"json_object": answer}, "meta": null}),
    ]
}

async fn validate_credentials(app: &App, data: &Value) -> Result<Vec<Value>, Value> {
    let fail = |message: String| session_error("ToolProviderCredentialValidationError", &message, None);
    check_provider(data).map_err(|e| fail(e.message))?;
    let settings = Settings::from_credentials(credentials(data)).map_err(|e| fail(e.message))?;
    let store = app.stores.get(&settings.store).await.map_err(|e| fail(e.to_string()))?;
    let probe = store.probe().await.map_err(|e| fail(e.to_string()))?;
    for w in &probe.warnings {
        tracing::warn!(backend = probe.backend, "store check: {w}");
    }
    tracing::info!("credentials validated against {}", probe.server);
    Ok(vec![json!({"result": true})])
}

fn runtime_parameters(data: &Value) -> Result<Vec<Value>, ToolError> {
    check_provider(data)?;
    let tool = Tool::from_name(data.get("tool").and_then(Value::as_str).unwrap_or(""))?;
    // Our parameters are static: answer with the declared ones.
    let parameters =
        crate::declarations::tool(tool.name()).and_then(|t| t.get("parameters").cloned()).unwrap_or_else(|| json!([]));
    Ok(vec![json!({ "parameters": parameters })])
}
