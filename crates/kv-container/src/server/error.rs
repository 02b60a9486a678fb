//! HTTP error responses: always `{"error":"<code>","message":"<text>"}` with a fitting status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::engine::EngineError;

/// An error answer. `code` is the stable machine-readable part clients branch on.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn bad_key(why: &str) -> Self {
        Self::bad_request("bad_key", why)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn too_large() -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", "value is larger than 1 MiB (1048576 bytes)")
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token")
    }

    /// A request head carrying both `Content-Length` and `Transfer-Encoding`: a proxy in
    /// front may have framed it differently (request smuggling), so it is refused.
    pub(crate) fn ambiguous_framing() -> Self {
        Self::bad_request("bad_framing", "a request must not carry both Content-Length and Transfer-Encoding")
    }

    /// The answer, and the connection closed after it: its framing cannot be trusted.
    pub(crate) fn into_close_response(self) -> Response {
        let mut resp = self.into_response();
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this path")
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        // Details go to the log, not to clients; the client only needs "not stored, retry".
        tracing::warn!("kv: request failed: {e}");
        match e {
            EngineError::Storage(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage_error",
                "the store could not complete the operation; nothing was acknowledged",
            ),
            EngineError::Unavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the store is shutting down or its writer stopped",
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.code, "message": self.message }).to_string();
        let mut resp = (self.status, body).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        resp
    }
}
