//! Who may reach the KV container, decided at start: the tokens in force (`--tokens-file`, or
//! the single `*` token), the warnings for a listener other hosts can reach, and SIGHUP.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::{auth, tokens};

/// What start-up warns about a listener other hosts can reach: no token, no TLS (one line each).
pub(crate) fn exposure_warnings(listen: SocketAddr, token: bool, tls: bool) -> Vec<String> {
    let mut warnings = vec![];
    if listen.ip().is_loopback() {
        return warnings;
    }
    if !token {
        warnings.push(
            "kv: listening on a non-loopback address without a token; anyone who can reach it can read and write"
                .into(),
        );
    }
    if !tls {
        warnings.push(format!(
            "kv: listening on {listen}, a non-loopback address, without TLS: tokens and events cross the network in \
             clear text; give --tls-cert and --tls-key (see docs/kv-security.md)"
        ));
    }
    warnings
}

/// Where `kv serve` was told to find its tokens: `--token` / `KV_TOKEN`, `--token-file`,
/// `--tokens-file`.
pub(crate) struct TokenSources<'a> {
    pub(crate) token: Option<&'a str>,
    pub(crate) token_file: Option<&'a Path>,
    pub(crate) tokens_file: Option<&'a Path>,
}

/// The tokens in force at start: `--tokens-file` (a malformed one refuses to start, naming
/// the line), else the single `*` token of `--token-file` / `--token` / `KV_TOKEN`.
pub(crate) fn token_table(args: &TokenSources<'_>) -> anyhow::Result<Option<tokens::Table>> {
    let single = token_text(args)?;
    match args.tokens_file {
        Some(_) if single.is_some() => anyhow::bail!(
            "--tokens-file replaces --token, --token-file and KV_TOKEN: give only one (put the operator token \
             into the tokens file as `* TOKEN`)"
        ),
        Some(path) => Ok(Some(auth::Auth::read_file(path)?)),
        None => single.map(|t| tokens::Table::single(&t)).transpose(),
    }
}

/// The token from `--token-file` (first line, surrounding blanks trimmed), else `--token` /
/// `KV_TOKEN`.
fn token_text(args: &TokenSources<'_>) -> anyhow::Result<Option<String>> {
    let Some(path) = args.token_file else {
        return Ok(args.token.map(str::to_owned));
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading --token-file {}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim();
    anyhow::ensure!(!token.is_empty(), "--token-file {}: the first line is empty", path.display());
    Ok(Some(token.to_owned()))
}

/// SIGHUP re-reads the tokens file: requests in flight finish, the next ones meet the new
/// tokens. A malformed file is logged and changes nothing.
pub(crate) async fn reload_on_hangup(auth: Arc<auth::Auth>) {
    #[cfg(unix)]
    {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            tracing::warn!("kv: cannot listen for SIGHUP; use `kv reload` to re-read the tokens file");
            return;
        };
        while hup.recv().await.is_some() {
            // The outcome is logged by `reload` itself.
            let _ = auth.reload();
        }
    }
    #[cfg(not(unix))]
    let _ = auth;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reachable_listener_without_tls_is_warned_about_once() {
        let any: SocketAddr = "0.0.0.0:8123".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:8123".parse().unwrap();
        let plain = exposure_warnings(any, true, false);
        assert_eq!(plain.len(), 1);
        assert!(plain[0].contains("without TLS") && plain[0].contains("0.0.0.0:8123"), "{plain:?}");
        assert!(exposure_warnings(any, true, true).is_empty());
        assert_eq!(exposure_warnings(any, false, false).len(), 2);
        assert!(exposure_warnings(lo, false, false).is_empty());
        assert!(exposure_warnings("[::1]:1".parse().unwrap(), false, false).is_empty());
    }
}
