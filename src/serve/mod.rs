//! `stateful-tool serve`: reads the plugin's settings once, builds its [`App`], and hands it
//! to `dify_plugin::run_with`, which serves it on the runtime `INSTALL_METHOD` names.

use std::time::Duration;

use dify_plugin::runtime::env::EnvSettings;
use dify_plugin::runtime::register::Registration;
use dify_plugin::runtime::serverless;
use dify_plugin::{Error, Exit, InstallMethod, RunOptions};

use crate::declarations;
use crate::dispatch::{App, PROVIDER};
use event_store::hosts::AllowedHosts;
use event_store::{HostClock, StoreOptions};

/// `serve --help`: every environment variable that changes what `serve` does, with defaults.
/// The daemon sets INSTALL_METHOD; the others are for debugging, serverless hosts and tests.
pub const SERVE_ENV_HELP: &str = "\
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

/// What the plugin reads from its environment for itself (the SDK reads the runtime's own
/// settings), read once at start-up and passed down.
#[derive(Debug, Clone)]
pub(crate) struct PluginOptions {
    pub(crate) store: StoreOptions,
    /// The host clock the plugin stamps times with.
    pub(crate) clock: HostClock,
}

impl PluginOptions {
    /// From the environment (or `.env`): `STATEFUL_TOOL_STORE_TIMEOUT_MS` and
    /// `STATEFUL_TOOL_TRIGGER_TIMEOUT_MS` (positive numbers; anything else keeps the default),
    /// and `STATEFUL_TOOL_STORE_HOSTS`.
    pub(crate) fn from_settings(settings: &EnvSettings) -> Result<Self, Error> {
        let millis = |name: &str| {
            let value = settings.get(name)?;
            let ms = value.parse::<u64>().ok().filter(|&ms| ms > 0);
            if ms.is_none() {
                tracing::warn!("{name}={value:?} is not a positive number of milliseconds; using the default");
            }
            ms.map(Duration::from_millis)
        };
        let defaults = StoreOptions::default();
        let store = StoreOptions::new(
            millis("STATEFUL_TOOL_STORE_TIMEOUT_MS").unwrap_or(defaults.call_timeout),
            millis("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS").unwrap_or(defaults.door_timeout),
            AllowedHosts::parse(settings.get(STORE_HOSTS_VAR).as_deref())
                .map_err(|e| Error::Setting(format!("{e:#}")))?,
        );
        Ok(PluginOptions { store, clock: HostClock::system() })
    }
}

/// Comma-separated store hosts (`host` or `host:port`) the plugin may dial; unset: any.
pub(crate) const STORE_HOSTS_VAR: &str = "STATEFUL_TOOL_STORE_HOSTS";

/// `stateful-tool serve`: the one place the plugin reads its environment; the runtime
/// `INSTALL_METHOD` names serves the plugin until the daemon is done with it.
pub fn serve() -> Result<Exit, Error> {
    // As with the Python SDK, `.env` may choose the transport (`.env.example` sets remote);
    // the daemon always sets INSTALL_METHOD=local in the environment, which wins.
    let settings = EnvSettings::load();
    let options = PluginOptions::from_settings(&settings)?;
    // Only remote debugging registers, so only there does the package setting matter.
    let registration = match InstallMethod::from_settings(&settings)? {
        InstallMethod::Remote => Some(registration(settings.get("STATEFUL_TOOL_PACKAGE").as_deref())?),
        _ => None,
    };
    let app = App::new(options.clock, options.store);
    let run = RunOptions {
        env_prefix: "STATEFUL_TOOL".to_owned(),
        registration,
        about: about(),
        ..RunOptions::new(settings)
    };
    dify_plugin::run_with(app, run)
}

/// What remote debugging registers: the tool package, or with `STATEFUL_TOOL_PACKAGE=trigger`
/// the trigger package (the daemon refuses one registration holding both providers).
fn registration(package: Option<&str>) -> Result<Registration, Error> {
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
        Some(other) => {
            Err(Error::Setting(format!("STATEFUL_TOOL_PACKAGE={other:?}: use tool (the default) or trigger")))
        }
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
