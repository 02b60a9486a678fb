//! One multiplexed connection per topology, and how to make a new one: a node, a Cluster
//! (which follows MOVED/ASK and failovers itself), or the master that Sentinel names.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::errors::{classify, is_auth_error};
use super::guard::{
    auth_problem, cluster_who, host_port, is_refusal, master_who, refused_node, refused_password, sentinel_who,
    Guarded, Who,
};
use super::url::{node_url, Parsed, Target};
use crate::error::StoreError;
use crate::hosts::AllowedHosts;

/// A live connection. Cheap to clone: clones share one multiplexed connection.
#[derive(Clone)]
pub(crate) enum Link {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }
    fn get_db(&self) -> i64 {
        match self {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

impl Link {
    /// Runs `pipe` on the master that owns `key`, on one connection and in order (what WAIT
    /// needs: it counts the replicas that have this connection's writes). Errors stay in the
    /// reply, one per command.
    pub(crate) async fn on_key_owner(&mut self, key: &str, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        match self {
            Link::Node(c) => c.req_packed_commands(pipe, 0, pipe.len()).await,
            Link::Cluster(c) => {
                let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key.as_bytes(), SlotAddr::Master));
                c.route_pipeline(pipe.clone(), 0, pipe.len(), route).await
            }
        }
    }
}

/// Makes connections for one kv_url.
pub(crate) enum Connector {
    Node {
        client: redis::Client,
        config: ConnectionManagerConfig,
        addr: String,
    },
    Cluster {
        client: ClusterClient,
        seeds: String,
        /// One plain client per seed, to tell why the Cluster refused us.
        probes: Vec<(String, redis::Client)>,
    },
    Sentinel {
        sentinels: Vec<(String, redis::Client)>,
        master: String,
        db: u32,
        tls: bool,
        userinfo: String,
        ca: Option<Vec<u8>>,
        allowed: AllowedHosts,
    },
}

/// A client for one node; with a private CA, TLS must chain to it.
fn client(url: &str, ca: &Option<Vec<u8>>) -> Result<redis::Client, StoreError> {
    match ca {
        None => redis::Client::open(url),
        Some(pem) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates { client_tls: None, root_cert: Some(pem.clone()) },
        ),
    }
    .map_err(bad_url)
}

fn manager_config(t: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(t))
        .set_response_timeout(Some(t))
        .set_number_of_retries(2)
        .set_max_delay(std::time::Duration::from_millis(500))
}

fn bad_url(e: redis::RedisError) -> StoreError {
    StoreError::BadUrl(format!("kv_url is not a usable Redis URL: {e}"))
}

/// A Cluster client whose every dial passes the allow-list (see [`Guarded`]).
fn cluster_client(
    nodes: Vec<String>,
    ca: &Option<Vec<u8>>,
    t: Duration,
    allowed: &AllowedHosts,
) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClient::builder(nodes).async_dns_resolver(Guarded(allowed.clone()));
    if let Some(pem) = ca {
        builder = builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem.clone()) });
    }
    builder.connection_timeout(t).response_timeout(t).retries(3).build().map_err(bad_url)
}

async fn bounded<T>(
    addr: &str,
    t: Duration,
    fut: impl std::future::Future<Output = RedisResult<T>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(t, fut)
        .await
        .map_err(|_| StoreError::Timeout(t.as_millis() as u64))?
        .map_err(|e| classify(addr, t, e))
}

