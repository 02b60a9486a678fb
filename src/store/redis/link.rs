//! One multiplexed connection per topology, and how to make a new one: a node, a Cluster
//! (which follows MOVED/ASK and failovers itself), or the master that Sentinel names.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::url::{node_url, Parsed, Target};
use super::{classify, timeout_error};
use crate::store::{call_timeout, StoreError};

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

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(call_timeout()))
        .set_response_timeout(Some(call_timeout()))
        .set_number_of_retries(2)
        .set_max_delay(std::time::Duration::from_millis(500))
}

fn bad_url(e: redis::RedisError) -> StoreError {
    StoreError::Config(format!("kv_url is not a usable Redis URL: {e}"))
}

fn cluster_client(nodes: Vec<String>, ca: &Option<Vec<u8>>) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClient::builder(nodes);
    if let Some(pem) = ca {
        builder = builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem.clone()) });
    }
    builder.connection_timeout(call_timeout()).response_timeout(call_timeout()).retries(3).build().map_err(bad_url)
}

async fn bounded<T>(addr: &str, fut: impl std::future::Future<Output = RedisResult<T>>) -> Result<T, StoreError> {
    tokio::time::timeout(call_timeout(), fut).await.map_err(|_| timeout_error())?.map_err(|e| classify(addr, e))
}

impl Connector {
    /// The connector for `target`, and its first connection. A `redis://` URL that reaches a
    /// Cluster node becomes a Cluster connector seeded with that node.
    pub async fn open(parsed: Parsed) -> Result<(Connector, Link, String), StoreError> {
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
                let config = manager_config();
                let mut conn = bounded(&addr, client.get_connection_manager_with_config(config.clone())).await?;
                let info: String = bounded(&addr, redis::cmd("INFO").arg("cluster").query_async(&mut conn)).await?;
                if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                    Connector::Cluster { client: cluster_client(vec![url], &ca)?, seeds: addr }
                } else {
                    return Ok((Connector::Node { client, config, addr: addr.clone() }, Link::Node(conn), addr));
                }
            }
            Target::Cluster { nodes, tls, userinfo } => {
                let seeds = nodes.join(",");
                let urls = nodes.iter().map(|n| node_url(tls, &userinfo, n, 0)).collect();
                Connector::Cluster { client: cluster_client(urls, &ca)?, seeds }
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
        let (link, at) = connector.connect().await?;
        Ok((connector, link, at))
    }

    /// A new connection, and where it goes (for messages).
    pub async fn connect(&self) -> Result<(Link, String), StoreError> {
        match self {
            Connector::Node { client, config, addr } => {
                let conn = bounded(addr, client.get_connection_manager_with_config(config.clone())).await?;
                Ok((Link::Node(conn), addr.clone()))
            }
            Connector::Cluster { client, seeds } => {
                let conn = bounded(seeds, client.get_async_connection()).await?;
                Ok((Link::Cluster(conn), format!("the cluster seeded by {seeds}")))
            }
            Connector::Sentinel { master, db, tls, userinfo, ca, .. } => {
                let (addr, via) = self.discover().await?;
                let client = client(&node_url(*tls, userinfo, &addr, *db), ca)?;
                let mut conn = bounded(&addr, client.get_connection_manager_with_config(manager_config())).await?;
                // Sentinel can lag a failover by a moment: only a node that says it is the
                // master is used, so a claim never lands on a replica-to-be.
                let role: Vec<Value> = bounded(&addr, redis::cmd("ROLE").query_async(&mut conn)).await?;
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
    async fn discover(&self) -> Result<(String, String), StoreError> {
        let Connector::Sentinel { sentinels, master, .. } = self else { unreachable!("discover is for Sentinel") };
        let mut errors = vec![];
        let mut unknown = 0;
        for (at, client) in sentinels {
            let asked = async {
                let mut conn = bounded(at, client.get_multiplexed_async_connection()).await?;
                let cmd = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(master).to_owned();
                bounded(at, cmd.query_async::<Option<(String, u16)>>(&mut conn)).await
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
