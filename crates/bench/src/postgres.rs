//! The PostgreSQL rows: a server the bench starts itself (Debian's binaries, as the
//! `postgres` user when run as root), the plugin vs a raw client sending the very statements
//! the plugin sends (create-if-absent, read) at the same concurrency.
//
// The raw side is C tokio-postgres connections, one per task, each with the statements
// prepared once: what an application claiming ids straight in PostgreSQL would do. Store CPU
// is the postmaster plus every backend.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use event_store::postgres::sql::Sql;
use event_store::postgres::PostgresStore;
use event_store::HostClock;

use super::config::Config;
use super::measure::{micros_since, Measure, Meter, Tally};
use super::procs::{children, cpu_ticks, pss_kib, signal_and_wait, TempDir};
use super::results::{Results, Row};
use super::started::{plugin_rows, with_store_cpu, StartedStore};
use super::workload::{event_ids, keys, record_value, TTL_MS};

const STORE: &str = "postgres";

/// The schema the plugin keeps its tables in when `kv_url` names none (event-store's
/// `url::DEFAULT_SCHEMA`, which it does not export).
pub(crate) const SCHEMA: &str = "stateful_tool";

/// The postmaster, killed (with its backends, which exit when it dies) on drop.
pub(crate) struct Server {
    child: Child,
    port: u16,
    /// The binaries' directory (`postgres`, `pg_dump`) and the cluster's data directory.
    bin: PathBuf,
    data: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The postmaster and every process it started (the backends, the checkpointer, …).
    fn pids(&self) -> Vec<u32> {
        let pid = self.child.id();
        std::iter::once(pid).chain(children(pid)).collect()
    }

    /// CPU of the postmaster and every process it started (the backends), in ticks.
    fn cpu_ticks(&self) -> u64 {
        self.pids().into_iter().map(cpu_ticks).sum()
    }

    /// Memory of the whole server in KiB: the sum of its processes' proportional sets, which
    /// counts the shared buffers once however many backends map them.
    pub(crate) fn pss_kib(&self) -> u64 {
        self.pids().into_iter().map(pss_kib).sum()
    }

    /// The bench's role on the `postgres` database, without TLS (the server offers none).
    pub(crate) fn url(&self) -> String {
        format!("postgres://bench@127.0.0.1:{}/postgres?sslmode=disable", self.port)
    }

    pub(crate) fn bin(&self) -> &Path {
        &self.bin
    }

    pub(crate) fn data(&self) -> &Path {
        &self.data
    }

    /// A clean stop: SIGINT is PostgreSQL's fast shutdown (`pg_ctl stop -m fast`): clients
    /// are disconnected and a shutdown checkpoint is written, so the next start replays no
    /// WAL. SIGKILL after `within`.
    pub(crate) fn stop(&mut self, within: Duration) -> anyhow::Result<std::process::ExitStatus> {
        signal_and_wait(&mut self.child, libc::SIGINT, within)
    }

    /// Starts the server again on the same data directory and port, after [`Server::stop`];
    /// returns once the port accepts connections (queries may still be refused while it
    /// starts up).
    pub(crate) fn restart(&mut self) -> anyhow::Result<()> {
        self.child = launch(&self.bin, &self.data, self.port)?;
        wait_for_port(self.port)
    }
}

/// `program` as the `postgres` user when we are root (PostgreSQL refuses to run as root).
fn as_postgres(program: &Path) -> Command {
    if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"]).arg(program);
        c.env("HOME", std::env::temp_dir());
        c
    } else {
        Command::new(program)
    }
}

/// The newest /usr/lib/postgresql/<version>/bin, if PostgreSQL is installed.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b).filter(|b| b.join("initdb").is_file())
}

