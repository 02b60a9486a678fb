//! The store-host allow-list for the nodes Redis names after connecting, and why a node
//! refused our credentials (which password, and whether the server has one at all).

use std::net::SocketAddr;
use std::time::Duration;

use redis::io::AsyncDNSResolver;
use redis::{ErrorKind, RedisError, RedisFuture};

use super::errors::{is_auth_error, NOT_ALLOWED};
use crate::error::StoreError;
use crate::hosts::AllowedHosts;

/// Resolves hosts for the Cluster client, refusing any host the allow-list does not permit.
/// The client dials every node through its resolver (seeds, the owners in `CLUSTER SLOTS`,
/// `MOVED`/`ASK` targets), so no node outside the list is ever connected to.
pub(crate) struct Guarded(pub(crate) AllowedHosts);

impl AsyncDNSResolver for Guarded {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        host: &'b str,
        port: u16,
    ) -> RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            if !self.0.permits(host, port) {
                let why = format!("the Redis node {} {NOT_ALLOWED} ({})", host_port(host, port), self.0.describe());
                return Err(RedisError::from((ErrorKind::InvalidClientConfig, "store host refused", why)));
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
            if found.is_empty() {
                return Err(RedisError::from((ErrorKind::InvalidClientConfig, "No address found for host")));
            }
            Ok(Box::new(found.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

/// `host:port`, an IPv6 host in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The refusal of a node that `source` named (a Sentinel, `CLUSTER SLOTS`).
pub(crate) fn refused_node(host: &str, port: u16, source: &str, allowed: &AllowedHosts) -> StoreError {
    StoreError::config(refused_node_text(host, port, source, allowed))
}

pub(crate) fn refused_node_text(host: &str, port: u16, source: &str, allowed: &AllowedHosts) -> String {
    format!(
        "{source} names the Redis node {}, which {NOT_ALLOWED} ({}); the plugin would be sent there, so it refuses \
         this store: add that host to the list, or have Redis announce an allowed name",
        host_port(host, port),
        allowed.describe()
    )
}

/// One node, and how to talk about it and its password in messages.
pub(crate) struct Who<'a> {
    /// e.g. `the Sentinel at 10.0.0.1:26379`.
    pub(crate) node: String,
    /// e.g. `sentinel_password in kv_url`.
    pub(crate) which: &'a str,
    /// What to write when the node needs a password and kv_url gives none.
    pub(crate) missing: &'a str,
    /// How kv_url looks without that password.
    pub(crate) remove: &'a str,
}

pub(crate) fn cluster_who(seed: &str) -> Who<'static> {
    Who {
        node: format!("the Redis Cluster node at {seed}"),
        which: "the password in kv_url",
        missing: "put it in kv_url: redis+cluster://:password@host:port,host:port",
        remove: "redis+cluster://host:port,host:port",
    }
}

pub(crate) fn sentinel_who(at: &str) -> Who<'static> {
    Who {
        node: format!("the Sentinel at {at}"),
        which: "sentinel_password in kv_url",
        missing: "add ?sentinel_password=… to kv_url (Dify's REDIS_SENTINEL_PASSWORD); the password before the @ \
                  is the master's (REDIS_PASSWORD), not the Sentinels'",
        remove: "drop ?sentinel_password=",
    }
}

pub(crate) fn master_who(master: &str, addr: &str, via: &str) -> Who<'static> {
    Who {
        node: format!("the master {master:?} at {addr} (named by the Sentinel at {via})"),
        which: "the master's password in kv_url (before the @; Dify's REDIS_PASSWORD)",
        missing: "put the master's password before the @: redis+sentinel://:password@host:26379,…/master \
                  (?sentinel_password= is only for the Sentinels themselves)",
        remove: "redis+sentinel://host:26379,…/master",
    }
}

pub(crate) fn is_refusal(e: &redis::RedisError) -> bool {
    is_auth_error(e) || e.code() == Some("NOAUTH")
}

/// Why `client` cannot talk to its node because of credentials: `None` when it can, or when
/// the failure is something else. Makes its own short connection.
pub(crate) async fn auth_problem(client: &redis::Client, who: &Who<'_>, t: Duration) -> Option<StoreError> {
    let info = client.get_connection_info();
    let has_password = info.redis_settings().password().is_some();
    let tried = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(t, tried).await {
        Ok(Err(e)) if is_auth_error(&e) && has_password => Some(refused_password(who, info, t).await),
        Ok(Err(e)) if e.code() == Some("NOAUTH") || is_auth_error(&e) => {
            let why = format!("{} requires a password (NOAUTH): {}", who.node, who.missing);
            Some(StoreError::unauthorized(why).caused_by(e))
        }
        _ => None,
    }
}

/// The node refused the password it was given; the client library reports every refusal
/// alike. One unauthenticated PING tells the two common mistakes apart: a server without a
/// password answers it, a server with one answers NOAUTH.
pub(crate) async fn refused_password(who: &Who<'_>, info: &redis::ConnectionInfo, timeout: Duration) -> StoreError {
    let bare = redis::RedisConnectionInfo::default().set_db(info.redis_settings().db());
    let bare = info.clone().set_redis_settings(bare);
    let ping = async {
        let mut conn = redis::Client::open(bare)?.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    let which = who.which;
    let what = match tokio::time::timeout(timeout, ping).await {
        Ok(Ok(_)) => format!(
            "the server has no password set (it answers without one): remove it from kv_url ({}), or set a password \
             on the server",
            who.remove
        ),
        Ok(Err(e)) if e.code() == Some("NOAUTH") => {
            "the server requires a password and this one is wrong (or the user does not exist)".to_owned()
        }
        _ => "the password is wrong, or the server has none set".to_owned(),
    };
    StoreError::unauthorized(format!("{} refused {which}: {what}", who.node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_resolver_refuses_hosts_off_the_list_by_name() {
        let guarded = Guarded(AllowedHosts::parse(Some("127.0.0.1:7000,::1")).unwrap());
        let found: Vec<SocketAddr> = guarded.resolve("127.0.0.1", 7000).await.unwrap().collect();
        assert_eq!(found, vec![SocketAddr::from(([127, 0, 0, 1], 7000))]);
        assert!(guarded.resolve("::1", 7005).await.is_ok());
        let refused = guarded.resolve("127.0.0.1", 7001).await.err().unwrap().to_string();
        assert!(refused.contains("the Redis node 127.0.0.1:7001") && refused.contains(NOT_ALLOWED), "{refused}");
        let everything = Guarded(AllowedHosts::default());
        assert!(everything.resolve("127.0.0.1", 1).await.is_ok());
    }
}
