//! `INSTALL_METHOD=remote`: register with a running daemon over TCP and serve sessions there; reconnect when dropped.
//!
//! Policy, per connection:
//! - The daemon's verdict on a registration is silence (success) or one text line and a close
//!   (bad key, invalid declaration). A text line is final: exit code 2, never retried, also on
//!   a reconnect (the key expires after two idle hours).
//! - The registration counts as accepted once the daemon sends its first JSON line (a request)
//!   or two seconds pass after `end` without an answer.
//! - A close before acceptance on the very first connection also exits 2 (the address is
//!   wrong or the daemon is refusing us without a word); on a later connection it is one more
//!   failed attempt.
//! - After acceptance a close is a disconnect: in-flight sessions are abandoned (the daemon
//!   already failed them) and the plugin reconnects and re-registers from scratch.
//! - Reconnect delays start at [`RemoteConfig::reconnect_base`] (default 1000 ms) and double
//!   per consecutive failure up to 30 s; after [`RemoteConfig::max_attempts`] (default 10,
//!   about 2.5 minutes) consecutive failures the plugin gives up ([`Error::GaveUp`]). The
//!   host chooses both (the daemon has no setting for them).
//!
//! A refusal and a silent first close end the runtime with [`Error::Refused`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout};

use super::register::{explain_refusal, registration, Registration, Verdict, Watched};
use super::{session_loop, ServeOptions};
use crate::error::Error;
use crate::handler::Handler;

/// The daemon's remote-debugging port unless the settings name another.
pub const DEFAULT_PORT: u16 = 5003;
/// Silence after `end` that we take as success (the daemon never acknowledges one).
pub(crate) const ACCEPT_GRACE: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The daemon drops a connection whose handshake takes longer than 10 s.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to look for the daemon's refusal line after a write to it failed.
const REFUSAL_WAIT: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The daemon closes a connection after 60 s without a heartbeat.
const MAX_HEARTBEAT: Duration = Duration::from_secs(30);
/// The first reconnect delay unless the host chooses another.
pub const DEFAULT_RECONNECT_BASE: Duration = Duration::from_millis(1000);
/// Failed attempts in a row before giving up, unless the host chooses another number.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// Where the daemon listens for debugging connections, the key it wants, and the host's
/// reconnect policy.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The daemon's host.
    pub host: String,
    /// The daemon's remote-debugging port.
    pub port: u16,
    /// The debugging key Dify shows (Plugins → Debug).
    pub key: String,
    /// The first reconnect delay (doubling per consecutive failure up to 30 s; at least 1 ms).
    pub reconnect_base: Duration,
    /// Failed attempts in a row before [`run_remote`] gives up (at least 1).
    pub max_attempts: u32,
}

impl RemoteConfig {
    /// Reads the daemon's settings through `get` (environment, then `.env`, as the SDK does):
    /// `REMOTE_INSTALL_URL` (`host:port` or `scheme://host:port`) or `REMOTE_INSTALL_HOST` /
    /// `REMOTE_INSTALL_PORT`, and `REMOTE_INSTALL_KEY`. The reconnect policy is the defaults
    /// ([`DEFAULT_RECONNECT_BASE`], [`DEFAULT_MAX_ATTEMPTS`]); set the fields to change it.
    pub fn from_settings(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let (host, port) = match get("REMOTE_INSTALL_URL") {
            Some(url) => parse_address(&url).map_err(|e| Error::Setting(format!("REMOTE_INSTALL_URL={url:?}: {e}")))?,
            None => {
                let host = get("REMOTE_INSTALL_HOST").unwrap_or_else(|| "localhost".to_owned());
                let port = match get("REMOTE_INSTALL_PORT") {
                    Some(p) => p
                        .parse()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| Error::Setting(format!("REMOTE_INSTALL_PORT={p:?} is not a port")))?,
                    None => DEFAULT_PORT,
                };
                (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port)
            }
        };
        let key = get("REMOTE_INSTALL_KEY").ok_or_else(|| {
            Error::Setting(
                "REMOTE_INSTALL_KEY is not set: copy the debugging key from Dify → Plugins → Debug into .env \
                 (REMOTE_INSTALL_KEY=...) or the environment"
                    .to_owned(),
            )
        })?;
        Ok(RemoteConfig { host, port, key, reconnect_base: DEFAULT_RECONNECT_BASE, max_attempts: DEFAULT_MAX_ATTEMPTS })
    }

    /// `host:port`, the host in brackets when it is an IPv6 address.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let base = self.reconnect_base.max(Duration::from_millis(1));
        base.saturating_mul(1u32 << failures.min(16)).min(MAX_BACKOFF)
    }
}

