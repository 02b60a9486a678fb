//! `kv_url` as the store layer reads it: the scheme that picks a backend, and the redacted
//! form every message and log line shows.

use crate::error::StoreError;

/// What a workflow author may write, for messages about a `kv_url` we cannot use.
pub(crate) const ACCEPTED_SCHEMES: &str = "http(s)://host:port for the KV container (`stateful-tool kv serve`), \
                                    or for Redis ≥ 7 redis(s)://[:password@]host:port/db, \
                                    redis(s)+cluster://[:password@]host:port,host:port… or \
                                    redis(s)+sentinel://[:password@]host:port,host:port…/master[/db], \
                                    or for PostgreSQL postgres://role:password@host:port[,host:port…]/database";

/// A backend, by `kv_url` scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    KvContainer,
    Redis,
    Postgres,
    /// The in-process store, only when the runtime allows it (tests).
    Memory,
}

impl Scheme {
    /// The scheme of `url`; an unknown or missing one is the user's input error.
    pub(crate) fn of(url: &str) -> Result<Scheme, StoreError> {
        match url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).as_deref() {
            Some("http" | "https") => Ok(Scheme::KvContainer),
            Some("redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel" | "rediss+sentinel") => {
                Ok(Scheme::Redis)
            }
            Some("postgres" | "postgresql") => Ok(Scheme::Postgres),
            Some("memory") => Ok(Scheme::Memory),
            _ => Err(unsupported(url)),
        }
    }
}

/// The error for a `kv_url` whose scheme we do not serve, listing the ones we do.
pub(crate) fn unsupported(url: &str) -> StoreError {
    StoreError::BadUrl(format!("kv_url {:?} has no supported scheme: use {ACCEPTED_SCHEMES}", redact(url)))
}

/// Longest URL a message repeats, in characters.
const SHOWN_CHARS: usize = 200;

/// The URL as messages and logs show it: the whole userinfo (user and password; a bare
/// `TOKEN@host` is a secret too) becomes `***`, with or without a scheme, parsable or not;
/// so does the value of every query parameter but the file paths `tls_ca`, `tls_cert` and
/// `tls_key` (`sentinel_password=…`).
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => format!("***@{}", &rest[at + 1..]),
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("tls_ca" | "tls_cert" | "tls_key", _)) => pair.to_owned(),
                    Some((name, _)) => format!("{name}=***"),
                    None => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => rest,
    };
    let shown = match scheme {
        Some(scheme) => format!("{scheme}://{rest}"),
        None => rest,
    };
    match shown.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &shown[..cut]),
        None => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_masks_the_whole_userinfo() {
        assert_eq!(redact("http://127.0.0.1:8123"), "http://127.0.0.1:8123");
        assert_eq!(redact("http://TOKEN@host:8123"), "http://***@host:8123");
        assert_eq!(redact("redis://:s3cret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redact("redis://user:s3cret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redact("http://u:pw@h:1/x@y"), "http://***@h:1/x@y");
        assert_eq!(redact("http://u:p@w@h:notaport"), "http://***@h:notaport");
        assert_eq!(redact("user:pw@host:6379"), "***@host:6379");
        assert_eq!(redact("no scheme"), "no scheme");
        assert_eq!(redact("rediss+cluster://:pw@a:7000,b:7001"), "rediss+cluster://***@a:7000,b:7001");
        assert_eq!(
            redact("redis+sentinel://u:pw@s1,s2:26380/m/1?sentinel_password=sp&tls_ca=/ca.pem"),
            "redis+sentinel://***@s1,s2:26380/m/1?sentinel_password=***&tls_ca=/ca.pem"
        );
        assert_eq!(
            redact("redis+sentinel://s1/m?sentinel_password=a@b"),
            "redis+sentinel://s1/m?sentinel_password=***"
        );
        assert_eq!(
            redact("https://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem"),
            "https://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem"
        );
        assert_eq!(redact(&"x".repeat(300)).chars().count(), SHOWN_CHARS + 1);
    }

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("HTTPS://h").unwrap(), Scheme::KvContainer);
        assert_eq!(Scheme::of("rediss://h").unwrap(), Scheme::Redis);
        assert_eq!(Scheme::of("PostgreSQL://u@h/db").unwrap(), Scheme::Postgres);
        assert_eq!(Scheme::of("postgres://u@h/db").unwrap(), Scheme::Postgres);
        for form in ["redis+cluster", "rediss+cluster", "Redis+Sentinel", "rediss+sentinel"] {
            assert_eq!(Scheme::of(&format!("{form}://h:1,h:2")).unwrap(), Scheme::Redis, "{form}");
        }
        for bad in ["ftp://x", "localhost:8123", "", "://h", "http:/h", "redis+foo://h"] {
            let e = Scheme::of(bad).unwrap_err();
            assert!(
                matches!(&e, StoreError::BadUrl(m) if m.contains("http(s)://") && m.contains("redis(s)://")),
                "{e}"
            );
        }
        assert!(!unsupported("ftp://u:pw@h").to_string().contains("pw"));
    }
}
