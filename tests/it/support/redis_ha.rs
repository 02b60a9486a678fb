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
use super::redis::{Access, RedisServer};

/// Ingest goes on in the same plugin processes: each of them gets a new id accepted
/// (retrying while the store settles; no restart).
pub(crate) async fn ingest_resumes(plugins: &[Arc<Plugin>], creds: &Value, tag: &str) {
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
pub(crate) fn accepted_twice(calls: &[Call]) -> usize {
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

fn info(node: &RedisServer, section: &str) -> String {
    node.client().get_connection().and_then(|mut c| redis::cmd("INFO").arg(section).query(&mut c)).unwrap_or_default()
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_owned())
}

/// Six `--cluster-enabled` nodes joined by `redis-cli --cluster create --cluster-replicas 1`.
pub(crate) struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    pub access: Access,
}

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        Self::start_as(Access::default())
    }

    /// A cluster reached as `access` says; with TLS, the cluster bus and replication use
    /// TLS too (`tls-cluster`, `tls-replication`) and no node listens in plain text.
    pub(crate) fn start_as(access: Access) -> RedisCluster {
        let tls_cluster: &[&str] = if access.tls.is_some() { &["--tls-cluster", "yes"] } else { &[] };
        let mut nodes = vec![];
        for _ in 0..6 {
            let bus = free_port().to_string();
            let mut args = vec![
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
            ];
            args.extend(tls_cluster);
            nodes.push(RedisServer::start_as(access.clone(), &args));
        }
        let mut create = Command::new("redis-cli");
        if let Some(dir) = &access.tls {
            create.arg("--tls").arg("--cacert").arg(dir.join("ca.pem"));
        }
        if let Some(pw) = &access.password {
            create.args(["-a", pw, "--no-auth-warning"]);
        }
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
        let cluster = RedisCluster { nodes, access };
        cluster.wait_healthy();
        cluster
    }

    /// Every live node sees state ok and three masters with a replica each.
    pub(crate) fn wait_healthy(&self) {
        wait_for("the cluster to be ok", Duration::from_secs(30), || {
            self.nodes.iter().filter(|n| n.is_up()).all(|n| {
                let i = info_cluster(n);
                i.contains("cluster_state:ok") && i.contains("cluster_slots_ok:16384")
            }) && self.masters().len() == 3
        });
    }

    /// `redis+cluster://` seed list of every node.
    pub(crate) fn url(&self) -> String {
        format!("redis+cluster://{}", self.seeds())
    }

    /// `host:port,host:port,…` of every node.
    pub(crate) fn seeds(&self) -> String {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",")
    }

    /// Ports of the nodes that currently are masters.
    pub(crate) fn masters(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.is_up() && field(&info(n, "replication"), "role").as_deref() == Some("master"))
            .map(|n| n.port)
            .collect()
    }

    /// Keys matching `pattern` on the master at `port`.
    pub(crate) fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        let node = self.nodes.iter().find(|n| n.port == port).unwrap();
        redis::cmd("KEYS").arg(pattern).query(&mut node.client().get_connection().unwrap()).unwrap()
    }

    /// A cluster-aware connection for checks.
    pub(crate) fn conn(&self) -> redis::cluster::ClusterConnection {
        let seeds: Vec<_> =
            self.nodes.iter().filter(|n| n.is_up()).map(|n| n.client().get_connection_info().clone()).collect();
        let mut b = redis::cluster::ClusterClient::builder(seeds);
        if let Some(dir) = &self.access.tls {
            let root_cert = Some(std::fs::read(dir.join("ca.pem")).unwrap());
            b = b.certs(redis::TlsCertificates { client_tls: None, root_cert });
        }
        if let Some(pw) = &self.access.password {
            b = b.password(pw.clone());
        }
        b.build().unwrap().get_connection().unwrap()
    }

    pub(crate) fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}

fn info_cluster(node: &RedisServer) -> String {
    node.client().get_connection().and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query(&mut c)).unwrap_or_default()
}

/// One master, one replica, three Sentinels watching `mymaster` (quorum 2).
pub(crate) struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    /// How the Sentinels are reached: the data nodes' TLS, and the Sentinels' own password.
    sentinel_access: Access,
    _dir: tempfile::TempDir,
}

pub(crate) const MASTER_NAME: &str = "mymaster";