/// initdb in `dir` and start the server (trust on loopback; fsync on, synchronous_commit on:
/// what a default installation acknowledges). None when PostgreSQL is not installed.
pub(crate) fn start(dir: &Path) -> anyhow::Result<Option<Server>> {
    let Some(bin) = bin_dir() else {
        eprintln!("  postgres: /usr/lib/postgresql/<version>/bin is missing; the PostgreSQL rows are skipped");
        return Ok(None);
    };
    let data = dir.join("pg");
    std::fs::create_dir_all(&data)?;
    if unsafe { libc::geteuid() } == 0 {
        Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status().context("chown")?;
    }
    let data = data.join("data");
    let out = as_postgres(&bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args(["-U", "bench", "--auth=trust", "--no-sync", "--no-locale", "-E", "UTF8"])
        .output()
        .context("running initdb")?;
    if !out.status.success() {
        bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let server = Server { child: launch(&bin, &data, port)?, port, bin, data };
    wait_for_port(port)?;
    Ok(Some(server))
}

/// The postmaster on `data`, listening on loopback `port` only.
fn launch(bin: &Path, data: &Path, port: u16) -> anyhow::Result<Child> {
    as_postgres(&bin.join("postgres"))
        .arg("-D")
        .arg(data)
        .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting postgres")
}

fn wait_for_port(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("postgres did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The PostgreSQL rows at every concurrency of `cfg`: raw claims/duplicates/reads, then the
/// plugin's new ingests/duplicates/status through `postgres://`.
pub(crate) async fn run(
    cfg: &Config,
    tmp: &TempDir,
    res: &mut Results,
    progress: &impl Fn(&str, &Row),
) -> anyhow::Result<()> {
    let Some(server) = start(tmp.path())? else { return Ok(()) };
    let url = server.url();
    // Retried while the server finishes starting; this also creates our tables.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = PostgresStore::connect(&url, 0, HostClock::system(), Duration::from_secs(5)).await {
        if Instant::now() > deadline {
            bail!("the plugin's store cannot connect: {e}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sql = Arc::new(Sql::new(SCHEMA));
    let mut run_id = 0u32;
    for &c in &cfg.concurrency {
        if cfg.wants("raw") {
            let row = |op, m| Row::store_only(STORE, op, c, m);
            let warm = keys(&event_ids(&format!("pg-raw-warm-c{c}"), cfg.warmup));
            raw(&server, &url, &sql, warm, c, cfg.cap, true, "created").await?;
            let ids = event_ids(&format!("pg-raw-c{c}"), cfg.n);
            let new = raw(&server, &url, &sql, keys(&ids), c, cfg.cap, true, "created").await?;
            let claimed = keys(&ids[..new.ops]);
            let dup = raw(&server, &url, &sql, claimed.clone(), c, cfg.cap, true, "exists").await?;
            let read = raw(&server, &url, &sql, claimed, c, cfg.cap, false, "found").await?;
            for r in [row("claim_new", new), row("claim_dup", dup), row("read", read)] {
                progress("raw", &r);
                res.raw.push(r);
            }
        }
        if cfg.wants("plugin") {
            let cpu_ticks = || server.cpu_ticks();
            let store =
                StartedStore { name: STORE, prefix: "pg", url: &url, pid: server.child.id(), cpu_ticks: &cpu_ticks };
            plugin_rows(cfg, tmp, &store, c, &mut run_id, res, progress).await?;
        }
    }
    Ok(())
}

/// One raw run: `keys` shared out dynamically to `c` connections; the plugin's claim
/// statement or its read statement. Stops early at `cap`.
#[allow(clippy::too_many_arguments)]
async fn raw(
    server: &Server,
    url: &str,
    sql: &Arc<Sql>,
    keys: Vec<String>,
    c: usize,
    cap: Duration,
    claim: bool,
    expected: &str,
) -> anyhow::Result<Measure> {
    let mut clients = vec![];
    for _ in 0..c {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.context("raw connect")?;
        tokio::spawn(conn);
        let statement = client.prepare(if claim { &sql.create } else { &sql.read }).await.context("prepare")?;
        clients.push((client, statement));
    }
    let (keys, n) = (Arc::new(keys), Arc::new(AtomicUsize::new(0)));
    let value = Arc::new(record_value(keys.first().map_or("x", |k| k.trim_start_matches("evt_"))));
    let t0 = server.cpu_ticks();
    let meter = Meter::start(None, server.child.id());
    let deadline = Instant::now() + cap;
    let mut workers = tokio::task::JoinSet::new();
    for (client, statement) in clients {
        let (keys, n, value) = (keys.clone(), n.clone(), value.clone());
        workers.spawn(async move {
            let (mut lat, mut tally) = (vec![], Tally::default());
            let (claim_id, ttl, until) = ("", TTL_MS as i64, None::<i64>);
            loop {
                let i = n.fetch_add(1, Ordering::Relaxed);
                if i >= keys.len() || Instant::now() >= deadline {
                    return Ok::<_, tokio_postgres::Error>((lat, tally));
                }
                let t = Instant::now();
                let key = keys[i].as_str();
                let row = if claim {
                    client.query_one(&statement, &[&key, &&value[..], &claim_id, &ttl, &until]).await?
                } else {
                    client.query_one(&statement, &[&key]).await?
                };
                lat.push(micros_since(t));
                tally.add(
                    match (
                        claim,
                        claim && row.get::<_, i32>(0) == 1,
                        row.get::<_, Option<Vec<u8>>>(if claim { 3 } else { 1 }).is_some(),
                    ) {
                        (true, true, _) => "created",
                        (true, false, _) => "exists",
                        (false, _, true) => "found",
                        (false, _, false) => "missing",
                    },
                );
            }
        });
    }
    let (mut lat, mut tally) = (Vec::with_capacity(keys.len()), Tally::default());
    while let Some(done) = workers.join_next().await {
        let (l, t) = done.context("a load worker panicked")?.context("a statement failed")?;
        lat.extend(l);
        tally.merge(t);
    }
    let capped = lat.len() < keys.len();
    Ok(with_store_cpu(meter.finish(lat, tally, expected, capped), server.cpu_ticks().saturating_sub(t0)))
}
