//! Our HTTP KV container (`stateful-tool kv serve`): conditional writes, TTL, group commit.
//!
//! Layout: `http` (routes, status mapping) → `request` (validation) → `engine` (redb,
//! handle, MVCC reads) → `writer` (the group-commit thread) → `batch` (one write
//! transaction per batch). `auth` checks bearer tokens against the `tokens` table (each bound
//! to namespaces or `*`), `tls` sets up HTTPS, `ttl` purges expired keys,
//! `record` is the on-disk layout, `inspect` reads a stopped store.
//!
//! Connections: `conn` runs hyper (HTTP/1.1 and h2c) over sockets `tracked` watches, under
//! the caps and deadlines of `limits`.
//!
//! Limits: keys 1–1024 bytes of `[A-Za-z0-9._~-]`, values ≤ 1 MiB (refused before they are
//! buffered), request heads ≤ `--max-header-bytes` and at most 100 headers; requests hyper
//! cannot parse are answered by hyper itself (plain 400/431, without our JSON body or
//! `KV-Time-Ms`).

mod access;
mod app;
mod auth;
mod backup;
mod batch;
mod census;
mod check_process;
mod claims;
mod compact;
mod compact_plan;
mod conn;
mod counts;
#[cfg(test)]
mod counts_tests;
mod disk_pace;
mod engine;
#[cfg(test)]
mod engine_tests;
mod error;
mod gather;
mod health;
mod http;
mod image;
#[cfg(test)]
mod image_tests;
mod inspect;
mod integrity;
#[cfg(test)]
mod integrity_tests;
mod ladder;
mod limits;
mod listing;
mod metrics;
mod open;
mod ops_metrics;
mod pin;
mod rates;
mod read_ahead;
mod record;
mod request;
mod squeeze;
mod state;
mod tables;
mod tls;
mod tokens;
mod tracked;
mod traffic;
mod ttl;
mod ui;
mod usage;
mod verify;
mod warm;
mod writer;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use app::Container;
pub(crate) use backup::{backup_dir, read_snapshot, restore, BackupFormat};
pub(crate) use check_process::check_pinned;
pub(crate) use check_process::CheckPinnedArgs;
pub(crate) use compact::run as compact;
pub(crate) use compact::CompactArgs;
pub(crate) use engine::{DurabilityMode, DB_FILE};
pub(crate) use image::{ImageReader, Summary};
pub use inspect::{inventory, Inventory};
pub(crate) use open::sync_parent;
pub use record::ServerClock;
pub(crate) use usage::run as usage;

/// How long shutdown waits for in-flight requests before closing connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// `kv check`: the stopped store's data directory.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Data directory (the server must not be running on it).
    #[arg(long, default_value = "./data")]
    pub(crate) data: std::path::PathBuf,
}

