//! The plugin runtime: picks the transport from `INSTALL_METHOD` and serves sessions.

pub mod stdio;

use std::process::ExitCode;
use std::time::Duration;

use crate::dispatch::App;
use crate::store::Clock;

#[derive(clap::Args)]
pub struct ServeArgs {}

/// Knobs of the session loop (tests shorten the heartbeat).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub heartbeat: Duration,
    pub max_in_flight: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        let ms = std::env::var("STATEFUL_TOOL_HEARTBEAT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&v: &u64| v > 0)
            .unwrap_or(10_000);
        ServeOptions { heartbeat: Duration::from_millis(ms), max_in_flight: 4096 }
    }
}

pub fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    let method = std::env::var("INSTALL_METHOD").unwrap_or_else(|_| "local".to_owned());
    // One thread: every session is I/O-bound, and with stdin/stdout, the store sockets and
    // all sessions on one event loop a request costs no thread hand-off. Two workers plus
    // the main thread spent about a third of the plugin's CPU on waking each other.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let app = App::new(Clock::system());
    let result = match method.as_str() {
        "local" | "" => rt.block_on(stdio::run_stdio(app, ServeOptions::default())),
        other => Err(anyhow::anyhow!("INSTALL_METHOD={other} is not supported by this build (supported: local)")),
    };
    // Without a pipe, stdin is read on a blocking thread that a broken stdout leaves parked:
    // don't wait for it.
    rt.shutdown_background();
    result
}

#[cfg(test)]
mod tests;
