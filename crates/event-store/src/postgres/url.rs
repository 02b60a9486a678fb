//! The PostgreSQL kv_url: `postgres(ql)://user:password@host:port[,host:port…]/database?…`,
//! with our options (`schema`, `tls_ca`) taken out and the rest handed to tokio-postgres.

use std::time::Duration;

use tokio_postgres::config::{Host, SslMode, TargetSessionAttrs};

use super::super::url::redact;
use crate::error::StoreError;

/// The schema our table lives in when kv_url names none.
pub(crate) const DEFAULT_SCHEMA: &str = "stateful_tool";

/// A parsed PostgreSQL kv_url.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub(crate) config: tokio_postgres::Config,
    /// The schema holding our tables (an unquoted SQL identifier).
    pub(crate) schema: String,
    /// The CA file TLS must chain to (`tls_ca=`, or libpq's `sslrootcert=`); None = public roots.
    pub(crate) tls_ca: Option<String>,
    /// `sslmode=disable`: no TLS at all.
    pub(crate) tls_off: bool,
}

fn bad(url: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::BadUrl(format!("kv_url {:?} is not a usable PostgreSQL URL: {why}", redact(url)))
}

/// A schema name we can put in SQL unquoted: lower-case letters, digits, `_`; 63 bytes at most.
fn valid_schema(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.starts_with("pg_")
}

impl Parsed {
    pub(crate) fn parse(url: &str, timeout: Duration) -> Result<Parsed, StoreError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (mut schema, mut tls_ca, mut sslmode) = (DEFAULT_SCHEMA.to_owned(), None, None);
        let mut rest = vec![];
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("schema", s)) => schema = s.to_owned(),
                Some(("tls_ca" | "sslrootcert", path)) => tls_ca = Some(decode(path)),
                Some(("sslmode", mode)) => sslmode = Some(mode.to_owned()),
                Some((
                    "target_session_attrs"
                    | "application_name"
                    | "connect_timeout"
                    | "keepalives"
                    | "keepalives_idle"
                    | "load_balance_hosts"
                    | "channel_binding"
                    | "options",
                    _,
                )) => rest.push(pair),
                _ => {
                    return Err(bad(
                        url,
                        format!(
                            "parameter {:?} is not known (known: schema, sslmode, tls_ca, target_session_attrs, \
                             application_name, connect_timeout, keepalives, keepalives_idle, load_balance_hosts, \
                             channel_binding, options)",
                            pair.split('=').next().unwrap_or_default()
                        ),
                    ))
                }
            }
        }
        if !valid_schema(&schema) {
            return Err(bad(
                url,
                format!("schema {schema:?} must be lower-case letters, digits and _, not starting with a digit or pg_"),
            ));
        }
        let plain = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
        let mut config: tokio_postgres::Config = plain.parse().map_err(|e| bad(url, e))?;
        if config.get_hosts().is_empty() {
            return Err(bad(url, "it names no host"));
        }
        if config.get_hosts().iter().any(|h| !matches!(h, Host::Tcp(_))) {
            return Err(bad(url, "name hosts by address (Unix sockets are not supported)"));
        }
        if config.get_user().is_none() {
            return Err(bad(url, "it names no user: postgres://user:password@host:5432/database"));
        }
        if config.get_dbname().is_none() {
            return Err(bad(url, "it names no database: postgres://user:password@host:5432/database"));
        }
        // libpq's modes: we always verify the certificate when TLS is used, so require,
        // verify-ca and verify-full mean the same here.
        let tls_off = match sslmode.as_deref().unwrap_or(if tls_ca.is_some() { "verify-full" } else { "prefer" }) {
            "disable" => true,
            "prefer" | "allow" => {
                config.ssl_mode(SslMode::Prefer);
                false
            }
            "require" | "verify-ca" | "verify-full" => {
                config.ssl_mode(SslMode::Require);
                false
            }
            other => {
                return Err(bad(
                    url,
                    format!("sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"),
                ))
            }
        };
        if tls_off {
            config.ssl_mode(SslMode::Disable);
        }
        // Claims are writes: a read-only standby is never the right server. With several hosts
        // this finds the primary, including a standby promoted after a failover.
        if !query.contains("target_session_attrs=") {
            config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout.min(Duration::from_secs(5)));
        }
        if config.get_application_name().is_none() {
            config.application_name("stateful-tool");
        }
        Ok(Parsed { config, schema, tls_ca, tls_off })
    }

    /// Every `host:port` kv_url names, in order (each one may be dialled).
    pub(crate) fn hosts(&self) -> Vec<(String, u16)> {
        let ports = self.config.get_ports();
        self.config
            .get_hosts()
            .iter()
            .enumerate()
            .filter_map(|(i, h)| match h {
                Host::Tcp(name) => {
                    let port = ports.get(i).or_else(|| ports.first()).copied().unwrap_or(5432);
                    Some((name.clone(), port))
                }
                #[allow(unreachable_patterns)]
                _ => None,
            })
            .collect()
    }

    /// The hosts as messages show them: `a:5432,b:5432/database`.
    pub(crate) fn display(&self) -> String {
        let hosts: Vec<String> = self.hosts().iter().map(|(h, p)| format!("{h}:{p}")).collect();
        format!("{}/{}", hosts.join(","), self.config.get_dbname().unwrap_or_default())
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn forms() {
        let p = Parsed::parse("postgres://app:p%40ss@db:5433/events", T).unwrap();
        assert_eq!(p.config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!((p.schema.as_str(), p.tls_off, p.tls_ca.clone()), (DEFAULT_SCHEMA, false, None));
        assert_eq!(p.display(), "db:5433/events");
        assert_eq!(p.config.get_ssl_mode(), SslMode::Prefer);
        assert_eq!(p.config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        let p = Parsed::parse(
            "postgresql://app:pw@a:5432,b:5433/events?schema=claims_eu&sslmode=verify-full&tls_ca=/etc/ca%20x.pem",
            T,
        )
        .unwrap();
        assert_eq!(p.hosts(), vec![("a".to_owned(), 5432), ("b".to_owned(), 5433)]);
        assert_eq!((p.schema.as_str(), p.tls_ca.as_deref()), ("claims_eu", Some("/etc/ca x.pem")));
        assert_eq!(p.config.get_ssl_mode(), SslMode::Require);
        let p = Parsed::parse("postgres://app@a/events?sslmode=disable&target_session_attrs=any", T).unwrap();
        assert!(p.tls_off);
        assert_eq!(p.config.get_target_session_attrs(), TargetSessionAttrs::Any);
    }

    #[test]
    fn mistakes_are_bad_urls() {
        for wrong in [
            "postgres://app:pw@db/events?schema=Bad-Name",
            "postgres://app:pw@db/events?schema=pg_catalog",
            "postgres://app:pw@db/events?sslmode=sometimes",
            "postgres://app:pw@db/events?search_path=x",
            "postgres://app:pw@db",
            "postgres://db/events",
            "postgres://app:pw@db:notaport/events",
        ] {
            let e = Parsed::parse(wrong, T).unwrap_err();
            assert!(matches!(&e, StoreError::BadUrl(m) if !m.contains(":pw")), "{wrong}: {e}");
        }
    }
}