/// `kv serve`: where to listen, the data directory, tokens, TLS, durability and limits.
#[derive(clap::Args)]
#[command(after_help = ENV_HELP)]
pub struct ServeArgs {
    /// Address to bind (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8123")]
    pub(crate) listen: String,
    /// Data directory.
    #[arg(long, default_value = "./data")]
    pub(crate) data: std::path::PathBuf,
    /// Bearer token required on every request. Prefer env KV_TOKEN or --token-file: a
    /// command-line argument is visible to every user through `ps`.
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// File holding the bearer token (its first line); wins over --token / KV_TOKEN.
    #[arg(long)]
    pub(crate) token_file: Option<std::path::PathBuf>,
    /// Tokens bound to namespaces: one `NAMESPACE TOKEN` per line (`*` = every namespace;
    /// `sha256:<hex>` instead of the token). Re-read on SIGHUP and `kv reload`.
    /// Instead of --token / --token-file / KV_TOKEN.
    #[arg(long)]
    pub(crate) tokens_file: Option<std::path::PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// Require a client certificate signed by this PEM CA on every connection (mTLS).
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<std::path::PathBuf>,
    /// `immediate`: every acknowledged write is fsync'd first. `none`: no fsync per write
    /// (benchmarks only; a crash can lose the last second or two of writes).
    #[arg(long, value_enum, default_value = "immediate")]
    pub(crate) durability: DurabilityMode,
    /// How often expired keys are purged, in milliseconds.
    #[arg(long, default_value_t = 1000, hide = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) purge_interval_ms: u64,
    /// Page cache of the data file, in MiB: the bulk of the container's memory once the store
    /// outgrows it. Damage to the file under a cached page is seen once it is read again.
    #[arg(long, default_value_t = open::DEFAULT_CACHE_MB as u64, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub(crate) cache_mb: u64,
    /// Pages a second the background integrity check may read from the disk while the store
    /// serves requests (pages the host's page cache holds are not counted; after a second
    /// with no request, no limit); 0: no limit. The check shares the disk with the writer's
    /// commits: on a cloud disk that throttles operations a second, what the check reads a
    /// commit waits for. The limit makes the check longer where the host has not cached the
    /// file and requests keep coming (1,000 a second: up to 70 min for 17 GB), and the file
    /// grows by what is written while it runs. 0 suits a local SSD.
    #[arg(long, default_value_t = check_process::DISK_READS_PER_S)]
    pub(crate) check_disk_reads: u32,
    /// Serve `GET /metrics` without the token (for a scraper on a trusted network).
    #[arg(long)]
    pub(crate) metrics_public: bool,
    #[command(flatten)]
    pub(crate) conn: limits::ConnArgs,
    #[command(flatten)]
    pub(crate) ui: ui::UiArgs,
}

/// `kv serve --help`: the environment variables it reads, with defaults.
const ENV_HELP: &str = "\
Environment:
  KV_TOKEN                        the bearer token, instead of --token (default: none, no auth)
  STATEFUL_TOOL_LOG (or RUST_LOG) log filter: error, warn, info, debug (default info); logs go to
                                  stderr, the one `listening on http://ip:port` line to stdout";

/// `kv check`: exit 0 and a summary when the store is valid, 1 and what is wrong otherwise.
pub(crate) fn check(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let path = dir.join(DB_FILE);
    if !path.exists() {
        eprintln!("kv check: {} does not exist (no store in {})", path.display(), dir.display());
        return Ok(ExitCode::FAILURE);
    }
    match verify::check(&path) {
        Ok(records) => {
            println!("ok: {} is a complete, valid store ({records} records, every page intact)", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            let dir = dir.display().to_string();
            eprintln!("kv check: {}", open::Damaged { path: path.display().to_string(), dir, why });
            Ok(ExitCode::FAILURE)
        }
    }
}

pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    log_panics();
    cap_malloc_arenas();
    let listen: SocketAddr =
        args.listen.parse().with_context(|| format!("--listen {:?} is not an ip:port", args.listen))?;
    let tokens = access::token_table(&access::TokenSources {
        token: args.token.as_deref(),
        token_file: args.token_file.as_deref(),
        tokens_file: args.tokens_file.as_deref(),
    })?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(tls::acceptor(&tls::TlsFiles { cert, key, client_ca: args.tls_client_ca.as_deref() })?)
        }
        _ => None,
    };
    for warning in access::exposure_warnings(listen, tokens.is_some(), tls.is_some()) {
        tracing::warn!("{warning}");
    }
    // Bind first: a port already in use must fail before the data directory is created or
    // opened, so a mistaken second start leaves no trace on disk.
    let listener = std::net::TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen} (another `kv serve` on this port? choose another --listen)")
    })?;
    listener.set_nonblocking(true)?;
    let check = check_process::CheckProgram::of_this_process(args.check_disk_reads)?;
    let (engine, writer) = engine::Engine::open_serving(
        &args.data,
        args.durability,
        record::ServerClock::system(),
        (args.cache_mb as usize) << 20,
        check,
    )?;
    // Serving starts now; the check of every page and record runs beside it.
    engine.check_in_background();
    tracing::info!(
        "kv: data in {} (durability {}, auth {})",
        args.data.join(DB_FILE).display(),
        args.durability.as_str(),
        match &tokens {
            Some(t) if args.tokens_file.is_some() => format!("{} tokens from --tokens-file", t.len()),
            Some(_) => "one token".to_owned(),
            None => "off".to_owned(),
        }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("kv-http").build()?;
    let state = Arc::new(state::AppState {
        engine,
        durability: args.durability,
        data_file: args.data.join(DB_FILE),
        metrics_public: args.metrics_public,
        census: Arc::new(args.ui.census()),
    });
    let purge_every = Duration::from_millis(args.purge_interval_ms);
    let limits = runtime.block_on(async { limits::Limits::from_args(&args.conn) });
    state.engine.metrics().ops.set_max_connections(limits.max_connections);
    let metrics = state.engine.metrics().clone();
    let refusals = Arc::new(auth::Refusals::new(metrics));
    let auth = tokens.map(|t| Arc::new(auth::Auth::new(t, args.tokens_file.clone(), refusals.clone())));
    let tls = tls.map(|acceptor| tls::Tls { acceptor, refusals });
    let result = runtime.block_on(serve_http(state, listener, auth, tls, purge_every, limits));
    // Dropping the runtime drops every task holding an engine handle; the writer then
    // commits whatever is still queued and exits, and the database closes cleanly.
    runtime.shutdown_timeout(Duration::from_secs(1));
    writer.join();
    result
}

