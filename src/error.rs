//! The one enum of tool error classes, and how each becomes a protocol session error.

use std::sync::Arc;

use dify_plugin::ErrorMessage;
use serde_json::Value;

use event_store::StoreError;

/// What went wrong, in the four classes users and workflows branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Bad or missing input; nothing touched the store.
    ParamInvalid,
    /// The store was unreachable, slow, refused, or answered nonsense.
    UpstreamError,
    /// The operation needs an existing record and there is none.
    NotFound,
    /// Same id, different content; or a stale / contradictory transition.
    Conflict,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ParamInvalid => "param_invalid",
            ErrorClass::UpstreamError => "upstream_error",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
        }
    }
}

/// An error a tool reports to its caller.
#[derive(Debug, Clone)]
pub struct ToolError {
    pub class: ErrorClass,
    pub message: String,
    /// Extra machine-readable details (at most a few keys; the daemon allows ≤ 10).
    pub(crate) details: Option<Value>,
    /// The store failure behind it, with its own causes (shared: a tool error is cloned into
    /// the answers of every call that waited on it).
    pub(crate) cause: Option<Arc<StoreError>>,
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class.as_str(), self.message)
    }
}

/// The source is the store error itself (not its shared handle), so a reader walking the
/// chain meets `StoreError` and then its own cause.
impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl ToolError {
    pub(crate) fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        ToolError { class, message: message.into(), details: None, cause: None }
    }
    pub(crate) fn param(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::ParamInvalid, message)
    }
    pub(crate) fn upstream(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::UpstreamError, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::NotFound, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Conflict, message)
    }
    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// Every error a session can end with: a tool's (its class is the `error_type`), or a failed
/// credential validation, which the daemon shows on the provider form under its own type.
#[derive(Debug, Clone)]
pub(crate) enum SessionError {
    Tool(ToolError),
    CredentialValidation(String),
}

impl From<ToolError> for SessionError {
    fn from(e: ToolError) -> Self {
        SessionError::Tool(e)
    }
}

impl SessionError {
    /// The session `error` message: `error_type` (the class), `message` (what a workflow
    /// author reads), and `args` (the details).
    pub(crate) fn to_message(&self) -> ErrorMessage {
        match self {
            SessionError::Tool(e) => {
                ErrorMessage::new(e.class.as_str(), e.message.as_str()).with_details(e.details.clone())
            }
            SessionError::CredentialValidation(m) => {
                ErrorMessage::new("ToolProviderCredentialValidationError", m.as_str())
            }
        }
    }

    /// The `data` of the session `error` message ([`ErrorMessage::to_wire`], the one place an
    /// error becomes protocol JSON).
    pub(crate) fn to_wire(&self) -> Value {
        self.to_message().to_wire()
    }
}

impl From<event_store::key::InvalidInput> for ToolError {
    fn from(e: event_store::key::InvalidInput) -> Self {
        ToolError::param(e.message)
    }
}

/// The one mapping of a store failure to its class: the caller's own input (`kv_url`,
/// credentials bound to other namespaces) is `param_invalid`, everything else upstream. The
/// message is the store error's own words, which quote a cause where it says what to fix;
/// the error itself stays the tool error's source.
impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        let class = if e.is_callers_input() { ErrorClass::ParamInvalid } else { ErrorClass::UpstreamError };
        ToolError { class, message: e.to_string(), details: None, cause: Some(Arc::new(e)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn session_error_caps_args_at_ten_keys() {
        let mut details = serde_json::Map::new();
        for i in 0..20 {
            details.insert(format!("k{i}"), json!(i));
        }
        let v = SessionError::from(ToolError::conflict("x").with_details(Value::Object(details))).to_wire();
        assert_eq!(v["error_type"], "conflict");
        assert_eq!(v["args"].as_object().unwrap().len(), 10);
    }

    #[test]
    fn a_store_error_keeps_its_words_its_class_and_its_cause() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = ToolError::from(StoreError::interrupted("reset by peer").caused_by(io));
        assert_eq!(e.class, ErrorClass::UpstreamError);
        assert_eq!(e.message, "the connection to the store broke before it answered: reset by peer");
        let store = e.source().and_then(|s| s.downcast_ref::<StoreError>()).expect("the store error is the source");
        assert!(store.source().is_some_and(|io| io.is::<std::io::Error>()), "{store:?}");
        let url = ToolError::from(StoreError::BadUrl("kv_url has no scheme".into()));
        assert_eq!((url.class, url.message.as_str()), (ErrorClass::ParamInvalid, "kv_url has no scheme"));
    }

    #[test]
    fn non_object_details_are_wrapped() {
        let v = SessionError::from(ToolError::upstream("down").with_details(json!("x"))).to_wire();
        assert_eq!(v["args"], json!({"details": "x"}));
    }
}
