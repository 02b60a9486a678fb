//! Engine tests: group commit, ordering inside a batch, CAS, TTL on a pinned clock, failures.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::batch::{Precondition, WriteOp, WriteOutcome, Written};
use super::engine::{DurabilityMode, Engine, EngineError, WriterHandle};
use super::inspect::inventory;
use super::integrity::CheckRunner;
use super::open::DEFAULT_CACHE_MB;
use super::record::ServerClock;
use super::writer::BatchHook;

type Answered = Result<WriteOutcome, EngineError>;

fn put(key: &str, value: &str, pre: Precondition, ttl_ms: Option<u64>) -> WriteOp {
    WriteOp::put(key, value.to_owned(), pre, ttl_ms)
}

fn open(dir: &Path, clock: ServerClock) -> (Engine, WriterHandle) {
    open_with(dir, DurabilityMode::Immediate, clock, None)
}

fn open_with(
    dir: &Path,
    mode: DurabilityMode,
    clock: ServerClock,
    hook: Option<Box<dyn BatchHook>>,
) -> (Engine, WriterHandle) {
    Engine::start(dir, mode, clock, DEFAULT_CACHE_MB << 20, hook, CheckRunner::Thread).expect("engine opens")
}

/// Holds the writer before its first batch until the gate is opened, so a test can fill the
/// queue first and observe batching deterministically.
struct Gated(Option<std::sync::mpsc::Receiver<()>>);

impl BatchHook for Gated {
    fn before_gather(&mut self) {
        if let Some(gate) = self.0.take() {
            let _ = gate.recv();
        }
    }
}

/// Fails the next batch (and only that one) as a failed commit would, once armed.
struct FailNext(Arc<AtomicBool>);

impl BatchHook for FailNext {
    fn before_apply(&mut self) -> Result<(), String> {
        if self.0.swap(false, Ordering::SeqCst) {
            return Err("injected: the commit failed".into());
        }
        Ok(())
    }
}

fn gated(dir: &Path) -> (Engine, WriterHandle, std::sync::mpsc::Sender<()>) {
    let (gate, gate_rx) = std::sync::mpsc::channel();
    let (engine, writer) =
        open_with(dir, DurabilityMode::Immediate, ServerClock::system(), Some(Box::new(Gated(Some(gate_rx)))));
    (engine, writer, gate)
}

