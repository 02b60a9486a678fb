//! One seeded schedule: concurrent deliveries of one event, their runs' completions and
//! crashes, and store faults, interleaved by a seeded scheduler on one thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use serde_json::{json, Map, Value};

use super::check::{self, Call, Kind, Ledger};
use super::report::{short, short_reply, Faults};
use super::rng::Rng;
use super::store::{Flaw, Op, SimStore, StoreReply};
use crate::error::ToolError;
use crate::tools::{event_complete, event_ingest, Answer, Settings};
use event_store::record::Status;
use event_store::StoreError;

type Running = Pin<Box<dyn Future<Output = Result<Answer, ToolError>>>>;

struct Task {
    call: Call,
    fut: Option<Running>,
}

const KEY: &str = "evt_sim";
const MAX_STEPS: usize = 600;

struct Sim {
    rng: Rng,
    store: SimStore,
    settings: Settings,
    tasks: Vec<Task>,
    ledger: Ledger,
    /// Requests delivered late or duplicated: applied at some later step, or never.
    ghosts: Vec<Op>,
    /// Runs that will call event_complete at a given step.
    runs: Vec<(usize, u32, Status)>,
    fault_percent: u64,
    faults: Faults,
    /// The step-by-step trace, when asked for.
    trace: Option<Vec<String>>,
    step: usize,
}

/// Runs schedule `seed` against a store with `flaw` (`Flaw::None`: a sound one); `Err` names
/// the invariant it broke. With `trace`, the schedule's trace goes to stderr.
pub(crate) fn run(seed: u64, trace: bool, faults: &mut Faults, flaw: Flaw) -> Result<(), String> {
    let (result, lines) = play(seed, trace, faults, flaw);
    for line in lines.unwrap_or_default() {
        eprintln!("{line}");
    }
    result
}

/// Schedule `seed`'s outcome and its whole trace: one seed, one run, line for line.
pub(crate) fn traced(seed: u64, flaw: Flaw) -> (Result<(), String>, Vec<String>) {
    let (result, lines) = play(seed, true, &mut Faults::default(), flaw);
    (result, lines.unwrap_or_default())
}

fn play(seed: u64, trace: bool, faults: &mut Faults, flaw: Flaw) -> (Result<(), String>, Option<Vec<String>>) {
    let mut rng = Rng::new(seed);
    let retention = rng.pick(&["2s", "60s", "1h"]);
    let default_lease = rng.pick(&["0", "1", "5", "30"]);
    let issued = AtomicU64::new(0);
    let settings = Settings::from_credentials(&json!({"retention": retention, "default_lease_seconds": default_lease}))
        .expect("valid settings")
        // Time in the simulation is virtual: a call's deadline runs on the virtual clock (the
        // store's), and a round trip the scheduler times out has taken its whole timeout.
        .with_call_timeout(std::time::Duration::from_secs(5))
        // Claim ids from the seed too: nothing in a schedule is drawn outside it.
        .with_claim_ids(move || format!("{seed:016x}{:016x}", issued.fetch_add(1, Ordering::Relaxed)));
    let fault_percent = rng.pick(&[5, 15, 30, 50]);
    let mut sim = Sim {
        rng,
        store: SimStore::new(1_700_000_000_000, flaw),
        settings,
        tasks: vec![],
        ledger: Ledger::default(),
        ghosts: vec![],
        runs: vec![],
        fault_percent,
        faults: std::mem::take(faults),
        trace: trace.then(|| {
            vec![format!("seed {seed}: retention {retention}, default lease {default_lease}s, faults {fault_percent}%")]
        }),
        step: 0,
    };
    let result = sim.play();
    *faults = std::mem::take(&mut sim.faults);
    (result, sim.trace.take())
}

