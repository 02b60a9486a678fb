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
    pub(crate) fn committed(&mut self, batch: usize, took: Duration) {
        self.last_batch = batch;
        self.last_commit = took;
    }

    /// Hands queued writes to `take` until the batch (holding `have` already, at most `max`)
    /// is as large as the last one, the wait budget is spent, or writes stop arriving.
    pub(crate) fn top_up<T>(&self, rx: &mut Receiver<T>, mut have: usize, max: usize, mut take: impl FnMut(T)) {
        let want = self.last_batch.min(max);
        if have >= want {
            return;
        }
        let budget = (self.last_commit / 4).min(MAX_WAIT);
        let start = Instant::now();
        let mut last_arrival = start;
        while have < want {
            match rx.try_recv() {
                Ok(job) => {
                    take(job);
                    have += 1;
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
    use tokio::sync::mpsc;

    #[test]
    fn waits_only_for_as_many_as_the_last_batch_and_never_without_one() {
        let (tx, mut rx) = mpsc::channel(16);
        for i in 0..5 {
            tx.try_send(i).unwrap();
        }
        let mut batch = Vec::new();
        // No durable commit seen yet: no waiting, nothing taken.
        Gather::default().top_up(&mut rx, batch.len(), 1024, |j| batch.push(j));
        assert!(batch.is_empty());
        let mut g = Gather::default();
        g.committed(3, Duration::from_millis(4));
        g.top_up(&mut rx, batch.len(), 1024, |j| batch.push(j));
        assert_eq!(batch, [0, 1, 2]);
        // Fewer queued than wanted: it takes what comes and stops once writes stop arriving.
        g.committed(10, Duration::from_secs(10));
        g.top_up(&mut rx, batch.len(), 1024, |j| batch.push(j));
        assert_eq!(batch.len(), 5);
    }
}
