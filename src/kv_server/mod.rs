//! Our HTTP KV container (`stateful-tool kv serve`): conditional writes, TTL, group commit.
//!
//! Layout: `http` (routes, status mapping) → `request` (validation) → `engine` (redb,
//! handle, MVCC reads) → `writer` (the group-commit thread) → `batch` (one write
//! transaction per batch). `auth` checks the bearer token, `ttl` purges expired keys,
//! `record` is the on-disk layout, `inspect` reads a stopped store.
//!
//! Limits: keys 1–1024 bytes of `[A-Za-z0-9._~-]`, values ≤ 1 MiB (refused before they are
//! buffered). Header limits are hyper's HTTP/1.1 defaults (at most 100 headers, ~400 KB read
//! buffer); requests hyper cannot parse are answered by hyper itself (plain 400/431, without
//! our JSON body or `KV-Time-Ms`).

mod auth;
mod batch;
mod engine;
#[cfg(test)]
mod engine_tests;
mod error;
mod gather;
mod http;
mod inspect;
mod record;
mod request;
mod ttl;
mod writer;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;

pub use engine::{DurabilityMode, DB_FILE};
pub use inspect::{inventory, Inventory};

/// How long shutdown waits for in-flight requests before closing connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(clap::Subcommand)]
pub enum KvCommand {
    /// Serve the v1 KV protocol.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
#[command(after_help = ENV_HELP)]
pub struct ServeArgs {
    /// Address to bind (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8123")]
    pub listen: String,
    /// Data directory.
    #[arg(long, default_value = "./data")]
    pub data: std::path::PathBuf,
    /// Bearer token required on every request (or env KV_TOKEN).
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// `immediate`: every acknowledged write is fsync'd first. `none`: no fsync per write
    /// (benchmarks only; a crash can lose the last second or two of writes).
    #[arg(long, value_enum, default_value = "immediate")]
    pub durability: DurabilityMode,
    /// How often expired keys are purged, in milliseconds.
    #[arg(long, default_value_t = 1000, hide = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub purge_interval_ms: u64,
}

/// `kv serve --help`: the environment variables it reads, with defaults.
const ENV_HELP: &str = "\
Environment:
  KV_TOKEN                        the bearer token, instead of --token (default: none, no auth)
  STATEFUL_TOOL_LOG (or RUST_LOG) log filter: error, warn, info, debug (default info); logs go to
                                  stderr, the one `listening on http://ip:port` line to stdout";

pub fn run(cmd: KvCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KvCommand::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr =
        args.listen.parse().with_context(|| format!("--listen {:?} is not an ip:port", args.listen))?;
    let token = match args.token.as_deref() {
        Some(t) => Some(Arc::new(auth::Token::new(t)?)),
        None => None,
    };
    if !listen.ip().is_loopback() && token.is_none() {
        tracing::warn!(
            "kv: listening on a non-loopback address without a token; anyone who can reach it can read and write"
        );
    }
    // Bind first: a port already in use must fail before the data directory is created or
    // opened, so a mistaken second start leaves no trace on disk.
    let listener = std::net::TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen} (another `kv serve` on this port? choose another --listen)")
    })?;
    listener.set_nonblocking(true)?;
    let (engine, writer) = engine::Engine::open(&args.data, args.durability, record::Clock::system())?;
    tracing::info!(
        "kv: data in {} (durability {}, auth {})",
        args.data.join(DB_FILE).display(),
        args.durability.as_str(),
        if token.is_some() { "on" } else { "off" }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("kv-http").build()?;
    let state = Arc::new(http::AppState { engine, durability: args.durability });
    let purge_every = Duration::from_millis(args.purge_interval_ms);
    let result = runtime.block_on(serve_http(state, listener, token, purge_every));
    // Dropping the runtime drops every task holding an engine handle; the writer then
    // commits whatever is still queued and exits, and the database closes cleanly.
    runtime.shutdown_timeout(Duration::from_secs(1));
    writer.join();
    result
}

async fn serve_http(
    state: Arc<http::AppState>,
    listener: std::net::TcpListener,
    token: Option<Arc<auth::Token>>,
    purge_every: Duration,
) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let local = listener.local_addr()?;
    let purge = tokio::spawn(ttl::purge_loop(state.engine.clone(), purge_every));
    let app = http::router(state, token);
    let listener = listener.tap_io(|tcp| {
        // Small request/response pairs: do not let Nagle's algorithm delay them.
        let _ = tcp.set_nodelay(true);
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    announce(local);
    tokio::select! {
        () = shutdown_signal() => {}
        ended = &mut server => {
            purge.abort();
            anyhow::bail!("kv: HTTP server stopped unexpectedly: {ended:?}");
        }
    }
    tracing::info!("kv: shutting down");
    let _ = stop.send(());
    purge.abort();
    if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
        tracing::warn!("kv: requests still running after {SHUTDOWN_GRACE:?}; closing them");
    }
    Ok(ExitCode::SUCCESS)
}

/// The one line on stdout: tests and scripts read it to learn the (possibly ephemeral) port.
fn announce(local: SocketAddr) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on http://{local}").and_then(|()| out.flush()).is_err() {
        tracing::warn!("kv: could not write the 'listening on' line to stdout");
    }
    tracing::info!("kv: listening on http://{local}");
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
