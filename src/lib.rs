//! stateful_tool: a Dify tool plugin that processes each delivered event exactly once.
//!
//! Path of a request: the `dify_plugin` crate (wire framing, sessions, the runtimes; started by
//! `serve`) → `dispatch` (the plugin's `Handler`: action routing) → `tools` (event_ingest /
//! event_status / event_complete) → the `event_store` crate (atomic ops).

pub mod call;
pub mod declarations;
pub mod dispatch;
pub mod error;
mod request;
pub mod serve;
/// The deterministic simulation of the claim protocol (a test): beside the tools it drives.
#[cfg(test)]
mod sim;
pub mod tools;
pub mod trigger;
