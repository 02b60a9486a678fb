//! What dispatch decides for one delivery: the HTTP answer the sender gets and whether a
//! workflow starts.

use serde_json::{Map, Value};

/// What dispatch answers: the HTTP answer the sender gets and whether a workflow starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) status: u16,
    /// `accepted`, `duplicate`, `in_progress`, `conflict`, `unsigned`, `no_id`, `too_large`,
    /// `store_unavailable`, `misconfigured`, `bad_request`, `builder`.
    pub(crate) outcome: &'static str,
    /// Short human-readable reason, sent in the JSON body.
    pub(crate) message: String,
    /// Only an accepted delivery starts workflows (then `payload` is what invoke gets).
    pub(crate) start: bool,
    pub(crate) retry_after: Option<u32>,
    /// Extra fields for the body (delivery id, attempt, status) and, when `start`, the payload.
    pub(crate) fields: Map<String, Value>,
    pub(crate) payload: Map<String, Value>,
}

impl Verdict {
    pub(crate) fn refuse(status: u16, outcome: &'static str, message: impl Into<String>) -> Verdict {
        Verdict {
            status,
            outcome,
            message: message.into(),
            start: false,
            retry_after: None,
            fields: Map::new(),
            payload: Map::new(),
        }
    }

    pub(super) fn with(mut self, name: &str, value: Value) -> Verdict {
        self.fields.insert(name.to_owned(), value);
        self
    }
}
