//! The transports that carry the daemon's protocol to a [`Handler`](crate::Handler): stdio
//! (how the daemon starts a plugin), remote debugging over TCP, and HTTP (serverless).

pub mod env;
#[cfg(feature = "http")]
mod invoke;
pub mod register;
pub mod remote;
#[cfg(feature = "http")]
pub mod serverless;
pub mod session_loop;
#[cfg(unix)]
pub mod stdio;

use std::time::Duration;

use crate::logging::LogRoute;
use crate::protocol::BackwardsOptions;

/// What the HTTP runtimes' `GET /` says about the plugin: its name (also in the start-up
/// line) and any further fields (a version, the tools it provides, …).
#[derive(Debug, Clone)]
pub struct About {
    /// The plugin's name.
    pub name: &'static str,
    /// Further members of `GET /`'s object.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// Knobs of the session loop (tests shorten the heartbeat).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How often a `heartbeat` line tells the daemon the plugin is alive (it gives up on a
    /// plugin silent for 60 s).
    pub heartbeat: Duration,
    /// Sessions served at once; the next request line waits for one to end (as many again are
    /// read ahead, so answers to backwards calls behind them still reach their sessions).
    pub max_in_flight: usize,
    /// Where log records go while the loop runs.
    pub logs: LogRoute,
    /// How a session's calls back into Dify wait and are named.
    pub backwards: BackwardsOptions,
}

impl Default for ServeOptions {
    fn default() -> Self {
        // 1024 sessions in flight: enough to keep a plugin's backends busy; more would only
        // wait, each holding its parsed request.
        ServeOptions {
            heartbeat: Duration::from_secs(10),
            max_in_flight: 1024,
            logs: LogRoute::Stderr,
            backwards: BackwardsOptions::default(),
        }
    }
}
