//! One seeded schedule: concurrent deliveries of one event, their runs' completions and
//! crashes, and store faults, interleaved by a seeded scheduler on one thread.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use stateful_tool::Settings;

use crate::check::{self, Call, Ledger};
use crate::report::Faults;
use crate::rng::Rng;
use crate::state::{Sim, KEY};
use crate::store::SimStore;
use crate::world::Flaw;
use event_store::record::Status;

/// A schedule that has not gone quiet by this step is drained without faults.
const MAX_STEPS: usize = 600;

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

    /// L3 after every step: no write of a call that answered `upstream_error` is in the store.
    fn check_l3(&self) -> Result<(), String> {
        let calls: Vec<&Call> = self.tasks.iter().map(|t| &t.call).collect();
        check::nothing_after_upstream_errors(&self.store.world.lock().unwrap(), KEY, &calls)
    }
}
