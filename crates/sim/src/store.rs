//! The store the tools see: every request is parked in the shared world until the scheduler
//! decides how (and whether) it is delivered and answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use event_store::{
    ClockHand, Created, Current, EventStore, HostClock, Probe, Rollback, StoreClock, StoreError, Swapped, Version,
    Write,
};

use crate::world::{Flaw, Op, Parked, ReplyCell, StoreReply, World};

/// The store the tools see: every call parks a request in the shared world and waits.
#[derive(Clone)]
pub(crate) struct SimStore {
    pub(crate) world: Arc<Mutex<World>>,
    clock: StoreClock,
    /// Moves the plugin host's clock with the world's (virtual ms).
    hand: ClockHand,
}

impl SimStore {
    /// A store with `flaw` (`Flaw::None`: a sound one).
    pub(crate) fn new(start_ms: i64, flaw: Flaw) -> SimStore {
        let (host, hand) = HostClock::manual(start_ms);
        let clock = StoreClock::new(host);
        clock.observe(start_ms);
        let world = World { now_ms: start_ms, flaw, ..World::default() };
        SimStore { world: Arc::new(Mutex::new(world)), clock, hand }
    }

    /// Moves the store's clock (and the plugin host's, which follows it here) forward.
    pub(crate) fn advance(&self, ms: i64) {
        let mut w = self.world.lock().unwrap();
        w.now_ms += ms;
        self.hand.set(w.now_ms);
    }

    fn park(&self, op: Op, timeout: Duration) -> Waiting {
        let slot: ReplyCell = Arc::new(Mutex::new(None));
        let mut w = self.world.lock().unwrap();
        let task = w.current_task;
        let gives_up_ms = w.now_ms + ms(timeout);
        w.parked.push(Parked { task, op, gives_up_ms, slot: slot.clone() });
        Waiting(slot)
    }
}

/// Resolves when the scheduler has answered the parked request.
struct Waiting(ReplyCell);

impl Future for Waiting {
    type Output = StoreReply;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<StoreReply> {
        match self.0.lock().unwrap().take() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

fn unexpected(r: StoreReply) -> StoreError {
    StoreError::unexpected(format!("the simulation answered {r:?}"))
}

impl EventStore for SimStore {
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        let Write { value, ttl, until } = write;
        let op = Op::Create { key: key.into(), value: value.to_vec(), ttl_ms: ms(ttl), until: until.map(|d| d.0) };
        match self.park(op, timeout).await {
            StoreReply::Created(c) => Ok(c),
            StoreReply::Failed(e) => Err(e),
            r => Err(unexpected(r)),
        }
    }

    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        match self.park(Op::Read { key: key.into() }, timeout).await {
            StoreReply::Read(c, now) => Ok((c, now)),
            StoreReply::Failed(e) => Err(e),
            r => Err(unexpected(r)),
        }
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        let Version::Rev(expected) = expected else { return Err(StoreError::unexpected("a foreign version")) };
        let Write { value, ttl, until } = write;
        let (value, until) = (value.to_vec(), until.map(|d| d.0));
        let op = Op::Swap { key: key.into(), expected: *expected, value, ttl_ms: ms(ttl), until };
        match self.park(op, timeout).await {
            StoreReply::Swapped(s) => Ok(s),
            StoreReply::Failed(e) => Err(e),
            r => Err(unexpected(r)),
        }
    }

    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        let Rollback { claim_id, restore, ttl, until } = rollback;
        let op = Op::Release {
            key: key.into(),
            claim_id: claim_id.into(),
            restore: restore.map(<[u8]>::to_vec),
            ttl_ms: ms(ttl),
            until: until.map(|d| d.0),
        };
        match self.park(op, timeout).await {
            StoreReply::Released(b) => Ok(b),
            StoreReply::Failed(e) => Err(e),
            r => Err(unexpected(r)),
        }
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        Ok(Probe { backend: "simulation", server: "in-process".into(), warnings: vec![] })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}
