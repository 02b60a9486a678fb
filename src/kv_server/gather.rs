//! Group-commit gathering: a short, bounded wait for more writes before a durable commit.
//
// After a commit answers a batch, its clients send their next writes within a fraction of a
// commit; a writer that starts the next batch at once commits the first few of them alone
// and makes the rest wait a whole fsync. Waiting for about as many writes as the last batch
// had (never longer than a quarter of the last commit, and only while they keep coming)
// lets one fsync cover all of them. Nothing is acknowledged earlier than before: this only
// decides which batch a write joins.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::{error::TryRecvError, Receiver};

use super::batch::WriteOp;
use super::writer::{Job, Reply, MAX_BATCH};

/// Longest wait, whatever the commit time: bounds the latency a slow disk can add.
const MAX_WAIT: Duration = Duration::from_millis(2);
/// Stop waiting once no write has arrived for this long: the burst is over.
const IDLE_GAP: Duration = Duration::from_micros(200);
/// Poll interval while waiting (a sleep, so the HTTP threads keep the cores).
const POLL: Duration = Duration::from_micros(50);

#[derive(Debug, Default)]
pub(super) struct Gather {
    last_batch: usize,
    last_commit: Duration,
}

impl Gather {
    /// Records a durable commit of `batch` writes that took `took`.
    pub fn committed(&mut self, batch: usize, took: Duration) {
        self.last_batch = batch;
        self.last_commit = took;
    }

    /// Adds queued writes to the batch until it is as large as the last one, the wait
    /// budget is spent, or writes stop arriving.
    pub fn top_up(&self, rx: &mut Receiver<Job>, ops: &mut Vec<WriteOp>, replies: &mut Vec<Reply>) {
        let want = self.last_batch.min(MAX_BATCH);
        if ops.len() >= want {
            return;
        }
        let budget = (self.last_commit / 4).min(MAX_WAIT);
        let start = Instant::now();
        let mut last_arrival = start;
        while ops.len() < want {
            match rx.try_recv() {
                Ok(job) => {
                    ops.push(job.op);
                    replies.push(job.reply);
                    last_arrival = Instant::now();
                }
                Err(TryRecvError::Empty) => {
                    let now = Instant::now();
                    if now - start >= budget || now - last_arrival >= IDLE_GAP {
                        return;
                    }
                    std::thread::sleep(POLL);
                }
                Err(TryRecvError::Disconnected) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::sync::{mpsc, oneshot};

    fn job() -> Job {
        let op = WriteOp::Put {
            key: "k".into(),
            value: Bytes::new(),
            pre: super::super::batch::Precondition::None,
            ttl_ms: None,
        };
        Job { op, reply: oneshot::channel().0 }
    }

    #[test]
    fn waits_only_for_as_many_as_the_last_batch_and_never_without_one() {
        let (tx, mut rx) = mpsc::channel(16);
        for _ in 0..5 {
            tx.try_send(job()).unwrap();
        }
        let (mut ops, mut replies) = (Vec::new(), Vec::new());
        // No durable commit seen yet: no waiting, nothing taken.
        Gather::default().top_up(&mut rx, &mut ops, &mut replies);
        assert!(ops.is_empty());
        let mut g = Gather::default();
        g.committed(3, Duration::from_millis(4));
        g.top_up(&mut rx, &mut ops, &mut replies);
        assert_eq!((ops.len(), replies.len()), (3, 3));
        // Fewer queued than wanted: it takes what comes and stops once writes stop arriving.
        g.committed(10, Duration::from_secs(10));
        g.top_up(&mut rx, &mut ops, &mut replies);
        assert_eq!(ops.len(), 5);
    }
}
