//! Logs go to stderr only: stdout belongs to the protocol writer.

/// Installs a stderr logger; `RUST_LOG` (or `STATEFUL_TOOL_LOG`) sets the filter, default `info`.
pub fn init() {
    let filter =
        std::env::var("STATEFUL_TOOL_LOG").or_else(|_| std::env::var("RUST_LOG")).unwrap_or_else(|_| "info".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}
