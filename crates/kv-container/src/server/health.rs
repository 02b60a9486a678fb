//! What `/healthz` reports beyond "the writer runs": writes that currently fail, and damage
//! found in the data file at run time. Both are logged when they start and end.

use std::sync::Mutex;

#[derive(Default)]
struct State {
    write_error: Option<String>,
    damage: Option<String>,
}

/// Shared by the writer, the readers and the health route.
#[derive(Default)]
pub(crate) struct Health {
    state: Mutex<State>,
}

/// A problem `/healthz` reports (with 503).
pub(crate) struct Problem {
    pub(crate) status: &'static str,
    pub(crate) reason: String,
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_failed(&self, why: &str) {
        let mut s = self.lock();
        if s.write_error.is_none() {
            tracing::error!("kv: writes are failing, nothing is acknowledged until they succeed again: {why}");
        }
        s.write_error = Some(why.to_owned());
    }

    pub(crate) fn write_succeeded(&self) {
        let mut s = self.lock();
        if s.write_error.take().is_some() {
            tracing::warn!("kv: writes succeed again");
        }
    }

    /// Damage stays reported until a restart: the file needs `kv check` and a decision.
    pub(crate) fn damaged(&self, why: &str) {
        let mut s = self.lock();
        if s.damage.is_none() {
            tracing::error!(
                "kv: the data file is damaged: {why}. Stop the server and run `stateful-tool kv check --data DIR`"
            );
            s.damage = Some(why.to_owned());
        }
    }

    /// Once damage is known, nothing is read or written: the store cannot tell a damaged page
    /// that still parses from a good one, and a wrong "not found" would let an event through twice.
    pub(crate) fn damage(&self) -> Option<String> {
        self.lock().damage.as_ref().map(|d| format!("the data file is damaged ({d}); restart after `kv check`"))
    }

    pub(crate) fn problem(&self) -> Option<Problem> {
        let s = self.lock();
        if let Some(d) = &s.damage {
            return Some(Problem { status: "damaged", reason: format!("the data file is damaged: {d}") });
        }
        s.write_error.as_ref().map(|e| Problem { status: "unavailable", reason: format!("writes are failing: {e}") })
    }
}
