//! The one enum of tool error classes, and how each becomes a protocol session error.

use dify_plugin::ErrorMessage;
use serde_json::Value;

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
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", class.as_str())]
pub struct ToolError {
    pub class: ErrorClass,
    pub message: String,
    /// Extra machine-readable details (at most a few keys; the daemon allows ≤ 10).
    pub(crate) details: Option<Value>,
}

impl ToolError {
    pub(crate) fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        ToolError { class, message: message.into(), details: None }
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

impl From<crate::store::key::InvalidInput> for ToolError {
    fn from(e: crate::store::key::InvalidInput) -> Self {
        ToolError::param(e.message)
    }
}

impl From<crate::store::StoreError> for ToolError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::BadUrl(message) | crate::store::StoreError::Forbidden(message) => {
                ToolError::param(message)
            }
            e => ToolError::upstream(e.to_string()),
        }
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
    fn non_object_details_are_wrapped() {
        let v = SessionError::from(ToolError::upstream("down").with_details(json!("x"))).to_wire();
        assert_eq!(v["args"], json!({"details": "x"}));
    }
}