impl Sim {
    fn play(&mut self) -> Result<(), String> {
        let mut to_deliver = 2 + self.rng.below(4);
        while self.step < MAX_STEPS {
            self.step += 1;
            let idle = self.tasks.iter().all(|t| t.fut.is_none());
            if to_deliver > 0 && (idle || self.rng.chance(20)) {
                to_deliver -= 1;
                self.deliver();
            }
            let due: Vec<(usize, u32, Status)> = self.runs.iter().copied().filter(|r| r.0 <= self.step).collect();
            self.runs.retain(|r| r.0 > self.step);
            for (_, attempt, target) in due {
                self.complete(attempt, target);
            }
            self.act();
            self.poll_all()?;
            self.check_l3()?;
            let idle = self.tasks.iter().all(|t| t.fut.is_none());
            if idle && to_deliver == 0 && self.runs.is_empty() {
                break;
            }
        }
        // Drain: every request still in flight is delivered without faults.
        self.fault_percent = 0;
        while self.tasks.iter().any(|t| t.fut.is_some()) {
            self.drain_step()?;
        }
        // Requests still in the network arrive now, or never.
        for op in std::mem::take(&mut self.ghosts) {
            if self.rng.chance(50) {
                self.apply_ghost(op);
            }
        }
        self.check_l3()?;
        let world = self.store.world.lock().unwrap();
        let calls: Vec<&Call> = self.tasks.iter().map(|t| &t.call).collect();
        check::at_quiescence(&world, KEY, &calls)?;
        let lease = check::lease_until(&world, KEY);
        drop(world);
        if let Some(until) = lease {
            let now = self.store.world.lock().unwrap().now_ms;
            self.store.advance((until - now).max(0) + 1);
        }
        // L2: once every run ended or its lease ran out, a fault-free delivery is accepted
        // (or a duplicate of a completed event, or of a run that holds no lease).
        let expected = check::expected_final(&self.store.world.lock().unwrap(), KEY);
        let last = self.deliver();
        while self.tasks[last].fut.is_some() {
            self.drain_step()?;
        }
        let got = self.tasks[last].call.outcome.clone().unwrap_or_default();
        if got != expected {
            return Err(format!("L2: the final delivery answered {got}, expected {expected}"));
        }
        Ok(())
    }

    /// One step without faults: a parked request is answered, or, when every call waits
    /// for time to pass (a read-back after a deadline), the clock moves.
    fn drain_step(&mut self) -> Result<(), String> {
        if self.store.world.lock().unwrap().parked.is_empty() {
            self.store.advance(100);
        }
        self.handle_parked();
        self.poll_all()?;
        self.check_l3()
    }

    fn check_l3(&self) -> Result<(), String> {
        let calls: Vec<&Call> = self.tasks.iter().map(|t| &t.call).collect();
        check::nothing_after_upstream_errors(&self.store.world.lock().unwrap(), KEY, &calls)
    }

    fn spawn(&mut self, kind: Kind, fut: Running) -> usize {
        self.tasks.push(Task {
            call: Call { kind, writes: Default::default(), outcome: None, attempt: None, unchecked: false },
            fut: Some(fut),
        });
        self.tasks.len() - 1
    }

    fn deliver(&mut self) -> usize {
        let mut p = Map::new();
        p.insert("event_id".into(), json!("sim"));
        p.insert("event_type".into(), json!("created"));
        p.insert("payload".into(), json!("{\"order\": 42}"));
        if self.rng.chance(20) {
            p.insert("lease_seconds".into(), json!(self.rng.pick(&[0, 1, 5])));
        }
        let (store, settings) = (self.store.clone(), self.settings.clone());
        let text = Value::Object(p).to_string();
        let fut = Box::pin(async move { event_ingest::run(&store, &settings, &params(&text)).await });
        self.spawn(Kind::Deliver, fut)
    }

    fn complete(&mut self, attempt: u32, target: Status) {
        let text = json!({"event_id": "sim", "status": target.as_str(), "attempt": attempt}).to_string();
        let (store, settings) = (self.store.clone(), self.settings.clone());
        let fut = Box::pin(async move { event_complete::run(&store, &settings, &params(&text)).await });
        self.spawn(Kind::Complete { attempt, target }, fut);
    }

