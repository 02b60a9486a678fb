//! The tool calls a schedule makes: deliveries of its event, the completions of the runs they
//! start, and the polling that drives them and checks each answer.

use std::task::{Context, Poll, Waker};

use serde_json::{json, Map, Value};
use stateful_tool::{Params, Tool};

use crate::check::{self, Call, Kind};
use crate::state::{Running, Sim, Task, KEY};
use event_store::record::Status;

impl Sim {
    /// Starts a call; it runs only when the scheduler polls it.
    fn spawn(&mut self, kind: Kind, fut: Running) -> usize {
        self.tasks.push(Task {
            call: Call { kind, writes: Default::default(), outcome: None, attempt: None, unchecked: false },
            fut: Some(fut),
        });
        self.tasks.len() - 1
    }

    /// A delivery of the event: the same content every time (never a conflict), sometimes
    /// with a lease of its own. Returns the call's index.
    pub(crate) fn deliver(&mut self) -> usize {
        let mut p = Map::new();
        p.insert("event_id".into(), json!("sim"));
        p.insert("event_type".into(), json!("created"));
        p.insert("payload".into(), json!("{\"order\": 42}"));
        if self.rng.chance(20) {
            p.insert("lease_seconds".into(), json!(self.rng.pick(&[0, 1, 5])));
        }
        let (store, settings) = (self.store.clone(), self.settings.clone());
        let text = Value::Object(p).to_string();
        let fut = Box::pin(async move { Tool::EventIngest.invoke(&store, &settings, &params(&text)).await });
        self.spawn(Kind::Deliver, fut)
    }

    /// A run's `event_complete` of `attempt` as `target` (possibly stale or premature).
    pub(crate) fn complete(&mut self, attempt: u32, target: Status) {
        let text = json!({"event_id": "sim", "status": target.as_str(), "attempt": attempt}).to_string();
        let (store, settings) = (self.store.clone(), self.settings.clone());
        let fut = Box::pin(async move { Tool::EventComplete.invoke(&store, &settings, &params(&text)).await });
        self.spawn(Kind::Complete { attempt, target }, fut);
    }

    /// Polls every unfinished call until it waits on the store again; checks each answer.
    pub(crate) fn poll_all(&mut self) -> Result<(), String> {
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
fn params(text: &str) -> Params<'_> {
    Params::parse(text).expect("the schedule writes JSON objects")
}
