//! Routes each request to its handler and turns every outcome into session messages.

use std::sync::Arc;

use dify_plugin::{ErrorMessage, Handler, Session};
use serde_json::{json, Map, Value};

use crate::error::{SessionError, ToolError};
use crate::store::{Clock, EventStore, StoreCache, StoreOptions};
use crate::tools::{self, Settings, Tool};

pub const PROVIDER: &str = "stateful_tool";

/// State shared by all sessions: the store clients (pools reused across sessions).
pub struct App {
    pub stores: StoreCache,
}

impl App {
    pub fn new(host: Clock, store: StoreOptions) -> Arc<App> {
        Arc::new(App { stores: StoreCache::new(host, store) })
    }
}

/// The plugin as the runtimes see it: every request's data goes to [`handle_request`], and
/// the errors the runtimes answer on their own are ours too ([`SessionError`]'s classes).
impl Handler for App {
    fn handle(&self, session: Session, data: Value) -> impl std::future::Future<Output = ()> + Send {
        handle_request(self, session, data)
    }

    fn malformed(&self, why: &str) -> ErrorMessage {
        SessionError::from(ToolError::param(format!("malformed input: {why}"))).to_message()
    }

    fn panicked(&self) -> ErrorMessage {
        SessionError::from(ToolError::upstream(dify_plugin::handler::PANICKED)).to_message()
    }
}

/// What a request handler answers with, before it becomes session messages. It only lives
/// between the handler and `respond`; boxing the answer would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Reply {
    /// A tool's answer: its `text`, `json` (and, for workflow nodes, `variable`) messages.
    Answer(tools::Answer),
    /// Other actions' `stream` chunks, as they go on the wire.
    Chunks(Vec<Value>),
}

/// Writes an outcome as session messages and ends the session (exactly one `end`, after an
/// optional `error`): the one place a handler's result or error meets the wire.
async fn respond(session: Session, outcome: Result<Reply, SessionError>) {
    match outcome {
        // Its text, json (and, for workflow nodes, variable) messages and the `end`, written
        // straight into one buffer.
        Ok(Reply::Answer(answer)) => session.finish_with_answer(&answer).await,
        Ok(Reply::Chunks(chunks)) => {
            for chunk in &chunks {
                session.stream(chunk).await;
            }
            session.finish(None).await;
        }
        Err(error) => session.finish(Some(error.to_wire())).await,
    }
}

/// One request's `data`, read once: what it asks, of which tool, with which credentials.
enum Request<'a> {
    InvokeTool {
        tool: Tool,
        params: &'a Map<String, Value>,
        credentials: &'a Value,
    },
    ValidateCredentials {
        credentials: &'a Value,
    },
    RuntimeParameters {
        tool: Tool,
    },
    /// A trigger action: the trigger reads the rest of `data` itself (its raw HTTP request).
    Trigger {
        action: &'a str,
    },
}

/// An absent `tool_parameters` reads like an empty object.
static NO_PARAMS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Request<'a> {
    /// Reads `data`: its `type` and `action`, and for tool actions the provider (ours), the
    /// tool, its parameters and the credentials. A credential check's refusal is reported the
    /// way Dify shows it on the provider form.
    fn parse(data: &'a Value) -> Result<Request<'a>, SessionError> {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or("");
        let action = data.get("action").and_then(Value::as_str).unwrap_or("");
        // An absent field reads like an empty object: every credential look-up finds nothing.
        let credentials = data.get("credentials").unwrap_or(&Value::Null);
        let tool = || Tool::from_name(data.get("tool").and_then(Value::as_str).unwrap_or(""));
        match (kind, action) {
            ("tool", "invoke_tool") => {
                check_provider(data)?;
                let tool = tool()?;
                let params = match data.get("tool_parameters") {
                    None | Some(Value::Null) => &*NO_PARAMS,
                    Some(Value::Object(m)) => m,
                    Some(_) => return Err(ToolError::param("tool_parameters must be an object").into()),
                };
                Ok(Request::InvokeTool { tool, params, credentials })
            }
            ("tool", "validate_tool_credentials") => {
                check_provider(data).map_err(|e| SessionError::CredentialValidation(e.message))?;
                Ok(Request::ValidateCredentials { credentials })
            }
            ("tool", "get_tool_runtime_parameters") => {
                check_provider(data)?;
                Ok(Request::RuntimeParameters { tool: tool()? })
            }
            ("trigger", action) => Ok(Request::Trigger { action }),
            _ => Err(ToolError::param(format!(
                "unsupported request type {kind:?} / action {action:?}: this plugin handles tool actions invoke_tool, \
                 validate_tool_credentials and get_tool_runtime_parameters, and trigger actions"
            ))
            .into()),
        }
    }
}

/// Handles one `request` and ends its session.
async fn handle_request(app: &App, session: Session, data: Value) {
    let outcome = match Request::parse(&data) {
        Ok(Request::InvokeTool { tool, params, credentials }) => {
            invoke_tool(app, tool, params, credentials).await.map(Reply::Answer).map_err(SessionError::from)
        }
        Ok(Request::ValidateCredentials { credentials }) => {
            validate_credentials(app, credentials).await.map(Reply::Chunks)
        }
        Ok(Request::RuntimeParameters { tool }) => Ok(Reply::Chunks(runtime_parameters(tool))),
        Ok(Request::Trigger { action }) => crate::trigger::handle(&app.stores, action, &data).await.map(Reply::Chunks),
        Err(e) => Err(e),
    };
    respond(session, outcome).await
}

fn check_provider(data: &Value) -> Result<(), ToolError> {
    match data.get("provider").and_then(Value::as_str) {
        Some(PROVIDER) => Ok(()),
        // The daemon sends the short name; accept the long `author/plugin/provider` form too.
        Some(p) if p.rsplit('/').next() == Some(PROVIDER) => Ok(()),
        other => Err(ToolError::param(format!("unknown provider {other:?}; this plugin provides {PROVIDER:?}"))),
    }
}

async fn invoke_tool(
    app: &App,
    tool: Tool,
    params: &Map<String, Value>,
    credentials: &Value,
) -> Result<tools::Answer, ToolError> {
    let mut settings = Settings::from_credentials(credentials)?;
    settings.call_timeout = app.stores.call_timeout();
    let store = app.stores.get(&settings.store).await?;
    tool.invoke(&*store, &settings, params).await
}

async fn validate_credentials(app: &App, credentials: &Value) -> Result<Vec<Value>, SessionError> {
    let fail = SessionError::CredentialValidation;
    let settings = Settings::from_credentials(credentials).map_err(|e| fail(e.message))?;
    let store = app.stores.get(&settings.store).await.map_err(|e| fail(e.to_string()))?;
    let probe = store.probe().await.map_err(|e| fail(e.to_string()))?;
    // The token must open the credential's namespace (a KV container binds tokens to
    // namespaces): read a key of that namespace that never exists.
    let key = crate::store::key::storage_key(settings.namespace.as_deref(), "stateful-tool-credential-probe");
    store.read(&key, app.stores.call_timeout()).await.map_err(|e| fail(e.to_string()))?;
    for w in &probe.warnings {
        tracing::warn!(backend = probe.backend, "store check: {w}");
    }
    tracing::info!("credentials validated against {}", probe.server);
    Ok(vec![json!({"result": true})])
}

fn runtime_parameters(tool: Tool) -> Vec<Value> {
    // Our parameters are static: answer with the declared ones.
    let parameters =
        crate::declarations::tool(tool.name()).and_then(|t| t.get("parameters").cloned()).unwrap_or_else(|| json!([]));
    vec![json!({ "parameters": parameters })]
}