    /// One scheduler decision.
    fn act(&mut self) {
        match self.rng.below(100) {
            0..=69 => self.handle_parked(),
            70..=79 if !self.ghosts.is_empty() => {
                let i = self.rng.below(self.ghosts.len() as u64) as usize;
                let op = self.ghosts.swap_remove(i);
                self.apply_ghost(op);
            }
            80..=89 => {
                let ms = 1 + self.rng.below(500) as i64;
                self.advance(ms);
            }
            90..=94 => {
                self.faults.clock_jumps += 1;
                let ms = 1000 + self.rng.below(40_000) as i64;
                self.advance(ms);
            }
            95..=96 => self.restart(),
            97..=99 => {
                let expiry = self.store.world.lock().unwrap().live(KEY).map(|e| e.expires_ms);
                if let Some(at) = expiry {
                    self.faults.ttl_expiries += 1;
                    let now = self.store.world.lock().unwrap().now_ms;
                    self.advance(at - now);
                }
            }
            _ => self.handle_parked(),
        }
    }

    /// Delivers one parked request (any of them: concurrent requests are reordered), with a
    /// fault or without.
    fn handle_parked(&mut self) {
        let mut w = self.store.world.lock().unwrap();
        if w.parked.is_empty() {
            return;
        }
        let i = self.rng.below(w.parked.len() as u64) as usize;
        if i + 1 != w.parked.len() {
            self.faults.reordered += 1;
        }
        let parked = w.parked.remove(i);
        if let Some(id) = parked.op.claim_id().filter(|_| !matches!(parked.op, Op::Release { .. })) {
            self.tasks[parked.task].call.writes.insert(id);
        }
        let key = KEY.to_owned();
        let fault = if self.rng.chance(self.fault_percent) { 1 + self.rng.below(5) } else { 0 };
        let read = matches!(parked.op, Op::Read { .. });
        let mut gave_up = None;
        let reply = match fault {
            // Delivered after the caller gave up (its whole timeout went by): it lands later,
            // is refused for arriving past its deadline, or is lost.
            1 => {
                self.faults.late += 1;
                gave_up = Some(parked.gives_up_ms - w.now_ms);
                if !read {
                    self.ghosts.push(parked.op.clone());
                }
                StoreReply::Failed(StoreError::Timeout(1000))
            }
            // Applied, and the answer is lost on the way back.
            2 => {
                self.faults.lost_answer += 1;
                w.apply(&parked.op);
                StoreReply::Failed(StoreError::interrupted("the answer was lost"))
            }
            // Refused before delivery: nothing happened, and the caller knows it.
            3 => {
                self.faults.failed_before += 1;
                StoreReply::Failed(StoreError::unreachable("sim", "connection refused"))
            }
            // The connection broke before delivery: nothing happened, but the caller cannot know.
            4 => {
                self.faults.cut_before += 1;
                StoreReply::Failed(StoreError::interrupted("the connection broke"))
            }
            // Delivered twice: answered once, and a copy arrives later.
            5 => {
                self.faults.duplicated += 1;
                let r = w.apply(&parked.op);
                w.reveal(&key);
                if !read {
                    self.ghosts.push(parked.op.clone());
                }
                r
            }
            _ => {
                let r = w.apply(&parked.op);
                w.reveal(&key);
                r
            }
        };
        drop(w);
        if let Some(ms) = gave_up {
            self.advance(ms.max(0));
        }
        if let Some(trace) = &mut self.trace {
            trace.push(format!(
                "step {} task {}: {:?} -> fault {fault}: {}",
                self.step,
                parked.task,
                short(&parked.op),
                short_reply(&reply)
            ));
        }
        parked.answer(reply);
    }

