//! One multiplexed connection per topology, and how to make a new one: a node, a Cluster
//! (which follows MOVED/ASK and failovers itself), or the master that Sentinel names.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::url::{node_url, Parsed, Target};
use super::{classify, is_auth_error, refused_password};
use crate::store::StoreError;

/// A live connection. Cheap to clone: clones share one multiplexed connection.
#[derive(Clone)]
pub enum Link {
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
    pub async fn on_key_owner(&mut self, key: &str, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
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
pub enum Connector {
    Node {
        client: redis::Client,
        config: ConnectionManagerConfig,
        addr: String,
    },
    Cluster {
        client: ClusterClient,
        seeds: String,
    },
    Sentinel {
        sentinels: Vec<(String, redis::Client)>,
        master: String,
        db: u32,
        tls: bool,
        userinfo: String,
        ca: Option<Vec<u8>>,
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

fn cluster_client(nodes: Vec<String>, ca: &Option<Vec<u8>>, t: Duration) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClient::builder(nodes);
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
    pub async fn open(parsed: Parsed, t: Duration) -> Result<(Connector, Link, String), StoreError> {
        let ca = match &parsed.tls_ca {
            None => None,
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                StoreError::Config(format!("the CA file {path:?} named by tls_ca in kv_url cannot be read: {e}"))
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
                        return Err(refused_password(&addr, client.get_connection_info(), t).await)
                    }
                    Ok(Err(e)) => return Err(classify(&addr, t, e)),
                };
                let info: String = bounded(&addr, t, redis::cmd("INFO").arg("cluster").query_async(&mut conn)).await?;
                if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                    Connector::Cluster { client: cluster_client(vec![url], &ca, t)?, seeds: addr }
                } else {
                    return Ok((Connector::Node { client, config, addr: addr.clone() }, Link::Node(conn), addr));
                }
            }
            Target::Cluster { nodes, tls, userinfo } => {
                let seeds = nodes.join(",");
                let urls = nodes.iter().map(|n| node_url(tls, &userinfo, n, 0)).collect();
                Connector::Cluster { client: cluster_client(urls, &ca, t)?, seeds }
            }
            Target::Sentinel { sentinels, master, db, tls, userinfo, sentinel_userinfo } => {
                let sentinels = sentinels
                    .iter()
                    .map(|s| {
                        let url = node_url(tls, &sentinel_userinfo, s, 0);
                        Ok((s.clone(), client(&url, &ca)?))
                    })
                    .collect::<Result<_, StoreError>>()?;
                Connector::Sentinel { sentinels, master, db, tls, userinfo, ca }
            }
        };
        let (link, at) = connector.connect(t).await?;
        Ok((connector, link, at))
    }

    /// A new connection, and where it goes (for messages).
    pub async fn connect(&self, t: Duration) -> Result<(Link, String), StoreError> {
        match self {
            Connector::Node { client, config, addr } => {
                let conn = bounded(addr, t, client.get_connection_manager_with_config(config.clone())).await?;
                Ok((Link::Node(conn), addr.clone()))
            }
            Connector::Cluster { client, seeds } => {
                let conn = bounded(seeds, t, client.get_async_connection()).await?;
                Ok((Link::Cluster(conn), format!("the cluster seeded by {seeds}")))
            }
            Connector::Sentinel { master, db, tls, userinfo, ca, .. } => {
                let (addr, via) = self.discover(t).await?;
                let client = client(&node_url(*tls, userinfo, &addr, *db), ca)?;
                let mut conn = bounded(&addr, t, client.get_connection_manager_with_config(manager_config(t))).await?;
                // Sentinel can lag a failover by a moment: only a node that says it is the
                // master is used, so a claim never lands on a replica-to-be.
                let role: Vec<Value> = bounded(&addr, t, redis::cmd("ROLE").query_async(&mut conn)).await?;
                if !matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
                    return Err(StoreError::Interrupted(format!(
                        "Sentinel at {via} names {addr} as master {master:?}, but it is not a master (yet)"
                    )));
                }
                Ok((Link::Node(conn), format!("Sentinel master {master:?} at {addr}")))
            }
        }
    }

    /// Asks each Sentinel in turn for the master's address; the first answer wins.
    async fn discover(&self, t: Duration) -> Result<(String, String), StoreError> {
        let Connector::Sentinel { sentinels, master, .. } = self else { unreachable!("discover is for Sentinel") };
        let mut errors = vec![];
        let mut unknown = 0;
        for (at, client) in sentinels {
            let asked = async {
                let mut conn = bounded(at, t, client.get_multiplexed_async_connection()).await?;
                let cmd = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(master).to_owned();
                bounded(at, t, cmd.query_async::<Option<(String, u16)>>(&mut conn)).await
            };
            match asked.await {
                Ok(Some((host, port))) => {
                    let host = if host.contains(':') { format!("[{host}]") } else { host };
                    return Ok((format!("{host}:{port}"), at.clone()));
                }
                Ok(None) => unknown += 1,
                Err(e) => errors.push(format!("{at}: {e}")),
            }
        }
        if unknown > 0 && errors.is_empty() {
            return Err(StoreError::Config(format!(
                "no Sentinel knows a master named {master:?} (asked {}); check the name after the last / in kv_url",
                sentinels.iter().map(|s| s.0.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        Err(StoreError::Unreachable(
            sentinels.iter().map(|s| s.0.as_str()).collect::<Vec<_>>().join(","),
            format!("no Sentinel named the master {master:?}: {}", errors.join("; ")),
        ))
    }

    /// The topology, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Connector::Node { .. } => "standalone Redis",
            Connector::Cluster { .. } => "Redis Cluster",
            Connector::Sentinel { .. } => "Redis behind Sentinel",
        }
    }

    /// True when a failed command is a reason to ask Sentinel again (the master moved).
    pub fn rediscovers(&self) -> bool {
        matches!(self, Connector::Sentinel { .. })
    }
}
