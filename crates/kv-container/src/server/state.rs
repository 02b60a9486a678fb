//! What every KV container handler shares, and the health verdict built from it.

use super::engine::{DurabilityMode, Engine};
use super::health::Problem;
use super::ui::settings::UiState;

/// What every handler needs.
pub struct AppState {
    pub engine: Engine,
    pub durability: DurabilityMode,
    /// `<data>/kv.redb`, whose size `/metrics` reports.
    pub data_file: std::path::PathBuf,
    /// `--metrics-public`: `/metrics` needs no token.
    pub metrics_public: bool,
    /// The status page's census cache.
    pub ui: UiState,
}

/// What `/healthz` reports when it is not ok.
pub fn health_problem(app: &AppState) -> Option<Problem> {
    match app.engine.writer_alive() {
        true => app.engine.health().problem(),
        false => Some(Problem { status: "unavailable", reason: "the storage writer stopped".into() }),
    }
}
