//! What the simulation counts and how its trace shows requests and answers.

use crate::world::{Op, StoreReply};

/// The faults the scheduler injects and the answers the calls give, counted over all
/// schedules (printed with `{:?}` after a search, to show what a budget covered).
#[derive(Debug, Default, Clone)]
pub struct Faults {
    pub(crate) late: u64,
    pub(crate) lost_answer: u64,
    pub(crate) failed_before: u64,
    pub(crate) cut_before: u64,
    pub(crate) duplicated: u64,
    pub(crate) ghosts_delivered: u64,
    /// Requests delivered after their caller's deadline, which the store refused.
    pub(crate) refused_late: u64,
    pub(crate) reordered: u64,
    pub(crate) restarts: u64,
    pub(crate) ttl_expiries: u64,
    pub(crate) clock_jumps: u64,
    pub(crate) crashed_runs: u64,
    pub(crate) answers: std::collections::BTreeMap<String, u64>,
}

pub(crate) fn short(op: &Op) -> String {
    match op {
        Op::Create { .. } => format!("create {:?}", op.claim_id().unwrap_or_default().get(..6)),
        Op::Read { .. } => "read".into(),
        Op::Swap { expected, .. } => format!("swap@{expected} {:?}", op.claim_id().unwrap_or_default().get(..6)),
        Op::Release { restore, .. } => {
            format!("release {:?} restore={}", op.claim_id().unwrap_or_default().get(..6), restore.is_some())
        }
    }
}

pub(crate) fn short_reply(r: &StoreReply) -> String {
    match r {
        StoreReply::Created(c) => format!("{:?}", matches!(c, event_store::Created::Created))
            .replace("true", "created")
            .replace("false", "exists"),
        StoreReply::Read(c, _) => if c.is_some() { "value" } else { "absent" }.into(),
        StoreReply::Swapped(s) => if matches!(s, event_store::Swapped::Swapped) { "swapped" } else { "changed" }.into(),
        StoreReply::Released(b) => format!("released={b}"),
        StoreReply::Failed(e) => format!("error {e}"),
    }
}