impl Connector {
    /// The connector for `target`, and its first connection. A `redis://` URL that reaches a
    /// Cluster node becomes a Cluster connector seeded with that node.
    pub(crate) async fn open(
        parsed: Parsed,
        t: Duration,
        allowed: AllowedHosts,
    ) -> Result<(Connector, Link, String), StoreError> {
        let ca = match &parsed.tls_ca {
            None => None,
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                StoreError::config(format!("the CA file {path:?} named by tls_ca in kv_url cannot be read: {e}"))
                    .caused_by(e)
            })?),
        };
        let connector = match parsed.target {
            Target::Node { url } => {
                let client = client(&url, &ca)?;
                let addr = client.get_connection_info().addr().to_string();
                let config = manager_config(t);
                let first = client.get_connection_manager_with_config(config.clone());
                let mut conn = match tokio::time::timeout(t, first).await {
                    Err(_) => return Err(StoreError::Timeout(t.as_millis() as u64)),
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e))
                        if is_auth_error(&e) && client.get_connection_info().redis_settings().password().is_some() =>
                    {
                        let who = Who {
                            node: format!("the Redis server at {addr}"),
                            which: "the password in kv_url",
                            missing: "put it in kv_url: redis://:password@host:port/db",
                            remove: "redis://host:port/db",
                        };
                        return Err(refused_password(&who, client.get_connection_info(), t).await);
                    }
                    Ok(Err(e)) => return Err(classify(&addr, t, e)),
                };
                let info: String = bounded(&addr, t, redis::cmd("INFO").arg("cluster").query_async(&mut conn)).await?;
                if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                    let probes = vec![(addr.clone(), client)];
                    Connector::Cluster { client: cluster_client(vec![url], &ca, t, &allowed)?, seeds: addr, probes }
                } else {
                    return Ok((Connector::Node { client, config, addr: addr.clone() }, Link::Node(conn), addr));
                }
            }
            Target::Cluster { nodes, tls, userinfo } => {
                let seeds = nodes.join(",");
                let urls: Vec<String> = nodes.iter().map(|n| node_url(tls, &userinfo, n, 0)).collect();
                let probes =
                    nodes.iter().zip(&urls).map(|(n, u)| Ok((n.clone(), client(u, &ca)?))).collect::<Result<_, _>>()?;
                Connector::Cluster { client: cluster_client(urls, &ca, t, &allowed)?, seeds, probes }
            }
            Target::Sentinel { sentinels, master, db, tls, userinfo, sentinel_userinfo } => {
                let sentinels = sentinels
                    .iter()
                    .map(|s| {
                        let url = node_url(tls, &sentinel_userinfo, s, 0);
                        Ok((s.clone(), client(&url, &ca)?))
                    })
                    .collect::<Result<_, StoreError>>()?;
                Connector::Sentinel { sentinels, master, db, tls, userinfo, ca, allowed }
            }
        };
        let (link, at) = connector.connect(t).await?;
        Ok((connector, link, at))
    }

    /// A new connection, and where it goes (for messages).
    pub(crate) async fn connect(&self, t: Duration) -> Result<(Link, String), StoreError> {
        match self {
            Connector::Node { client, config, addr } => {
                let conn = bounded(addr, t, client.get_connection_manager_with_config(config.clone())).await?;
                Ok((Link::Node(conn), addr.clone()))
            }
            Connector::Cluster { client, seeds, probes } => {
                match tokio::time::timeout(t, client.get_async_connection()).await {
                    Err(_) => Err(StoreError::Timeout(t.as_millis() as u64)),
                    Ok(Ok(conn)) => Ok((Link::Cluster(conn), format!("the cluster seeded by {seeds}"))),
                    Ok(Err(e)) => {
                        // The Cluster client reports a refused password as a failed start: ask
                        // the seeds one by one which password problem it is, if it is one.
                        for (seed, probe) in probes {
                            if let Some(refused) = auth_problem(probe, &cluster_who(seed), t).await {
                                return Err(refused);
                            }
                        }
                        Err(classify(seeds, t, e))
                    }
                }
            }
            Connector::Sentinel { master, db, tls, userinfo, ca, allowed, .. } => {
                let (host, port, via) = self.discover(t).await?;
                // The master's address comes from a Sentinel, not from kv_url: it must pass
                // the allow-list before it is dialled.
                if !allowed.permits(&host, port) {
                    return Err(refused_node(&host, port, &format!("the Sentinel at {via}"), allowed));
                }
                let addr = host_port(&host, port);
                let client = client(&node_url(*tls, userinfo, &addr, *db), ca)?;
                let who = master_who(master, &addr, &via);
                let refused = |e: redis::RedisError| async {
                    match is_refusal(&e) {
                        true => auth_problem(&client, &who, t).await.unwrap_or_else(|| classify(&addr, t, e)),
                        false => classify(&addr, t, e),
                    }
                };
                let mut conn =
                    match tokio::time::timeout(t, client.get_connection_manager_with_config(manager_config(t))).await {
                        Err(_) => return Err(StoreError::Timeout(t.as_millis() as u64)),
                        Ok(Ok(conn)) => conn,
                        Ok(Err(e)) => return Err(refused(e).await),
                    };
                // Sentinel can lag a failover by a moment: only a node that says it is the
                // master is used, so a claim never lands on a replica-to-be.
                let role: Vec<Value> = match tokio::time::timeout(t, redis::cmd("ROLE").query_async(&mut conn)).await {
                    Err(_) => return Err(StoreError::Timeout(t.as_millis() as u64)),
                    Ok(Ok(role)) => role,
                    Ok(Err(e)) => return Err(refused(e).await),
                };
                if !matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
                    return Err(StoreError::interrupted(format!(
                        "Sentinel at {via} names {addr} as master {master:?}, but it is not a master (yet)"
                    )));
                }
                Ok((Link::Node(conn), format!("Sentinel master {master:?} at {addr}")))
            }
        }
    }

    /// Asks each Sentinel in turn for the master's address → (host, port, which Sentinel
    /// answered); the first answer wins.
    async fn discover(&self, t: Duration) -> Result<(String, u16, String), StoreError> {
        let Connector::Sentinel { sentinels, master, .. } = self else { unreachable!("discover is for Sentinel") };
        let (mut errors, mut unknown, mut refused) = (vec![], 0, None);
        for (at, client) in sentinels {
            let asked = async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                let cmd = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(master).to_owned();
                cmd.query_async::<Option<(String, u16)>>(&mut conn).await
            };
            match tokio::time::timeout(t, asked).await {
                Ok(Ok(Some((host, port)))) => return Ok((host, port, at.clone())),
                Ok(Ok(None)) => unknown += 1,
                Err(_) => errors.push(format!("{at}: {}", StoreError::Timeout(t.as_millis() as u64))),
                Ok(Err(e)) => {
                    if refused.is_none() && is_refusal(&e) {
                        refused = auth_problem(client, &sentinel_who(at), t).await;
                    }
                    errors.push(format!("{at}: {}", classify(at, t, e)));
                }
            }
        }
        let asked = sentinels.iter().map(|s| s.0.as_str()).collect::<Vec<_>>().join(", ");
        if unknown > 0 && errors.is_empty() {
            return Err(StoreError::config(format!(
                "no Sentinel knows a master named {master:?} (asked {asked}); check the name after the last / in kv_url"
            )));
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        Err(StoreError::unreachable(asked, format!("no Sentinel named the master {master:?}: {}", errors.join("; "))))
    }

    /// The topology, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Connector::Node { .. } => "standalone Redis",
            Connector::Cluster { .. } => "Redis Cluster",
            Connector::Sentinel { .. } => "Redis behind Sentinel",
        }
    }

    /// True when a failed command is a reason to ask Sentinel again (the master moved).
    pub(crate) fn rediscovers(&self) -> bool {
        matches!(self, Connector::Sentinel { .. })
    }
}
