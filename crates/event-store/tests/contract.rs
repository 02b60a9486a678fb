//! The `EventStore` contract every backend keeps, run against the in-process store with a
//! clock the test moves by hand: create once, swap by version, release by claim id, expiry
//! by the store's clock, and no write after its deadline.

use std::time::Duration;

use event_store::memory::MemoryStore;
use event_store::record::{Record, Status};
use event_store::{
    ClockHand, Created, EventStore, HostClock, Rollback, StoreDeadline, StoreError, Swapped, Version, Write,
};

const T0: i64 = 1_780_000_000_000;
const CALL: Duration = Duration::from_secs(5);
const TTL: Duration = Duration::from_secs(60);

fn store() -> (MemoryStore, ClockHand) {
    let (clock, hand) = HostClock::manual(T0);
    (MemoryStore::new(clock, 0), hand)
}

/// A record as the tools write it, made by the write `claim_id`.
fn record(claim_id: &str, attempt: u32) -> Vec<u8> {
    Record {
        v: 1,
        event_id: "E1".into(),
        event_type: "created".into(),
        payload: None,
        fingerprint: "f".into(),
        status: Status::Processing,
        received_at: "t".into(),
        updated_at: "t".into(),
        attempt,
        lease_until_ms: None,
        completed_at: None,
        result: None,
        claim_id: claim_id.into(),
        run_id: None,
        door: None,
    }
    .to_bytes()
}

fn write(value: &[u8]) -> Write<'_> {
    Write { value, ttl: TTL, until: None }
}

async fn version(s: &MemoryStore, key: &str) -> Version {
    s.read(key, CALL).await.unwrap().expect("the key is there").version
}

#[tokio::test]
async fn a_key_is_created_once_and_a_second_create_sees_the_first() {
    let (s, _) = store();
    let first = record("a", 1);
    assert!(matches!(s.create("k", write(&first), CALL).await.unwrap(), Created::Created));
    let Created::Exists(cur) = s.create("k", write(&record("b", 1)), CALL).await.unwrap() else {
        panic!("a second create replaced the first")
    };
    assert_eq!((cur.value, cur.store_now_ms), (first, T0));
    assert_eq!(s.len(), 1);
}

#[tokio::test]
async fn a_swap_lands_only_on_the_version_it_read() {
    let (s, _) = store();
    s.create("k", write(&record("a", 1)), CALL).await.unwrap();
    let read = version(&s, "k").await;
    assert!(matches!(s.swap("k", &read, write(&record("b", 2)), CALL).await.unwrap(), Swapped::Swapped));
    // The version read before is stale now: the swap reports what is there instead.
    let Swapped::Changed(Some(newer)) = s.swap("k", &read, write(&record("c", 2)), CALL).await.unwrap() else {
        panic!("a stale swap landed")
    };
    assert_eq!(newer.value, record("b", 2));
    assert_ne!(newer.version, read);
    assert!(matches!(s.swap("gone", &read, write(b"x"), CALL).await.unwrap(), Swapped::Changed(None)));
}

#[tokio::test]
async fn a_release_undoes_only_the_claim_it_names() {
    let (s, _) = store();
    s.create("k", write(&record("a", 1)), CALL).await.unwrap();
    let other = Rollback { claim_id: "b", restore: None, ttl: TTL, until: None };
    assert!(!s.release("k", other, CALL).await.unwrap(), "released by another claim id");
    assert!(s.read("k", CALL).await.unwrap().is_some());
    let ours = Rollback { claim_id: "a", restore: None, ttl: TTL, until: None };
    assert!(s.release("k", ours, CALL).await.unwrap());
    assert!(s.read("k", CALL).await.unwrap().is_none(), "a released claim without a restore is deleted");

    // A takeover is rolled back to the record it replaced.
    s.create("k", write(&record("a", 1)), CALL).await.unwrap();
    let read = version(&s, "k").await;
    s.swap("k", &read, write(&record("b", 2)), CALL).await.unwrap();
    let before = record("a", 1);
    let back = Rollback { claim_id: "b", restore: Some(&before), ttl: TTL, until: None };
    assert!(s.release("k", back, CALL).await.unwrap());
    assert_eq!(s.read("k", CALL).await.unwrap().unwrap().value, before);
}

#[tokio::test]
async fn a_record_expires_by_the_store_clock_when_the_test_moves_it() {
    let (s, hand) = store();
    let short = Write { value: b"v", ttl: Duration::from_millis(1000), until: None };
    s.create("k", short, CALL).await.unwrap();
    hand.advance(999);
    let (cur, at) = s.read_at("k", CALL).await.unwrap();
    assert_eq!((cur.is_some(), at), (true, T0 + 999));
    hand.advance(1);
    assert!(s.read("k", CALL).await.unwrap().is_none(), "alive past its ttl");
    assert!(matches!(s.create("k", write(b"w"), CALL).await.unwrap(), Created::Created), "an expired key is free");
    assert_eq!(s.clock().now_ms(), T0 + 1000, "the store's clock is the one the test moves");
}

#[tokio::test]
async fn a_write_past_its_deadline_is_refused_and_not_applied() {
    let (s, hand) = store();
    hand.advance(10);
    let now = T0 + 10;
    let late = |value| Write { value, ttl: TTL, until: Some(StoreDeadline(now - 1)) };
    let too_late = |e: StoreError| {
        assert!(
            matches!(e, StoreError::TooLate { deadline_ms, store_now_ms } if deadline_ms == now - 1 && store_now_ms == now),
            "{e}"
        );
        assert!(!e.is_ambiguous(), "a refused write is known not to have landed");
    };
    too_late(s.create("k", late(b"a"), CALL).await.unwrap_err());
    assert!(s.is_empty(), "a refused create wrote something");
    let in_time = Write { value: b"a", ttl: TTL, until: Some(StoreDeadline(now)) };
    assert!(matches!(s.create("k", in_time, CALL).await.unwrap(), Created::Created), "the deadline itself is in time");
    let read = version(&s, "k").await;
    too_late(s.swap("k", &read, late(b"b"), CALL).await.unwrap_err());
    let undo = Rollback { claim_id: "a", restore: None, ttl: TTL, until: Some(StoreDeadline(now - 1)) };
    too_late(s.release("k", undo, CALL).await.unwrap_err());
    assert_eq!(s.read("k", CALL).await.unwrap().unwrap().value, b"a", "a refused write changed the record");
}
