//! `stateful-tool serve`: reads the environment once, builds the plugin's [`App`], and hands
//! it to the transport `INSTALL_METHOD` names (the `dify_plugin` runtimes).

use std::process::ExitCode;
use std::time::Duration;

use dify_plugin::logging::LogRoute;
use dify_plugin::runtime::register::Registration;
use dify_plugin::runtime::{env, remote, serverless, stdio, ServeOptions};

use crate::declarations;
use crate::dispatch::{App, PROVIDER};
use crate::store::{Clock, StoreOptions};

/// `serve --help`: every environment variable that changes what `serve` does, with defaults.
/// The daemon sets INSTALL_METHOD; the others are for debugging, serverless hosts and tests.
pub const ENV_HELP: &str = "\
Environment (read once at start; for INSTALL_METHOD, REMOTE_*, SERVERLESS_*, AWS_LAMBDA_* and
STATEFUL_TOOL_RECONNECT_* a ./.env file fills in what the environment leaves unset):
  INSTALL_METHOD                     transport: local (stdio, as the daemon starts plugins; the
                                     default), remote, serverless or aws_lambda
  REMOTE_INSTALL_URL                 remote: the daemon's debugging address, host:port
  REMOTE_INSTALL_HOST, _PORT         remote: the same in two parts (default localhost, 5003)
  REMOTE_INSTALL_KEY                 remote: the debugging key shown by Dify (required)
  STATEFUL_TOOL_PACKAGE              remote: register as the tool package (tool, the default) or
                                     the trigger package (trigger)
  STATEFUL_TOOL_RECONNECT_MS         remote: first reconnect delay, doubling up to 30 s (default 1000)
  STATEFUL_TOOL_RECONNECT_ATTEMPTS   remote: failed attempts in a row before giving up (default 10)
  SERVERLESS_HOST, SERVERLESS_PORT   serverless: HTTP address (default 0.0.0.0, 8080)
  AWS_LAMBDA_HOST, AWS_LAMBDA_PORT   aws_lambda: HTTP address (default 0.0.0.0, 8080)
  STATEFUL_TOOL_STORE_TIMEOUT_MS     one deadline for all store round trips of a tool call, in ms
                                     (default 5000)
  STATEFUL_TOOL_TRIGGER_TIMEOUT_MS   trigger: one deadline for a webhook's claim at the door, in ms
                                     (default 1500; the sender is waiting)
  STATEFUL_TOOL_STORE_HOSTS          comma-separated host or host:port entries: the only stores
                                     kv_url may name (default: any host)
  STATEFUL_TOOL_HEARTBEAT_MS         heartbeat interval towards the daemon, in ms (default 10000)
  STATEFUL_TOOL_LOG (or RUST_LOG)    log filter: error, warn, info, debug (default info); under
                                     the daemon, logs are protocol `log` events (stderr before)";

/// Everything the plugin reads from its environment, read once at start-up and passed down.
#[derive(Debug, Clone)]
pub(crate) struct RuntimeOptions {
    pub(crate) serve: ServeOptions,
    pub(crate) store: StoreOptions,
    /// The host clock the plugin stamps times with.
    pub(crate) clock: Clock,
}

impl RuntimeOptions {
    /// From the environment (or `.env`): `STATEFUL_TOOL_STORE_TIMEOUT_MS`,
    /// `STATEFUL_TOOL_HEARTBEAT_MS` and `STATEFUL_TOOL_TRIGGER_TIMEOUT_MS` (positive numbers;
    /// anything else keeps the default).
    pub(crate) fn from_settings(get: impl Fn(&str) -> Option<String>) -> Self {
        let millis = |name: &str| {
            let value = get(name)?;
            let ms = value.parse::<u64>().ok().filter(|&ms| ms > 0);
            if ms.is_none() {
                tracing::warn!("{name}={value:?} is not a positive number of milliseconds; using the default");
            }
            ms.map(Duration::from_millis)
        };
        let (serve, store) = (ServeOptions::default(), StoreOptions::default());
        RuntimeOptions {
            serve: ServeOptions { heartbeat: millis("STATEFUL_TOOL_HEARTBEAT_MS").unwrap_or(serve.heartbeat), ..serve },
            store: StoreOptions {
                call_timeout: millis("STATEFUL_TOOL_STORE_TIMEOUT_MS").unwrap_or(store.call_timeout),
                door_timeout: millis("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS").unwrap_or(store.door_timeout),
                ..store
            },
            clock: Clock::system(),
        }
    }
}

/// Comma-separated store hosts (`host` or `host:port`) the plugin may dial; unset: any.
pub(crate) const STORE_HOSTS_VAR: &str = "STATEFUL_TOOL_STORE_HOSTS";

