//! The invariants a schedule must keep, checked against the simulated store at the moment
//! each answer is given and at quiescence.

use std::collections::{HashMap, HashSet};

use crate::world::World;
use event_store::record::{Record, Status};
use stateful_tool::{Answer, ErrorClass, ToolError};

/// What a task was asked to do.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Deliver,
    Complete { attempt: u32, target: Status },
}

/// One tool call of a schedule and what it did.
pub(crate) struct Call {
    pub(crate) kind: Kind,
    /// The claim ids of the writes it sent (its own records).
    pub(crate) writes: HashSet<String>,
    /// `accepted`, `duplicate`, `completed`, …, or `error:<class>` once it answered.
    pub(crate) outcome: Option<String>,
    /// The attempt its answer reported.
    pub(crate) attempt: Option<u32>,
    /// It answered `upstream_error` saying its writes could not be checked before its deadline
    /// (the store did not answer even the read-back): the documented lease-bounded case.
    pub(crate) unchecked: bool,
}

/// Everything answered so far, for the invariants that span answers.
#[derive(Default)]
pub(crate) struct Ledger {
    /// (life of the id, attempt) → how many deliveries were told `accepted`.
    pub(crate) accepted: HashMap<(u32, u32), usize>,
}

fn record(world: &World, key: &str) -> Option<Record> {
    world.live(key).map(|e| Record::from_bytes(&e.value).expect("the simulation stores only records"))
}

/// Checks one answer against the store as it is when the answer is given.
pub(crate) fn on_answer(
    world: &World,
    key: &str,
    call: &mut Call,
    result: &Result<Answer, ToolError>,
    ledger: &mut Ledger,
) -> Result<(), String> {
    let rec = record(world, key);
    let own = |r: &Record| call.writes.contains(&r.claim_id);
    match result {
        Ok(answer) => {
            let v = answer.to_value();
            let outcome = v["outcome"].as_str().unwrap_or_default().to_owned();
            let attempt = v["attempt"].as_u64().map(|a| a as u32);
            call.attempt = attempt;
            call.outcome = Some(outcome.clone());
            match (&call.kind, outcome.as_str()) {
                (Kind::Deliver, "accepted") => {
                    let a = attempt.ok_or("accepted without an attempt")?;
                    match &rec {
                        Some(r) if r.status == Status::Processing && r.attempt == a && own(r) => {}
                        other => return Err(format!("S2: accepted attempt {a}, but the store holds {other:?}")),
                    }
                    let life = world.lives.get(key).copied().unwrap_or(0);
                    let n = ledger.accepted.entry((life, a)).or_default();
                    *n += 1;
                    if *n > 1 {
                        return Err(format!("S1: attempt {a} (life {life}) was accepted {n} times"));
                    }
                }
                (Kind::Deliver, "duplicate") => match &rec {
                    Some(r) if own(r) => {
                        return Err(format!(
                            "O1: a delivery was told duplicate of its own claim (attempt {})",
                            r.attempt
                        ))
                    }
                    Some(_) => {}
                    None => return Err("duplicate of a record that is not in the store".into()),
                },
                (Kind::Complete { attempt: a, target }, done) if done == target.as_str() => match &rec {
                    Some(r) if r.attempt == *a && r.status == *target && own(r) => {}
                    other => {
                        return Err(format!("F1: completion of attempt {a} reported {done}; the store holds {other:?}"))
                    }
                },
                (Kind::Complete { .. }, o) if o.starts_with("already_") => {
                    if let Some(r) = rec.as_ref().filter(|r| own(r)) {
                        return Err(format!(
                            "O1: a completion was told {o} about its own write (attempt {})",
                            r.attempt
                        ));
                    }
                }
                (kind, o) => return Err(format!("{kind:?} answered an undocumented outcome {o}")),
            }
        }
        Err(e) => {
            call.outcome = Some(format!("error:{}", e.class.as_str()));
            call.unchecked = e.message.contains("could not be checked");
            let allowed = match call.kind {
                // Every delivery carries the same content: never a conflict, never bad input.
                Kind::Deliver => e.class == ErrorClass::UpstreamError,
                Kind::Complete { .. } => e.class != ErrorClass::ParamInvalid,
            };
            if !allowed {
                return Err(format!("{:?} failed with {e}", call.kind));
            }
        }
    }
    Ok(())
}

/// L3, after every step and at quiescence: once a call answered `upstream_error`, no write of
/// it is in the store, then or ever after (each write carried a deadline the store enforces,
/// and the call read back once the deadline had passed). So the delivery after it finds the
/// store as if this call had never run, and is `accepted` unless another run holds the event.
pub(crate) fn nothing_after_upstream_errors(world: &World, key: &str, calls: &[&Call]) -> Result<(), String> {
    let Some(rec) = record(world, key) else { return Ok(()) };
    let failed = |c: &&&Call| c.outcome.as_deref() == Some("error:upstream_error") && !c.unchecked;
    match calls.iter().find(|c| failed(c) && c.writes.contains(&rec.claim_id)) {
        Some(c) => Err(format!(
            "L3: {:?} answered upstream_error, yet its write (attempt {}, {}) is in the store",
            c.kind,
            rec.attempt,
            rec.status.as_str()
        )),
        None => Ok(()),
    }
}

/// L1, at quiescence: a `processing` record was answered `accepted` to the delivery that
/// wrote it, or that delivery answered `upstream_error` (its claim could not be rolled back),
/// or its lease will expire.
pub(crate) fn at_quiescence(world: &World, key: &str, calls: &[&Call]) -> Result<(), String> {
    let Some(rec) = record(world, key) else { return Ok(()) };
    if rec.status != Status::Processing || rec.lease_until_ms.is_some() {
        return Ok(());
    }
    let writer = calls.iter().find(|c| c.writes.contains(&rec.claim_id));
    match writer.map(|c| (c.outcome.as_deref(), c.attempt)) {
        Some((Some("accepted"), Some(a))) if a == rec.attempt => Ok(()),
        Some((Some("error:upstream_error"), _)) => Ok(()),
        other => Err(format!(
            "L1: attempt {} is processing without a lease, and its writer answered {other:?}: nobody runs it",
            rec.attempt
        )),
    }
}

/// What the final, fault-free delivery must answer once every run has ended or its lease
/// has run out (L2).
pub(crate) fn expected_final(world: &World, key: &str) -> &'static str {
    match record(world, key) {
        Some(r) if r.status == Status::Completed => "duplicate",
        Some(r) if r.status == Status::Processing && r.lease_until_ms.is_none() => "duplicate",
        _ => "accepted",
    }
}

/// The latest lease of the record (the clock is moved past it before the final delivery).
pub(crate) fn lease_until(world: &World, key: &str) -> Option<i64> {
    record(world, key).and_then(|r| r.lease_until_ms)
}
