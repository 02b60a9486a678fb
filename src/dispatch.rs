//! Routes each request to its handler and turns every outcome into session messages.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dify_plugin::{ErrorMessage, Handler, Oversize, OversizeLine, RequestData, Session};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::{SessionError, ToolError};
use crate::request::{RequestFields, ToolParameters};
use crate::tools::{self, Params, Settings, Tool};
use event_store::{HostClock, StoreCache, StoreOptions};

pub const PROVIDER: &str = "stateful_tool";

/// What a session whose handler panicked is told: the request failed inside the plugin, and
/// (every tool's effect being exactly-once) the caller may retry it.
pub(crate) const PANICKED: &str =
    "the plugin failed internally while handling this request (see the plugin log); retrying the call is safe";

/// Distinct credential sets whose settings are kept; a workspace has a handful, and past this
/// many the map is emptied and refilled (an attacker cycling credentials only costs parses).
const SETTINGS_KEPT: usize = 64;

/// State shared by all sessions: the store clients (pools reused across sessions), and the
/// settings each credential set reads as (every call of a provider sends the same ones).
pub struct App {
    pub stores: StoreCache,
    settings: Mutex<HashMap<Box<str>, Arc<Settings>, foldhash::fast::RandomState>>,
}

impl App {
    pub fn new(host: HostClock, store: StoreOptions) -> Arc<App> {
        Arc::new(App { stores: StoreCache::new(host, store), settings: Mutex::default() })
    }

    /// The settings `credentials` (their JSON text; absent reads like an empty object) give,
    /// read once per distinct text.
    fn settings(&self, credentials: Option<&RawValue>) -> Result<Arc<Settings>, ToolError> {
        let text = credentials.map_or("", RawValue::get);
        if let Some(found) = self.settings.lock().unwrap_or_else(|p| p.into_inner()).get(text) {
            return Ok(found.clone());
        }
        let tree = match text {
            "" => Value::Null,
            text => serde_json::from_str(text)
                .map_err(|e| ToolError::param(format!("the credentials are not JSON this plugin can read: {e}")))?,
        };
        let settings = Arc::new(Settings::from_credentials(&tree)?.with_call_timeout(self.stores.call_timeout()));
        let mut kept = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= SETTINGS_KEPT {
            kept.clear();
        }
        kept.insert(text.into(), settings.clone());
        Ok(settings)
    }
}

/// The plugin as the runtimes see it: every request's data goes to [`handle_request`], and
/// the errors the runtimes answer on their own are ours too ([`SessionError`]'s classes); a
/// webhook too long to hold still gets its sender a 413 from the trigger.
impl Handler for App {
    type Data<'a> = RequestFields<'a>;

    fn handle<'a>(
        &'a self,
        session: Session,
        data: RequestFields<'a>,
        request: &'a RequestData,
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        handle_request(self, session, data, request)
    }

    fn malformed(&self, why: &str) -> ErrorMessage {
        SessionError::from(ToolError::param(format!("malformed input: {why}"))).to_message()
    }

    fn panicked(&self) -> ErrorMessage {
        SessionError::from(ToolError::upstream(PANICKED)).to_message()
    }

    fn oversize(&self, line: &OversizeLine<'_>) -> Oversize {
        match crate::trigger::oversize_dispatch(line.prefix, line.len) {
            Some(stand_in) => Oversize::Handle(stand_in),
            None => Oversize::Refuse(self.malformed(&line.describe())),
        }
    }
}

/// What a request handler answers with, before it becomes session messages. It only lives
/// between the handler and `respond`; boxing the answer would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    /// A tool's answer: its `text`, `json` (and, for workflow nodes, `variable`) messages.
    Answer(tools::Answer),
    /// Other actions' `stream` chunks, as they go on the wire.
    Chunks(Vec<Value>),
}

/// Writes an outcome as session messages and ends the session (exactly one `end`, after an
/// optional `error`): the one place a handler's result or error meets the wire.
async fn respond(session: Session, outcome: Result<Outgoing, SessionError>) {
    match outcome {
        // Its text, json (and, for workflow nodes, variable) messages and the `end`, written
        // straight into one buffer.
        Ok(Outgoing::Answer(answer)) => session.finish_with_answer(&answer).await,
        Ok(Outgoing::Chunks(chunks)) => {
            for chunk in &chunks {
                session.stream(chunk).await;
            }
            session.finish(None).await;
        }
        Err(error) => session.finish(Some(error.to_wire())).await,
    }
}

/// One request's `data`, read once from its text: what it asks, of which tool, with which
/// credentials (their JSON text) and parameters (strings borrowed from the text).
enum Action<'a> {
    InvokeTool {
        tool: Tool,
        params: Params<'a>,
        credentials: Option<&'a RawValue>,
    },
    ValidateCredentials {
        credentials: Option<&'a RawValue>,
    },
    RuntimeParameters {
        tool: Tool,
    },
    /// A trigger action: the trigger reads the rest of `data` itself (its raw HTTP request).
    Trigger {
        action: Cow<'a, str>,
    },
}

