//! How the scheduler treats the store's requests: each delivered, delayed, lost, refused,
//! cut, duplicated or reordered, while the clock moves, TTLs run out and the store restarts.

use crate::report::{short, short_reply};
use crate::state::{Sim, KEY};
use crate::world::{Op, StoreReply};
use event_store::StoreError;

impl Sim {
    /// One scheduler decision.
    pub(crate) fn act(&mut self) {
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
    pub(crate) fn handle_parked(&mut self) {
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
    pub(crate) fn advance(&mut self, ms: i64) {
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

    pub(crate) fn apply_ghost(&mut self, op: Op) {
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
}
