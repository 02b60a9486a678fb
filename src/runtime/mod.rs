//! The plugin runtime: picks the transport from `INSTALL_METHOD` and serves sessions.

pub mod env;
pub mod invoke;
pub mod register;
pub mod remote;
pub mod serverless;
pub mod session_loop;
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
        // 1024 sessions in flight keep every store busy (the KV client sends at most 256
        // requests at once per store); more would only wait, each holding its parsed request.
        ServeOptions { heartbeat: Duration::from_millis(ms), max_in_flight: 1024 }
    }
}

/// Comma-separated store hosts (`host` or `host:port`) the plugin may dial; unset: any.
pub const STORE_HOSTS_VAR: &str = "STATEFUL_TOOL_STORE_HOSTS";

/// The transports, by `INSTALL_METHOD` value.
pub const INSTALL_METHODS: &str = "local (stdio, as the daemon starts plugins), remote (debugging over TCP), \
                                   serverless and aws_lambda (HTTP)";

pub fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    // As with the SDK, `.env` may choose the transport (`.env.example` sets remote); the daemon
    // always sets INSTALL_METHOD=local in the environment, which wins.
    let settings = env::EnvSettings::load();
    let method = settings.get("INSTALL_METHOD").unwrap_or_default().to_ascii_lowercase();
    let get = |name: &str| settings.get(name);
    // One thread: every session is I/O-bound, and with stdin/stdout, the store sockets and
    // all sessions on one event loop a request costs no thread hand-off. Two workers plus
    // the main thread spent about a third of the plugin's CPU on waking each other.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let allowed = crate::store::cache::AllowedHosts::parse(settings.get(STORE_HOSTS_VAR).as_deref())?;
    let app = App::with_allowed_store_hosts(Clock::system(), allowed);
    let result = match method.as_str() {
        "local" | "" => rt.block_on(stdio::run_stdio(app, ServeOptions::default())),
        "remote" => remote::RemoteConfig::from_settings(get)
            .and_then(|cfg| rt.block_on(remote::run_remote(app, ServeOptions::default(), cfg))),
        "serverless" => serverless::HttpConfig::from_settings("serverless", "SERVERLESS", get)
            .and_then(|cfg| rt.block_on(serverless::run_http(app, cfg))),
        "aws_lambda" => serverless::HttpConfig::from_settings("aws_lambda", "AWS_LAMBDA", get)
            .and_then(|cfg| rt.block_on(serverless::run_http(app, cfg))),
        other => Err(anyhow::anyhow!("INSTALL_METHOD={other:?} is not supported; use one of: {INSTALL_METHODS}")),
    };
    // Without a pipe, stdin is read on a blocking thread that a broken stdout leaves parked:
    // don't wait for it.
    rt.shutdown_background();
    result
}

#[cfg(test)]
mod tests;
