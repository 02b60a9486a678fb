//! The Redis Cluster rows: a 3-master / 3-replica cluster the bench starts itself, the plugin
//! vs raw `SET NX GET PX` sent through a cluster client at the same concurrency.
//
// The raw side is one `redis` cluster client (one multiplexed connection per master, as the
// plugin has) with C operations in flight: what an application that claims keys straight in
// the cluster would do. Store CPU is the sum over the six nodes.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::config::Config;
use super::measure::{micros_since, Measure, Meter, Tally};
use super::procs::{cpu_ticks, TempDir, REDIS_ANSWER_WAIT};
use super::results::{Results, Row};
use super::started::{plugin_rows, with_store_cpu, StartedStore};
use super::workload::{event_ids, keys, record_value, TTL_MS};

const STORE: &str = "redis-cluster";

/// Six redis-server processes, killed and reaped on drop.
struct Cluster {
    nodes: Vec<(Child, u16)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (child, _) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    fn seeds(&self) -> String {
        self.nodes.iter().map(|(_, p)| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    fn cpu_ticks(&self) -> u64 {
        self.nodes.iter().map(|(c, _)| cpu_ticks(c.id())).sum()
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts six cluster nodes and joins them (`redis-cli --cluster create --cluster-replicas 1`);
/// None (with the reason on stderr) when redis-server or redis-cli is missing.
fn start(redis_server: &str, dir: &Path) -> anyhow::Result<Option<Cluster>> {
    for bin in [redis_server, "redis-cli"] {
        if Command::new(bin).arg("--version").output().is_err() {
            eprintln!("  cluster: {bin} is not installed; the Redis Cluster rows are skipped");
            return Ok(None);
        }
    }
    let mut cluster = Cluster { nodes: vec![] };
    for i in 0..6 {
        let (port, bus) = (free_port()?, free_port()?);
        let data = dir.join(format!("cluster-{i}"));
        std::fs::create_dir_all(&data)?;
        let child = Command::new(redis_server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-port", &bus.to_string(), "--cluster-node-timeout", "5000"])
            .arg("--dir")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {redis_server}"))?;
        cluster.nodes.push((child, port));
    }
    for &(_, port) in &cluster.nodes {
        wait("a cluster node to answer", || query(port, &["PING"]).is_some_and(|r| r == "PONG"))?;
    }
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(cluster.nodes.iter().map(|(_, p)| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .context("running redis-cli --cluster create")?;
    if !out.status.success() {
        bail!("redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
    }
    for &(_, port) in &cluster.nodes {
        wait("the cluster to be ok", || {
            query(port, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"))
        })?;
    }
    Ok(Some(cluster))
}

fn query(port: u16, args: &[&str]) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut con = client.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut con).ok()
}

fn wait(what: &str, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The cluster rows at every concurrency of `cfg`: raw claims/duplicates/reads, then the
/// plugin's new ingests/duplicates/status through `redis+cluster://`.
pub(crate) async fn run(
    cfg: &Config,
    tmp: &TempDir,
    res: &mut Results,
    progress: &impl Fn(&str, &Row),
) -> anyhow::Result<()> {
    let Some(cluster) = start(&cfg.redis, tmp.path())? else { return Ok(()) };
    let seeds = cluster.seeds();
    let urls: Vec<String> = cluster.nodes.iter().map(|(_, p)| format!("redis://127.0.0.1:{p}")).collect();
    let client = redis::cluster::ClusterClient::builder(urls)
        .connection_timeout(REDIS_ANSWER_WAIT)
        .response_timeout(REDIS_ANSWER_WAIT)
        .build()
        .context("a cluster client")?;
    let url = format!("redis+cluster://{seeds}");
    let mut run_id = 0u32;
    for &c in &cfg.concurrency {
        if cfg.wants("raw") {
            let row = |op, m| Row::store_only(STORE, op, c, m);
            let con = client.get_async_connection().await.context("connecting to the cluster")?;
            let warm = keys(&event_ids(&format!("cluster-raw-warm-c{c}"), cfg.warmup));
            raw(&cluster, &con, warm, c, cfg.cap, true, "created").await?;
            let ids = event_ids(&format!("cluster-raw-c{c}"), cfg.n);
            let new = raw(&cluster, &con, keys(&ids), c, cfg.cap, true, "created").await?;
            let claimed = keys(&ids[..new.ops]);
            let dup = raw(&cluster, &con, claimed.clone(), c, cfg.cap, true, "exists").await?;
            let read = raw(&cluster, &con, claimed, c, cfg.cap, false, "found").await?;
            for r in [row("claim_new", new), row("claim_dup", dup), row("read", read)] {
                progress("raw", &r);
                res.raw.push(r);
            }
        }
        if cfg.wants("plugin") {
            let cpu_ticks = || cluster.cpu_ticks();
            let store = StartedStore {
                name: STORE,
                prefix: "cluster",
                url: &url,
                pid: cluster.nodes[0].0.id(),
                cpu_ticks: &cpu_ticks,
            };
            plugin_rows(cfg, tmp, &store, c, &mut run_id, res, progress).await?;
        }
    }
    Ok(())
}

/// One raw run: `keys` shared out dynamically to `c` tasks on one cluster client; claims
/// (`SET key value NX GET PX ttl`) or reads (`GET`). Stops early at `cap`.
#[allow(clippy::too_many_arguments)]
async fn raw(
    cluster: &Cluster,
    con: &redis::cluster_async::ClusterConnection,
    keys: Vec<String>,
    c: usize,
    cap: Duration,
    claim: bool,
    expected: &str,
) -> anyhow::Result<Measure> {
    let (keys, n) = (Arc::new(keys), Arc::new(AtomicUsize::new(0)));
    let value = Arc::new(record_value(keys.first().map_or("x", |k| k.trim_start_matches("evt_"))));
    let store_pid = cluster.nodes[0].0.id();
    let t0 = cluster.cpu_ticks();
    let meter = Meter::start(None, store_pid);
    let deadline = Instant::now() + cap;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..c {
        let (keys, n, value, mut con) = (keys.clone(), n.clone(), value.clone(), con.clone());
        workers.spawn(async move {
            let (mut lat, mut tally) = (vec![], Tally::default());
            loop {
                let i = n.fetch_add(1, Ordering::Relaxed);
                if i >= keys.len() || Instant::now() >= deadline {
                    return Ok::<_, redis::RedisError>((lat, tally));
                }
                let t = Instant::now();
                let mut cmd = redis::cmd(if claim { "SET" } else { "GET" });
                cmd.arg(&keys[i]);
                if claim {
                    cmd.arg(&value[..]).arg("NX").arg("GET").arg("PX").arg(TTL_MS);
                }
                let prev: Option<Vec<u8>> = cmd.query_async(&mut con).await?;
                lat.push(micros_since(t));
                tally.add(match (claim, prev.is_some()) {
                    (true, false) => "created",
                    (true, true) => "exists",
                    (false, true) => "found",
                    (false, false) => "missing",
                });
            }
        });
    }
    let (mut lat, mut tally) = (Vec::with_capacity(keys.len()), Tally::default());
    while let Some(done) = workers.join_next().await {
        let (l, t) = done.context("a load worker panicked")?.context("a cluster command failed")?;
        lat.extend(l);
        tally.merge(t);
    }
    let capped = lat.len() < keys.len();
    Ok(with_store_cpu(meter.finish(lat, tally, expected, capped), cluster.cpu_ticks().saturating_sub(t0)))
}
