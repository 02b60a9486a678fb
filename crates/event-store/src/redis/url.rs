//! The Redis kv_url forms: one node, the seed nodes of a Cluster, or Sentinels and a master name.

use crate::error::StoreError;

/// A parsed kv_url: the deployment, and the CA file (`?tls_ca=/path/ca.pem`) that TLS
/// connections must chain to instead of the public roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) target: Target,
    pub(crate) tls_ca: Option<String>,
}

/// Where the Redis deployment is, parsed from kv_url (passwords still percent-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `redis://` / `rediss://`: one node. Whether it is a Cluster node is learnt on connect.
    Node { url: String },
    /// `redis+cluster://` / `rediss+cluster://`: seed nodes of a Redis Cluster.
    Cluster { nodes: Vec<String>, tls: bool, userinfo: String },
    /// `redis+sentinel://` / `rediss+sentinel://`: Sentinels that know `master`.
    Sentinel { sentinels: Vec<String>, master: String, db: u32, tls: bool, userinfo: String, sentinel_userinfo: String },
}

/// A kv_url written wrong is the user's input (`param_invalid`), not a store failure.
fn config(msg: impl Into<String>) -> StoreError {
    StoreError::BadUrl(msg.into())
}

/// The `host:port` of every seed node or Sentinel a Cluster or Sentinel kv_url lists (each
/// one is dialled, so each must pass the store-host allow-list); `None` for other forms.
pub(crate) fn seed_hosts(url: &str) -> Result<Option<Vec<String>>, StoreError> {
    match Parsed::parse(url)?.target {
        Target::Node { .. } => Ok(None),
        Target::Cluster { nodes, .. } => Ok(Some(nodes)),
        Target::Sentinel { sentinels, .. } => Ok(Some(sentinels)),
    }
}

impl Parsed {
    pub(crate) fn parse(url: &str) -> Result<Parsed, StoreError> {
        let (url, query) = url.split_once('?').unwrap_or((url, ""));
        let mut tls_ca = None;
        let mut rest = vec![];
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("tls_ca", path)) => tls_ca = Some(percent_decode(path)),
                _ => rest.push(pair),
            }
        }
        let url = if rest.is_empty() { url.to_owned() } else { format!("{url}?{}", rest.join("&")) };
        Ok(Parsed { target: Target::parse(&url)?, tls_ca })
    }
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, StoreError> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| config("kv_url has no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        let (tls, kind) = match scheme.as_str() {
            "redis" | "rediss" => return Ok(Target::Node { url: url.to_owned() }),
            "redis+cluster" => (false, "cluster"),
            "rediss+cluster" => (true, "cluster"),
            "redis+sentinel" => (false, "sentinel"),
            "rediss+sentinel" => (true, "sentinel"),
            _ => return Err(config(format!("{scheme}:// is not a Redis kv_url form"))),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = authority.rsplit_once('@').unwrap_or(("", authority));
        let default_port = if kind == "cluster" { 6379 } else { 26379 };
        let nodes = hosts.split(',').map(|h| host_port(h.trim(), default_port)).collect::<Result<Vec<_>, _>>()?;
        let mut sentinel_userinfo = String::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_password", v)) if kind == "sentinel" => sentinel_userinfo = format!(":{v}"),
                _ => {
                    return Err(config(format!(
                        "kv_url parameter {:?} is not known (known: tls_ca, and sentinel_password for Sentinel forms)",
                        pair.split('=').next().unwrap_or_default()
                    )))
                }
            }
        }
        if kind == "cluster" {
            if !path.trim_matches('/').is_empty() && path.trim_matches('/') != "0" {
                return Err(config("a Redis Cluster has only database 0: drop the /db part of kv_url"));
            }
            return Ok(Target::Cluster { nodes, tls, userinfo: userinfo.to_owned() });
        }
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let master = parts.next().ok_or_else(|| {
            config("a Sentinel kv_url names the master: redis+sentinel://host:26379,host:26380/mymaster")
        })?;
        let db = match parts.next() {
            None => 0,
            Some(d) => d.parse().map_err(|_| config(format!("{d:?} in kv_url is not a database number")))?,
        };
        if parts.next().is_some() {
            return Err(config("a Sentinel kv_url path is /<master_name>[/<db>]"));
        }
        Ok(Target::Sentinel {
            sentinels: nodes,
            master: percent_decode(master),
            db,
            tls,
            userinfo: userinfo.to_owned(),
            sentinel_userinfo,
        })
    }
}

/// `host:port`, `host` or `[v6]:port`, checked and normalised.
fn host_port(text: &str, default_port: u16) -> Result<String, StoreError> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| config(format!("{text:?} in kv_url is not host:port")))?;
        (format!("[{h}]"), after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (text.to_owned(), None),
        }
    };
    let port = match port {
        None => default_port,
        Some(p) => p.parse().map_err(|_| config(format!("{p:?} in kv_url is not a port")))?,
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return Err(config(format!("{text:?} in kv_url is not host:port")));
    }
    Ok(format!("{host}:{port}"))
}

pub(crate) fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if let (b'%', Some(&h), Some(&l)) = (b[i], b.get(i + 1), b.get(i + 2)) {
            if let (Some(h), Some(l)) = (hex(h), hex(l)) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL of one node, with the deployment's credentials.
pub(crate) fn node_url(tls: bool, userinfo: &str, host_port: &str, db: u32) -> String {
    let scheme = if tls { "rediss" } else { "redis" };
    let at = if userinfo.is_empty() { "" } else { "@" };
    format!("{scheme}://{userinfo}{at}{host_port}/{db}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(Target::parse("redis://h:1/0").unwrap(), Target::Node { url: "redis://h:1/0".into() });
        assert_eq!(
            Target::parse("rediss+cluster://:p%40ss@a:7000,b,[::1]:7002").unwrap(),
            Target::Cluster {
                nodes: vec!["a:7000".into(), "b:6379".into(), "[::1]:7002".into()],
                tls: true,
                userinfo: ":p%40ss".into()
            }
        );
        assert_eq!(
            Target::parse("redis+sentinel://:pw@s1:26379,s2/my%20master/2?sentinel_password=sp").unwrap(),
            Target::Sentinel {
                sentinels: vec!["s1:26379".into(), "s2:26379".into()],
                master: "my master".into(),
                db: 2,
                tls: false,
                userinfo: ":pw".into(),
                sentinel_userinfo: ":sp".into(),
            }
        );
        assert_eq!(node_url(true, ":p%40ss", "a:1", 0), "rediss://:p%40ss@a:1/0");
        let p = Parsed::parse("rediss://h:1/0?tls_ca=/etc/ca%20x.pem").unwrap();
        assert_eq!(
            p,
            Parsed { target: Target::Node { url: "rediss://h:1/0".into() }, tls_ca: Some("/etc/ca x.pem".into()) }
        );
        assert_eq!(node_url(false, "", "a:1", 3), "redis://a:1/3");
    }

    #[test]
    fn mistakes_are_bad_urls() {
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1/m/x",
            "redis+sentinel://s1/m/1/2",
            "redis+cluster://a:1/3",
            "redis+cluster://a:x",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a:1?ca=x",
            "redis+foo://a",
        ] {
            assert!(matches!(Target::parse(bad), Err(StoreError::BadUrl(_))), "{bad}");
        }
    }
}
