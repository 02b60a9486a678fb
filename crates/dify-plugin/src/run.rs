//! [`run`]: a plugin's whole start-up, as the daemon's environment chooses the runtime.
//!
//! The daemon starts an installed plugin with `INSTALL_METHOD=local` (stdio); a developer
//! sets `remote` (with `REMOTE_INSTALL_*`) to debug against a running Dify; a serverless host
//! sets `serverless` or `aws_lambda`. The SDK's own knobs carry the host's prefix
//! ([`RunOptions::env_prefix`]): `<PREFIX>_HEARTBEAT_MS`, `<PREFIX>_BACKWARDS_TIMEOUT_MS`,
//! `<PREFIX>_RECONNECT_MS` and `<PREFIX>_RECONNECT_ATTEMPTS`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Exit};
use crate::handler::Handler;
use crate::logging::LogRoute;
use crate::protocol::BackwardsOptions;
use crate::runtime::env::EnvSettings;
use crate::runtime::register::Registration;
use crate::runtime::remote::RemoteConfig;
#[cfg(feature = "http")]
use crate::runtime::serverless::{self, HttpConfig};
use crate::runtime::{remote, About, ServeOptions};

/// The `INSTALL_METHOD` values, as an error message lists them.
const INSTALL_METHODS: &str =
    "local (stdio, as the daemon starts plugins), remote (debugging over TCP), serverless and aws_lambda (HTTP)";

/// What [`run_with`] needs besides the handler: where settings come from, and what the
/// remote and HTTP runtimes say about the plugin.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The settings (environment and `.env`), read once.
    pub settings: EnvSettings,
    /// The prefix of the SDK's own knobs (`<PREFIX>_HEARTBEAT_MS`, …); `DIFY_PLUGIN` by default.
    pub env_prefix: String,
    /// What remote debugging registers (required for `INSTALL_METHOD=remote`).
    pub registration: Option<Registration>,
    /// What the HTTP runtimes' `GET /` says about the plugin.
    pub about: About,
    /// Sessions served at once; a further request waits for one to end.
    pub max_in_flight: usize,
}

impl RunOptions {
    /// The defaults, reading `settings`.
    pub fn new(settings: EnvSettings) -> Self {
        RunOptions {
            settings,
            env_prefix: "DIFY_PLUGIN".to_owned(),
            registration: None,
            about: About { name: "plugin", fields: serde_json::Map::new() },
            max_in_flight: ServeOptions::default().max_in_flight,
        }
    }
}

/// How the daemon reaches the plugin, by `INSTALL_METHOD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallMethod {
    /// `local` (or unset): newline-delimited JSON on stdin/stdout, as the daemon starts an
    /// installed plugin.
    Local,
    /// `remote`: registers with a running daemon over TCP, for debugging.
    Remote,
    /// `serverless`: HTTP, on `SERVERLESS_HOST` / `SERVERLESS_PORT`.
    Serverless,
    /// `aws_lambda`: HTTP, on `AWS_LAMBDA_HOST` / `AWS_LAMBDA_PORT`.
    AwsLambda,
}

impl InstallMethod {
    /// `INSTALL_METHOD` from `settings` (case does not matter; unset is local).
    pub fn from_settings(settings: &EnvSettings) -> Result<InstallMethod, Error> {
        match settings.get("INSTALL_METHOD").unwrap_or_default().to_ascii_lowercase().as_str() {
            "local" | "" => Ok(InstallMethod::Local),
            "remote" => Ok(InstallMethod::Remote),
            "serverless" => Ok(InstallMethod::Serverless),
            "aws_lambda" => Ok(InstallMethod::AwsLambda),
            other => {
                Err(Error::Setting(format!("INSTALL_METHOD={other:?} is not supported; use one of: {INSTALL_METHODS}")))
            }
        }
    }
}

/// A runtime with everything it reads from the settings: what [`run_with`] starts.
#[derive(Debug, Clone)]
pub enum Transport {
    /// stdio, with the session loop's options.
    Local(ServeOptions),
    /// Remote debugging: the session loop's options, the daemon's address and key, the
    /// reconnect policy, and what to register.
    Remote(ServeOptions, RemoteConfig, Registration),
    /// HTTP (serverless or aws_lambda).
    #[cfg(feature = "http")]
    Http(HttpConfig),
}