    /// Moves the clock. Network delay is bounded: a request still in flight arrives (or is
    /// lost) before the record it races with expires.
    fn advance(&mut self, ms: i64) {
        let (now, expiry) = {
            let w = self.store.world.lock().unwrap();
            (w.now_ms, w.live(KEY).map(|e| e.expires_ms))
        };
        if expiry.is_some_and(|at| now + ms >= at) {
            for op in std::mem::take(&mut self.ghosts) {
                if self.rng.chance(50) {
                    self.apply_ghost(op);
                }
            }
        }
        self.store.advance(ms);
    }

    fn apply_ghost(&mut self, op: Op) {
        self.faults.ghosts_delivered += 1;
        let mut w = self.store.world.lock().unwrap();
        let r = w.apply(&op);
        if matches!(r, StoreReply::Failed(StoreError::TooLate { .. })) {
            self.faults.refused_late += 1;
        }
        if let Some(trace) = &mut self.trace {
            trace.push(format!("step {}: late copy of {:?} lands: {}", self.step, short(&op), short_reply(&r)));
        }
    }

    /// The store restarts: unacknowledged writes may be lost, and requests waiting on the
    /// broken connections fail (or are delivered after the restart).
    fn restart(&mut self) {
        self.faults.restarts += 1;
        let mut w = self.store.world.lock().unwrap();
        w.restart();
        let parked = std::mem::take(&mut w.parked);
        for p in parked {
            if self.rng.chance(50) {
                p.answer(StoreReply::Failed(StoreError::interrupted("the store restarted")));
            } else {
                w.parked.push(p);
            }
        }
        if let Some(trace) = &mut self.trace {
            trace.push(format!("step {}: store restart", self.step));
        }
    }

    /// Polls every unfinished call until it waits on the store again; checks each answer.
    fn poll_all(&mut self) -> Result<(), String> {
        let mut cx = Context::from_waker(Waker::noop());
        for i in 0..self.tasks.len() {
            let Some(fut) = self.tasks[i].fut.as_mut() else { continue };
            self.store.world.lock().unwrap().current_task = i;
            let Poll::Ready(result) = fut.as_mut().poll(&mut cx) else { continue };
            self.tasks[i].fut = None;
            // Writes parked in the same poll that finished (none today) still count as its own.
            let world = self.store.world.lock().unwrap();
            let task = &mut self.tasks[i];
            let checked = check::on_answer(&world, KEY, &mut task.call, &result, &mut self.ledger);
            drop(world);
            let outcome = task.call.outcome.clone().unwrap_or_default();
            let counted = if task.call.unchecked { format!("{outcome} (unchecked)") } else { outcome.clone() };
            *self.faults.answers.entry(counted).or_default() += 1;
            if let Some(trace) = &mut self.trace {
                trace.push(format!(
                    "step {} task {i} {:?} answered {outcome} attempt {:?}",
                    self.step, task.call.kind, task.call.attempt
                ));
            }
            checked?;
            if let (Kind::Deliver, "accepted", Some(attempt)) = (&task.call.kind, outcome.as_str(), task.call.attempt) {
                self.schedule_run(attempt);
            }
        }
        Ok(())
    }

    /// The run that was told `accepted`: it completes, fails, or crashes (never calls back);
    /// sometimes a stale or premature completion for a neighbouring attempt arrives too.
    fn schedule_run(&mut self, attempt: u32) {
        let at = self.step + 1 + self.rng.below(30) as usize;
        match self.rng.below(100) {
            0..=44 => self.runs.push((at, attempt, Status::Completed)),
            45..=79 => self.runs.push((at, attempt, Status::Failed)),
            _ => self.faults.crashed_runs += 1,
        }
        if self.rng.chance(10) {
            let other = if attempt > 1 && self.rng.chance(50) { attempt - 1 } else { attempt + 1 };
            let target = self.rng.pick(&[Status::Completed, Status::Failed]);
            self.runs.push((self.step + 1 + self.rng.below(30) as usize, other, target));
        }
    }
}

/// A call's parameters from the JSON object text the schedule wrote.
fn params(text: &str) -> crate::tools::Params<'_> {
    crate::tools::Params::parse(text).expect("the schedule writes JSON objects")
}
