//! Real Redis high-availability setups on loopback ports, built by the test itself: a
//! 3-master / 3-replica Cluster, and a master + replica watched by three Sentinels.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::load::{event, Call};
use super::plugin::Plugin;
use super::redis::RedisServer;

/// Ingest goes on in the same plugin processes: each of them gets a new id accepted
/// (retrying while the store settles; no restart).
pub async fn ingest_resumes(plugins: &[Arc<Plugin>], creds: &Value, tag: &str) {
    for (i, p) in plugins.iter().enumerate() {
        let id = format!("{tag}-after-{i}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = p.invoke("event_ingest", creds, event(&id)).await;
            if r.outcome() == "accepted" {
                break;
            }
            assert_eq!(r.outcome(), "error:upstream_error", "{r:?}");
            assert!(Instant::now() < deadline, "plugin {i} never accepted again after the failover: {r:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Ids answered `accepted` more than once: each is an acknowledged claim that a failover lost.
pub fn accepted_twice(calls: &[Call]) -> usize {
    let mut n: HashMap<&str, usize> = HashMap::new();
    for c in calls.iter().filter(|c| c.outcome == "accepted") {
        *n.entry(&c.id).or_default() += 1;
    }
    n.values().filter(|&&k| k > 1).count()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn info(port: u16, section: &str) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    client.get_connection().and_then(|mut c| redis::cmd("INFO").arg(section).query(&mut c)).unwrap_or_default()
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_owned())
}

/// Six `--cluster-enabled` nodes joined by `redis-cli --cluster create --cluster-replicas 1`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let mut nodes = vec![];
        for _ in 0..6 {
            let bus = free_port().to_string();
            nodes.push(RedisServer::start(&[
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus,
                "--cluster-node-timeout",
                "1000",
                // A replica whose master died may take over at once: the failover test
                // kills masters and must not wait for a validity window.
                "--cluster-replica-validity-factor",
                "0",
            ]));
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed (scripts/ensure-redis.sh)");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { nodes };
        cluster.wait_healthy();
        cluster
    }

    /// Every live node sees state ok and three masters with a replica each.
    pub fn wait_healthy(&self) {
        wait_for("the cluster to be ok", Duration::from_secs(30), || {
            self.nodes.iter().filter(|n| n.is_up()).all(|n| {
                let i = info_cluster(n.port);
                i.contains("cluster_state:ok") && i.contains("cluster_slots_ok:16384")
            }) && self.masters().len() == 3
        });
    }

    /// `redis+cluster://` seed list of every node.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Ports of the nodes that currently are masters.
    pub fn masters(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.is_up() && field(&info(n.port, "replication"), "role").as_deref() == Some("master"))
            .map(|n| n.port)
            .collect()
    }

    /// Keys matching `pattern` on the master at `port`.
    pub fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        redis::cmd("KEYS").arg(pattern).query(&mut client.get_connection().unwrap()).unwrap()
    }

    /// A cluster-aware connection for checks.
    pub fn conn(&self) -> redis::cluster::ClusterConnection {
        let seeds: Vec<String> = self.nodes.iter().filter(|n| n.is_up()).map(|n| n.url()).collect();
        redis::cluster::ClusterClient::new(seeds).unwrap().get_connection().unwrap()
    }

    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}

fn info_cluster(port: u16) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    client.get_connection().and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query(&mut c)).unwrap_or_default()
}

/// One master, one replica, three Sentinels watching `mymaster` (quorum 2).
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

pub const MASTER_NAME: &str = "mymaster";

impl RedisSentinel {
    pub fn start() -> RedisSentinel {
        let master = RedisServer::start(&[]);
        let mp = master.port.to_string();
        let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &mp]);
        let dir = tempfile::tempdir().unwrap();
        let mut sentinels = vec![];
        for i in 0..3 {
            let port = free_port();
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {MASTER_NAME} 127.0.0.1 {mp} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\nsentinel failover-timeout {MASTER_NAME} 5000\n",
                    dir.path().display()
                ),
            )
            .unwrap();
            sentinels.push((port, spawn_sentinel(&conf)));
        }
        let s = RedisSentinel { master, replica, sentinels, _dir: dir };
        // Ready when every Sentinel knows the replica and the two other Sentinels.
        wait_for("the sentinels to see each other", Duration::from_secs(30), || {
            s.sentinels.iter().all(|(port, _)| {
                let m = sentinel_master(*port);
                m.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && m.get("num-slaves").map(String::as_str) == Some("1")
            })
        });
        wait_for("the replica to be in sync", Duration::from_secs(30), || {
            field(&info(s.replica.port, "replication"), "master_link_status").as_deref() == Some("up")
        });
        s
    }

    /// `redis+sentinel://` with every Sentinel.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.sentinels.iter().map(|(p, _)| format!("127.0.0.1:{p}")).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", seeds.join(","))
    }

    /// The master's port as the first Sentinel reports it.
    pub fn master_port(&self) -> Option<u16> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinels[0].0)).unwrap();
        let mut c = client.get_connection().ok()?;
        let addr: Option<(String, u16)> =
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME).query(&mut c).ok()?;
        addr.map(|a| a.1)
    }
}

fn spawn_sentinel(conf: &Path) -> Child {
    Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()))
        .arg(conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (scripts/ensure-redis.sh)")
}

fn sentinel_master(port: u16) -> std::collections::HashMap<String, String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let flat: Vec<String> = client
        .get_connection()
        .and_then(|mut c| redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME).query(&mut c))
        .unwrap_or_default();
    flat.chunks(2).filter(|p| p.len() == 2).map(|p| (p[0].clone(), p[1].clone())).collect()
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (_, c) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
