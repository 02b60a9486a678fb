//! Optional bearer-token check, constant time, applied to every route except `/healthz`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The configured token, kept only as its SHA-256: comparing fixed-size digests in constant
/// time leaks neither the content nor the length of the real token.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl Token {
    pub fn new(token: &str) -> anyhow::Result<Token> {
        // An empty KV_TOKEN is far more likely a deployment mistake than a wish for no
        // auth; refusing to start beats silently serving an open store.
        anyhow::ensure!(!token.is_empty(), "the KV token must not be empty");
        Ok(Token { digest: Sha256::digest(token.as_bytes()).into() })
    }

    /// True when `headers` carry `Authorization: Bearer <token>` with the right token.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(given) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        digest.ct_eq(&self.digest).into()
    }
}

/// The credential of a `Bearer` authorization (scheme name is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim_start())
}

/// Middleware: answers 401 before the handler (and before any body is read) when the
/// request does not carry the token. `/healthz` stays open for probes.
pub async fn require_token(State(token): State<Arc<Token>>, req: Request, next: Next) -> Response {
    if req.uri().path() != "/healthz" && !token.admits(req.headers()) {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accepts_only_the_exact_token() {
        let t = Token::new("s3cret").unwrap();
        assert!(t.admits(&with_auth("Bearer s3cret")));
        assert!(t.admits(&with_auth("bearer s3cret")));
        assert!(!t.admits(&with_auth("Bearer s3cre")));
        assert!(!t.admits(&with_auth("Bearer s3cret2")));
        assert!(!t.admits(&with_auth("Basic s3cret")));
        assert!(!t.admits(&with_auth("s3cret")));
        assert!(!t.admits(&HeaderMap::new()));
    }

    #[test]
    fn empty_token_is_refused() {
        assert!(Token::new("").is_err());
    }
}