/// glibc gives each thread that allocates its own arena (up to 8 per core) and returns little
/// of them to the system. The page cache's pages are allocated by whichever thread reads them
/// (the writer, a backup, the census, the integrity check) and freed by whichever evicts them;
/// with more than one arena the cache moves between arenas and the one it left keeps the freed
/// pages as holes: measured at 1 M records with --cache-mb 256, after a backup one arena held
/// 244 MB of pages and the other 246 MB of free memory (RSS 485 MiB, 252 after a trim).
/// One arena reuses what an eviction freed for the next page, so RSS stays the cache plus a
/// constant; the per-thread caches in front of it keep small allocations off its lock.
/// Page-sized ones take it: the integrity check, which reads every page, runs in a process
/// of its own for that reason (see `check_process`).
fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called before the runtime starts its threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// A panic inside the storage engine (it asserts on damaged pages) is caught where it
/// happens and reported through `/healthz`; the log gets one line saying where, not a raw
/// backtrace on stderr.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| l.to_string()).unwrap_or_default();
        let thread = std::thread::current().name().unwrap_or("unnamed").to_owned();
        tracing::error!("kv: internal failure in thread {thread} at {at}: {msg}");
    }));
}

async fn serve_http(
    state: Arc<state::AppState>,
    listener: std::net::TcpListener,
    auth: Option<Arc<auth::Auth>>,
    tls: Option<tls::Tls>,
    purge_every: Duration,
    limits: limits::Limits,
) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let local = listener.local_addr()?;
    let purge = tokio::spawn(ttl::purge_loop(state.engine.clone(), purge_every));
    let metrics = state.engine.metrics().clone();
    let reloads = auth.clone().map(|auth| tokio::spawn(access::reload_on_hangup(auth)));
    let app = http::router(state, auth);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut server = tokio::spawn(conn::serve(listener, app, limits, stopped, SHUTDOWN_GRACE, metrics, tls));
    announce(scheme, local);
    tokio::select! {
        () = shutdown_signal() => {}
        ended = &mut server => {
            purge.abort();
            anyhow::bail!("kv: HTTP server stopped unexpectedly: {ended:?}");
        }
    }
    tracing::info!("kv: shutting down");
    if let Some(reloads) = reloads {
        reloads.abort();
    }
    let _ = stop.send(true);
    purge.abort();
    if tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), server).await.is_err() {
        tracing::warn!("kv: requests still running after {SHUTDOWN_GRACE:?}; closing them");
    }
    Ok(ExitCode::SUCCESS)
}

/// The one line on stdout: tests and scripts read it to learn the (possibly ephemeral) port.
fn announce(scheme: &str, local: SocketAddr) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on {scheme}://{local}").and_then(|()| out.flush()).is_err() {
        tracing::warn!("kv: could not write the 'listening on' line to stdout");
    }
    tracing::info!("kv: listening on {scheme}://{local}");
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No SIGINT handler available: rely on SIGTERM alone.
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
