//! One schedule's state: its generator, store, calls and what they answered, which the
//! schedule's loop, its calls and its network all step.

use std::future::Future;
use std::pin::Pin;

use stateful_tool::{Answer, Settings, ToolError};

use crate::check::{Call, Ledger};
use crate::report::Faults;
use crate::rng::Rng;
use crate::store::SimStore;
use crate::world::Op;
use event_store::record::Status;

/// The storage key of the one event every call of a schedule names (`event_id` `sim`).
pub(crate) const KEY: &str = "evt_sim";

/// A tool call in progress: the plugin's own code, polled by the scheduler.
pub(crate) type Running = Pin<Box<dyn Future<Output = Result<Answer, ToolError>>>>;

/// One call of the schedule: what it did so far, and its future until it answers.
pub(crate) struct Task {
    pub(crate) call: Call,
    pub(crate) fut: Option<Running>,
}

/// One schedule in progress: its generator, its store, its calls and what they answered.
pub(crate) struct Sim {
    pub(crate) rng: Rng,
    pub(crate) store: SimStore,
    pub(crate) settings: Settings,
    pub(crate) tasks: Vec<Task>,
    pub(crate) ledger: Ledger,
    /// Requests delivered late or duplicated: applied at some later step, or never.
    pub(crate) ghosts: Vec<Op>,
    /// Runs that will call event_complete at a given step.
    pub(crate) runs: Vec<(usize, u32, Status)>,
    pub(crate) fault_percent: u64,
    pub(crate) faults: Faults,
    /// The step-by-step trace, when asked for.
    pub(crate) trace: Option<Vec<String>>,
    pub(crate) step: usize,
}