impl Transport {
    /// Reads every setting the chosen runtime needs, so a bad one is reported before anything
    /// starts. A knob that is not a number keeps its default.
    pub fn from_options(options: &RunOptions) -> Result<Transport, Error> {
        let settings = &options.settings;
        let get = |name: &str| settings.get(name);
        let setting = |name: &str| {
            let name = format!("{}_{name}", options.env_prefix);
            settings.get(&name).map(|value| (name, value))
        };
        // The heartbeat must tick, and a backwards call must wait: zero or not a number keeps
        // the default, with a warning.
        let positive_ms = |knob: &str| {
            setting(knob).and_then(|(name, value)| {
                let ms = value.parse::<u64>().ok().filter(|&n| n > 0);
                if ms.is_none() {
                    tracing::warn!("{name}={value:?} is not a positive number of milliseconds; using the default");
                }
                ms
            })
        };
        let heartbeat = positive_ms("HEARTBEAT_MS");
        let backwards_timeout = positive_ms("BACKWARDS_TIMEOUT_MS");
        // A reconnect knob that is not a number keeps its default (zero is clamped in use).
        let reconnect = |name: &str| setting(name).and_then(|(_, value)| value.parse::<u64>().ok());
        let defaults = ServeOptions::default();
        let serve = ServeOptions {
            heartbeat: heartbeat.map_or(defaults.heartbeat, Duration::from_millis),
            max_in_flight: options.max_in_flight.max(1),
            logs: LogRoute::Protocol,
            backwards: BackwardsOptions {
                timeout: backwards_timeout.map_or(defaults.backwards.timeout, Duration::from_millis),
                ..defaults.backwards
            },
        };
        Ok(match InstallMethod::from_settings(settings)? {
            InstallMethod::Local => Transport::Local(serve),
            InstallMethod::Remote => {
                let registration = options.registration.ok_or_else(|| {
                    Error::Setting("INSTALL_METHOD=remote: this plugin has no registration to send".to_owned())
                })?;
                let cfg = RemoteConfig::from_settings(get)?;
                let cfg = RemoteConfig {
                    reconnect_base: reconnect("RECONNECT_MS").map_or(cfg.reconnect_base, Duration::from_millis),
                    max_attempts: reconnect("RECONNECT_ATTEMPTS")
                        .map_or(cfg.max_attempts, |n| u32::try_from(n).unwrap_or(u32::MAX)),
                    ..cfg
                };
                // The daemon drops `log` events of a debugging connection: the terminal gets them too.
                Transport::Remote(ServeOptions { logs: LogRoute::ProtocolAndStderr, ..serve }, cfg, registration)
            }
            #[cfg(feature = "http")]
            InstallMethod::Serverless => Transport::Http(HttpConfig::from_settings("serverless", "SERVERLESS", get)?),
            #[cfg(feature = "http")]
            InstallMethod::AwsLambda => Transport::Http(HttpConfig::from_settings("aws_lambda", "AWS_LAMBDA", get)?),
            #[cfg(not(feature = "http"))]
            InstallMethod::Serverless | InstallMethod::AwsLambda => {
                return Err(Error::Setting(
                    "INSTALL_METHOD names an HTTP runtime: this plugin was built without the `http` feature".into(),
                ))
            }
        })
    }
}

/// Serves `handler` with the runtime the environment (and `./.env`) chooses, with the default
/// [`RunOptions`]: see [`run_with`].
pub fn run<H: Handler>(handler: Arc<H>) -> Result<Exit, Error> {
    run_with(handler, RunOptions::new(EnvSettings::load()))
}

/// Serves `handler` with the runtime `options.settings` choose, until the daemon is done with
/// the plugin ([`Exit`]) or the runtime cannot go on ([`Error`]). It neither prints nor exits
/// the process; logs go through `tracing` (see [`crate::logging::init`]).
///
/// The runtime is tokio's current-thread one: every session is I/O-bound, and with the
/// protocol streams, the plugin's sockets and all sessions on one event loop a request costs
/// no thread hand-off.
pub fn run_with<H: Handler>(handler: Arc<H>, options: RunOptions) -> Result<Exit, Error> {
    let transport = Transport::from_options(&options)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("building the async runtime", e))?;
    let result = rt.block_on(serve(handler, transport, options.about));
    // Without a pipe, stdin is read on a blocking thread that a broken stdout leaves parked:
    // don't wait for it.
    rt.shutdown_background();
    result
}

