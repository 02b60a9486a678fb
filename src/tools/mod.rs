//! The tools: `event_ingest`, `event_status`, `event_complete`, over any `EventStore`.

pub(crate) mod answer;
mod claims;
mod deadline;
pub(crate) mod event_complete;
pub(crate) mod event_ingest;
mod event_status;
pub(crate) mod params;
mod pyrepr;
mod sentence;
pub(crate) mod settings;

use crate::error::ToolError;
pub use answer::Answer;
use claims::Claims;
pub(crate) use deadline::Deadline;
use event_store::record::Record;
use event_store::EventStore;
pub use params::Params;
pub use settings::Settings;

/// The tools this provider declares: the one place a tool name is mapped to its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    EventIngest,
    EventStatus,
    EventComplete,
}

impl Tool {
    /// Every tool, in declaration order.
    pub const ALL: [Tool; 3] = [Tool::EventIngest, Tool::EventStatus, Tool::EventComplete];

    /// The tool's wire name (its YAML `identity.name`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::EventIngest => "event_ingest",
            Tool::EventStatus => "event_status",
            Tool::EventComplete => "event_complete",
        }
    }

    /// The tool a request names; an unknown name is the caller's mistake.
    pub fn from_name(name: &str) -> Result<Tool, ToolError> {
        Tool::ALL.into_iter().find(|t| t.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
            ToolError::param(format!("unknown tool {name:?}; this provider has {}", names.join(", ")))
        })
    }

    /// Runs the tool; the answer is the `json` message's object, and gives the `text`
    /// sentence and the workflow outputs.
    pub async fn invoke<S: EventStore>(
        self,
        store: &S,
        settings: &Settings,
        params: &Params<'_>,
    ) -> Result<Answer, ToolError> {
        let answer = match self {
            Tool::EventIngest => event_ingest::run(store, settings, params).await,
            Tool::EventStatus => event_status::run(store, settings, params).await,
            Tool::EventComplete => event_complete::run(store, settings, params).await,
        };
        answer.map(|a| a.of_tool(self))
    }

    /// The names of the tool's declared outputs (`output_schema.properties` of its embedded
    /// YAML): what a workflow tool node offers as its output variables.
    pub(crate) fn outputs(self) -> &'static [String] {
        static OUTPUTS: std::sync::OnceLock<Vec<Vec<String>>> = std::sync::OnceLock::new();
        let all = OUTPUTS.get_or_init(|| {
            Tool::ALL
                .iter()
                .map(|t| {
                    let properties = crate::declarations::declared_tool(t.name())
                        .and_then(|d| d["output_schema"]["properties"].as_object())
                        .expect("every tool declares output_schema.properties");
                    properties.keys().cloned().collect()
                })
                .collect()
        });
        &all[Tool::ALL.iter().position(|t| *t == self).expect("every tool is in ALL")]
    }
}

/// Decodes a stored value, turning a foreign or corrupt value into an upstream error that
/// names the key (nothing is overwritten).
pub(crate) fn decode(bytes: &[u8], key: &str) -> Result<Record, ToolError> {
    Record::from_bytes(bytes).map_err(|e| {
        ToolError::upstream(format!(
            "the store holds a value under {key} that is not an event record ({e}); it was left untouched"
        ))
    })
}

/// How many times a tool re-reads a record that another delivery keeps changing before
/// giving up with `upstream_error` (each round means someone else made progress).
pub(crate) const MAX_ROUNDS: usize = 16;

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use event_store::memory::MemoryStore;
    use event_store::{HostClock, StoreConfig};

    pub(crate) fn settings() -> Settings {
        Settings {
            store: StoreConfig { url: "memory://".into(), token: None, min_replicas: 0 },
            namespace: None,
            event_types: vec!["created".into(), "updated".into(), "closed".into()],
            retention: std::time::Duration::from_secs(3600),
            default_lease: std::time::Duration::ZERO,
            call_timeout: std::time::Duration::from_secs(5),
            call_timeout_setting: settings::STORE_TIMEOUT_SETTING,
            claim_ids: Default::default(),
        }
    }

    pub(crate) fn store() -> MemoryStore {
        MemoryStore::new(HostClock::system(), 0)
    }

    /// A call's parameters from a JSON object (its text is leaked: a test's few bytes).
    pub(crate) fn params(v: serde_json::Value) -> Params<'static> {
        Params::parse(Box::leak(v.to_string().into_boxed_str())).expect("an object")
    }
}