impl<'a> Action<'a> {
    /// Reads `data`: its `type` and `action`, and for tool actions the provider (ours), the
    /// tool, its parameters and the credentials. A credential check's refusal is reported the
    /// way Dify shows it on the provider form.
    fn parse(fields: RequestFields<'a>) -> Result<Action<'a>, SessionError> {
        // Absent credentials read like an empty object: every look-up finds nothing.
        let RequestFields { kind, action, provider, tool, credentials, tool_parameters } = fields;
        let (kind, action) = (kind.unwrap_or_default(), action.unwrap_or_default());
        let tool = || Tool::from_name(tool.as_deref().unwrap_or_default());
        match (&*kind, &*action) {
            ("tool", "invoke_tool") => {
                check_provider(provider.as_deref())?;
                let tool = tool()?;
                let params = match tool_parameters {
                    ToolParameters::Absent => Params::default(),
                    ToolParameters::Object(params) => params,
                    ToolParameters::NotObject => {
                        return Err(ToolError::param("tool_parameters must be an object").into())
                    }
                };
                Ok(Action::InvokeTool { tool, params, credentials })
            }
            ("tool", "validate_tool_credentials") => {
                check_provider(provider.as_deref()).map_err(|e| SessionError::CredentialValidation(e.message))?;
                Ok(Action::ValidateCredentials { credentials })
            }
            ("tool", "get_tool_runtime_parameters") => {
                check_provider(provider.as_deref())?;
                Ok(Action::RuntimeParameters { tool: tool()? })
            }
            ("trigger", _) => Ok(Action::Trigger { action }),
            _ => Err(ToolError::param(format!(
                "unsupported request type {kind:?} / action {action:?}: this plugin handles tool actions invoke_tool, \
                 validate_tool_credentials and get_tool_runtime_parameters, and trigger actions"
            ))
            .into()),
        }
    }
}

/// Handles one `request` (read into `read`; `data` is its text) and ends its session.
async fn handle_request(app: &App, session: Session, fields: RequestFields<'_>, data: &RequestData) {
    respond(session, route(app, fields, data).await).await
}

async fn route(app: &App, fields: RequestFields<'_>, data: &RequestData) -> Result<Outgoing, SessionError> {
    match Action::parse(fields)? {
        Action::InvokeTool { tool, params, credentials } => {
            Ok(Outgoing::Answer(invoke_tool(app, tool, &params, credentials).await?))
        }
        // Boxed: a session's task holds its largest path's state, and the task is moved into
        // its box whole when it is spawned; these paths are rarer (and larger) than a tool's.
        Action::ValidateCredentials { credentials } => {
            Box::pin(validate_credentials(app, credentials)).await.map(Outgoing::Chunks)
        }
        Action::RuntimeParameters { tool } => Ok(Outgoing::Chunks(runtime_parameters(tool))),
        Action::Trigger { action } => {
            // The trigger reads its request as a tree (its raw HTTP request and subscription).
            let data = data.to_value().map_err(|e| ToolError::param(format!("malformed input: {e}")))?;
            Box::pin(crate::trigger::handle(&app.stores, &action, &data)).await.map(Outgoing::Chunks)
        }
    }
}

fn check_provider(provider: Option<&str>) -> Result<(), ToolError> {
    match provider {
        Some(PROVIDER) => Ok(()),
        // The daemon sends the short name; accept the long `author/plugin/provider` form too.
        Some(p) if p.rsplit('/').next() == Some(PROVIDER) => Ok(()),
        other => Err(ToolError::param(format!("unknown provider {other:?}; this plugin provides {PROVIDER:?}"))),
    }
}

async fn invoke_tool(
    app: &App,
    tool: Tool,
    params: &Params<'_>,
    credentials: Option<&RawValue>,
) -> Result<tools::Answer, ToolError> {
    let settings = app.settings(credentials)?;
    let store = app.stores.get(&settings.store).await?;
    tool.invoke(&*store, &settings, params).await
}

async fn validate_credentials(app: &App, credentials: Option<&RawValue>) -> Result<Vec<Value>, SessionError> {
    let fail = SessionError::CredentialValidation;
    let settings = app.settings(credentials).map_err(|e| fail(e.message))?;
    let store = app.stores.get(&settings.store).await.map_err(|e| fail(e.to_string()))?;
    let probe = settings.check_store(&*store, app.stores.call_timeout()).await.map_err(|e| fail(e.to_string()))?;
    for w in &probe.warnings {
        tracing::warn!(backend = probe.backend, "store check: {w}");
    }
    tracing::info!("credentials validated against {}", probe.server);
    Ok(vec![json!({"result": true})])
}

fn runtime_parameters(tool: Tool) -> Vec<Value> {
    // Our parameters are static: answer with the declared ones.
    let parameters = crate::declarations::declared_tool(tool.name())
        .and_then(|t| t.get("parameters").cloned())
        .unwrap_or_else(|| json!([]));
    vec![json!({ "parameters": parameters })]
}
