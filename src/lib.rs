//! stateful_tool: a Dify tool plugin that processes each delivered event exactly once.
//!
//! Path of a request: `protocol` (wire framing) → `runtime` (sessions) → `dispatch` (action
//! routing) → `tools` (event_ingest / event_status / event_complete) → `store` (atomic ops).

pub mod call;
pub mod declarations;
pub mod dispatch;
pub mod error;
pub mod kv_admin;
pub mod kv_server;
pub mod logging;
#[doc(hidden)]
pub mod oracle;
pub mod package;
pub mod protocol;
pub mod runtime;
pub mod store;
pub mod tools;
pub mod trigger;