/// [`run_with`]'s work, on a runtime the caller provides.
pub async fn serve<H: Handler>(handler: Arc<H>, transport: Transport, about: About) -> Result<Exit, Error> {
    let never = |r: Result<Infallible, Error>| r.map(|never| match never {});
    #[cfg(not(feature = "http"))]
    drop(about);
    match transport {
        #[cfg(unix)]
        Transport::Local(opts) => crate::runtime::stdio::run_stdio(handler, opts).await,
        #[cfg(not(unix))]
        Transport::Local(_) => Err(Error::Setting("INSTALL_METHOD=local: the stdio runtime is Unix-only".into())),
        Transport::Remote(opts, cfg, registration) => never(remote::run_remote(handler, opts, cfg, registration).await),
        #[cfg(feature = "http")]
        Transport::Http(cfg) => never(serverless::run_http(handler, cfg, about).await),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn transport(pairs: &[(&str, &str)], registration: Option<Registration>) -> Result<Transport, Error> {
        let options = RunOptions {
            env_prefix: "HOST".into(),
            registration,
            ..RunOptions::new(EnvSettings::from_pairs(pairs.iter().copied()))
        };
        Transport::from_options(&options)
    }

    static MANIFEST: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(|| json!({}));

    fn registration() -> Option<Registration> {
        Some(Registration { manifest: &MANIFEST, declaration: ("tool_declaration", &MANIFEST), assets: &[] })
    }

    #[test]
    fn install_method_chooses_the_runtime() {
        let Transport::Local(opts) = transport(&[], None).unwrap() else { panic!("unset is local") };
        assert_eq!((opts.heartbeat, opts.logs), (Duration::from_secs(10), LogRoute::Protocol));
        assert!(matches!(transport(&[("INSTALL_METHOD", "LOCAL")], None), Ok(Transport::Local(_))));
        let http = transport(&[("INSTALL_METHOD", "aws_lambda"), ("AWS_LAMBDA_PORT", "9")], None);
        #[cfg(feature = "http")]
        assert!(matches!(http, Ok(Transport::Http(HttpConfig { method: "aws_lambda", port: 9, .. }))), "{http:?}");
        #[cfg(not(feature = "http"))]
        assert!(http.unwrap_err().to_string().contains("`http` feature"));
        let e = transport(&[("INSTALL_METHOD", "carrier-pigeon")], None).unwrap_err().to_string();
        assert!(e.contains("\"carrier-pigeon\"") && e.contains("serverless"), "{e}");
    }

    #[test]
    fn the_hosts_prefix_names_the_sdks_knobs() {
        let Transport::Local(opts) = transport(&[("HOST_HEARTBEAT_MS", "250")], None).unwrap() else { panic!() };
        assert_eq!(opts.heartbeat, Duration::from_millis(250));
        let Transport::Local(opts) =
            transport(&[("HOST_HEARTBEAT_MS", "soon"), ("DIFY_PLUGIN_HEARTBEAT_MS", "5")], None).unwrap()
        else {
            panic!()
        };
        assert_eq!(opts.heartbeat, Duration::from_secs(10), "not a number, and another prefix: the default");
        assert_eq!(opts.backwards.timeout, Duration::from_secs(250), "the SDK's wait for a backwards answer");
        let knobs = [("HOST_BACKWARDS_TIMEOUT_MS", "1500")];
        let Transport::Local(opts) = transport(&knobs, None).unwrap() else { panic!() };
        assert_eq!(opts.backwards.timeout, Duration::from_millis(1500));
    }

    #[test]
    fn remote_debugging_reads_the_daemons_settings_and_the_reconnect_policy() {
        let remote = [("INSTALL_METHOD", "remote"), ("REMOTE_INSTALL_KEY", "k")];
        let Transport::Remote(opts, cfg, _) = transport(&remote, registration()).unwrap() else { panic!() };
        assert_eq!(opts.logs, LogRoute::ProtocolAndStderr);
        assert_eq!((cfg.key.as_str(), cfg.reconnect_base, cfg.max_attempts), ("k", Duration::from_secs(1), 10));
        let knobs = [remote[0], remote[1], ("HOST_RECONNECT_MS", "10"), ("HOST_RECONNECT_ATTEMPTS", "99999999999")];
        let Transport::Remote(_, cfg, _) = transport(&knobs, registration()).unwrap() else { panic!() };
        assert_eq!((cfg.reconnect_base, cfg.max_attempts), (Duration::from_millis(10), u32::MAX));
        let odd = [remote[0], remote[1], ("HOST_RECONNECT_MS", "soon"), ("HOST_RECONNECT_ATTEMPTS", "-1")];
        let Transport::Remote(_, cfg, _) = transport(&odd, registration()).unwrap() else { panic!() };
        assert_eq!((cfg.reconnect_base, cfg.max_attempts), (Duration::from_secs(1), 10), "not a number: the default");
        let e = transport(&remote, None).unwrap_err().to_string();
        assert!(e.contains("registration"), "{e}");
        let e = transport(&remote[..1], registration()).unwrap_err().to_string();
        assert!(e.contains("REMOTE_INSTALL_KEY"), "{e}");
    }
}
