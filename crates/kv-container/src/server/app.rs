//! The container's HTTP surface in-process: its router over a store, on a clock and a token
//! the caller gives, for a caller that serves requests itself (the contract tests through
//! `oneshot`). `serve` adds what only a listening process needs: sockets, TLS, purging,
//! signals.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use clap::Parser;

use super::auth::{Auth, Refusals};
use super::engine::{DurabilityMode, Engine, WriterHandle, DB_FILE};
use super::open::DEFAULT_CACHE_MB;
use super::record::ServerClock;
use super::state::AppState;
use super::tokens::Table;
use super::ui::UiArgs;

/// The status page's settings at `kv serve`'s defaults.
#[derive(Parser)]
struct UiDefaults {
    #[command(flatten)]
    ui: UiArgs,
}

/// A container's routes over the store in a data directory, and the writer thread behind them.
pub struct Container {
    router: Router,
    writer: WriterHandle,
}

impl Container {
    /// Opens the store in `data` (creating it in an empty directory) with durability
    /// `immediate`, judging TTLs and deadlines by `clock`. With `token`, every route but
    /// `/healthz` needs `Authorization: Bearer <token>`, as `kv serve --token` does.
    pub fn open(data: &Path, clock: ServerClock, token: Option<&str>) -> anyhow::Result<Container> {
        let durability = DurabilityMode::Immediate;
        let (engine, writer) = Engine::open_cached(data, durability, clock, DEFAULT_CACHE_MB << 20)?;
        let census = Arc::new(UiDefaults::try_parse_from(["kv"])?.ui.census());
        let refusals = Arc::new(Refusals::new(engine.metrics().clone()));
        let auth = token.map(Table::single).transpose()?.map(|table| Arc::new(Auth::new(table, None, refusals)));
        let state = AppState { engine, durability, data_file: data.join(DB_FILE), metrics_public: false, census };
        Ok(Container { router: super::http::router(Arc::new(state), auth), writer })
    }

    /// The routes (a cheap handle: each clone serves the same store).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Waits for the writer to commit what is queued and close the store; every clone of the
    /// router must be gone first (they hold the store open).
    pub fn close(self) {
        drop(self.router);
        self.writer.join();
    }
}
