//! stateful_tool: a Dify tool plugin that processes each delivered event exactly once.
//!
//! Path of a request: `protocol` (wire framing) → `runtime` (sessions) → `dispatch` (action
//! routing) → `tools` (event_ingest / event_status / event_complete) → `store` (atomic ops).

pub mod call;
pub mod declarations;
pub mod dispatch;
pub mod error;
pub mod logging;
#[doc(hidden)]
pub mod oracle;
pub mod protocol;
pub mod runtime;
pub mod tools;
pub mod trigger;

// The crates the plugin is built on, under the names the plugin's modules use.
pub use difypkg as package;
pub use event_store as store;
pub use kv_container::admin as kv_admin;
pub use kv_container::server as kv_server;