impl RedisSentinel {
    pub(crate) fn start() -> RedisSentinel {
        Self::start_as(Access::default(), None)
    }

    /// Master and replica reached as `access` says; the Sentinels use the same TLS (to
    /// clients and to the nodes they watch) and require `sentinel_password` if given.
    pub(crate) fn start_as(access: Access, sentinel_password: Option<&str>) -> RedisSentinel {
        let master = RedisServer::start_as(access.clone(), &[]);
        let mp = master.port.to_string();
        let replica = RedisServer::start_as(access.clone(), &["--replicaof", "127.0.0.1", &mp]);
        let dir = tempfile::tempdir().unwrap();
        let sentinel_access = Access { tls: access.tls.clone(), password: sentinel_password.map(str::to_owned) };
        let mut sentinels = vec![];
        for i in 0..3 {
            let port = free_port();
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            let mut text = match &access.tls {
                None => format!("port {port}\n"),
                Some(certs) => format!(
                    "port 0\ntls-port {port}\ntls-cert-file {0}/server.pem\ntls-key-file {0}/server.key\n\
                     tls-ca-cert-file {0}/ca.pem\ntls-auth-clients no\ntls-replication yes\n",
                    certs.display()
                ),
            };
            text += &format!(
                "bind 127.0.0.1\ndir {}\nsentinel monitor {MASTER_NAME} 127.0.0.1 {mp} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\nsentinel failover-timeout {MASTER_NAME} 5000\n",
                dir.path().display()
            );
            if let Some(pw) = &access.password {
                text += &format!("sentinel auth-pass {MASTER_NAME} {pw}\n");
            }
            if let Some(pw) = sentinel_password {
                // Sentinels also use it with one another.
                text += &format!("requirepass {pw}\n");
            }
            std::fs::write(&conf, text).unwrap();
            sentinels.push((port, spawn_sentinel(&conf)));
        }
        let s = RedisSentinel { master, replica, sentinels, sentinel_access, _dir: dir };
        // Ready when every Sentinel knows the replica and the two other Sentinels.
        wait_for("the sentinels to see each other", Duration::from_secs(30), || {
            s.sentinels.iter().all(|(port, _)| {
                let m = s.sentinel_master(*port);
                m.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && m.get("num-slaves").map(String::as_str) == Some("1")
            })
        });
        wait_for("the replica to be in sync", Duration::from_secs(30), || {
            field(&info(&s.replica, "replication"), "master_link_status").as_deref() == Some("up")
        });
        s
    }

    /// `redis+sentinel://` with every Sentinel.
    pub(crate) fn url(&self) -> String {
        format!("redis+sentinel://{}/{MASTER_NAME}", self.seeds())
    }

    /// `host:port,host:port,…` of every Sentinel.
    pub(crate) fn seeds(&self) -> String {
        self.sentinels.iter().map(|(p, _)| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// True once every Sentinel names `port` as the master and none is still failing over.
    /// One Sentinel's answer is not enough: the failover's leader names the promoted replica
    /// while it still reconfigures, and a Sentinel that has not yet taken the new
    /// configuration still names the old master. An old master without persistence that comes
    /// back before the group agrees can be chosen again, and the promoted replica then resyncs
    /// from it, empty, dropping writes it acknowledged (Redis's documented hazard of masters
    /// without persistence that restart on their own).
    pub(crate) fn all_name_master(&self, port: u16) -> bool {
        self.sentinels.iter().all(|(sentinel, _)| {
            let addr: Option<(String, u16)> = self
                .sentinel_access
                .client(*sentinel)
                .get_connection()
                .and_then(|mut c| redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME).query(&mut c))
                .ok()
                .flatten();
            let flags = self.sentinel_master(*sentinel).get("flags").cloned().unwrap_or_default();
            addr.map(|a| a.1) == Some(port) && flags == "master"
        })
    }

    fn sentinel_master(&self, port: u16) -> std::collections::HashMap<String, String> {
        let flat: Vec<String> = self
            .sentinel_access
            .client(port)
            .get_connection()
            .and_then(|mut c| redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME).query(&mut c))
            .unwrap_or_default();
        flat.chunks(2).filter(|p| p.len() == 2).map(|p| (p[0].clone(), p[1].clone())).collect()
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

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (_, c) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
