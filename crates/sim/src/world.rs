//! The simulated store's state: one key space on a virtual clock, what answers revealed, and
//! the requests in flight; each request is applied atomically, as a real store would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use event_store::record::Record;
use event_store::{Created, Current, StoreError, Swapped, Version};

/// A request as the store would receive it.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Create { key: String, value: Vec<u8>, ttl_ms: i64, until: Option<i64> },
    Read { key: String },
    Swap { key: String, expected: u64, value: Vec<u8>, ttl_ms: i64, until: Option<i64> },
    Release { key: String, claim_id: String, restore: Option<Vec<u8>>, ttl_ms: i64, until: Option<i64> },
}

impl Op {
    /// The claim_id a write carries (a release carries the one it removes).
    pub(crate) fn claim_id(&self) -> Option<String> {
        match self {
            Op::Create { value, .. } | Op::Swap { value, .. } => Record::from_bytes(value).ok().map(|r| r.claim_id),
            Op::Release { claim_id, .. } => Some(claim_id.clone()),
            Op::Read { .. } => None,
        }
    }
}

/// What the store answers to one request.
#[derive(Debug)]
pub(crate) enum StoreReply {
    Created(Created),
    /// The value and the store's time of the read.
    Read(Option<Current>, i64),
    Swapped(Swapped),
    Released(bool),
    Failed(StoreError),
}

/// One key's value, its revision and when it expires (virtual ms).
#[derive(Debug, Clone)]
pub(crate) struct SimValue {
    pub(crate) value: Vec<u8>,
    pub(crate) rev: u64,
    pub(crate) expires_ms: i64,
}

/// The store's state and the requests in flight.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) now_ms: i64,
    pub(crate) data: HashMap<String, SimValue>,
    /// Per key, the last state some answer revealed (a restart never loses it).
    pub(crate) acked: HashMap<String, Option<SimValue>>,
    pub(crate) rev: u64,
    pub(crate) parked: Vec<Parked>,
    /// Which task is issuing store calls right now (set by the executor before each poll).
    pub(crate) current_task: usize,
    /// How many times each key expired (a new life of the id: attempts start over).
    pub(crate) lives: HashMap<String, u32>,
    /// A flaw played on purpose, to show the checks catch it.
    pub(crate) flaw: Flaw,
}

/// A deliberately broken store: each flaw is a mistake the invariants must catch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Flaw {
    /// A sound store.
    #[default]
    None,
    /// Applies a write whenever it arrives (the store before write deadlines).
    IgnoresDeadlines,
    /// Answers every record with a claim_id no call sent, so a call never recognises its own
    /// write (the protocol before own-write recognition took its own late claim for
    /// someone else's).
    HidesClaimIds,
}

impl World {
    pub(crate) fn live(&self, key: &str) -> Option<&SimValue> {
        self.data.get(key).filter(|e| e.expires_ms > self.now_ms)
    }

    /// Drops expired keys (counting a new life of each).
    pub(crate) fn expire(&mut self) {
        let now = self.now_ms;
        let gone: Vec<String> = self.data.iter().filter(|(_, e)| e.expires_ms <= now).map(|(k, _)| k.clone()).collect();
        for k in gone {
            self.data.remove(&k);
            self.acked.insert(k.clone(), None);
            *self.lives.entry(k).or_default() += 1;
        }
    }

    fn current(&self, e: &SimValue) -> Current {
        let value = match self.flaw {
            Flaw::HidesClaimIds => match Record::from_bytes(&e.value) {
                Ok(rec) => Record { claim_id: "hidden".to_owned(), ..rec }.to_bytes(),
                Err(_) => e.value.clone(),
            },
            _ => e.value.clone(),
        };
        Current { value, version: Version::Rev(e.rev), store_now_ms: self.now_ms }
    }

    fn put(&mut self, key: &str, value: &[u8], ttl_ms: i64) {
        self.rev += 1;
        self.data.insert(
            key.to_owned(),
            SimValue { value: value.to_vec(), rev: self.rev, expires_ms: self.now_ms + ttl_ms },
        );
    }

    /// Applies one request atomically and returns the answer the store would send. A write
    /// that arrives after its deadline (unless the store ignores deadlines) is refused.
    pub(crate) fn apply(&mut self, op: &Op) -> StoreReply {
        self.expire();
        let until = match op {
            Op::Create { until, .. } | Op::Swap { until, .. } | Op::Release { until, .. } => *until,
            Op::Read { .. } => None,
        };
        if let Some(d) = until.filter(|d| self.flaw != Flaw::IgnoresDeadlines && self.now_ms > *d) {
            return StoreReply::Failed(StoreError::TooLate { deadline_ms: d, store_now_ms: self.now_ms });
        }
        match op {
            Op::Create { key, value, ttl_ms, .. } => match self.live(key) {
                Some(e) => StoreReply::Created(Created::Exists(self.current(e))),
                None => {
                    self.put(key, value, *ttl_ms);
                    StoreReply::Created(Created::Created)
                }
            },
            Op::Read { key } => StoreReply::Read(self.live(key).map(|e| self.current(e)), self.now_ms),
            Op::Swap { key, expected, value, ttl_ms, .. } => match self.live(key) {
                Some(e) if e.rev == *expected => {
                    self.put(key, value, *ttl_ms);
                    StoreReply::Swapped(Swapped::Swapped)
                }
                other => StoreReply::Swapped(Swapped::Changed(other.map(|e| self.current(e)))),
            },
            Op::Release { key, claim_id, restore, ttl_ms, .. } => {
                let ours = self
                    .live(key)
                    .and_then(|e| Record::from_bytes(&e.value).ok())
                    .is_some_and(|r| r.claim_id == *claim_id);
                if ours {
                    match restore {
                        Some(v) => self.put(key, v, *ttl_ms),
                        None => {
                            self.data.remove(key);
                        }
                    }
                }
                StoreReply::Released(ours)
            }
        }
    }

    /// An answer reached its caller: what it revealed about `key` can never be lost again.
    pub(crate) fn reveal(&mut self, key: &str) {
        let cur = self.live(key).cloned();
        self.acked.insert(key.to_owned(), cur);
    }

    /// A restart: every key goes back to the last state an answer revealed; writes that were
    /// applied but whose answers never reached anyone may be lost.
    pub(crate) fn restart(&mut self) {
        for (key, state) in self.acked.clone() {
            match state {
                Some(e) => {
                    self.data.insert(key, e);
                }
                None => {
                    self.data.remove(&key);
                }
            }
        }
        let unrevealed: Vec<String> = self.data.keys().filter(|k| !self.acked.contains_key(*k)).cloned().collect();
        for k in unrevealed {
            self.data.remove(&k);
        }
    }
}

/// Where the scheduler puts the reply a parked request waits for.
pub(crate) type ReplyCell = Arc<Mutex<Option<StoreReply>>>;

/// A request the scheduler has not decided about yet.
pub(crate) struct Parked {
    pub(crate) task: usize,
    pub(crate) op: Op,
    /// When the caller's timeout for it fires (virtual ms): a `Timeout` answer comes no earlier.
    pub(crate) gives_up_ms: i64,
    pub(crate) slot: ReplyCell,
}

impl Parked {
    /// Hands `reply` to the call waiting on this request (it sees it at its next poll).
    pub(crate) fn answer(&self, reply: StoreReply) {
        *self.slot.lock().unwrap() = Some(reply);
    }
}
