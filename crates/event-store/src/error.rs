//! `StoreError`: why a store call failed, in words a workflow author can act on, with the
//! underlying error (a socket's, a TLS handshake's, a server's) kept as its source.

/// The underlying error a [`StoreError`] carries as its [`std::error::Error::source`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store call failed. Every variant but the caller's own input ([`Self::is_callers_input`])
/// is an upstream failure, never a success. A variant's text (`why`, `what`) is complete for
/// the reader and may quote its cause where the cause's words say what to fix; `cause` keeps
/// the typed error for whoever needs more than words.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Nothing was sent: connecting failed, or no connection was free in time.
    #[error("the store at {at} is unreachable: {why}")]
    Unreachable {
        /// The store's address, without credentials.
        at: String,
        why: String,
        #[source]
        cause: Option<Cause>,
    },
    /// No answer within the call's timeout (ms): the request may have been applied.
    #[error("the store did not answer within {0} ms")]
    Timeout(u64),
    /// The connection broke after the request was sent: it may have been applied.
    #[error("the connection to the store broke before it answered: {why}")]
    Interrupted {
        why: String,
        #[source]
        cause: Option<Cause>,
    },
    /// The store refused the credentials (a token, a password, a role).
    #[error("the store refused the credentials: {why}")]
    Unauthorized {
        why: String,
        #[source]
        cause: Option<Cause>,
    },
    /// The token is valid but bound to other namespaces: the user's credentials
    /// (`param_invalid`); the message names the namespace.
    #[error("{0}")]
    Forbidden(String),
    /// The store answered something this client cannot use (an unexpected status or reply,
    /// a write it could not confirm replicated).
    #[error("the store answered {what}")]
    Unexpected {
        what: String,
        #[source]
        cause: Option<Cause>,
    },
    /// The store, or what the plugin may do with it, is set up so it cannot be used (a CA
    /// file, a privilege, a host outside the allowed ones).
    #[error("the store configuration is invalid: {why}")]
    Config {
        why: String,
        #[source]
        cause: Option<Cause>,
    },
    /// `kv_url` cannot be used as written (scheme, syntax); the message says what to write.
    #[error("{0}")]
    BadUrl(String),
    /// The store refused a write that reached it after its deadline: it was not applied and
    /// never will be (not ambiguous).
    #[error("the store refused a write that reached it after its deadline (deadline {deadline_ms}, store time {store_now_ms})")]
    TooLate { deadline_ms: i64, store_now_ms: i64 },
}

impl StoreError {
    /// Nothing was sent to the store at `at`; `why` says what to check.
    pub fn unreachable(at: impl Into<String>, why: impl Into<String>) -> Self {
        StoreError::Unreachable { at: at.into(), why: why.into(), cause: None }
    }
    /// The connection broke after the request was sent.
    pub fn interrupted(why: impl Into<String>) -> Self {
        StoreError::Interrupted { why: why.into(), cause: None }
    }
    /// The store refused the credentials.
    pub fn unauthorized(why: impl Into<String>) -> Self {
        StoreError::Unauthorized { why: why.into(), cause: None }
    }
    /// The store answered `what`, which this client cannot use.
    pub fn unexpected(what: impl Into<String>) -> Self {
        StoreError::Unexpected { what: what.into(), cause: None }
    }
    /// The store's setup is unusable, as `why` says.
    pub fn config(why: impl Into<String>) -> Self {
        StoreError::Config { why: why.into(), cause: None }
    }

    /// This error with `e` as its source (a variant without a source is returned as it is).
    pub fn caused_by(mut self, e: impl Into<Cause>) -> Self {
        match &mut self {
            StoreError::Unreachable { cause, .. }
            | StoreError::Interrupted { cause, .. }
            | StoreError::Unauthorized { cause, .. }
            | StoreError::Unexpected { cause, .. }
            | StoreError::Config { cause, .. } => *cause = Some(e.into()),
            StoreError::Timeout(_) | StoreError::Forbidden(_) | StoreError::BadUrl(_) | StoreError::TooLate { .. } => {}
        }
        self
    }

    /// True when the request may have been applied although no answer arrived: the caller
    /// must read the key back before deciding anything.
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, StoreError::Timeout(_) | StoreError::Interrupted { .. })
    }

    /// True when the caller's own input is at fault (`kv_url` as written, credentials bound to
    /// other namespaces): the fix is in what the caller sent (`param_invalid`), not upstream.
    pub fn is_callers_input(&self) -> bool {
        matches!(self, StoreError::BadUrl(_) | StoreError::Forbidden(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_cause_is_the_source_and_the_text_stays_ours() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = StoreError::unreachable("http://kv:8080", "connection refused").caused_by(io);
        assert_eq!(e.to_string(), "the store at http://kv:8080 is unreachable: connection refused");
        let source = e.source().expect("the cause is the source");
        assert_eq!(
            source.downcast_ref::<std::io::Error>().map(|io| io.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert!(StoreError::Timeout(5).caused_by("ignored").source().is_none());
    }

    #[test]
    fn only_a_url_or_a_namespace_is_the_callers_input() {
        assert!(StoreError::BadUrl("x".into()).is_callers_input());
        assert!(StoreError::Forbidden("x".into()).is_callers_input());
        assert!(!StoreError::config("x").is_callers_input());
        assert!(!StoreError::unauthorized("x").is_callers_input());
        assert!(StoreError::interrupted("x").is_ambiguous() && StoreError::Timeout(1).is_ambiguous());
        assert!(!StoreError::unreachable("a", "b").is_ambiguous());
    }
}