/// `host`, `host:port`, `[v6]:port`, optionally behind `scheme://` and before a `/path`.
pub(crate) fn parse_address(url: &str) -> Result<(String, u16), String> {
    let rest = url.trim().split_once("://").map_or(url.trim(), |(_, r)| r);
    let rest = rest.split('/').next().unwrap_or_default();
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => {
            let (host, tail) = v6.split_once(']').ok_or("unclosed '[' in the host")?;
            (host, tail.strip_prefix(':'))
        }
        None => match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    if host.is_empty() {
        return Err("no host; expected host:port, e.g. localhost:5003".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().ok().filter(|&p| p > 0).ok_or_else(|| format!("{p:?} is not a port"))?,
    };
    Ok((host.to_owned(), port))
}

/// How one connection ended.
enum ConnectionEnd {
    Refused(String),
    /// Never reached the daemon.
    Unreachable(String),
    /// Closed before the registration was accepted.
    ClosedEarly(String),
    /// Closed after the registration was accepted.
    Lost(String),
}

/// Registers `registration` with the daemon at `cfg`'s address and serves `app`'s sessions
/// there, reconnecting as the module's policy says; it ends only with an error.
pub async fn run_remote<H: Handler>(
    app: Arc<H>,
    mut opts: ServeOptions,
    cfg: RemoteConfig,
    registration: Registration,
) -> Result<Infallible, Error> {
    opts.heartbeat = opts.heartbeat.min(MAX_HEARTBEAT);
    let addr = cfg.addr();
    let mut failures = 0u32;
    let mut registered_before = false;
    loop {
        let outcome = connect_once(&cfg, &registration, &app, &opts).await;
        let why = match outcome {
            ConnectionEnd::Refused(text) => return Err(Error::Refused(explain_refusal(&text, &addr))),
            ConnectionEnd::ClosedEarly(why) if !registered_before => {
                return Err(Error::Refused(format!(
                    "{why}; the daemon at {addr} gave no reason. Check that REMOTE_INSTALL_URL names the plugin \
                     daemon's remote-debugging port and that the key is current (Dify → Plugins → Debug)"
                )))
            }
            ConnectionEnd::Lost(why) => {
                registered_before = true;
                failures = 0;
                tracing::warn!("lost the connection to the daemon at {addr}: {why}; reconnecting");
                sleep(cfg.backoff(0)).await;
                continue;
            }
            ConnectionEnd::Unreachable(why) | ConnectionEnd::ClosedEarly(why) => why,
        };
        failures += 1;
        if failures >= cfg.max_attempts.max(1) {
            return Err(Error::GaveUp { attempts: failures, addr, why });
        }
        let delay = cfg.backoff(failures - 1);
        tracing::warn!("{why}; retrying in {delay:?} (attempt {}/{})", failures + 1, cfg.max_attempts);
        sleep(delay).await;
    }
}

async fn connect_once<H: Handler>(
    cfg: &RemoteConfig,
    plugin: &Registration,
    app: &Arc<H>,
    opts: &ServeOptions,
) -> ConnectionEnd {
    let addr = cfg.addr();
    let stream = match timeout(CONNECT_TIMEOUT, TcpStream::connect((cfg.host.as_str(), cfg.port))).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return ConnectionEnd::Unreachable(format!("cannot connect to {addr}: {e}")),
        Err(_) => return ConnectionEnd::Unreachable(format!("connecting to {addr} timed out")),
    };
    let _ = stream.set_nodelay(true);
    let (read_half, mut write_half) = stream.into_split();
    let (mut reader, mut verdict) = Watched::new(read_half);
    let lines = registration(&cfg.key, plugin.manifest, plugin.declaration, plugin.assets);
    let sent = timeout(REGISTER_TIMEOUT, async {
        write_half.write_all(&lines).await?;
        write_half.flush().await
    })
    .await;
    if let Err(e) = sent.map_err(|_| "timed out".to_owned()).and_then(|r| r.map_err(|e| e.to_string())) {
        // A refused handshake closes the socket while we are still writing: the reason may be waiting.
        let mut scratch = [0u8; 1024];
        let _ = timeout(REFUSAL_WAIT, reader.read(&mut scratch)).await;
        let v = verdict.borrow().clone();
        return match v {
            Verdict::Refused(text) => ConnectionEnd::Refused(text),
            _ => ConnectionEnd::ClosedEarly(format!("sending the registration to {addr} failed ({e})")),
        };
    }
    tracing::info!("registration sent to the daemon at {addr}");
    let serve = session_loop::serve(BufReader::with_capacity(64 * 1024, reader), write_half, app.clone(), opts.clone());
    tokio::pin!(serve);
    let grace = sleep(ACCEPT_GRACE);
    tokio::pin!(grace);
    let (mut accepted, mut watching) = (false, true);
    let ended =
        |accepted: bool, why: String| if accepted { ConnectionEnd::Lost(why) } else { ConnectionEnd::ClosedEarly(why) };
    loop {
        tokio::select! {
            result = &mut serve => {
                let v = verdict.borrow().clone();
                return match (v, result) {
                    (Verdict::Refused(text), _) => ConnectionEnd::Refused(text),
                    (_, Ok(())) => ended(accepted, "the daemon closed the connection".into()),
                    (_, Err(e)) => ended(accepted, format!("connection error: {e}")),
                };
            }
            changed = verdict.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let v = verdict.borrow_and_update().clone();
                match v {
                    Verdict::Refused(text) => return ConnectionEnd::Refused(text),
                    // Dropping `serve` abandons the sessions of this connection: nobody can receive their answers.
                    Verdict::Closed => return ended(accepted, "the daemon closed the connection".into()),
                    Verdict::Speaking if !accepted => {
                        accepted = true;
                        tracing::info!("registered with the daemon at {addr}; serving requests");
                    }
                    Verdict::Speaking | Verdict::Silent => {}
                }
            }
            () = &mut grace, if !accepted => {
                accepted = true;
                tracing::info!("registered with the daemon at {addr} (no refusal within {ACCEPT_GRACE:?})");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_address("debug.dify.ai:5003").unwrap(), ("debug.dify.ai".into(), 5003));
        assert_eq!(parse_address("tcp://127.0.0.1:6000/").unwrap(), ("127.0.0.1".into(), 6000));
        assert_eq!(parse_address("http://[::1]:7000/x").unwrap(), ("::1".into(), 7000));
        assert_eq!(parse_address("localhost").unwrap(), ("localhost".into(), DEFAULT_PORT));
        assert!(parse_address("host:http").is_err());
        assert!(parse_address(":5003").is_err());
        assert!(parse_address("host:0").is_err());
    }

    fn config(pairs: &[(&str, &str)]) -> Result<RemoteConfig, Error> {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RemoteConfig::from_settings(|k| map.get(k).cloned())
    }

    #[test]
    fn settings_defaults_and_errors() {
        let c = config(&[("REMOTE_INSTALL_KEY", "k")]).unwrap();
        assert_eq!((c.addr(), c.reconnect_base, c.max_attempts), ("localhost:5003".into(), Duration::from_secs(1), 10));
        let c = config(&[("REMOTE_INSTALL_KEY", "k"), ("REMOTE_INSTALL_HOST", "::1"), ("REMOTE_INSTALL_PORT", "9")])
            .unwrap();
        assert_eq!(c.addr(), "[::1]:9");
        let url = [("REMOTE_INSTALL_KEY", "k"), ("REMOTE_INSTALL_URL", "h:1"), ("REMOTE_INSTALL_PORT", "9")];
        assert_eq!(config(&url).unwrap().addr(), "h:1", "the URL wins over host/port");
        let e = config(&[]).unwrap_err().to_string();
        assert!(e.contains("REMOTE_INSTALL_KEY") && e.contains("Plugins → Debug"), "{e}");
        assert!(config(&[("REMOTE_INSTALL_KEY", "k"), ("REMOTE_INSTALL_PORT", "x")]).is_err());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let c = config(&[("REMOTE_INSTALL_KEY", "k")]).unwrap();
        let delays: Vec<u64> = (0..8).map(|n| c.backoff(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        let c = RemoteConfig { reconnect_base: Duration::from_millis(10), ..c };
        let delays: Vec<u128> = (0..3).map(|n| c.backoff(n).as_millis()).collect();
        assert_eq!(delays, [10, 20, 40], "the host's first delay");
        let c = RemoteConfig { reconnect_base: Duration::ZERO, ..c };
        assert_eq!(c.backoff(0), Duration::from_millis(1), "never a busy loop");
    }
}
