//! What the simulation counts and how its trace shows requests and answers.

use super::store::{Op, Reply};

/// The faults the scheduler injects, counted over all schedules.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    pub late: u64,
    pub lost_answer: u64,
    pub failed_before: u64,
    pub cut_before: u64,
    pub duplicated: u64,
    pub ghosts_delivered: u64,
    /// Requests delivered after their caller's deadline, which the store refused.
    pub refused_late: u64,
    pub reordered: u64,
    pub restarts: u64,
    pub ttl_expiries: u64,
    pub clock_jumps: u64,
    pub crashed_runs: u64,
    pub answers: std::collections::BTreeMap<String, u64>,
}

pub fn short(op: &Op) -> String {
    match op {
        Op::Create { .. } => format!("create {:?}", op.claim_id().unwrap_or_default().get(..6)),
        Op::Read { .. } => "read".into(),
        Op::Swap { expected, .. } => format!("swap@{expected} {:?}", op.claim_id().unwrap_or_default().get(..6)),
        Op::Release { restore, .. } => {
            format!("release {:?} restore={}", op.claim_id().unwrap_or_default().get(..6), restore.is_some())
        }
    }
}

pub fn short_reply(r: &Reply) -> String {
    match r {
        Reply::Created(c) => format!("{:?}", matches!(c, crate::store::Created::Created))
            .replace("true", "created")
            .replace("false", "exists"),
        Reply::Read(c, _) => if c.is_some() { "value" } else { "absent" }.into(),
        Reply::Swapped(s) => if matches!(s, crate::store::Swapped::Swapped) { "swapped" } else { "changed" }.into(),
        Reply::Released(b) => format!("released={b}"),
        Reply::Failed(e) => format!("error {e}"),
    }
}