/// The transports, by `INSTALL_METHOD` value.
pub(crate) const INSTALL_METHODS: &str = "local (stdio, as the daemon starts plugins), remote (debugging over TCP), \
                                   serverless and aws_lambda (HTTP)";

/// `stateful-tool serve`: the one place the plugin reads its environment.
pub fn run() -> anyhow::Result<ExitCode> {
    // As with the SDK, `.env` may choose the transport (`.env.example` sets remote); the daemon
    // always sets INSTALL_METHOD=local in the environment, which wins.
    let settings = env::EnvSettings::load();
    let method = settings.get("INSTALL_METHOD").unwrap_or_default().to_ascii_lowercase();
    let get = |name: &str| settings.get(name);
    let mut options = RuntimeOptions::from_settings(get);
    // One thread: every session is I/O-bound, and with stdin/stdout, the store sockets and
    // all sessions on one event loop a request costs no thread hand-off. Two workers plus
    // the main thread spent about a third of the plugin's CPU on waking each other.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    options.store.allowed_hosts = crate::store::hosts::AllowedHosts::parse(settings.get(STORE_HOSTS_VAR).as_deref())?;
    let app = App::new(options.clock, options.store);
    let result = match method.as_str() {
        "local" | "" => rt.block_on(stdio::run_stdio(app, ServeOptions { logs: LogRoute::Protocol, ..options.serve })),
        "remote" => remote_config(get).and_then(|cfg| {
            let opts = ServeOptions { logs: LogRoute::ProtocolAndStderr, ..options.serve };
            let registration = registration(get("STATEFUL_TOOL_PACKAGE").as_deref())?;
            rt.block_on(remote::run_remote(app, opts, cfg, registration))
        }),
        "serverless" => serverless::HttpConfig::from_settings("serverless", "SERVERLESS", get)
            .and_then(|cfg| rt.block_on(serverless::run_http(app, cfg, about()))),
        "aws_lambda" => serverless::HttpConfig::from_settings("aws_lambda", "AWS_LAMBDA", get)
            .and_then(|cfg| rt.block_on(serverless::run_http(app, cfg, about()))),
        other => Err(anyhow::anyhow!("INSTALL_METHOD={other:?} is not supported; use one of: {INSTALL_METHODS}")),
    };
    // Without a pipe, stdin is read on a blocking thread that a broken stdout leaves parked:
    // don't wait for it.
    rt.shutdown_background();
    result
}

/// Remote debugging's settings: the daemon's (`REMOTE_INSTALL_*`, read by `dify_plugin`) and
/// our reconnect policy, `STATEFUL_TOOL_RECONNECT_MS` (the first delay) and
/// `STATEFUL_TOOL_RECONNECT_ATTEMPTS`; a value that is not a number keeps the default.
fn remote_config(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<remote::RemoteConfig> {
    let cfg = remote::RemoteConfig::from_settings(&get)?;
    let number = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
    Ok(remote::RemoteConfig {
        reconnect_base: number("STATEFUL_TOOL_RECONNECT_MS").map_or(cfg.reconnect_base, Duration::from_millis),
        max_attempts: number("STATEFUL_TOOL_RECONNECT_ATTEMPTS")
            .map_or(cfg.max_attempts, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        ..cfg
    })
}

/// What remote debugging registers: the tool package, or with `STATEFUL_TOOL_PACKAGE=trigger`
/// the trigger package (the daemon refuses one registration holding both providers).
fn registration(package: Option<&str>) -> anyhow::Result<Registration> {
    match package {
        None | Some("tool") => Ok(Registration {
            manifest: declarations::manifest(),
            declaration: ("tool_declaration", declarations::tool_provider()),
            assets: declarations::assets(),
        }),
        Some("trigger") => Ok(Registration {
            manifest: declarations::trigger::manifest(),
            declaration: ("trigger_declaration", declarations::trigger::provider()),
            assets: declarations::trigger::assets(),
        }),
        Some(other) => anyhow::bail!("STATEFUL_TOOL_PACKAGE={other:?}: use tool (the default) or trigger"),
    }
}

/// What the HTTP runtimes' `GET /` says about the plugin.
fn about() -> serverless::About {
    let mut fields = serde_json::Map::new();
    fields.insert("version".into(), env!("CARGO_PKG_VERSION").into());
    fields.insert("tools".into(), crate::tools::Tool::ALL.map(crate::tools::Tool::name).as_slice().into());
    serverless::About { name: PROVIDER, fields }
}

#[cfg(test)]
mod tests;
