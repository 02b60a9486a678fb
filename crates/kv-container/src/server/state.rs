//! What every KV container handler shares, and the health verdict built from it.

use super::census::Census;
use super::engine::{DurabilityMode, Engine};
use super::health::Problem;

/// What a handler extracts to reach the [`AppState`].
pub(crate) type Shared = axum::extract::State<std::sync::Arc<AppState>>;

/// What every handler needs.
pub(crate) struct AppState {
    pub(crate) engine: Engine,
    pub(crate) durability: DurabilityMode,
    /// `<data>/kv.redb`, whose size `/metrics` reports.
    pub(crate) data_file: std::path::PathBuf,
    /// `--metrics-public`: `/metrics` needs no token.
    pub(crate) metrics_public: bool,
    /// The status counts, kept between requests (the status page and `/metrics` read them).
    pub(crate) census: std::sync::Arc<Census>,
}

/// What `/healthz` reports when it is not ok.
pub(crate) fn health_problem(app: &AppState) -> Option<Problem> {
    match app.engine.writer_alive() {
        true => app.engine.health().problem(),
        false => Some(Problem { status: "unavailable", reason: "the storage writer stopped".into() }),
    }
}