fn created(outcome: Answered) -> Written {
    match outcome {
        Ok(WriteOutcome::Created(w)) => w,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// Queues `ops` strictly in this order (each is in the queue before the next is sent).
async fn enqueue_in_order(engine: &Engine, ops: Vec<WriteOp>) -> Vec<JoinHandle<Answered>> {
    let mut handles = Vec::new();
    for op in ops {
        let target = engine.queued() + 1;
        let e = engine.clone();
        handles.push(tokio::spawn(async move { e.write(op).await }));
        wait_queued(engine, target).await;
    }
    handles
}

async fn wait_queued(engine: &Engine, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.queued() < n {
        assert!(Instant::now() < deadline, "queue never reached {n}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn join_all(handles: Vec<JoinHandle<Answered>>) -> Vec<Answered> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_concurrent_writes_commit_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, gate) = gated(dir.path());
    const N: usize = 200;
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let e = engine.clone();
            tokio::spawn(async move { e.write(put(&format!("k{i}"), "1", Precondition::IfAbsent, None)).await })
        })
        .collect();
    wait_queued(&engine, N).await;
    gate.send(()).unwrap();
    let mut revs: Vec<u64> = join_all(handles).await.into_iter().map(|r| created(r).rev).collect();
    revs.sort_unstable();
    revs.dedup();
    assert_eq!(revs.len(), N, "every write got its own revision");
    assert_eq!(engine.stats().commits.load(Ordering::SeqCst), 1, "one fsync'd commit for {N} writes");
    drop(engine);
    writer.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_concurrent_writers_need_fewer_commits_than_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer) = open(dir.path(), ServerClock::system());
    const WRITERS: usize = 32;
    const EACH: usize = 25;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let e = engine.clone();
            tokio::spawn(async move {
                for n in 0..EACH {
                    created(e.write(put(&format!("w{w}-{n}"), "{}", Precondition::IfAbsent, None)).await);
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    let commits = engine.stats().commits.load(Ordering::SeqCst);
    assert!(commits < (WRITERS * EACH) as u64, "{commits} commits for {} writes", WRITERS * EACH);
    drop(engine);
    writer.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_writes_in_a_batch_see_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, writer, gate) = gated(dir.path());
    let ops = vec![
        put("k", "\"a\"", Precondition::IfAbsent, None),
        put("k", "\"b\"", Precondition::IfAbsent, None),
        WriteOp::Delete { key: "k".into(), pre: Precondition::None, until_ms: None },
        put("k", "\"c\"", Precondition::IfAbsent, None),
        put("k", "\"d\"", Precondition::IfRev(1), None),
    ];
    let handles = enqueue_in_order(&engine, ops).await;
    gate.send(()).unwrap();
    let r = join_all(handles).await;
    let first = created(r[0].clone());
    match &r[1] {
        Ok(WriteOutcome::PreconditionFailed(Some(cur))) => {
            assert_eq!((&cur.value[..], cur.rev), (&b"\"a\""[..], first.rev))
        }
        other => panic!("second create must lose to the first: {other:?}"),
    }
    assert_eq!(r[2].clone().unwrap(), WriteOutcome::Deleted);
    let third = created(r[3].clone());
    assert!(third.rev > first.rev);
    assert!(matches!(&r[4], Ok(WriteOutcome::PreconditionFailed(Some(c))) if c.rev == third.rev));
    assert_eq!(engine.stats().commits.load(Ordering::SeqCst), 1);
    assert_eq!(&engine.get("k".into()).await.unwrap().unwrap().value[..], b"\"c\"");
    drop(engine);
    writer.join();
}

#[tokio::test]
async fn compare_and_swap_and_conditional_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (e, writer) = open(dir.path(), ServerClock::system());
    let w1 = created(e.write(put("k", "1", Precondition::None, None)).await);
    let w2 = match e.write(put("k", "2", Precondition::IfRev(w1.rev), None)).await {
        Ok(WriteOutcome::Replaced(w)) => w,
        other => panic!("CAS with the current rev must succeed: {other:?}"),
    };
    assert!(w2.rev > w1.rev);
    match e.write(put("k", "3", Precondition::IfRev(w1.rev), None)).await {
        Ok(WriteOutcome::PreconditionFailed(Some(cur))) => {
            assert_eq!((&cur.value[..], cur.rev), (&b"2"[..], w2.rev))
        }
        other => panic!("stale CAS must fail with the current value: {other:?}"),
    }
    let absent = e.write(put("nope", "1", Precondition::IfExists, None)).await;
    assert_eq!(absent.unwrap(), WriteOutcome::PreconditionFailed(None));
    let stale = e.write(WriteOp::Delete { key: "k".into(), pre: Precondition::IfRev(w1.rev), until_ms: None }).await;
    assert!(matches!(stale, Ok(WriteOutcome::PreconditionFailed(Some(_)))));
    let del = e.write(WriteOp::Delete { key: "k".into(), pre: Precondition::IfRev(w2.rev), until_ms: None }).await;
    assert_eq!(del.unwrap(), WriteOutcome::Deleted);
    let again = e.write(WriteOp::Delete { key: "k".into(), pre: Precondition::None, until_ms: None }).await;
    assert_eq!(again.unwrap(), WriteOutcome::NotFound);
    assert!(e.get("k".into()).await.unwrap().is_none());
    drop(e);
    writer.join();
}

#[tokio::test]
async fn expiry_hides_keys_and_purge_reclaims_them() {
    let dir = tempfile::tempdir().unwrap();
    let (clock, now) = ServerClock::manual(1_000_000);
    let (e, writer) = open(dir.path(), clock);
    let w = created(e.write(put("k", "1", Precondition::None, Some(300))).await);
    assert_eq!(w.expires_ms, 1_000_300);
    now.store(1_000_299, Ordering::SeqCst);
    assert!(e.get("k".into()).await.unwrap().is_some());
    now.store(1_000_300, Ordering::SeqCst);
    assert!(e.get("k".into()).await.unwrap().is_none(), "expired keys read as absent");
    // Preconditions also treat it as absent, before any purge ran.
    created(e.write(put("k", "2", Precondition::IfAbsent, None)).await);
    // A key rewritten with a later expiry must survive a purge of its old deadline.
    created(e.write(put("moved", "1", Precondition::None, Some(100))).await);
    let _ = e.write(put("moved", "2", Precondition::None, Some(10_000))).await.unwrap();
    for i in 0..5 {
        created(e.write(put(&format!("t{i}"), "1", Precondition::None, Some(100))).await);
    }
    now.store(1_000_500, Ordering::SeqCst);
    let mut purged = Vec::new();
    loop {
        match e.write(WriteOp::Purge { limit: 2 }).await.unwrap() {
            WriteOutcome::Purged(0) => break,
            WriteOutcome::Purged(n) => purged.push(n),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(purged, vec![2, 2, 1], "bounded batches");
    assert!(e.get("moved".into()).await.unwrap().is_some());
    drop(e);
    writer.join();
    let inv = inventory(dir.path()).unwrap();
    assert_eq!((inv.records, inv.expiry_entries), (2, 1), "k and moved remain");
}

#[tokio::test]
async fn revisions_keep_increasing_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (e, writer) = open(dir.path(), ServerClock::system());
    created(e.write(put("a", "1", Precondition::None, None)).await);
    let last = created(e.write(put("b", "1", Precondition::None, None)).await).rev;
    drop(e);
    writer.join();
    assert_eq!(inventory(dir.path()).unwrap().last_rev, last);
    let (e, writer) = open(dir.path(), ServerClock::system());
    assert_eq!(e.get("a".into()).await.unwrap().map(|r| r.value), Some(Bytes::from_static(b"1")));
    let next = created(e.write(put("c", "1", Precondition::None, None)).await).rev;
    assert!(next > last, "ETags never repeat after a restart");
    drop(e);
    writer.join();
}

#[tokio::test]
async fn a_failed_batch_acknowledges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fail = Arc::new(AtomicBool::new(true));
    let (e, writer) =
        open_with(dir.path(), DurabilityMode::Immediate, ServerClock::system(), Some(Box::new(FailNext(fail.clone()))));
    let r = e.write(put("k", "1", Precondition::IfAbsent, None)).await;
    assert!(matches!(r, Err(EngineError::Storage(_))), "{r:?}");
    assert!(e.get("k".into()).await.unwrap().is_none());
    created(e.write(put("k", "1", Precondition::IfAbsent, None)).await);
    drop(e);
    writer.join();
}

#[tokio::test]
async fn none_mode_still_keeps_writes_over_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (e, writer) = open_with(dir.path(), DurabilityMode::None, ServerClock::system(), None);
    for i in 0..10 {
        created(e.write(put(&format!("k{i}"), "1", Precondition::IfAbsent, None)).await);
    }
    drop(e);
    writer.join();
    assert_eq!(inventory(dir.path()).unwrap().records, 10);
}

/// `KV-Deadline-Ms` is judged with the time of the batch that applies the write, before its
/// precondition; a read reports a time before any batch still being applied (whose writes it
/// cannot see yet), so "past the deadline and absent" is final.
#[tokio::test]
async fn deadlines_are_judged_at_the_batch_and_reads_never_claim_a_batch_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (clock, now) = ServerClock::manual(1_000_000);
    let (e, writer) = open(dir.path(), clock);
    let by = |until_ms| WriteOp::Put {
        key: "k".into(),
        value: Bytes::from_static(b"1").into(),
        pre: Precondition::IfAbsent,
        ttl_ms: None,
        until_ms: Some(until_ms),
    };
    assert_eq!(e.write(by(999_999)).await.unwrap(), WriteOutcome::TooLate(1_000_000));
    assert!(e.get("k".into()).await.unwrap().is_none(), "a late write writes nothing");
    let w = created(e.write(by(1_000_000)).await);
    let late_delete = WriteOp::Delete { key: "k".into(), pre: Precondition::IfRev(w.rev), until_ms: Some(999_000) };
    assert_eq!(e.write(late_delete).await.unwrap(), WriteOutcome::TooLate(1_000_000));
    let (found, at) = e.get_at("k".into()).await.unwrap();
    assert_eq!((found.map(|r| r.rev), at), (Some(w.rev), 1_000_000), "idle: the read's own time");
    now.store(1_000_500, Ordering::SeqCst);
    e.busy_since().store(1_000_200, Ordering::SeqCst);
    assert_eq!(e.get_at("k".into()).await.unwrap().1, 1_000_199, "just before the batch in progress");
    e.busy_since().store(u64::MAX, Ordering::SeqCst);
    drop(e);
    writer.join();
}
