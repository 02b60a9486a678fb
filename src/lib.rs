//! stateful_tool: a Dify tool plugin that processes each delivered event exactly once.
//!
//! Path of a request: the `dify_plugin` crate (wire framing, sessions, the runtimes; started by
//! `serve`) → `dispatch` (the plugin's `Handler`: action routing) → `tools` (event_ingest /
//! event_status / event_complete) → the `event_store` crate (atomic ops).

mod daemon_line;
mod declarations;
mod dispatch;
mod error;
mod request;
mod serve;
mod tools;
mod trigger;

// The plugin's public surface, all of it: what its binary runs (`serve`, the `call` command's
// request), and what the bench, the fuzz targets and `tests/it` drive. Everything else is the
// plugin's own.
pub use daemon_line::{request_line, request_line_from};
pub use declarations::{assets, declared_tool, manifest, tool_names, tool_provider};
pub use dispatch::{App, PROVIDER};
pub use error::{ErrorClass, ToolError};
pub use serve::{serve, SERVE_ENV_HELP};
pub use tools::answer::NOT_FOR_AGENTS;
pub use tools::event_ingest::IngestRequest;
pub use tools::settings::DEFAULT_KV_URL;
pub use tools::{Answer, Params, Settings, Tool};
